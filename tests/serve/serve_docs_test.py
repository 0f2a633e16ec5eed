#!/usr/bin/env python3
"""serve_docs_test.py — the curl examples of docs/serving.md run against a real attn serve.

    serve_docs_test.py ATTN_BINARY MODELS_DIR SOURCE_DIR

The shell block after the marker "<!-- serve docs example: ... -->" in docs/serving.md is run
with bash (-e, pipefail) against `attn serve` on MODELS_DIR/rev served under the id the docs
use ("reverse": a link of that name to the folder), its address replaced by the server's and
every curl made to fail on an HTTP error (--fail-with-body). A control: the same block with a
wrong model id must fail.
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Checks, Served  # noqa: E402

attn, models, source = sys.argv[1], sys.argv[2], sys.argv[3]
check = Checks("serve_docs")
doc = open(os.path.join(source, "docs", "serving.md"), encoding="utf-8").read()
m = re.search(r"<!-- serve docs example:[^>]*-->\s*```sh\n(.*?)```", doc, re.S)
check.true(m, "docs/serving.md has the marked example block")
block = m.group(1) if m else ""


def run(script):
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], capture_output=True, text=True, timeout=120)


with tempfile.TemporaryDirectory() as tmp:
    os.symlink(os.path.abspath(os.path.join(models, "rev")), os.path.join(tmp, "reverse"))
    with Served(attn, os.path.join(tmp, "reverse")) as s:
        script = block.replace("127.0.0.1:8080", "127.0.0.1:%d" % s.port).replace("curl ", "curl --fail-with-body ")
        r = run(script)
        check.eq(r.returncode, 0, "the example runs: " + r.stderr[-2000:] + r.stdout[-2000:])
        for part in ('{"status":"ok"}', '"id":"reverse"', '"object":"text_completion"', "data: [DONE]",
                     '"tokens":[{"id":7,"piece":"3"}', '"content":"351"', "# TYPE attn_requests_total counter"):
            check.true(part in r.stdout, "the example's output has " + part)
        bad = run(script.replace('"model": "reverse"', '"model": "nope"'))
        check.true(bad.returncode != 0, "control: a wrong model id makes the example fail")

check.done()
