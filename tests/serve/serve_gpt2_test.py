#!/usr/bin/env python3
"""serve_gpt2_test.py — `attn serve` on a Hugging Face GPT-2 folder answers as `attn generate`.

    serve_gpt2_test.py ATTN_BINARY GPT2_FOLDER

GPT2_FOLDER is the tiny GPT-2 of the torch fixtures (config.json, model.safetensors,
vocab.json, merges.txt; its forward and greedy continuation are checked against PyTorch by
tests/torch/gpt2_torch_test.cpp). Served by a real `attn serve --port 0`: greedy continuations
over HTTP equal `attn generate`'s (the prompt read without <bos>, byte-level BPE text); the
streamed text equals the non-streamed one; /tokenize and /detokenize round-trip through the
BPE; a prompt past the 24 learned positions is 400 context_length_exceeded. The folder
quantized to int8 (`attn quantize`: one of our folders with the tokenizer as encoder.json and
vocab.bpe) serves text as `attn generate` on it does.
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Checks, Served, streamed_texts  # noqa: E402

attn, folder = sys.argv[1], sys.argv[2]
check = Checks("serve_gpt2")
model = os.path.basename(os.path.normpath(folder))
prompts = ["hello world", "the cat", "a"]



def generated(model_dir):
    return subprocess.run([attn, "generate", "--model", model_dir, "--greedy", "--max-tokens", "5", "--threads", "1",
                           *sum([["--prompt", p] for p in prompts], [])],
                          capture_output=True, text=True, check=True).stdout.split("\n")[:len(prompts)]


want = generated(folder)
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

with tempfile.TemporaryDirectory(prefix="attn_serve_gpt2_int8_") as tmp:
    q8 = os.path.join(tmp, "gpt2-int8")
    subprocess.run([attn, "quantize", "--model", folder, "--to", "int8", "--out", q8], capture_output=True, check=True)
    want_q8 = generated(q8)
    with Served(attn, q8, checks=check) as s:
        name = os.path.basename(q8)
        got = [s.complete({"model": name, "prompt": p, "temperature": 0, "max_tokens": 5})["choices"][0]["text"]
               for p in prompts]
        check.eq(got, want_q8, "int8 GPT-2: greedy == attn generate on the quantized folder")
        toks = s.post("/tokenize", {"content": "hello world"}).json()["tokens"]
        check.eq(s.post("/detokenize", {"tokens": toks}).json()["content"], "hello world", "int8 GPT-2: BPE round trip")
        check.eq(s.stop(), 0, "int8 GPT-2: SIGTERM: exit 0")

check.done()
