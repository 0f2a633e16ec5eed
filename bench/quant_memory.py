#!/usr/bin/env python3
"""quant_memory.py — file size and resident memory of model folders in each precision.

    quant_memory.py --attn ATTN FOLDER [FOLDER ...]

For each folder: model.safetensors' size, then a real `attn serve --threads 1` on it: resident
memory (VmRSS) once it answers /health (the model loaded, nothing decoded), after one greedy
completion, and the process's peak (VmHWM, loading included). Prints a Markdown table, ratios
against the first folder (the float32 one). Resident memory counts the whole process: the
weights plus the runtime's own (about 15 MB of libraries, the HTTP server's threads).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "serve"))
from serve_util import Served  # noqa: E402


def status_kib(pid):
    out = {}
    for line in open("/proc/%d/status" % pid):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def prompt_of(folder):
    """A short prompt in the folder's vocabulary: its first few ordinary tokens."""
    try:
        tokens = json.load(open(os.path.join(folder, "vocab.json")))["tokens"]
        plain = [t for t in tokens if not (t.startswith("<") and t.endswith(">")) and not t.startswith("[")]
        return "".join(plain[:4]) or "a"
    except (OSError, KeyError, ValueError):
        return "a"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attn", required=True)
    ap.add_argument("folders", nargs="+")
    args = ap.parse_args()
    rows = []
    for folder in args.folders:
        size = os.path.getsize(os.path.join(folder, "model.safetensors"))
        with Served(args.attn, folder) as s:
            loaded = status_kib(s.proc.pid)
            s.complete({"model": os.path.basename(os.path.normpath(folder)), "prompt": prompt_of(folder),
                        "temperature": 0, "max_tokens": 8})
            after = status_kib(s.proc.pid)
            s.stop()
        rows.append((os.path.basename(os.path.normpath(folder)), size / 2**20, loaded["VmRSS"] / 1024,
                     after["VmRSS"] / 1024, after["VmHWM"] / 1024))
    base = rows[0]
    print("| folder | model.safetensors MiB | resident after load MiB | after a completion MiB | peak MiB |")
    print("|---|---:|---:|---:|---:|")
    for name, size, loaded, after, peak in rows:
        print("| %s | %.1f (%.2fx) | %.1f (%.2fx) | %.1f | %.1f (%.2fx) |" % (
            name, size, base[1] / size, loaded, base[2] / loaded, after, peak, base[4] / peak))


if __name__ == "__main__":
    main()
