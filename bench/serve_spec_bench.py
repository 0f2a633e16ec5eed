#!/usr/bin/env python3
"""serve_spec_bench.py — speculative decoding in `attn serve`, one request at a time.

    serve_spec_bench.py --attn ATTN --model DIR --draft DIR --prompts FILE
                        [--max-tokens N] [--draft-tokens 4,7] [--repeat 3] [--threads 1]

Starts a real `attn serve` per mode (plain; --draft DIR at each K of --draft-tokens;
--prompt-lookup), sends every line of FILE as a greedy completion, one after the other (the
case speculation is for: a lone request leaves the machine idle), and reports generated tokens
per second over the whole sequence (HTTP included), the fastest of --repeat rounds (modes
alternate within a round, so drifts in the machine's speed hit all of them), the ratio to
plain, and the server's own counts from /metrics: acceptance (accepted / drafted) and tokens
per model pass. Every mode's texts must equal plain's (checked; a difference is an error).
"""
import argparse
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "serve"))
from serve_util import Served  # noqa: E402


def metric(s, name):
    m = re.search(r"^%s (\S+)$" % name, s.get("/metrics").text, re.M)
    return float(m.group(1)) if m else 0.0


def run_mode(args, prompts, extra):
    model_id = os.path.basename(os.path.normpath(args.model))
    served = Served(args.attn, args.model, *extra)
    served.cmd[served.cmd.index("--threads") + 1] = str(args.threads)
    with served as s:
        body = {"model": model_id, "temperature": 0, "max_tokens": args.max_tokens}
        for p in prompts[:2]:  # warm-up
            s.complete(dict(body, prompt=p))
        before = {n: metric(s, n) for n in ("attn_decode_steps_total", "attn_draft_tokens_total",
                                            "attn_draft_accepted_total", "attn_completion_tokens_total")}
        texts, tokens = [], 0
        t0 = time.perf_counter()
        for p in prompts:
            r = s.complete(dict(body, prompt=p))
            texts.append(r["choices"][0]["text"])
            tokens += r["usage"]["completion_tokens"]
        seconds = time.perf_counter() - t0
        after = {n: metric(s, n) - before[n] for n in before}
        s.stop()
    return {"texts": texts, "tokens": tokens, "seconds": seconds, **after}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attn", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--max-tokens", type=int, default=17)
    ap.add_argument("--draft-tokens", default="4,7")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    prompts = [l.rstrip("\n") for l in open(args.prompts) if l.strip()]
    modes = [("plain", [])]
    for k in args.draft_tokens.split(","):
        modes.append(("draft K=%s" % k, ["--draft", args.draft, "--draft-tokens", k]))
    modes.append(("prompt lookup K=4", ["--prompt-lookup"]))
    best = {}
    for r in range(args.repeat):
        for name, extra in modes:
            res = run_mode(args, prompts, extra)
            print("round %d %-18s %8.1f tokens/s" % (r + 1, name, res["tokens"] / res["seconds"]), flush=True)
            if name not in best or res["seconds"] < best[name]["seconds"]:
                best[name] = res
    plain = best["plain"]
    print("\n%d prompts one at a time, greedy, max_tokens %d, %d thread(s); fastest of %d" %
          (len(prompts), args.max_tokens, args.threads, args.repeat))
    print("| mode | tokens/s | vs plain | acceptance | tokens per pass | same text |")
    print("|---|---:|---:|---:|---:|---|")
    ok = True
    for name, _ in modes:
        b = best[name]
        same = b["texts"] == plain["texts"]
        ok = ok and same
        acc = b["attn_draft_accepted_total"] / b["attn_draft_tokens_total"] if b["attn_draft_tokens_total"] else 0
        per_pass = b["attn_completion_tokens_total"] / b["attn_decode_steps_total"] if b["attn_decode_steps_total"] else 0
        print("| %s | %.1f | %.2fx | %s | %.2f | %s |" % (
            name, b["tokens"] / b["seconds"], plain["seconds"] / b["seconds"],
            "%.1f%%" % (100 * acc) if b["attn_draft_tokens_total"] else "-", per_pass, "yes" if same else "NO"))
    if not ok:
        sys.exit("serve_spec_bench: a mode's texts differ from plain decoding's")


if __name__ == "__main__":
    main()
