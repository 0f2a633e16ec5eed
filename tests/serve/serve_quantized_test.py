#!/usr/bin/env python3
"""serve_quantized_test.py — `attn serve` on model folders in reduced precision.

    serve_quantized_test.py ATTN_BINARY MODELS_DIR

MODELS_DIR holds make_serve_models.sh's rev_int8 (the encoder-decoder in int8) and lm_bf16 (the
decoder-only model in bf16), written by `attn quantize`. Served, each answers as the command
line does on the same folder: greedy and beam-search text equal `attn translate`'s, greedy
continuations equal `attn generate`'s; concurrent requests get their solo answers (the int8
and bf16 products quantize or round each row on its own, so batching cannot change a row);
/v1/models and /metrics work as for float32 folders. Control: the int8 folder's answers are
those of its own weights, not the float32 model's, wherever the two differ (checked on the
log-probabilities, which differ even when the text does not).
"""
import os
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Checks, Served  # noqa: E402

attn, models = sys.argv[1], sys.argv[2]
rev, rev_int8, lm, lm_bf16 = (os.path.join(models, m) for m in ("rev", "rev_int8", "lm", "lm_bf16"))
check = Checks("serve_quantized")


def cli(*args, stdin=""):
    r = subprocess.run([attn, *args], input=stdin, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def texts_of(resp):
    return [c["text"] for c in sorted(resp["choices"], key=lambda c: c["index"])]


def logprobs_of(resp):
    return resp["choices"][0]["logprobs"]["token_logprobs"]


check.true("int8" in "".join(cli("info", "--model", rev_int8)), "attn info names int8")

sources = ["01234", "54321", "13520", "2403", "0", "55", "310", "4213"]
with Served(attn, rev_int8, "--max-batch", "8", checks=check) as s:
    check.eq([m["id"] for m in s.get("/v1/models").json()["data"]], ["rev_int8"], "model id")
    want = cli("translate", "--model", rev_int8, stdin="\n".join(sources) + "\n")
    solo = [texts_of(s.complete({"model": "rev_int8", "prompt": src, "temperature": 0}))[0] for src in sources]
    check.eq(solo, want, "int8 greedy == attn translate on the int8 folder")
    want_beam = cli("translate", "--model", rev_int8, "--beam", "4", stdin="\n".join(sources) + "\n")
    got_beam = [texts_of(s.complete({"model": "rev_int8", "prompt": src, "beam_size": 4}))[0] for src in sources]
    check.eq(got_beam, want_beam, "int8 beam 4 == attn translate --beam 4")

    results, barrier = {}, threading.Barrier(len(sources))

    def one(i):
        barrier.wait()
        results[i] = texts_of(s.complete({"model": "rev_int8", "prompt": sources[i], "temperature": 0}))[0]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(sources))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    check.eq([results.get(i) for i in range(len(sources))], solo, "8 concurrent int8 requests: solo answers")

    lp_int8 = logprobs_of(s.complete({"model": "rev_int8", "prompt": "01234", "temperature": 0, "logprobs": 1}))
    metrics = s.get("/metrics").text
    check.true("attn_model_loaded 1" in metrics and "attn_completion_tokens_total" in metrics, "/metrics")
    check.eq(s.stop(), 0, "SIGTERM: exit 0 (int8)")

# Control: the float32 folder's log-probabilities for the same request differ from the int8 ones,
# so the check above would catch a server that ignored the quantized weights.
with Served(attn, rev, checks=check) as s:
    lp_f32 = logprobs_of(s.complete({"model": "rev", "prompt": "01234", "temperature": 0, "logprobs": 1}))
    check.true(lp_f32 != lp_int8, "control: int8 log-probabilities differ from float32's")
    check.eq(s.stop(), 0, "SIGTERM: exit 0 (f32)")

prompts = ["abcd", "jklm", "nopab", "c"]
with Served(attn, lm_bf16, "--max-batch", "4", checks=check) as s:
    want = cli("generate", "--model", lm_bf16, "--greedy", "--max-tokens", "6",
               *sum([["--prompt", p] for p in prompts], []))
    got = [texts_of(s.complete({"model": "lm_bf16", "prompt": p, "temperature": 0, "max_tokens": 6}))[0]
           for p in prompts]
    check.eq(got, want, "bf16 greedy == attn generate on the bf16 folder")
    results, barrier = {}, threading.Barrier(len(prompts))

    def one_lm(i):
        barrier.wait()
        results[i] = texts_of(s.complete({"model": "lm_bf16", "prompt": prompts[i], "temperature": 0,
                                          "max_tokens": 6}))[0]

    threads = [threading.Thread(target=one_lm, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    check.eq([results.get(i) for i in range(len(prompts))], got, "4 concurrent bf16 requests: solo answers")
    check.eq(s.stop(), 0, "SIGTERM: exit 0 (bf16)")

check.done()
