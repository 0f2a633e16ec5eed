#!/bin/bash
# Trains the tiny models the serve tests serve, each in a second or two (one thread, no
# dropout, constant rate): OUT/rev (encoder-decoder, reverse 5 symbols of 6), OUT/lm (decoder-only
# on lines of 8 letters following a..p, learned positions of 16: prompts of 15 tokens at most)
# and OUT/mlm (encoder-only masked LM on lines of one repeated letter), plus OUT/rev_int8 and
# OUT/lm_bf16, their quantized copies.
#   make_serve_models.sh ATTN_BINARY OUT_DIR
# Run by ctest as the serve_models test (FIXTURES_SETUP serve).
set -euo pipefail
attn=${1:?usage: make_serve_models.sh ATTN_BINARY OUT_DIR}
out=${2:?usage: make_serve_models.sh ATTN_BINARY OUT_DIR}
mkdir -p "$out"
cd "$out"
small="--d-model 32 --heads 2 --d-ff 64 --dropout 0 --attention-dropout 0 --schedule constant --lr 0.01
  --label-smoothing 0 --threads 1 --no-report --samples 0 --quiet --force"

"$attn" train --task reverse --length 5 --symbols 6 --train-size 1000 --valid-size 32 --layers 1 --epochs 5 \
  --batch-size 32 --warmup 20 --out rev $small

letters=abcdefghijklmnop
: > lm.txt
for copy in 1 2 3 4; do
  for start in $(seq 0 15); do
    line=""
    for k in $(seq 0 7); do line+=${letters:$(((start + k) % 16)):1}; done
    echo "$line" >> lm.txt
  done
done
"$attn" train --arch decoder-only --text lm.txt --layers 2 --epochs 20 --batch-size 16 --warmup 10 \
  --positional learned --max-len 16 --out lm $small

: > mlm.txt
for copy in 0 1 2 3; do
  for k in $(seq 0 15); do
    n=$((4 + (k + copy) % 5))
    printf "%${n}s\n" "" | tr ' ' "${letters:$k:1}" >> mlm.txt
  done
done
"$attn" train --arch encoder-only --text mlm.txt --layers 1 --epochs 10 --batch-size 16 --warmup 10 --out mlm $small
# Reduced-precision copies (attn quantize): rev in int8, lm in bf16.
"$attn" quantize --model rev --to int8 --out rev_int8 --force
"$attn" quantize --model lm --to bf16 --out lm_bf16 --force
echo "make_serve_models.sh: rev, lm, mlm, rev_int8 and lm_bf16 in $out"
