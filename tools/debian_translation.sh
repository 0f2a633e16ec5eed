#!/usr/bin/env bash
# A real English->German translation model on Debian's own translations (docs/real-data.md,
# "Sentences from Debian"), and PyTorch trained on the same ids for the same wall-clock time.
#
#   1. the corpus: tools/debian_corpus.py (apt-get: translation indexes and a fixed package list)
#   2. a shared SentencePiece vocabulary on the training split's two sides (attn vocab train)
#   3. attn train: the paper's recipe at the size below, a checkpoint every CKPT_EVERY steps
#   4. attn average of the last AVERAGE checkpoints, then attn eval on the test split: BLEU
#      (sacreBLEU's 13a) and chrF, greedy and beam 4 with alpha 0.6
#   5. bench/torch_translate_train.py: torch.nn.Transformer, same ids, same model and recipe,
#      trained for attn's training seconds, then greedy and beam 4 on the same test sources,
#      scored by the same attn eval --hyp
# Results: $OUT/results.json and $OUT/results.md. Nothing is tuned on the test split.
#
#   tools/debian_translation.sh                         # the documented run (about 2 x EPOCHS' time)
#   EPOCHS=1 MAX_TRAIN=3000 MAX_TEST=100 D_MODEL=64 LAYERS=1 D_FF=256 SP_SIZE=1000 WARMUP=100 \
#     CKPT_EVERY=10 OUT=runs/dt-smoke tools/debian_translation.sh   # a quick check of the pipeline
#   SKIP_TORCH=1 tools/debian_translation.sh            # attn only
#   ONLY_TORCH=1 tools/debian_translation.sh            # the PyTorch side of a finished attn run
#   RESUME=1 tools/debian_translation.sh                # continue an interrupted attn run (or give it
#                                                       # more EPOCHS) from its last checkpoint, then go on
#   STREAM=1 tools/debian_translation.sh                # attn train --stream: the training split read in
#                                                       # chunks of CHUNK_LINES pairs, never whole
#   PRECISION=bf16 SKIP_TORCH=1 tools/debian_translation.sh   # attn in bf16 mixed precision
set -euo pipefail

ATTN=${ATTN:-build/attn}
OUT=${OUT:-runs/debian-translation}
PYTHON=${PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-2}
SP_SIZE=${SP_SIZE:-8000}       # pieces of the shared vocabulary (4 specials included)
D_MODEL=${D_MODEL:-256}
HEADS=${HEADS:-4}
LAYERS=${LAYERS:-3}            # encoder and decoder layers each
D_FF=${D_FF:-1024}
EPOCHS=${EPOCHS:-8}
MAX_TOKENS=${MAX_TOKENS:-4096} # padded tokens per batch
WARMUP=${WARMUP:-2000}
CKPT_EVERY=${CKPT_EVERY:-100}
AVERAGE=${AVERAGE:-5}          # checkpoints averaged
TORCH_BEAMS=${TORCH_BEAMS:-1,4} # the PyTorch side's decodings (1: greedy); its beam search has no cache
MAX_TRAIN=${MAX_TRAIN:-0}      # 0: the whole training split; N: its first N pairs (smoke runs)
MAX_TEST=${MAX_TEST:-0}        # 0: the whole test split; N: its first N pairs (smoke runs only)
STREAM=${STREAM:-0}            # 1: attn train --stream --chunk-lines CHUNK_LINES
CHUNK_LINES=${CHUNK_LINES:-10000}
PRECISION=${PRECISION:-f32}    # attn train --precision: f32, or bf16 (mixed precision, docs/training.md)
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

die() { echo "debian_translation: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*"; }
[ -x "$ATTN" ] || die "no attn binary at $ATTN (make build, or set ATTN)"
mkdir -p "$OUT"
timed() {  # timed NAME COMMAND...: runs it, logs to $OUT/NAME.log, its wall seconds to $OUT/NAME.seconds
  local name=$1; shift
  local start=$SECONDS
  "$@" > "$OUT/$name.log" 2>&1 || { tail -20 "$OUT/$name.log" >&2; die "$name failed (log: $OUT/$name.log)"; }
  echo $((SECONDS - start)) > "$OUT/$name.seconds"
}

C="$OUT/corpus"
if [ ! -f "$C/test.tsv" ]; then
  log "corpus (tools/debian_corpus.py)"
  "$PYTHON" "$HERE/debian_corpus.py" --out "$C" > "$OUT/corpus.log" 2>&1 || { tail -20 "$OUT/corpus.log" >&2; die "corpus failed"; }
fi
D="$OUT/data"
mkdir -p "$D"
if [ "$MAX_TRAIN" -gt 0 ]; then head -n "$MAX_TRAIN" "$C/train.tsv" > "$D/train.tsv"; else cp "$C/train.tsv" "$D/train.tsv"; fi
cp "$C/valid.tsv" "$D/"
if [ "$MAX_TEST" -gt 0 ]; then head -n "$MAX_TEST" "$C/test.tsv" > "$D/test.tsv"; else cp "$C/test.tsv" "$D/"; fi
for s in train valid test; do
  cut -f1 "$D/$s.tsv" > "$D/$s.en"
  cut -f2 "$D/$s.tsv" > "$D/$s.de"
done
STREAM_ARGS=()
[ "$STREAM" = 1 ] && STREAM_ARGS=(--stream --chunk-lines "$CHUNK_LINES")
if [ "${ONLY_TORCH:-0}" != 1 ]; then
  if [ "${RESUME:-0}" = 1 ]; then
    [ -f "$OUT/attn/train_config.json" ] || die "RESUME=1: no attn run in $OUT/attn to resume"
    log "attn: resuming $OUT/attn from its last checkpoint, up to $EPOCHS epochs"
    # Resuming is exact (docs/training.md): the run ends as an uninterrupted one would.
    timed attn_resume "$ATTN" train --out "$OUT/attn" --resume --epochs "$EPOCHS" --quiet
  else
    log "shared SentencePiece vocabulary: bpe, $SP_SIZE pieces"
    timed spm_train "$ATTN" vocab train --input "$D/train.en" --input "$D/train.de" --size "$SP_SIZE" --type bpe \
      --output "$OUT/spm"

    log "attn: D=$D_MODEL, $HEADS heads, $LAYERS+$LAYERS layers, d_ff $D_FF, $EPOCHS epochs, $MAX_TOKENS tokens a batch"
    timed attn_train "$ATTN" train --data "$D/train.tsv" --valid "$D/valid.tsv" --vocab "$OUT/spm" \
      --d-model "$D_MODEL" --heads "$HEADS" --encoder-layers "$LAYERS" --decoder-layers "$LAYERS" --d-ff "$D_FF" \
      --epochs "$EPOCHS" --batch-size 0 --max-tokens "$MAX_TOKENS" --warmup "$WARMUP" \
      --checkpoint-every "$CKPT_EVERY" --keep "$AVERAGE" --seed 1 --threads "$THREADS" --precision "$PRECISION" \
      ${STREAM_ARGS[@]+"${STREAM_ARGS[@]}"} --out "$OUT/attn" --force --no-report --quiet
  fi
  timed attn_average "$ATTN" average --model "$OUT/attn" --last "$AVERAGE" --out "$OUT/attn_avg" --force
  for m in attn attn_avg; do
    timed "${m}_greedy" "$ATTN" eval --model "$OUT/$m" --data "$D/test.tsv" --metric bleu,chrf --json --threads "$THREADS"
    timed "${m}_beam4" "$ATTN" eval --model "$OUT/$m" --data "$D/test.tsv" --metric bleu,chrf --beam 4 --alpha 0.6 \
      --json --threads "$THREADS"
  done
fi
head -12 "$D/test.en" > "$OUT/examples.en"
"$ATTN" translate --model "$OUT/attn_avg" --beam 4 --threads "$THREADS" < "$OUT/examples.en" > "$OUT/examples.attn.de"

# attn's training seconds: the epochs' training time without validation where metrics.jsonl
# records it (train_seconds), else the epochs' wall time (which includes validation: the
# PyTorch side then gets slightly more time than attn trained).
BUDGET=$("$PYTHON" - "$OUT/attn/metrics.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
epochs = [r for r in rows if "epoch" in r and ("seconds" in r or "train_seconds" in r)]
print(round(sum(r.get("train_seconds", r.get("seconds", 0)) for r in epochs), 1))
EOF
)
log "attn trained for $BUDGET s"

if [ "${SKIP_TORCH:-0}" != 1 ]; then
  log "PyTorch: the same ids, model and recipe, $BUDGET s of training"
  for s in train valid; do
    "$ATTN" vocab encode --vocab "$OUT/spm" < "$D/$s.en" > "$D/$s.en.ids"
    "$ATTN" vocab encode --vocab "$OUT/spm" < "$D/$s.de" > "$D/$s.de.ids"
    paste "$D/$s.en.ids" "$D/$s.de.ids" > "$D/$s.ids"
  done
  "$ATTN" vocab encode --vocab "$OUT/spm" < "$D/test.en" > "$D/test.en.ids"
  V=$("$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))['tgt_vocab_size'])" "$OUT/attn/config.json")
  # PyTorch at its fastest on these machines (bench/RESULTS.md, "Configuration"): OpenMP
  # OpenBLAS with its own core detection, glibc malloc on transparent huge pages.
  TORCH_LIB=/usr/lib/x86_64-linux-gnu/openblas-openmp
  TORCH_ENV=(OMP_NUM_THREADS="$THREADS" GLIBC_TUNABLES=glibc.malloc.hugetlb=1)
  [ -e "$TORCH_LIB/libblas.so.3" ] && TORCH_ENV+=(LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  timed torch_train env "${TORCH_ENV[@]}" "$PYTHON" "$ROOT/bench/torch_translate_train.py" --train "$D/train.ids" --valid "$D/valid.ids" \
    --test "$D/test.en.ids" --out "$OUT/torch" --vocab-size "$V" --seconds "$BUDGET" \
    --d-model "$D_MODEL" --heads "$HEADS" --layers "$LAYERS" --d-ff "$D_FF" --max-tokens "$MAX_TOKENS" \
    --warmup "$WARMUP" --beams "$TORCH_BEAMS" --alpha 0.6 --threads "$THREADS" --seed 1
  for k in ${TORCH_BEAMS//,/ }; do
    if [ "$k" -le 1 ]; then dec=greedy; else dec=beam$k; fi
    "$ATTN" vocab decode --vocab "$OUT/spm" < "$OUT/torch.$dec.ids" > "$OUT/torch.$dec.de"
    timed "torch_${dec}_score" "$ATTN" eval --hyp "$OUT/torch.$dec.de" --ref "$D/test.de" --metric bleu,chrf --json
  done
fi

"$PYTHON" - "$OUT" "$BUDGET" <<'EOF'
import json, os, sys
out, budget = sys.argv[1], float(sys.argv[2])
def last_json(name):
    path = os.path.join(out, name + ".log")
    if not os.path.exists(path):
        return None
    text = open(path).read()
    start = text.rfind("\n{")  # the last JSON object of the log (attn eval --json prints it indented)
    try:
        return json.loads(text[start + 1:] if start >= 0 else text)
    except ValueError:
        return None
counts = json.load(open(os.path.join(out, "corpus", "counts.json")))
res = {"budget_seconds": budget, "corpus": counts.get("splits"), "runs": {}}
for name in ("attn_greedy", "attn_beam4", "attn_avg_greedy", "attn_avg_beam4", "torch_greedy_score", "torch_beam4_score"):
    j = last_json(name)
    if j is not None:
        res["runs"][name] = j
j = last_json("torch_train")
if j is not None:
    res["runs"]["torch_train"] = j
json.dump(res, open(os.path.join(out, "results.json"), "w"), indent=1, sort_keys=True)
def fmt(j, key):
    for k in (key, key.upper()):
        if isinstance(j, dict) and k in j:
            v = j[k]
            return "%.2f" % (v["score"] if isinstance(v, dict) else v)
    return "-"
lines = ["| system | decoding | BLEU | chrF |", "|---|---|---|---|"]
for name, label, dec in (("attn_greedy", "attn, last", "greedy"), ("attn_beam4", "attn, last", "beam 4"),
                         ("attn_avg_greedy", "attn, averaged", "greedy"), ("attn_avg_beam4", "attn, averaged", "beam 4"),
                         ("torch_greedy_score", "PyTorch, same time", "greedy"),
                         ("torch_beam4_score", "PyTorch, same time", "beam 4")):
    j = res["runs"].get(name)
    if j is not None:
        lines.append("| %s | %s | %s | %s |" % (label, dec, fmt(j, "bleu"), fmt(j, "chrf")))
open(os.path.join(out, "results.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
