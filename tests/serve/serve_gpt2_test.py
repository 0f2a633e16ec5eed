#!/usr/bin/env python3
"""serve_gpt2_test.py — `attn serve` on a Hugging Face GPT-2 folder answers as `attn generate`.

    serve_gpt2_test.py ATTN_BINARY GPT2_FOLDER

GPT2_FOLDER is the tiny GPT-2 of the torch fixtures (config.json, model.safetensors,
vocab.json, merges.txt; its forward and greedy continuation are checked against PyTorch by
tests/torch/gpt2_torch_test.cpp). Served by a real `attn serve --port 0`: greedy continuations
over HTTP equal `attn generate`'s (the prompt read without <bos>, byte-level BPE text); the
streamed text equals the non-streamed one; /tokenize and /detokenize round-trip through the
BPE; a prompt past the 24 learned positions is 400 context_length_exceeded.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Checks, Served, streamed_texts  # noqa: E402

attn, folder = sys.argv[1], sys.argv[2]
check = Checks("serve_gpt2")
model = os.path.basename(os.path.normpath(folder))
prompts = ["hello world", "the cat", "a"]

want = subprocess.run([attn, "generate", "--model", folder, "--greedy", "--max-tokens", "5", "--threads", "1",
                       *sum([["--prompt", p] for p in prompts], [])],
                      capture_output=True, text=True, check=True).stdout.split("\n")[:len(prompts)]
with Served(attn, folder, checks=check) as s:
    got = []
    for p in prompts:
        r = s.complete({"model": model, "prompt": p, "temperature": 0, "max_tokens": 5})
        got.append(r["choices"][0]["text"])
    check.eq(got, want, "greedy == attn generate (GPT-2 folder)")
    check.true(any(t for t in got), "control: some continuation is not empty")

    body = {"model": model, "prompt": "hello world", "temperature": 0.9, "seed": 4, "n": 2, "max_tokens": 8}
    plain = s.complete(body)
    events, done = s.stream(body)
    texts, _ = streamed_texts(events)
    check.true(done, "stream ends with [DONE]")
    check.eq([texts.get(c["index"], "") for c in plain["choices"]], [c["text"] for c in plain["choices"]],
             "streamed text == non-streamed text")

    for text in ["hello world", "the cat sat."]:
        toks = s.post("/tokenize", {"content": text}).json()["tokens"]
        check.eq(s.post("/detokenize", {"tokens": toks}).json()["content"], text, "BPE round trip " + text)

    r = s.post("/v1/completions", {"model": model, "prompt": "hello " * 30, "max_tokens": 1})
    check.error(r, 400, "prompt", "context_length_exceeded", "a prompt past the learned positions")
    check.eq(s.stop(), 0, "SIGTERM: exit 0")

check.done()
