#!/usr/bin/env python3
"""serve_speculative_test.py — `attn serve --draft DIR` and `--prompt-lookup`.

    serve_speculative_test.py ATTN_BINARY MODELS_DIR

MODELS_DIR holds make_serve_models.sh's folders. Each served model drafts with a copy of
itself in reduced precision (rev with rev_int8, lm with lm_bf16: same family and vocabulary,
different bits, so drafts are sometimes rejected) or with prompt lookup. A greedy request that
runs alone decodes in speculative rounds (attn_speculative_rounds_total grows, some drafts are
accepted) and still answers exactly what the plain server answers: the same text as `attn
translate` / `attn generate`, the same log-probabilities, streamed or not. Concurrent requests
(plain steps) get their solo answers. Bad drafts are refused at startup with a message naming
the problem. Control: the plain server's metrics count no rounds.
"""
import os
import re
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Checks, Served, streamed_texts  # noqa: E402

attn, models = sys.argv[1], sys.argv[2]
rev, rev_int8, lm, lm_bf16, mlm = (os.path.join(models, m) for m in ("rev", "rev_int8", "lm", "lm_bf16", "mlm"))
check = Checks("serve_speculative")


def cli(*args, stdin=""):
    r = subprocess.run([attn, *args], input=stdin, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def metric(s, name):
    m = re.search(r"^%s (\S+)$" % name, s.get("/metrics").text, re.M)
    return float(m.group(1)) if m else None


def answers(s, model, prompts, **fields):
    """Each prompt alone: (texts, token log-probabilities)."""
    texts, lps = [], []
    for p in prompts:
        r = s.complete(dict({"model": model, "prompt": p, "temperature": 0, "logprobs": 1}, **fields))
        texts.append(r["choices"][0]["text"] if r["choices"] else None)
        lps.append(r["choices"][0]["logprobs"]["token_logprobs"] if r["choices"] else None)
    return texts, lps


def concurrent(s, model, prompts, **fields):
    results, barrier = {}, threading.Barrier(len(prompts))

    def one(i):
        barrier.wait()
        r = s.complete(dict({"model": model, "prompt": prompts[i], "temperature": 0}, **fields))
        results[i] = r["choices"][0]["text"] if r["choices"] else None

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return [results.get(i) for i in range(len(prompts))]


# Encoder-decoder: rev drafted by its int8 copy.
sources = ["01234", "54321", "13520", "2403", "0", "55", "310", "4213"]
want = cli("translate", "--model", rev, stdin="\n".join(sources) + "\n")
with Served(attn, rev, checks=check) as s:
    plain_texts, plain_lps = answers(s, "rev", sources)
    check.eq(plain_texts, want, "plain server == attn translate")
    check.eq(metric(s, "attn_speculative_rounds_total"), 0.0, "control: no rounds without a draft")
    check.eq(s.stop(), 0, "SIGTERM: exit 0 (plain)")
for args in (["--draft", rev_int8], ["--draft", rev_int8, "--draft-tokens", "2"], ["--prompt-lookup"]):
    with Served(attn, rev, *args, checks=check) as s:
        texts, lps = answers(s, "rev", sources)
        check.eq(texts, want, "%s: greedy == attn translate" % " ".join(args[:1] + args[2:]))
        check.eq(lps, plain_lps, "%s: the plain server's log-probabilities" % args[0])
        rounds, drafted = metric(s, "attn_speculative_rounds_total"), metric(s, "attn_draft_tokens_total")
        accepted = metric(s, "attn_draft_accepted_total")
        check.true(rounds > 0 and drafted > 0, "%s: speculative rounds ran (%s, %s drafted)" % (args[0], rounds, drafted))
        if args[0] == "--draft":
            check.true(0 < accepted <= drafted, "%s: drafts accepted (%s of %s)" % (args[0], accepted, drafted))
            check.true(metric(s, "attn_decode_steps_total") < metric(s, "attn_completion_tokens_total") + len(sources),
                       "fewer model passes than tokens")
        events, done = s.stream({"model": "rev", "prompt": sources[0], "temperature": 0})
        check.true(done and streamed_texts(events)[0].get(0) == want[0], "%s: streamed text" % args[0])
        check.eq(concurrent(s, "rev", sources), want, "%s: concurrent requests get their solo answers" % args[0])
        check.eq(s.stop(), 0, "SIGTERM: exit 0 (%s)" % args[0])

# Decoder-only: lm drafted by its bf16 copy, and by prompt lookup.
prompts = ["abcd", "jklm", "nopab", "c", "abcdabcd"]
want_lm = cli("generate", "--model", lm, "--greedy", "--max-tokens", "7", *sum([["--prompt", p] for p in prompts], []))
with Served(attn, lm, checks=check) as s:
    _, plain_lm_lps = answers(s, "lm", prompts, max_tokens=7)
    check.eq(s.stop(), 0, "SIGTERM: exit 0 (plain lm)")
for args in (["--draft", lm_bf16], ["--prompt-lookup", "--kv-cache", "contiguous"]):
    with Served(attn, lm, *args, checks=check) as s:
        texts, lps = answers(s, "lm", prompts, max_tokens=7)
        check.eq(texts, want_lm, "lm %s: greedy == attn generate" % args[0])
        check.eq(lps, plain_lm_lps, "lm %s: the plain server's log-probabilities" % args[0])
        check.true(metric(s, "attn_speculative_rounds_total") > 0, "lm %s: rounds ran" % args[0])
        if args[0] == "--draft":  # the lm's continuations rarely repeat its context: lookup finds little
            check.true(metric(s, "attn_draft_accepted_total") > 0, "lm %s: drafts accepted" % args[0])
        check.eq(concurrent(s, "lm", prompts, max_tokens=7), want_lm, "lm %s: concurrent solo answers" % args[0])
        check.eq(s.stop(), 0, "SIGTERM: exit 0 (lm %s)" % args[0])


# Bad drafts: refused at startup, the message naming the problem.
def refused(args, words, what):
    p = subprocess.run([attn, "serve", "--port", "0", *args], capture_output=True, text=True, timeout=120)
    check.true(p.returncode != 0 and all(w in p.stderr for w in words), "%s (%s)" % (what, p.stderr.strip()[-200:]))


refused(["--model", rev, "--draft", lm], ["same family"], "a draft of another family")
refused(["--model", lm, "--draft", rev], ["same family"], "a decoder-only model drafted by an encoder-decoder")
refused(["--model", mlm, "--draft", rev], ["does not decode"], "an encoder-only model cannot draft")
refused(["--model", rev, "--draft", os.path.join(models, "no-such-folder")], ["no-such-folder"], "a missing draft folder")
refused(["--model", rev, "--draft", rev_int8, "--prompt-lookup"], ["exclude each other"], "a draft and prompt lookup")
refused(["--model", rev, "--draft-tokens", "3"], ["--draft-tokens needs"], "--draft-tokens alone")
refused(["--model", rev, "--draft", rev_int8, "--draft-tokens", "0"], ["--draft-tokens must be >= 1"], "0 draft tokens")

check.done()
