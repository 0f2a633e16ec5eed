#!/usr/bin/env python3
"""bench/alloc_profile.py — where a training step of the demo's model spends its time.

Samples `alloc_bench` (the demo's Trainer loop) with `perf record` and groups the flat
profile by what the code does: GEMM, attention, the vector kernels, dropout, copies and zero
fills, allocation (malloc/free and page faults), autograd bookkeeping, the OpenMP runtime.
Prints a Markdown table (share of samples per group, and the top symbols of each group).
Needs Linux `perf` (Debian: linux-perf) with perf_event_paranoid <= 2, or root.

    bench/alloc_profile.py --bench build/bench/alloc_bench [--steps 300] [--top 3]
Extra arguments after `--` go to alloc_bench (for example `-- --threads 2`).
Not here: call graphs (run perf report yourself for those) or the PyTorch side.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# (group, test on (dso, symbol)); the first match wins, so order matters.
GROUPS = [
    ("GEMM (OpenBLAS sgemm, packing)", lambda d, s: "openblas" in d or s.startswith(("sgemm", "cblas_"))),
    ("attention (naive/flash kernels, masks)",
     lambda d, s: re.search(r"attention|sdpa_impl|apply_attention_mask", s) is not None),
    ("dropout (mask draw and scaling)", lambda d, s: re.search(r"dropout|keep_mask|Rng::|Xoshiro", s) is not None),
    ("vector kernels (softmax, norms, activations, CE, Adam)",
     lambda d, s: "kernels::simd" in s or re.search(
         r"kernels::(softmax|log_softmax|layer_norm|rms_norm|cross_entropy|gelu|relu|scale|binary|adam)", s) is not None),
    ("other kernels (embedding, sums, bias gradients)",
     lambda d, s: "attn::kernels::" in s or "column_sums" in s or "reduce_rows" in s),
    ("copies and zero fills (contiguous, zeros, memcpy)",
     lambda d, s: re.search(r"memset|memmove|memcpy|copy_from|Tensor::zeros|Tensor::fill", s) is not None),
    ("allocation (malloc/free, page faults)",
     lambda d, s: re.search(r"malloc|free|_int_|unlink_chunk|consolidate|sysmalloc|tcache|aligned_alloc|memalign|"
                            r"page_fault|clear_page|do_anonymous|handle_mm|alloc_pages|mmap|munmap|zap_|"
                            r"unmap_page|lru_|folio|^\(anonymous namespace\)::count", s) is not None),
    ("autograd and tensor bookkeeping",
     lambda d, s: re.search(r"attn::|std::|_Sp_counted|operator new|operator delete", s) is not None),
    ("OpenMP runtime", lambda d, s: "gomp" in d),
    ("operating system (other kernel time)", lambda d, s: d == "[kernel.kallsyms]"),
]

LINE = re.compile(r"^\s*([0-9.]+)%\s+(\S+)\s+\[[.k]\]\s+(.*?)\s*(?:-\s+-\s*)?$")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/bench/alloc_bench")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--top", type=int, default=3, help="symbols listed per group")
    ap.add_argument("--freq", type=int, default=2000, help="samples per second")
    ap.add_argument("rest", nargs="*", help="arguments for alloc_bench (after --)")
    args = ap.parse_args()
    if shutil.which("perf") is None:
        sys.exit("alloc_profile: `perf` not found (Debian: apt-get install linux-perf)")
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        rec = subprocess.run(["perf", "record", "-F", str(args.freq), "-o", data, "--", args.bench,
                              "--steps", str(args.steps), *args.rest], capture_output=True, text=True)
        if rec.returncode != 0:
            sys.exit(f"alloc_profile: perf record failed:\n{rec.stderr}")
        bench_out = [l for l in rec.stdout.splitlines() if l.strip()]
        rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,symbol", "--stdio",
                              "-g", "none"], capture_output=True, text=True, check=True)
    totals, tops = {}, {}
    for line in rep.stdout.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        pct, dso, sym = float(m.group(1)), m.group(2), m.group(3).strip()
        group = next((g for g, test in GROUPS if test(dso, sym)), "other")
        totals[group] = totals.get(group, 0.0) + pct
        tops.setdefault(group, []).append((pct, sym))
    print("\n".join(bench_out))
    print()
    print("| share of samples | what | top symbols |")
    print("|---:|---|---|")
    for group, pct in sorted(totals.items(), key=lambda kv: -kv[1]):
        syms = ", ".join(f"`{s[:60]}` {p:.1f}%" for p, s in sorted(tops[group], reverse=True)[: args.top])
        print(f"| {pct:.1f}% | {group} | {syms} |")


if __name__ == "__main__":
    main()
