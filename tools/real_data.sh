#!/usr/bin/env bash
# Real-data runs (docs/real-data.md): English->German encoder-decoders on FreeDict word and
# phrase pairs (characters, and a shared SentencePiece BPE vocabulary as in the paper's §5.1),
# a decoder-only language model and an encoder-only masked LM on the fortune files, each
# evaluated on held-out data; the numbers go to $OUT/results.md and results.json.
# Needs Debian's dict-freedict-eng-deu and fortunes packages. It does not tune anything on
# the held-out sets, and it does not download anything.
#
#   tools/real_data.sh                   # build/attn, runs/real-data, the documented sizes
#   ATTN=build/attn OUT=runs/rd JOBS=2 tools/real_data.sh
#   SUMMARY_ONLY=1 tools/real_data.sh    # rewrite results.md from finished runs
#   ONLY_SUBWORD=1 tools/real_data.sh    # only the subword translation (SP_SIZE, SP_TYPE, SP_EPOCHS)
#   ONLY_DEBIAN=1 tools/real_data.sh     # only the sentence translation on Debian's own translations
#                                        # (tools/debian_translation.sh into $OUT/debian-translation,
#                                        # attn and PyTorch at equal time; about two hours); it needs
#                                        # neither FreeDict nor the fortunes
set -euo pipefail

ATTN=${ATTN:-build/attn}
OUT=${OUT:-runs/real-data}
PYTHON=${PYTHON:-/usr/bin/python3}
JOBS=${JOBS:-1}               # 2: train the translation model beside the two language models
THREADS=${THREADS:-1}
MT_EPOCHS=${MT_EPOCHS:-2}
LM_EPOCHS=${LM_EPOCHS:-8}
MLM_EPOCHS=${MLM_EPOCHS:-15}
SP_SIZE=${SP_SIZE:-1000}      # pieces of the shared subword vocabulary (4 specials included)
SP_TYPE=${SP_TYPE:-bpe}
SP_EPOCHS=${SP_EPOCHS:-2}
HERE=$(cd "$(dirname "$0")" && pwd)

die() { echo "real_data: $*" >&2; exit 1; }
[ -x "$ATTN" ] || die "no attn binary at $ATTN (make build, or set ATTN)"
if [ "${ONLY_DEBIAN:-0}" = 1 ]; then
  ATTN="$ATTN" OUT="$OUT/debian-translation" PYTHON="$PYTHON" exec "$HERE/debian_translation.sh"
fi
[ -f /usr/share/dictd/freedict-eng-deu.index ] && [ -d /usr/share/games/fortunes ] ||
  die "install the corpora first: apt-get install -y dict-freedict-eng-deu fortunes"
mkdir -p "$OUT"
log() { echo "[$(date +%H:%M:%S)] $*"; }
timed() {  # timed NAME COMMAND...: runs it, logs to $OUT/NAME.log, stores its wall seconds in $OUT/NAME.seconds
  local name=$1; shift
  local start=$SECONDS
  "$@" > "$OUT/$name.log" 2>&1 || { tail -20 "$OUT/$name.log" >&2; die "$name failed (log: $OUT/$name.log)"; }
  echo $((SECONDS - start)) > "$OUT/$name.seconds"
}

if [ "${SUMMARY_ONLY:-0}" != 1 ]; then
  log "data"
  "$PYTHON" "$HERE/freedict_to_tsv.py" --out "$OUT/freedict" > /dev/null
  "$PYTHON" "$HERE/fortunes_to_text.py" --out "$OUT/fortunes" > /dev/null
fi
MT="$OUT/freedict" LM="$OUT/fortunes"

mt() {
  log "EN->DE encoder-decoder: D=64, 4 heads, 2+2 layers, characters, $MT_EPOCHS epochs"
  timed mt_train "$ATTN" train --data "$MT/train.tsv" --valid "$MT/valid.tsv" --tokens chars \
    --d-model 64 --heads 4 --encoder-layers 2 --decoder-layers 2 --d-ff 256 \
    --epochs "$MT_EPOCHS" --batch-size 64 --warmup 400 --seed 1 --threads "$THREADS" \
    --out "$OUT/mt" --force --quiet
  log "EN->DE test: greedy and beam 4"
  timed mt_eval_greedy "$ATTN" eval --model "$OUT/mt" --data "$MT/test.tsv" --metric bleu,chrf --json --threads "$THREADS"
  timed mt_eval_beam4 "$ATTN" eval --model "$OUT/mt" --data "$MT/test.tsv" --metric bleu,chrf --beam 4 --json --threads "$THREADS"
  cut -f1 "$MT/test.tsv" | head -12 > "$OUT/mt_examples.src"
  "$ATTN" translate --model "$OUT/mt" --beam 4 --threads "$THREADS" < "$OUT/mt_examples.src" > "$OUT/mt_examples.hyp"
}

mt_subword() {
  log "shared SentencePiece vocabulary: $SP_TYPE, $SP_SIZE pieces, on the training split's two sides"
  mkdir -p "$OUT/spm"
  cut -f1 "$MT/train.tsv" > "$OUT/spm/train.en"
  cut -f2 "$MT/train.tsv" > "$OUT/spm/train.de"
  timed spm_train "$ATTN" vocab train --input "$OUT/spm/train.en" --input "$OUT/spm/train.de" \
    --size "$SP_SIZE" --type "$SP_TYPE" --output "$OUT/spm"
  log "EN->DE encoder-decoder: D=64, 4 heads, 2+2 layers, subwords, $SP_EPOCHS epochs"
  timed mt_spm_train "$ATTN" train --data "$MT/train.tsv" --valid "$MT/valid.tsv" --vocab "$OUT/spm" \
    --d-model 64 --heads 4 --encoder-layers 2 --decoder-layers 2 --d-ff 256 \
    --epochs "$SP_EPOCHS" --batch-size 64 --warmup 400 --seed 1 --threads "$THREADS" \
    --out "$OUT/mt_spm" --force --quiet
  log "EN->DE (subwords) test: greedy and beam 4"
  timed mt_spm_eval_greedy "$ATTN" eval --model "$OUT/mt_spm" --data "$MT/test.tsv" --metric bleu,chrf --json --threads "$THREADS"
  timed mt_spm_eval_beam4 "$ATTN" eval --model "$OUT/mt_spm" --data "$MT/test.tsv" --metric bleu,chrf --beam 4 --json --threads "$THREADS"
  cut -f1 "$MT/test.tsv" | head -12 > "$OUT/mt_examples.src"
  "$ATTN" translate --model "$OUT/mt_spm" --beam 4 --threads "$THREADS" < "$OUT/mt_examples.src" > "$OUT/mt_spm_examples.hyp"
}

lms() {
  log "decoder-only LM: D=64, 4 heads, 4 layers, characters, $LM_EPOCHS epochs"
  timed lm_train "$ATTN" train --arch decoder-only --text "$LM/train.txt" --valid-text "$LM/valid.txt" \
    --d-model 64 --heads 4 --layers 4 --d-ff 256 --label-smoothing 0 \
    --epochs "$LM_EPOCHS" --batch-size 32 --warmup 400 --seed 1 --threads "$THREADS" \
    --out "$OUT/lm" --force --quiet
  timed lm_eval "$ATTN" eval --model "$OUT/lm" --text "$LM/test.txt" --json --threads "$THREADS"
  local prompts=(--prompt "The meaning of life is" --prompt "A computer" --prompt "Never trust a"
                 --prompt "Love is" --prompt "The best way to")
  "$ATTN" generate --model "$OUT/lm" "${prompts[@]}" --with-prompt --max-tokens 80 --threads "$THREADS" \
    > "$OUT/lm_greedy.txt"
  "$ATTN" generate --model "$OUT/lm" "${prompts[@]}" --with-prompt --max-tokens 80 --threads "$THREADS" \
    --temperature 0.8 --top-p 0.9 --seed 7 > "$OUT/lm_samples.txt"

  # Pre-norm: with the paper's post-norm this masked LM stalled (loss flat near 3.27, 24% accuracy after 6 epochs).
  log "encoder-only masked LM: D=64, 4 heads, 4 pre-norm layers, characters, $MLM_EPOCHS epochs"
  timed mlm_train "$ATTN" train --arch encoder-only --text "$LM/train.txt" --valid-text "$LM/valid.txt" \
    --d-model 64 --heads 4 --layers 4 --d-ff 256 --norm-first true \
    --epochs "$MLM_EPOCHS" --batch-size 32 --warmup 400 --seed 1 --threads "$THREADS" \
    --out "$OUT/mlm" --force --quiet
  timed mlm_eval "$ATTN" eval --model "$OUT/mlm" --text "$LM/test.txt" --seed 1 --json --threads "$THREADS"
  "$ATTN" fill-mask --model "$OUT/mlm" --top-k 3 --threads "$THREADS" \
    --text "The meaning of l[MASK]fe is" --text "A computer is a m[MASK]chine" \
    --text "Never trust [MASK] man who" --text "Love is bl[MASK]nd." > "$OUT/mlm_fill.txt"
}

if [ "${SUMMARY_ONLY:-0}" = 1 ]; then
  :  # only rewrite results.md and results.json from the runs in $OUT
elif [ "${ONLY_SUBWORD:-0}" = 1 ]; then
  mt_subword
elif [ "$JOBS" -ge 2 ]; then
  { mt && mt_subword; } & mt_pid=$!
  lms
  wait "$mt_pid" || die "the translation runs failed"
else
  mt
  mt_subword
  lms
fi

log "results"
"$PYTHON" - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
def last(run):
    with open(os.path.join(out, run, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()][-1]
def read(name):
    with open(os.path.join(out, name)) as f:
        return f.read()
def seconds(name):
    return int(read(name + ".seconds"))
def params(run):
    return json.loads(read(os.path.join(run, "config.json")))
res = {
    "freedict": json.loads(read("freedict/counts.json")),
    "fortunes": json.loads(read("fortunes/counts.json")),
    "mt": {"valid_last_epoch": last("mt"), "train_seconds": seconds("mt_train"),
           "greedy": json.loads(read("mt_eval_greedy.log")), "beam4": json.loads(read("mt_eval_beam4.log"))},
    "lm": {"valid_last_epoch": last("lm"), "train_seconds": seconds("lm_train")},
    "mlm": {"valid_last_epoch": last("mlm"), "train_seconds": seconds("mlm_train")},
}
for run in ("lm", "mlm"):
    if os.path.exists(os.path.join(out, run + "_eval.log")):
        res[run]["test"] = json.loads(read(run + "_eval.log"))
if os.path.exists(os.path.join(out, "mt_spm_eval_beam4.log")):
    res["mt_spm"] = {"valid_last_epoch": last("mt_spm"), "train_seconds": seconds("mt_spm_train"),
                     "vocabulary": json.loads(read("mt_spm/vocab.json"))["sentencepiece"],
                     "greedy": json.loads(read("mt_spm_eval_greedy.log")),
                     "beam4": json.loads(read("mt_spm_eval_beam4.log"))}
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(res, f, indent=2)
mt, lm, mlm = res["mt"], res["lm"], res["mlm"]
lines = ["# Real-data results", "",
         "| run | epochs | train time | held-out result |", "|---|---|---|---|"]
for name, run in (("characters", mt), ("subwords", res.get("mt_spm"))):
    if run is None:
        continue
    for mode in ("greedy", "beam4"):
        e = run[mode]
        lines.append(f"| EN->DE {name} {mode} | {run['valid_last_epoch']['epoch']} | {run['train_seconds']} s | "
                     f"exact {100 * e['exact_acc']:.2f}%, chrF {e['chrf']['score']:.2f}, BLEU {e['bleu']['score']:.2f} "
                     f"(1-4-gram precisions {', '.join(f'{p:.1f}' for p in e['bleu']['precisions'])}, "
                     f"BP {e['bleu']['bp']:.3f}), token acc {e['token_acc']:.4f} |")
lines.append(f"| decoder-only LM | {lm['valid_last_epoch']['epoch']} | {lm['train_seconds']} s | "
             f"val_ppl {lm['valid_last_epoch']['val_ppl']:.3f}, val_nll {lm['valid_last_epoch']['val_nll']:.4f}, "
             f"next-char acc {lm['valid_last_epoch']['val_token_acc']:.4f} |")
lines.append(f"| encoder-only MLM | {mlm['valid_last_epoch']['epoch']} | {mlm['train_seconds']} s | "
             f"masked-token acc {mlm['valid_last_epoch']['val_token_acc']:.4f}, val_ppl {mlm['valid_last_epoch']['val_ppl']:.3f} |")
if "test" in lm:
    t = lm["test"]
    lines.append(f"| decoder-only LM, test.txt | | | perplexity {t['perplexity']:.3f} per character "
                 f"({t['bits_per_char']:.3f} bits), next-char acc {t['token_acc']:.4f} |")
if "test" in mlm:
    t = mlm["test"]
    lines.append(f"| encoder-only MLM, test.txt | | | masked-token acc {t['token_acc']:.4f} (seed {t['seed']}), "
                 f"perplexity {t['perplexity']:.3f} |")
lines += ["", "## EN->DE examples (beam 4)", "```"]
src = read("mt_examples.src").splitlines()
hyp = read("mt_examples.hyp").splitlines()
lines += [f"{s}\t->\t{h}" for s, h in zip(src, hyp)] + ["```", ""]
if os.path.exists(os.path.join(out, "mt_spm_examples.hyp")):
    sub = read("mt_spm_examples.hyp").splitlines()
    lines += ["## EN->DE examples, subwords (beam 4)", "```"] + [f"{s}\t->\t{h}" for s, h in zip(src, sub)] + ["```", ""]
lines += ["## LM greedy", "```", read("lm_greedy.txt").rstrip(),
          "```", "", "## LM samples (temperature 0.8, top-p 0.9, seed 7)", "```", read("lm_samples.txt").rstrip(), "```",
          "", "## Fill-mask", "```", read("mlm_fill.txt").rstrip(), "```", ""]
with open(os.path.join(out, "results.md"), "w") as f:
    f.write("\n".join(lines))
print("\n".join(lines))
EOF
