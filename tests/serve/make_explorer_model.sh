#!/bin/bash
# Trains the model the explorer's browser test serves: the demo's task (reverse 8 digits of 10
# symbols) with a shorter recipe (D=32, 2 heads, 2+2 layers, 10 epochs, one thread: about 5 s)
# that reverses every validation sequence, the demo's `3 7 1 4 9 2 8 5` among them. (At 6 epochs
# it got 97-99% of them right, and whether that one was among them changed with the bits of the
# float products.)
#   make_explorer_model.sh ATTN_BINARY OUT_DIR
# Run by ctest as the serve_explorer_model test (FIXTURES_SETUP serve_explorer).
set -euo pipefail
attn=${1:?usage: make_explorer_model.sh ATTN_BINARY OUT_DIR}
out=${2:?usage: make_explorer_model.sh ATTN_BINARY OUT_DIR}
mkdir -p "$(dirname "$out")"
"$attn" train --task reverse --d-model 32 --heads 2 --d-ff 64 --layers 2 --dropout 0 --attention-dropout 0 \
  --label-smoothing 0 --epochs 10 --threads 1 --no-report --samples 0 --quiet --force --out "$out"
echo "make_explorer_model.sh: a reversal model in $out"
