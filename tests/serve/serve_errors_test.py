#!/usr/bin/env python3
"""serve_errors_test.py — every bad request gets OpenAI's error shape and disturbs no other.

    serve_errors_test.py ATTN_BINARY MODELS_DIR

Against real `attn serve --port 0` processes on MODELS_DIR/rev (make_serve_models.sh):
malformed JSON, wrong types and out-of-range values answer 400 naming the field as `param`;
an unknown model 404 (a missing one 400); an unknown route 404 and a wrong method 405; a body
over --max-body 413; with --api-key a missing or wrong key 401 (/health exempt); a full queue
503 with Retry-After and x-should-retry: false; a request larger than the paged KV cache's
pool 503 kv_cache_full. 1,000 malformed requests in a row and clients
that vanish mid-stream leave the server answering, and the other clients' answers unchanged.
SIGINT ends the server with status 0.
"""
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Checks, Served  # noqa: E402

attn, models = sys.argv[1], sys.argv[2]
rev = os.path.join(models, "rev")
check = Checks("serve_errors")
ok = {"model": "rev", "prompt": "01234", "temperature": 0}


def bad(s, body, status, param=None, code=None, path="/v1/completions"):
    check.error(s.post(path, body), status, param, code, "%s %s" % (path, str(body)[:80]))


def raw_request(port, data, read=True):
    """Sends raw bytes on a fresh connection; returns what came back (or b'' when not read)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        if not read:
            return b""
        sock.shutdown(socket.SHUT_WR)
        out = b""
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                out += chunk
        except socket.timeout:
            pass
        return out


with Served(attn, rev, "--max-body", "4096") as s:
    solo = s.complete(ok)["choices"][0]["text"]

    # Bodies that are not a request.
    bad(s, "{", 400, None, "invalid_json")
    bad(s, "", 400, None, "invalid_json")
    bad(s, "[1, 2]", 400, None, "invalid_json")
    bad(s, '"text"', 400, None, "invalid_json")
    # The model.
    bad(s, {"prompt": "01234"}, 400, "model", "missing_required_parameter")
    bad(s, {"model": 5, "prompt": "01234"}, 400, "model", "invalid_type")
    bad(s, {"model": "gpt-4", "prompt": "01234"}, 404, "model", "model_not_found")
    # The prompt.
    bad(s, {"model": "rev"}, 400, "prompt", "missing_required_parameter")
    for prompt in [5, {"a": 1}, [], "", [[]], [1.5], [True], ["01", 3], [9999], [0], "01x34", [[4, 5], [9999]]]:
        bad(s, dict(ok, prompt=prompt), 400, "prompt")
    # Wrong types and values of every parameter.
    cases = [("max_tokens", "5"), ("max_tokens", 1.5), ("max_tokens", 0), ("max_tokens", -3), ("max_tokens", True),
             ("temperature", "x"), ("temperature", -0.5), ("temperature", 2.5), ("top_p", 0), ("top_p", 1.5),
             ("top_p", "1"), ("n", 0), ("n", 17), ("n", "2"), ("logprobs", 6), ("logprobs", -1), ("logprobs", 1.5),
             ("stop", 5), ("stop", ["a", "b", "c", "d", "e"]), ("stop", [1]), ("stop", ""), ("stream", "yes"),
             ("echo", 1), ("seed", "7"), ("seed", 1.5), ("top_k", -1), ("beam_size", -1), ("beam_size", 17),
             ("length_penalty", -1), ("best_of", 3), ("suffix", "x"), ("logit_bias", {"5": 10}),
             ("presence_penalty", 1), ("frequency_penalty", -1), ("user", 5), ("stream_options", {"include_usage": True})]
    for field, value in cases:
        bad(s, dict(ok, **{field: value}), 400, field)
    bad(s, dict(ok, beam_size=2, n=3), 400, "n")
    bad(s, dict(ok, beam_size=2, logprobs=1), 400, "logprobs")
    bad(s, dict(ok, stream=True, stream_options=5), 400, "stream_options")
    # Tokenize and detokenize.
    bad(s, {}, 400, "content", path="/tokenize")
    bad(s, {"content": 5}, 400, "content", path="/tokenize")
    bad(s, {"content": "0x"}, 400, "content", path="/tokenize")
    bad(s, {"tokens": "4 5"}, 400, "tokens", path="/detokenize")
    bad(s, {"tokens": [4, 99999]}, 400, "tokens", path="/detokenize")
    bad(s, {"tokens": [-1]}, 400, "tokens", path="/detokenize")
    # Routes and methods.
    check.error(s.get("/v1/chat/completions"), 404, None, None, "unknown route")
    check.error(s.post("/nowhere", {}), 404, None, None, "unknown route (POST)")
    check.error(s.get("/v1/completions"), 405, None, None, "GET /v1/completions")
    check.error(s.post("/health", {}), 405, None, None, "POST /health")
    check.error(requests.delete(s.url("/v1/models"), timeout=10), 405, None, None, "DELETE /v1/models")
    # A body over --max-body.
    check.error(s.post("/v1/completions", dict(ok, user="x" * 5000)), 413, None, None, "body over --max-body")
    check.eq(s.complete(ok)["choices"][0]["text"], solo, "answers after the errors")

    # 1,000 malformed requests in a row (one connection kept alive, and raw garbage), then a good one.
    rng = random.Random(1)
    session = requests.Session()
    statuses = {}
    garbage = ['{"model": "rev", "prompt": ', '{"model": "rev", "prompt": [[[[', "\x00\xff", "null", "[]",
               '{"model": "rev", "prompt": "01234", "max_tokens": 1e999}', '{"model": "rev", "prompt": "\\ud800"}',
               '{"model": "rev", "prompt": "01234", "temperature": NaN}', "{" * 2000, '{"model": {"a": [1, 2]}}']
    for i in range(1000):
        if i % 100 == 99:
            raw_request(s.port, bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))) + b"\r\n\r\n")
            continue
        body = garbage[i % len(garbage)] if i % 3 else "".join(chr(rng.randrange(32, 127)) for _ in range(rng.randrange(50)))
        try:
            r = session.post(s.url("/v1/completions"), data=body.encode("utf-8", "surrogatepass"), timeout=10)
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        except requests.RequestException as e:
            check.true(False, "malformed request %d: %s" % (i, e))
    check.true(set(statuses) <= {400, 413}, "malformed requests answer 400 (or 413): %s" % statuses)
    check.eq(s.get("/health").status_code, 200, "healthy after 1,000 malformed requests")
    check.eq(s.complete(ok)["choices"][0]["text"], solo, "answers after 1,000 malformed requests")

    # Clients that vanish mid-stream: the others' answers are unchanged.
    sources = ["01234", "54321", "13520", "2403"]
    want = {src: s.complete(dict(ok, prompt=src))["choices"][0]["text"] for src in sources}
    got, errors = [], []

    def polite(src):
        for _ in range(5):
            try:
                got.append((src, s.complete(dict(ok, prompt=src))["choices"][0]["text"]))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

    def rude(i):
        body = ('{"model": "rev", "prompt": "%s", "temperature": 1.5, "seed": %d, "max_tokens": 200, "stream": true}'
                % (sources[i % 4], i)).encode()
        head = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\n\r\n" % len(body)).encode()
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as sock:
            sock.sendall(head + body)
            if i % 2:
                sock.recv(64)  # read the start of the stream, then hang up
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")

    threads = [threading.Thread(target=polite, args=(src,)) for src in sources]
    threads += [threading.Thread(target=rude, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    check.eq(errors, [], "no polite request failed")
    check.eq(sorted(got), sorted((src, want[src]) for src in sources for _ in range(5)),
             "polite answers unchanged by vanishing clients")
    time.sleep(0.5)
    check.eq(s.get("/health").status_code, 200, "healthy after vanishing clients")
    check.eq(s.stop(signal.SIGINT), 0, "SIGINT: exit 0")

# --api-key: every route but /health needs the key.
with Served(attn, rev, "--api-key", "sesame") as s:
    check.eq(s.get("/health").status_code, 200, "health needs no key")
    check.error(s.post("/v1/completions", ok), 401, None, "invalid_api_key", "no key")
    check.error(s.post("/v1/completions", ok, headers={"Authorization": "Bearer wrong"}), 401, None, None, "wrong key")
    check.error(s.post("/v1/completions", ok, headers={"Authorization": "sesame"}), 401, None, None, "not Bearer")
    check.error(s.get("/v1/models"), 401, None, None, "models without a key")
    check.error(s.get("/metrics"), 401, None, None, "metrics without a key")
    key = {"Authorization": "Bearer sesame"}
    check.eq(s.post("/v1/completions", ok, headers=key).status_code, 200, "the right key")
    check.eq(s.get("/v1/models", headers=key).status_code, 200, "models with the key")

# A full queue: --max-queue 0 lets no request wait; concurrent requests are refused with 503.
with Served(attn, rev, "--max-queue", "0", "--max-batch", "1") as s:
    results, barrier = [], threading.Barrier(8)

    def one(i):
        barrier.wait()
        results.append(s.post("/v1/completions", dict(ok, max_tokens=50, prompt="0123401234")))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    refused = [r for r in results if r.status_code == 503]
    check.true(refused, "a full queue refuses")
    check.eq(sorted({r.status_code for r in results} - {200, 503}), [], "only 200 and 503")
    for r in refused[:1]:
        check.error(r, 503, None, "queue_full", "full queue")
        check.eq(r.headers.get("x-should-retry"), "false", "x-should-retry: false")
        check.true(r.headers.get("Retry-After"), "Retry-After")

# The paged KV cache's pool (--kv-pool-mb): blocks of 1,024 positions of the decoder-only model
# (2 layers, D=32: 512 KiB each), two in 1 MiB. A request whose worst case needs three blocks
# (n = 3, one row each) is refused with 503 kv_cache_full; n = 2 fits. A pool that holds no
# block at all is an error at startup naming the sizes.
lm = os.path.join(models, "lm")
with Served(attn, lm, "--kv-block", "1024", "--kv-pool-mb", "1") as s:
    body = {"model": "lm", "prompt": "abc", "max_tokens": 4, "temperature": 0.5, "seed": 3}
    r = s.post("/v1/completions", dict(body, n=3))
    check.error(r, 503, None, "kv_cache_full", "a request larger than the KV pool")
    check.true("--kv-pool-mb" in r.json()["error"]["message"], "the message names --kv-pool-mb")
    check.eq(s.post("/v1/completions", dict(body, n=2)).status_code, 200, "a request the pool holds")
    metrics = s.get("/metrics").text
    check.true("attn_kv_blocks 2\n" in metrics, "/metrics: attn_kv_blocks 2")
    check.true("attn_kv_block_bytes 524288\n" in metrics, "/metrics: attn_kv_block_bytes 524288")
    check.true('attn_kv_cache_info{dtype="f32"} 1\n' in metrics, "/metrics: the KV dtype f32")
# bf16 blocks (--kv-dtype bf16, server-wide) take half the bytes: the same 1 MiB holds four, so
# n = 3 fits, and /metrics says so.
with Served(attn, lm, "--kv-block", "1024", "--kv-pool-mb", "1", "--kv-dtype", "bf16") as s:
    body = {"model": "lm", "prompt": "abc", "max_tokens": 4, "temperature": 0.5, "seed": 3}
    check.eq(s.post("/v1/completions", dict(body, n=3)).status_code, 200, "n = 3 in a pool of bf16 blocks")
    metrics = s.get("/metrics").text
    check.true("attn_kv_blocks 4\n" in metrics, "/metrics: attn_kv_blocks 4 (bf16)")
    check.true("attn_kv_block_bytes 262144\n" in metrics, "/metrics: attn_kv_block_bytes 262144 (bf16)")
    check.true('attn_kv_cache_info{dtype="bf16"} 1\n' in metrics, "/metrics: the KV dtype bf16")
p = subprocess.run([attn, "serve", "--model", lm, "--port", "0", "--kv-block", "4096", "--kv-pool-mb", "1"],
                   capture_output=True, text=True, timeout=120)
check.true(p.returncode != 0 and "attn: error:" in p.stderr, "a pool of no block: an error at startup")
p = subprocess.run([attn, "serve", "--model", lm, "--port", "0", "--kv-cache", "contiguous", "--kv-pool-mb", "8"],
                   capture_output=True, text=True, timeout=120)
check.true(p.returncode != 0 and "--kv-pool-mb needs --kv-cache paged" in p.stderr, "a pool without the paged cache")
p = subprocess.run([attn, "serve", "--model", lm, "--port", "0", "--kv-cache", "contiguous", "--kv-dtype", "bf16"],
                   capture_output=True, text=True, timeout=120)
check.true(p.returncode != 0 and "--kv-dtype bf16" in p.stderr and "--kv-cache contiguous" in p.stderr,
           "bf16 blocks with the contiguous cache")

check.done()
