#!/bin/bash
# Trains the model the explorer's browser test serves: the demo's task (reverse 8 digits of 10
# symbols) with a shorter recipe (D=32, 2 heads, 2+2 layers, 6 epochs, one thread: about 15 s)
# that reverses the demo's `3 7 1 4 9 2 8 5` exactly (99% of validation sequences).
#   make_explorer_model.sh ATTN_BINARY OUT_DIR
# Run by ctest as the serve_explorer_model test (FIXTURES_SETUP serve_explorer).
set -euo pipefail
attn=${1:?usage: make_explorer_model.sh ATTN_BINARY OUT_DIR}
out=${2:?usage: make_explorer_model.sh ATTN_BINARY OUT_DIR}
mkdir -p "$(dirname "$out")"
"$attn" train --task reverse --d-model 32 --heads 2 --d-ff 64 --layers 2 --dropout 0 --attention-dropout 0 \
  --label-smoothing 0 --epochs 6 --threads 1 --no-report --samples 0 --quiet --force --out "$out"
echo "make_explorer_model.sh: a reversal model in $out"
