#!/usr/bin/env python3
"""serve_openai_npm_test.py — the official OpenAI client (npm package openai) talks to attn serve.

    serve_openai_npm_test.py ATTN_BINARY MODELS_DIR NPM_DIR

NPM_DIR/node/node_modules holds the openai package (make_openai_npm.sh). openai_client.js asks
a real `attn serve` (MODELS_DIR/rev) for a non-streamed and a streamed completion and an
unknown model; the client must parse both (object, id, created, finish_reason, usage), the
streamed text must equal the non-streamed text and the server's answer to python-requests,
and the unknown model must surface as the client's 404 error naming the param.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Checks, Served  # noqa: E402

attn, models, npm_dir = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
here = os.path.dirname(os.path.abspath(__file__))
check = Checks("serve_openai_npm")

with Served(attn, os.path.join(models, "rev")) as s:
    want = s.complete({"model": "rev", "prompt": "01234", "temperature": 0, "max_tokens": 20})
    r = subprocess.run(["node", os.path.join(here, "openai_client.js"), os.path.join(npm_dir, "node", "node_modules"),
                        s.url("/v1"), "rev", "01234"], capture_output=True, text=True, timeout=120)
    check.eq(r.returncode, 0, "node client ran: " + r.stderr[-2000:])
    out = json.loads(r.stdout) if r.returncode == 0 else {"plain": {"choices": [{}]}, "streamed": {}, "error": {}}
    plain = out["plain"]
    check.eq(plain.get("object"), "text_completion", "object")
    check.true(isinstance(plain.get("id"), str) and isinstance(plain.get("created"), int), "id and created")
    check.eq(plain["choices"][0].get("text"), want["choices"][0]["text"], "client text == server text")
    check.eq(plain["choices"][0].get("finish_reason"), "stop", "finish_reason")
    check.eq(plain.get("usage"), want["usage"], "usage")
    check.eq(out["streamed"].get("texts"), {"0": want["choices"][0]["text"]}, "streamed text == non-streamed")
    check.eq(out["streamed"].get("finish_reasons"), {"0": "stop"}, "streamed finish_reason")
    check.eq(out["streamed"].get("usage"), want["usage"], "streamed usage (include_usage)")
    check.eq(out["error"], {"status": 404, "param": "model", "code": "model_not_found", "name": "NotFoundError"},
             "unknown model as the client's NotFoundError")

check.done()
