#!/usr/bin/env python3
"""serve_completions_test.py — `attn serve` answers as `attn translate` and `attn generate` do.

    serve_completions_test.py ATTN_BINARY MODELS_DIR

MODELS_DIR holds the tiny models of make_serve_models.sh (rev: encoder-decoder, lm:
decoder-only, mlm: encoder-only). Each is served by a real `attn serve --port 0` process:
greedy and beam-search text equal the command line's; streamed text equals non-streamed text
(greedy, seeded sampling, n > 1, stop strings, echo, logprobs, several prompts); the same
seed gives the same text; temperature 0 under 1, 2, 4 and 8 concurrent requests gives every
request its solo answer, and a grid of (max batch, requests) gives each seeded sampled request
its solo text and log-probabilities; token-id prompts read as their text; usage counts are exact;
/tokenize round trips; /metrics is well-formed Prometheus text; encoder-only models fill
masks; SIGTERM ends the server with status 0; the engine decodes with --threads threads.
"""
import os
import re
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Checks, Served, streamed_texts  # noqa: E402

attn, models = sys.argv[1], sys.argv[2]
rev, lm, mlm = (os.path.join(models, m) for m in ("rev", "lm", "mlm"))
check = Checks("serve_completions")


def cli(*args, stdin=""):
    r = subprocess.run([attn, *args], input=stdin, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def texts_of(resp):
    return [c["text"] for c in sorted(resp["choices"], key=lambda c: c["index"])]


def stream_equals_plain(s, body, what):
    """The streamed texts and finish reasons equal the non-streamed ones; returns the latter."""
    plain = s.complete(body)
    events, done = s.stream(body)
    check.true(done, what + ": stream ends with [DONE]")
    texts, reasons = streamed_texts(events)
    check.eq([texts.get(c["index"], "") for c in plain["choices"]], [c["text"] for c in plain["choices"]],
             what + ": streamed text == non-streamed text")
    check.eq([reasons.get(c["index"]) for c in plain["choices"]], [c["finish_reason"] for c in plain["choices"]],
             what + ": streamed finish_reason == non-streamed")
    for e in events:
        check.eq(e["object"], "text_completion", what + ": chunk object")
    return plain


def prom_check(text, what, check=check):
    """Prometheus text 0.0.4: TYPE before samples, names valid, histograms cumulative with +Inf == count."""
    types, samples = {}, {}
    for line in text.split("\n")[:-1]:
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            check.true(name not in types, what + ": one TYPE line for " + name)
            types[name] = kind
            continue
        if line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_][a-zA-Z0-9_]*)(\{[^}]*\})? (\S+)$', line)
        check.true(m, what + ": sample line %r" % line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        check.true(name in types or base in types, what + ": TYPE before sample " + name)
        samples.setdefault(name, []).append((labels, value))
    check.true(text.endswith("\n"), what + ": ends with a newline")
    for name, kind in types.items():
        check.true(name.startswith("attn_"), what + ": attn_ prefix on " + name)
        if kind == "counter":
            check.true(name.endswith("_total"), what + ": counter %s ends in _total" % name)
        if kind != "histogram":
            continue
        buckets = samples.get(name + "_bucket", [])
        values = [v for _, v in buckets]
        check.eq(values, sorted(values), what + ": %s buckets cumulative" % name)
        check.eq(buckets[-1][0] if buckets else None, '{le="+Inf"}', what + ": %s ends with +Inf" % name)
        check.eq(values[-1] if values else None, samples[name + "_count"][0][1], what + ": %s +Inf == _count" % name)
    return types, samples


# ---- encoder-decoder --------------------------------------------------------------------------
sources = ["01234", "54321", "13520", "2403", "0", "55", "310", "4213"]
with Served(attn, rev, "--max-batch", "16", checks=check) as s:
    check.eq(s.get("/health").json(), {"status": "ok"}, "health")
    models_json = s.get("/v1/models").json()
    check.eq([m["id"] for m in models_json["data"]], ["rev"], "model id is the folder's base name")

    # Greedy text == attn translate; beam search == attn translate --beam (n-best too).
    want = cli("translate", "--model", rev, stdin="\n".join(sources) + "\n")
    got = [texts_of(s.complete({"model": "rev", "prompt": src, "temperature": 0, "max_tokens": len(src) + 50}))[0]
           for src in sources]
    check.eq(got, want, "greedy == attn translate")
    want_beam = cli("translate", "--model", rev, "--beam", "4", "--n-best", "2", stdin="\n".join(sources) + "\n")
    got_beam = []
    for i, src in enumerate(sources):
        r = s.complete({"model": "rev", "prompt": src, "beam_size": 4, "n": 2, "max_tokens": len(src) + 50})
        got_beam += ["%d\t%d\t%s" % (i + 1, k + 1, t) for k, t in enumerate(texts_of(r))]
    check.eq(got_beam, ["\t".join(line.split("\t")[:2] + line.split("\t")[3:]) for line in want_beam],
             "beam_size 4, n 2 == attn translate --beam 4 --n-best 2")
    stream_equals_plain(s, {"model": "rev", "prompt": "13520", "beam_size": 4, "n": 2}, "beam stream")

    # Streamed == non-streamed.
    stream_equals_plain(s, {"model": "rev", "prompt": "01234", "temperature": 0}, "greedy")
    stream_equals_plain(s, {"model": "rev", "prompt": "01234", "temperature": 1.5, "seed": 3, "n": 3}, "sampled n=3")
    stream_equals_plain(s, {"model": "rev", "prompt": ["01234", "2403"], "temperature": 0, "n": 2}, "two prompts")
    stream_equals_plain(s, {"model": "rev", "prompt": "01234", "temperature": 0, "stop": ["21"]}, "stop")
    stream_equals_plain(s, {"model": "rev", "prompt": "01234", "temperature": 0, "echo": True}, "echo")
    stream_equals_plain(s, {"model": "rev", "prompt": "01234", "temperature": 0, "logprobs": 2}, "logprobs")
    stream_equals_plain(s, {"model": "rev", "prompt": "01234", "temperature": 0, "max_tokens": 3}, "length")

    # The same seed gives the same text.
    body = {"model": "rev", "prompt": ["01234", "13520"], "temperature": 1.5, "seed": 11, "n": 4}
    check.eq(texts_of(s.complete(body)), texts_of(s.complete(body)), "same seed, same text")

    # Temperature 0 under concurrency: every request its solo answer.
    solo = {src: texts_of(s.complete({"model": "rev", "prompt": src, "temperature": 0}))[0] for src in sources}
    for k in (1, 2, 4, 8):
        results, barrier = {}, threading.Barrier(k)

        def one(src):
            barrier.wait()
            results[src] = texts_of(s.complete({"model": "rev", "prompt": src, "temperature": 0}))[0]

        threads = [threading.Thread(target=one, args=(src,)) for src in sources[:k]]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        check.eq(results, {src: solo[src] for src in sources[:k]}, "%d concurrent requests, solo answers" % k)

    # Token-id prompts read as their text; a list of id lists gives one result per list.
    ids = s.post("/tokenize", {"content": "01234"}).json()["tokens"]
    check.eq(len(ids), 5, "tokenize: one id per character")
    check.eq(texts_of(s.complete({"model": "rev", "prompt": ids, "temperature": 0})), [solo["01234"]], "id prompt")
    check.eq(texts_of(s.complete({"model": "rev", "prompt": [ids, ids], "temperature": 0})), [solo["01234"]] * 2,
             "[ids, ids]: two equal results")
    check.eq(texts_of(s.complete({"model": "rev", "prompt": [ids, "2403"], "temperature": 0})),
             [solo["01234"], solo["2403"]], "mixed text and id prompts")

    # n > 1 and several prompts: index = prompt_i * n + j, usage summed.
    r = s.complete({"model": "rev", "prompt": ["01234", "2403"], "temperature": 0, "n": 3})
    check.eq([c["index"] for c in r["choices"]], list(range(6)), "choice indexes in order")
    check.eq(texts_of(r), [solo["01234"]] * 3 + [solo["2403"]] * 3, "n=3 greedy: equal choices per prompt")
    check.eq(r["usage"], {"prompt_tokens": 9, "completion_tokens": 3 * (len(solo["01234"]) + len(solo["2403"])),
                          "total_tokens": 9 + 3 * (len(solo["01234"]) + len(solo["2403"]))},
             "usage: prompt tokens once per prompt, completion tokens of every choice (EOS excluded)")
    check.eq(r["object"], "text_completion", "object")
    check.true(r["id"].startswith("cmpl-") and isinstance(r["created"], int), "id and created")

    # Exact usage at a length cut, and stop strings.
    r = s.complete({"model": "rev", "prompt": "01234", "temperature": 0, "max_tokens": 3})
    check.eq((texts_of(r), r["choices"][0]["finish_reason"], r["usage"]["completion_tokens"]),
             ([solo["01234"][:3]], "length", 3), "max_tokens 3: 3 tokens, finish_reason length")
    r = s.complete({"model": "rev", "prompt": "01234", "temperature": 0})
    check.eq((r["choices"][0]["finish_reason"], r["usage"]["completion_tokens"], r["usage"]["prompt_tokens"]),
             ("stop", 5, 5), "EOS: finish_reason stop, EOS not counted")
    stop_at = solo["01234"][2:4]
    r = s.complete({"model": "rev", "prompt": "01234", "temperature": 0, "stop": ["x", stop_at]})
    check.eq((texts_of(r), r["choices"][0]["finish_reason"], r["usage"]["completion_tokens"]),
             ([solo["01234"][:2]], "stop", 4), "stop string: text before it, tokens up to it")
    r = s.complete({"model": "rev", "prompt": "01234", "temperature": 0, "echo": True})
    check.eq(texts_of(r), ["01234" + solo["01234"]], "echo prepends the prompt")

    # logprobs: OpenAI's object, one entry per counted token.
    r = s.complete({"model": "rev", "prompt": "01234", "temperature": 0, "logprobs": 2, "echo": True})
    lp = r["choices"][0]["logprobs"]
    check.eq(sorted(lp.keys()), ["text_offset", "token_logprobs", "tokens", "top_logprobs"], "logprobs fields")
    check.eq("".join(lp["tokens"]), solo["01234"], "logprobs tokens spell the text")
    check.eq(lp["text_offset"], list(range(5, 10)), "text_offset after the echoed prompt")
    check.true(all(x <= 0 for x in lp["token_logprobs"]), "token_logprobs <= 0")
    check.true(all(isinstance(t, dict) and 1 <= len(t) <= 3 for t in lp["top_logprobs"]), "top_logprobs <= logprobs+1")

    # /tokenize and /detokenize round trip.
    for text in ["012345", "5", "54321054321"]:
        toks = s.post("/tokenize", {"content": text}).json()["tokens"]
        check.eq(s.post("/detokenize", {"tokens": toks}).json()["content"], text, "round trip " + text)
    pieces = s.post("/tokenize", {"content": "012", "with_pieces": True}).json()["tokens"]
    check.eq([p["piece"] for p in pieces], ["0", "1", "2"], "with_pieces")

    # /metrics: Prometheus text.
    m = s.get("/metrics")
    check.eq(m.headers["Content-Type"].split(";")[0], "text/plain", "metrics content type")
    types, samples = prom_check(m.text, "metrics")
    for name in ("attn_requests_total", "attn_prompt_tokens_total", "attn_completion_tokens_total",
                 "attn_queue_length", "attn_running_rows", "attn_batch_rows", "attn_time_to_first_token_seconds",
                 "attn_time_per_token_seconds", "attn_http_responses_total"):
        check.true(name in types, "metric " + name)
    check.true(samples.get("attn_requests_total", [("", 0)])[0][1] >= len(sources), "requests counted")
    check.true(any(lab == '{status="200"}' and v > 10 for lab, v in samples.get("attn_http_responses_total", [])),
               "200 responses counted")
    # A control: the checker rejects non-cumulative buckets.
    control = Checks("control", quiet=True)
    prom_check('# TYPE attn_x histogram\nattn_x_bucket{le="1"} 3\nattn_x_bucket{le="+Inf"} 2\nattn_x_sum 1\n'
               'attn_x_count 2\n', "control", control)
    check.eq(control.failed, 1, "control: non-cumulative buckets are caught")

    code = s.stop()
    check.eq(code, 0, "SIGTERM: exit 0")
    check.true(any("ready" == line.strip() for line in s.lines), "prints ready")

# ---- decoder-only -----------------------------------------------------------------------------
with Served(attn, lm, checks=check) as s:
    prompts = ["abcd", "jklm", "nopab", "c"]
    want = cli("generate", "--model", lm, "--greedy", "--max-tokens", "6", *sum([["--prompt", p] for p in prompts], []))
    got = [texts_of(s.complete({"model": "lm", "prompt": p, "temperature": 0, "max_tokens": 6}))[0] for p in prompts]
    check.eq(got, want, "decoder-only greedy == attn generate")
    stream_equals_plain(s, {"model": "lm", "prompt": "abcd", "temperature": 1, "seed": 5, "n": 3, "max_tokens": 8},
                        "lm sampled")
    stream_equals_plain(s, {"model": "lm", "prompt": "abcd", "temperature": 0, "max_tokens": 8, "stop": "g"}, "lm stop")
    r = s.post("/v1/completions", {"model": "lm", "prompt": "abcdefghijklmnop", "max_tokens": 1})
    check.error(r, 400, "prompt", "context_length_exceeded", "16-token prompt, 16 positions")
    r = s.post("/v1/completions", {"model": "lm", "prompt": "abcd", "max_tokens": 100})
    check.error(r, 400, "max_tokens", None, "max_tokens past the context")
    check.eq(s.stop(), 0, "SIGTERM: exit 0 (lm)")

# ---- the (max batch, requests) grid ------------------------------------------------------------
# Seeded sampling with logprobs: every request's text and log-probabilities (as JSON numbers,
# i.e. every bit of the double) equal its solo answer whatever the batch room and how many run
# together; with --max-batch below the request count, requests wait and join mid-decoding.
grid_prompts = ["01234", "54321", "13520", "2403", "0", "55"]
def grid_body(src, i):
    return {"model": "rev", "prompt": src, "temperature": 1.3, "seed": 40 + i, "logprobs": 1, "max_tokens": 12}
def answer(r):
    return [(c["text"], c["logprobs"]["token_logprobs"]) for c in r["choices"]]
for max_batch, n_requests in ((1, 3), (2, 2), (2, 4), (4, 2), (4, 6)):
    with Served(attn, rev, "--max-batch", str(max_batch), checks=check) as s:
        solo = [answer(s.complete(grid_body(src, i))) for i, src in enumerate(grid_prompts[:n_requests])]
        results, barrier = {}, threading.Barrier(n_requests)

        def one(i):
            barrier.wait()
            results[i] = answer(s.complete(grid_body(grid_prompts[i], i)))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n_requests)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        check.eq([results.get(i) for i in range(n_requests)], solo,
                 "max batch %d, %d requests: solo text and log-probabilities" % (max_batch, n_requests))
        # Control: the solo answers differ from one another (text or log-probability bits), so
        # answers swapped or mixed between requests would be caught.
        check.eq(len(set(repr(a) for a in solo)), n_requests, "control: distinct solo answers (max batch %d)" % max_batch)

# ---- encoder-only -----------------------------------------------------------------------------
with Served(attn, mlm, checks=check) as s:
    r = s.complete({"model": "mlm", "prompt": ["aa[MASK]a", "[MASK]ccc"]})
    check.eq(texts_of(r), ["aaaa", "cccc"], "fill-mask text")
    check.eq(r["usage"], {"prompt_tokens": 8, "completion_tokens": 2, "total_tokens": 10}, "fill-mask usage")
    events, done = s.stream({"model": "mlm", "prompt": "aa[MASK]a"})
    check.eq(streamed_texts(events)[0], {0: "aaaa"}, "fill-mask streamed")
    check.error(s.post("/v1/completions", {"model": "mlm", "prompt": "aaaa"}), 400, "prompt", None, "no mask")

# ---- --threads --------------------------------------------------------------------------------
# The engine thread decodes with --threads (OpenMP keeps the team size per thread, and a thread
# that attn starts has the runtime's default: every core). /metrics reports the count as the
# engine thread sees it; with --threads 1 decoding starts no OpenMP worker thread. Control: the
# count follows --threads (2 and 1 differ), so a server that ignored it would fail one of them.


def process_threads(s):
    return len(os.listdir("/proc/%d/task" % s.proc.pid))


def engine_threads(s):
    m = re.search(r"^attn_engine_threads (\S+)$", s.get("/metrics").text, re.M)
    return float(m.group(1)) if m else None


for threads in ("1", "2"):
    served = Served(attn, rev, checks=check)
    served.cmd[served.cmd.index("--threads") + 1] = threads
    with served as s:
        check.eq(engine_threads(s), float(threads), "--threads %s: the engine decodes on %s" % (threads, threads))
        before = process_threads(s)
        for src in ("01234", "54321", "2403"):
            s.complete({"model": "rev", "prompt": src, "temperature": 0})
            s.complete({"model": "rev", "prompt": src, "beam_size": 4})
        if threads == "1":
            check.eq(process_threads(s) - before, 0, "--threads 1: decoding starts no OpenMP worker thread")

check.done()
