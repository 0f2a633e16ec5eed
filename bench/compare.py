#!/usr/bin/env python3
"""bench/compare.py — attn and PyTorch side by side in one run (`make bench`).

Runs our Google Benchmark binaries (build/bench/*_bench, --benchmark_format=json: attention,
encoder layer, greedy and beam decoding, GEMM), memory_bench,
and `attn train --task reverse` (the demo's recipe and a base-size model's training throughput, each
in float32 and bf16), then the PyTorch twins (torch_bench.py, torch_reverse_train.py)
on the same shapes and thread count; prints one table per topic with both sides and the ratio
torch / attn (time ratio: above 1 means attn is faster; for GFLOP/s and tokens/s the inverse
rate ratio, so the same reading holds), and writes bench/RESULTS.md with the machine's details.

PyTorch runs in the fastest configuration found for it on this kind of machine: OpenBLAS with
its own core detection (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for the torch process only;
except where that detection falls back to the generic Prescott kernels on an AVX-512 CPU it does
not know: then both sides get the OPENBLAS_CORETYPE that `attn` would choose, docs/performance.md)
and glibc malloc on transparent huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1). Debian's
python3-torch loads whatever libblas.so.3 the alternatives system points at (possibly the 6
GFLOP/s reference BLAS); this script puts an OpenBLAS directory first on LD_LIBRARY_PATH of the
torch processes (no system change), probing the OpenMP and pthread builds with a 1024 matmul
and keeping the OpenMP build unless the pthread one is clearly (>10%) faster.
By default (`--torch-blas best`) every timed torch case also runs under the other build and the
faster time is reported: the pthread build, chosen by a matmul alone, made torch's decoding 4-5x slower.
The training comparison runs once per side by default; `--train-rounds N` runs N rounds of attn's
training and then PyTorch's, alternating (the machine's speed drifts by up to 30% within minutes,
and one run of each side may fall in different phases), and reports each side's median round.
The demo's recipe runs in both precisions (`--train-precisions`): float32 on both sides, then attn's
`--precision bf16` against torch.autocast; a last line sets attn's faster precision against PyTorch's
fastest run of any precision and thread count.
"""
import argparse
import datetime
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIBDIR = "/usr/lib/x86_64-linux-gnu" if platform.machine() == "x86_64" else "/usr/lib/aarch64-linux-gnu"

ALL_T = [128, 512, 1024, 2048, 4096]
ALL_MEM_T = [4096, 16384]
ALL_GEMM = [(n, n, n) for n in (256, 512, 1024, 2048, 4096)] + [(1024, 1536, 512), (1024, 2048, 512),
                                                                 (1024, 512, 2048)]
REVERSE_EPOCH_TOKENS = 10000 * (8 + 1)  # the demo's training set: 10,000 targets of 8 digits + EOS


def log(*a):
    print("[bench]", *a, file=sys.stderr, flush=True)


def sh(cmd, **kw):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, shell=isinstance(cmd, str), **kw).stdout.strip()
    except OSError:
        return ""


# ---- the machine -------------------------------------------------------------------------------

def machine_info(build):
    lscpu = {}
    for line in sh(["lscpu"]).splitlines():
        k, _, v = line.partition(":")
        lscpu[k.strip()] = v.strip()
    flags = lscpu.get("Flags", "").split()
    mem_kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    sockets = int(lscpu.get("Socket(s)", "1") or 1)
    cores = int(lscpu.get("Core(s) per socket", "0") or 0) * sockets
    ours = sh(f"ldd {build}/bench/gemm_bench | grep -i openblas | awk '{{print $3}}'")
    cxx = ""
    cache = os.path.join(build, "CMakeCache.txt")
    if os.path.exists(cache):
        m = re.search(r"^CMAKE_CXX_COMPILER:\w+=(.*)$", open(cache).read(), re.M)
        if m:
            cxx = sh([m.group(1), "--version"]).splitlines()[0:1]
            cxx = cxx[0] if cxx else ""
    thp = ""
    try:
        thp = open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip()
    except OSError:
        pass
    return {
        "cpu": lscpu.get("Model name", platform.processor()),
        "logical_cpus": os.cpu_count(),
        "cores": cores or os.cpu_count(),
        "threads_per_core": lscpu.get("Thread(s) per core", "?"),
        "hypervisor": lscpu.get("Hypervisor vendor", "none"),
        "caches": ", ".join(f"{k.split()[0]} {lscpu[k]}" for k in ("L1d cache", "L2 cache", "L3 cache") if k in lscpu),
        "avx2": "avx2" in flags,
        "avx512": sorted(f for f in flags if f.startswith("avx512")),
        "memory_gib": mem_kb / 2 ** 20,
        "kernel": platform.release(),
        "glibc": os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else "",
        "thp": thp,
        "compiler": cxx,
        "attn_openblas": ours or "?",
        "openblas_package": sh("dpkg-query -W -f='${Version}' libopenblas0-openmp 2>/dev/null") or "?",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def mem_available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


# ---- environments --------------------------------------------------------------------------------

def blas_core_fix():
    """The OPENBLAS_CORETYPE that `attn` re-executes itself with (attn::blas_core_type_fix) when
    OpenBLAS's own detection falls back to Prescott on an AVX-512 CPU, else None. Both sides of
    the comparison get it then, so that neither runs on the fallback kernels."""
    import ctypes
    for path in ("/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0", "libopenblas.so.0"):
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError:
            lib = None
    if lib is None:
        return None
    lib.openblas_get_corename.restype = ctypes.c_char_p
    # This process may have OPENBLAS_CORETYPE already; only a fresh detection counts, so ask a child.
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    code = ("import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); l.openblas_get_corename.restype=ctypes.c_char_p; "
            "print(l.openblas_get_corename().decode())")
    try:
        core = subprocess.run([sys.executable, "-c", code, lib._name], env=env, capture_output=True,
                              text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if core != "Prescott":
        return None
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        return None
    if not {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return None
    return "Cooperlake" if "avx512_bf16" in flags else "SkylakeX"


BLAS_CORE_FIX = None  # set in main()


def attn_env(threads):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    # OpenBLAS detects the core itself, as on torch's side: an inherited OPENBLAS_CORETYPE (some
    # environments set Haswell's AVX2 kernels) would put the two sides on different kernels.
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(k, None)
    if BLAS_CORE_FIX:
        env["OPENBLAS_CORETYPE"] = BLAS_CORE_FIX  # what `attn` itself would set; the bench binaries too
    return env


def torch_env(threads, blas_dir, hugepages):
    env = dict(os.environ)
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # let OpenBLAS detect the core itself
        env.pop(k, None)
    if BLAS_CORE_FIX:
        env["OPENBLAS_CORETYPE"] = BLAS_CORE_FIX  # ... unless it falls back to its generic kernels
    if blas_dir:
        env["LD_LIBRARY_PATH"] = blas_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    if hugepages:
        tun = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t and not t.startswith("glibc.malloc.hugetlb=")]
        env["GLIBC_TUNABLES"] = ":".join(tun + ["glibc.malloc.hugetlb=1"])
    env["OMP_NUM_THREADS"] = str(threads)
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    return env


def choose_torch_config(args):
    """Probes the BLAS builds torch can load; returns (blas_dir, probes)."""
    candidates = {"openblas-openmp": f"{LIBDIR}/openblas-openmp", "openblas-pthread": f"{LIBDIR}/openblas-pthread",
                  "system libblas.so.3": ""}
    probes = {}
    for name, d in candidates.items():
        if d and not os.path.exists(os.path.join(d, "libblas.so.3")):
            continue
        best = None
        for _ in range(2 if d else 1):
            out = sh([args.python, f"{HERE}/torch_bench.py", "--threads", str(args.threads), "probe", "--min-time",
                      str(min(args.min_time, 0.5))], env=torch_env(args.threads, d, args.torch_hugepages))
            try:
                p = json.loads(out.splitlines()[-1])
            except (ValueError, IndexError):
                continue
            if best is None or p["matmul_1024_gflops"] > best["matmul_1024_gflops"]:
                best = p
        if best:
            probes[name] = dict(best, dir=d)
            log(f"torch probe {name}: {best['matmul_1024_gflops']:.1f} GFLOP/s (1024 matmul), loads "
                + ", ".join(os.path.basename(x) for x in best["blas_libraries"]))
    if args.torch_blas not in ("auto", "best"):
        name = {"openmp": "openblas-openmp", "pthread": "openblas-pthread", "system": "system libblas.so.3"}[args.torch_blas]
        return name, candidates[name], probes
    g = {k: v["matmul_1024_gflops"] for k, v in probes.items()}
    choice = "openblas-openmp" if "openblas-openmp" in g else max(g, key=g.get, default="system libblas.so.3")
    if "openblas-pthread" in g and g["openblas-pthread"] > 1.1 * g.get(choice, 0):
        choice = "openblas-pthread"
    if g and g.get(choice, 0) < 15:
        log(f"WARNING: torch reaches only {g.get(choice, 0):.1f} GFLOP/s on a 1024 matmul: reference BLAS? "
            "Install libopenblas0-openmp (make deps).")
    return choice, candidates.get(choice, ""), probes


# ---- our side ----------------------------------------------------------------------------------------

def to_ms(value, unit):
    return value * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def run_gbench(args, binary, name_regex):
    path = os.path.join(args.build, "bench", binary)
    cmd = [path, f"--threads={args.threads}", "--benchmark_format=json", f"--benchmark_filter={name_regex}",
           f"--benchmark_min_time={args.min_time}", f"--benchmark_repetitions={args.reps}",
           "--benchmark_report_aggregates_only=true"]
    log(" ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, env=attn_env(args.threads))
    if p.returncode != 0:
        log(f"{binary} failed (exit {p.returncode}): {p.stderr.strip()[-2000:]}")
        return {}
    res = {}
    for b in json.loads(p.stdout)["benchmarks"]:
        if b.get("error_occurred"):
            log(f"{b['name']}: {b.get('error_message')}")
            continue
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b["run_name"].replace("/real_time", "")
        if name in res and b.get("run_type") != "aggregate":
            continue  # keep the median over the single iteration runs
        res[name] = {"ms": to_ms(b["real_time"], b["time_unit"]), "flop": b.get("flop"), "label": b.get("label", ""),
                     "kv_self_bytes": b.get("kv_self_bytes"), "kv_cross_bytes": b.get("kv_cross_bytes")}
    return res


def limit_address_space(limit):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


def run_memory_case(cmd, env, limit):
    """One process; its address space is capped so that a case too big for this machine fails
    with an allocation error instead of calling the OOM killer on a shared machine."""
    log(" ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=limit_address_space(limit))
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if lines:
        rec = json.loads(lines[-1])
        if rec.get("error") == "out of memory":
            rec["error"] = f"out of memory (cap {limit / 2 ** 30:.0f} GiB)"
        return rec
    return {"error": f"exit {p.returncode}: {p.stderr.strip()[-300:]}"}


def attn_train_available(build):
    exe = os.path.join(build, "attn")
    return os.path.exists(exe) and subprocess.run([exe, "train", "--help"], capture_output=True).returncode == 0


def run_attn_train(args, precision="f32"):
    exe = os.path.join(args.build, "attn")
    out = tempfile.mkdtemp(prefix="attn-bench-train-")
    try:
        cmd = [exe, "train", "--task", "reverse", "--out", out, "--force", "--epochs", str(args.epochs),
               "--threads", str(args.threads), "--quiet", "--precision", precision]
        log(" ".join(cmd))
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=attn_env(args.threads))
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            return {"error": f"attn train failed (exit {p.returncode}): {p.stderr.strip()[-300:]}"}
        epochs = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]
        # tokens_per_s counts training time only (validation and checkpoints excluded).
        secs = sum(REVERSE_EPOCH_TOKENS / e["tokens_per_s"] for e in epochs)
        return {"train_seconds": secs, "tokens_per_s": REVERSE_EPOCH_TOKENS * len(epochs) / secs,
                "wall_seconds": wall, "val_token_acc": epochs[-1].get("val_token_acc"), "epochs": len(epochs)}
    finally:
        shutil.rmtree(out, ignore_errors=True)


# A base-size model (the paper's base: D = 512, 8 heads, 6 + 6 layers, d_ff 2048) trained on the
# reverse task with 32 digits, batch 32: a few epochs of a small training set, the first epoch
# (page faults, OpenBLAS's buffers, the threads' start) left out of the figures.
BASE_TRAIN = {"d-model": 512, "heads": 8, "layers": 6, "d-ff": 2048, "length": 32, "batch-size": 32,
              "train-size": 256, "valid-size": 32, "epochs": 3}
BASE_EPOCH_TOKENS = BASE_TRAIN["train-size"] * (BASE_TRAIN["length"] + 1)


def steady_epochs(per_epoch, seconds_key):
    """Training seconds and tokens/s over the epochs after the first."""
    later = per_epoch[1:] or per_epoch
    secs = sum(e[seconds_key] for e in later)
    return {"train_seconds": secs, "tokens_per_s": BASE_EPOCH_TOKENS * len(later) / secs, "epochs": len(later),
            "final_loss": per_epoch[-1].get("loss")}


def run_attn_base_train(args, precision):
    exe = os.path.join(args.build, "attn")
    out = tempfile.mkdtemp(prefix="attn-bench-base-")
    try:
        cmd = [exe, "train", "--task", "reverse", "--out", out, "--force", "--threads", str(args.threads),
               "--precision", precision, "--quiet", "--samples", "0", "--no-report", "--keep", "1"]
        cmd += [x for k, v in BASE_TRAIN.items() for x in (f"--{k}", str(v))]  # --layers: both stacks
        log(" ".join(cmd))
        p = subprocess.run(cmd, capture_output=True, text=True, env=attn_env(args.threads))
        if p.returncode != 0:
            return {"error": f"attn train failed (exit {p.returncode}): {p.stderr.strip()[-300:]}"}
        epochs = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]
        return steady_epochs(epochs, "train_seconds")
    finally:
        shutil.rmtree(out, ignore_errors=True)


def run_torch_base_train(args, env, precision):
    argv = ["torch_reverse_train.py", "--threads", str(args.threads), "--precision", precision]
    argv += [x for k, v in BASE_TRAIN.items() for x in (f"--{k}", str(v))]
    r = run_torch(args, env, argv)
    return steady_epochs(r["per_epoch"], "seconds") if r else {"error": "torch_reverse_train.py failed"}


# ---- the torch side --------------------------------------------------------------------------------

def median_run(runs):
    """The run with the median training time (the lower of the two middle ones for an even count), or
    the first error, or None."""
    timed = sorted((r for r in runs if r and "error" not in r and r.get("train_seconds")),
                   key=lambda r: r["train_seconds"])
    if timed:
        return timed[(len(timed) - 1) // 2]
    return next((r for r in runs if r), None)


def run_torch(args, env, argv):
    cmd = [args.python, f"{HERE}/{argv[0]}"] + argv[1:]
    log(" ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        log(f"{argv[0]} failed (exit {p.returncode}): {p.stderr.strip()[-2000:]}")
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---- tables ------------------------------------------------------------------------------------------

def fmt(x, digits=2):
    if x is None:
        return "—"
    if isinstance(x, str):
        return x
    return f"{x:,.{digits}f}"


def ratio(num, den):
    return None if (num is None or den is None or den == 0) else num / den


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(fmt(c) if not isinstance(c, str) else c for c in r) + " |" for r in rows]
    return "\n".join(out)


TRAIN_PRECISIONS = ("f32", "bf16")
TRAIN_PRECISION_LABELS = {"f32": "float32", "bf16": "bf16 (attn: --precision bf16; torch: autocast)"}


def train_section(args, sections, prec, train, g):
    """Appends the demo recipe's table for one precision; returns (attn seconds, torch's fastest)."""
    a = train.get("attn")
    na = "not available" if (a and "error" in a) else "—"
    torch_runs = sorted(((int(k.split("_")[1]), v) for k, v in train.items() if k.startswith("torch_")),
                        key=lambda kv: -kv[0])
    timed = [(n, r) for n, r in torch_runs if g(r, "train_seconds")]
    best = min(timed, key=lambda nr: nr[1]["train_seconds"]) if timed else (None, None)
    cols = [f"torch, {n} thread{'s' if n > 1 else ''}" for n, _ in torch_runs]
    def row(label, key, digits):
        cells = [fmt(g(a, key), digits) if g(a, key) is not None else na]
        cells += [fmt(g(r, key), digits) for _, r in torch_runs]
        return [label] + cells
    rows = [row("training seconds (validation excluded)", "train_seconds", 1),
            row("tokens / s", "tokens_per_s", 0),
            row("wall seconds (whole run)", "wall_seconds", 1),
            row("val token accuracy (greedy)", "val_token_acc", 3)]
    rows[0].append(fmt(ratio(g(best[1], "train_seconds"), g(a, "train_seconds"))))
    rows[1].append(fmt(ratio(g(a, "tokens_per_s"), g(best[1], "tokens_per_s"))))
    rows[2].append("—")
    rows[3].append("—")
    if a and "error" in a:
        rows.append(["attn", a["error"]] + [""] * (len(cols) + 1))
    for n, r in torch_runs:
        if r and "error" in r:
            rows.append([f"torch, {n} thread{'s' if n > 1 else ''}", r["error"]] + [""] * (len(cols) + 1))
    epochs = args.epochs
    per_round = ""
    rounds = train.get("rounds", {})
    if args.train_rounds > 1 and rounds:
        secs = lambda r: g(r, "train_seconds")
        lines = []
        for i in range(args.train_rounds):
            a_s = secs(rounds["attn"][i])
            t_s = [secs(rounds[k][i]) for k in rounds if k.startswith("torch_")]
            t_best = min((t for t in t_s if t), default=None)
            lines.append(f"{fmt(a_s, 1)} s against {fmt(t_best, 1)} s ({fmt(ratio(t_best, a_s))}x)")
        per_round = (f" Medians of {args.train_rounds} alternating rounds (attn, then torch at each thread count); "
                     "training seconds per round, attn against torch's faster configuration: "
                     + "; ".join(lines) + ".")
    sections.append((f"Reverse-digits training ({epochs} epochs), {TRAIN_PRECISION_LABELS[prec]}",
                     "The demo's recipe on both sides: 10,000 training / 1,000 validation sequences of 8 digits "
                     "(the same sequences: torch_reverse_train.py regenerates attn's data bit for bit), batch 64, "
                     "D=64, 4 heads, 2+2 layers, d_ff 256, dropout 0.1, post-norm, sinusoidal positions, tied "
                     "embeddings, Adam (0.9, 0.98, 1e-9), Noam warm-up 400 scale 1, label smoothing 0.1. Tokens = "
                     "target symbols + EOS. attn: `attn train --task reverse --threads "
                     f"{args.threads} --precision {prec}` (metrics.jsonl tokens_per_s; with more than one thread "
                     "the demo's small model splits each batch into one shard per thread); torch: "
                     f"torch.nn.Transformer (`torch_reverse_train.py --precision {prec}`"
                     + (", under torch.autocast(\"cpu\", torch.bfloat16)" if prec == "bf16" else "")
                     + f") at {args.threads} thread(s) and at one. Ratio: the faster torch run's time / attn's time"
                     + (f" (torch's faster run here: {best[0]} thread{'s' if best[0] > 1 else ''})." if best[0] else ".")
                     + per_round,
                     table(["", f"attn, {args.threads} thread{'s' if args.threads > 1 else ''}"] + cols
                           + ["fastest torch / attn"], rows)))
    return g(a, "train_seconds"), g(best[1], "train_seconds")


def build_report(args, machine, torch_cfg, ours, theirs, mem, train, base_train=None):
    blas_name, blas_dir, probes = torch_cfg
    def get(d, k, f):
        return (d.get(k) or {}).get(f)
    sections = []

    def time_table(title, names):
        rows = []
        for label, name in names:
            a, t = get(ours, name, "ms"), get(theirs, name, "ms")
            rows.append(list(label) + [fmt(a), fmt(t), fmt(ratio(t, a))])
        return title, rows

    for kind, title in (("attention_forward", "Attention forward (no grad)"),
                        ("attention_forward_backward", "Attention forward + backward")):
        t, rows = time_table(title, [((str(T), "yes" if c else "no"), f"{kind}/T:{T}/causal:{c}")
                                     for T in args.T for c in (0, 1)])
        sections.append((t, "B=4, H=8, Dh=64, float32; milliseconds per call.",
                         table(["T", "causal", "attn ms", "torch ms", "torch / attn"], rows)))
    t, rows = time_table("Encoder layer (base: D=512, h=8, d_ff=2048, B=8, T=128)",
                         [(("forward (eval, no grad)",), "encoder_layer_forward"),
                          (("forward + backward (train, dropout 0.1)",), "encoder_layer_forward_backward"),
                          (("forward, int8 weights (torch: quantize_dynamic)",), "encoder_layer_forward_int8_weights"),
                          (("forward, bf16 weights (torch: autocast)",), "encoder_layer_forward_bf16_weights"),
                          (("forward + backward, bf16 (torch: autocast)",), "encoder_layer_forward_backward_bf16")])
    sections.append((t, "Milliseconds per call; post-norm, ReLU; float32 unless the pass says otherwise (attn: "
                        "int8/bf16 weights from Model::quantize, --precision bf16; torch: quantize_dynamic on its "
                        "nn.Linear modules, torch.autocast).",
                     table(["pass", "attn ms", "torch ms", "torch / attn"], rows)))

    if "decode" in args.topics.split(","):
        rows = []
        for B in (1, 8):
            a = get(ours, f"decode_greedy/B:{B}/kv:1", "ms")
            a0 = get(ours, f"decode_greedy/B:{B}/kv:0", "ms")
            t0 = get(theirs, f"decode_greedy/B:{B}/kv:0", "ms")
            t1 = get(theirs, f"decode_greedy/B:{B}/kv:1", "ms")
            tps = lambda ms: fmt(B * 64 / (ms * 1e-3), 0) if ms else "—"
            rows.append([str(B), fmt(a), tps(a), fmt(a0), fmt(t0), fmt(t1), fmt(ratio(t0, a)), fmt(ratio(t1, a))])
        sections.append(("Greedy decoding (base model, 64 tokens)",
                         "6+6 layers, D=512, h=8, d_ff=2048, vocabulary 1000, source length 32, float32, EOS "
                         "disabled so that every source decodes exactly 64 tokens; milliseconds per batch. attn: "
                         "`greedy_search` over `TransformerDecoder` with its KV cache (and, for reference, without "
                         "it). torch: `nn.Transformer` re-running the decoder over the whole prefix at every step "
                         "(the usual way), and a PyTorch loop with its own KV cache over the same modules "
                         "(checked to give nn.Transformer's tokens).",
                         table(["B", "attn ms (KV cache)", "attn tokens/s", "attn ms (no cache)",
                                "torch ms (recompute)", "torch ms (KV-cache loop)", "recompute / attn",
                                "KV loop / attn"], rows)))
        rows = []
        mib = lambda b: fmt(b / 2**20) if b is not None else "—"
        for B in (1, 8):
            name = f"decode_beam/B:{B}"
            a = get(ours, name, "ms")
            tps = fmt(B * 4 * 32 / (a * 1e-3), 0) if a else "—"
            rows.append([str(B), fmt(a), tps, mib(get(ours, name, "kv_self_bytes")),
                         mib(get(ours, name, "kv_cross_bytes"))])
        sections.append(("Beam search (base model, beam 4, 32 tokens)",
                         "The model and sources of greedy decoding; `beam_search` (beam 4, alpha 0.6) over "
                         "`TransformerDecoder` with its KV cache, EOS disabled so that every source runs 32 steps "
                         "with 4 live rows; milliseconds per batch, and the cache's bytes after the last step: "
                         "self-attention K/V (per row) and cross-attention K/V (per source, shared by its rows). "
                         "No torch twin.",
                         table(["B", "attn ms", "attn tokens/s (rows x steps)", "self K/V MiB", "cross K/V MiB"],
                               rows)))

    if "quantized" in args.topics.split(","):
        rows = []
        for B, beam in ((1, 1), (8, 1), (32, 4)):
            steps = 32 if beam > 1 else 64
            base = get(ours, f"decode_quantized/B:{B}/beam:{beam}/q:0", "ms")
            for q, label in ((0, "float32"), (1, "int8"), (2, "bf16")):
                name = f"decode_quantized/B:{B}/beam:{beam}/q:{q}"
                a, t = get(ours, name, "ms"), get(theirs, name, "ms")
                tps = fmt(B * beam * steps / (a * 1e-3), 0) if a else "—"
                rows.append([str(B), str(beam), label, fmt(a), tps, fmt(ratio(base, a)), fmt(t), fmt(ratio(t, a))])
        sections.append(("Reduced-precision weights: decoding the base model",
                         "The greedy model and sources above (64 tokens; beam 4 for 32 sources: 32 tokens), with "
                         "the weights in float32, int8 (per-row scales, activations quantized per row: VNNI) or "
                         "bf16 (vdpbf16ps); milliseconds per batch. torch: the KV-cache loop with "
                         "`quantize_dynamic` (int8: the decoder's `nn.Linear` layers and the output layer) or "
                         "under `torch.autocast(\"cpu\", torch.bfloat16)`; no beam twin.",
                         table(["B", "beam", "weights", "attn ms", "attn tokens/s", "float32 / this",
                                "torch ms", "torch / attn"], rows)))

    peak = ours.get("fma_peak")
    peak_gflops = (peak["flop"] / (peak["ms"] * 1e-3) / 1e9) if peak and peak.get("flop") else None
    rows = []
    for M, N, K in args.gemm:
        name = f"gemm/M:{M}/N:{N}/K:{K}"
        a, t = get(ours, name, "ms"), get(theirs, name, "ms")
        ga = 2 * M * N * K / (a * 1e-3) / 1e9 if a else None
        gt = 2 * M * N * K / (t * 1e-3) / 1e9 if t else None
        pct = lambda g: f"{100 * g / peak_gflops:.0f}%" if (g and peak_gflops) else "—"
        rows.append([f"{M}×{N}×{K}", fmt(ga, 1), pct(ga), fmt(gt, 1), pct(gt), fmt(ratio(ga, gt))])
    peak_line = (f"Measured peak: {fmt(peak_gflops, 1)} GFLOP/s float32 ({peak.get('label', '')} FMA chains on "
                 f"{args.threads} thread(s), `gemm_bench` fma_peak)." if peak_gflops else
                 "Measured peak: — GFLOP/s (float32 FMA chains on every thread, `gemm_bench` fma_peak).")
    sections.append(("GEMM (float32, row-major C = A B)",
                     "GFLOP/s = 2MNK / time. Ours is `kernels::gemm` (cblas_sgemm of Debian's OpenMP OpenBLAS); "
                     "torch's is `torch.mm(out=)`. " + peak_line,
                     table(["M×N×K", "attn GFLOP/s", "of peak", "torch GFLOP/s", "of peak", "attn / torch"], rows)))

    rows = []
    for T in args.mem_T:
        for mode in ("forward", "forward_backward"):
            a = mem.get(("attn", T, mode))
            t = mem.get(("torch", T, mode))

            def cell(r, f):
                if r is None:
                    return "—"
                if "error" in r:
                    return r["error"]
                return f"{r[f] / 1024:,.0f}"
            da = a.get("delta_kb") if a and "error" not in a else None
            dt = t.get("delta_kb") if t and "error" not in t else None
            rows.append([str(T), mode.replace("_", " + "), cell(a, "peak_kb"), cell(a, "delta_kb"),
                         cell(t, "peak_kb"), cell(t, "delta_kb"), fmt(ratio(dt, da))])
    sections.append(("Peak resident memory of attention",
                     "One process per case; B=4, H=8, Dh=64, float32, not causal. VmHWM after the call, with the "
                     "high-water mark reset (/proc/self/clear_refs) once q, k, v exist; Δ = peak − RSS before the "
                     "call (what the call itself added). MiB. The ratio compares Δ. A case that does not fit is "
                     "capped (RLIMIT_AS at 90% of available memory) and reported as out of memory.",
                     table(["T", "pass", "attn peak MiB", "attn Δ MiB", "torch peak MiB", "torch Δ MiB",
                            "torch / attn (Δ)"], rows)))

    g = lambda r, k: (r.get(k) if r and "error" not in r else None)
    fastest = {}  # precision -> (attn seconds, torch's fastest seconds)
    for prec in [p for p in TRAIN_PRECISIONS if p in train]:
        fastest[prec] = train_section(args, sections, prec, train[prec], g)
    if len(fastest) > 1:
        a_best = min((a for a, _ in fastest.values() if a), default=None)
        t_best = min((t for _, t in fastest.values() if t), default=None)
        if a_best and t_best:
            sections.append(("Reverse-digits training: the fastest of each side",
                             "attn's faster precision against PyTorch's fastest run of any precision and thread "
                             f"count, training seconds: {fmt(a_best, 1)} s against {fmt(t_best, 1)} s, "
                             f"**{fmt(ratio(t_best, a_best))}x**.", ""))

    if base_train:
        bt = {k: median_run(v) for k, v in base_train.items()}
        tps = lambda k: g(bt.get(k), "tokens_per_s")
        rows = []
        for prec, label in (("f32", "float32"), ("bf16", "bf16 (attn: --precision bf16; torch: autocast)")):
            a_k, t_k = f"attn_{prec}", f"torch_{prec}"
            cells = [label]
            for k in (a_k, t_k):
                r = bt.get(k)
                cells.append(r["error"] if r and "error" in r else fmt(tps(k), 0))
            cells.append(fmt(ratio(tps(a_k), tps(t_k))))
            cells.append(fmt(ratio(tps(a_k), tps("attn_f32"))) if prec == "bf16" else "")
            cells.append(fmt(ratio(tps(t_k), tps("torch_f32"))) if prec == "bf16" else "")
            rows.append(cells)
        n_rounds = len(next(iter(base_train.values())))
        per_round = ""
        if n_rounds > 1:
            cell = lambda r: fmt(g(r, "tokens_per_s"), 0)
            per_round = " Tokens/s per round (attn f32, torch f32, attn bf16, torch bf16): " + "; ".join(
                ", ".join(cell(base_train[k][i]) for k in ("attn_f32", "torch_f32", "attn_bf16", "torch_bf16"))
                for i in range(n_rounds)) + "."
        sections.append(("Base-size training (D=512, 6+6 layers)",
                         "Training throughput of the paper's base size: D=512, 8 heads, 6+6 layers, d_ff 2048, "
                         "dropout 0.1, post-norm, on the reverse task with 32 digits (33 target tokens with EOS), "
                         f"batch 32, {BASE_TRAIN['train-size']} training sequences per epoch, {BASE_TRAIN['epochs']} "
                         "epochs, the first left out (warm-up). attn: `attn train --task reverse --length 32 "
                         "--d-model 512 --heads 8 --layers 6 --d-ff 2048 --batch-size 32`, metrics.jsonl "
                         "train_seconds; torch: bench/torch_reverse_train.py with the same sizes "
                         f"(torch.nn.Transformer), both at {args.threads} thread(s). Target tokens per second of "
                         "training (validation excluded)"
                         + (f"; medians of {n_rounds} alternating rounds." if n_rounds > 1 else ".") + per_round,
                         table(["precision", "attn tokens/s", "torch tokens/s", "attn / torch",
                                "attn bf16 / f32", "torch bf16 / f32"], rows)))

    m = machine
    def blas_of(v):
        return next((x for x in v["blas_libraries"] if "libblas" in x), "?")
    probe_txt = "; ".join(f"{k} ({blas_of(v)}): {v['matmul_1024_gflops']:.1f} GFLOP/s" for k, v in probes.items())
    probe_txt = probe_txt or "not run"
    tv = next(iter(probes.values()), {}).get("torch") or sh([args.python, "-c", "import torch; print(torch.__version__)"])
    lines = ["# Benchmarks: attn and PyTorch side by side", ""]
    lines += [f"Generated by `make bench` (bench/compare.py) on {m['date']}. Ratios are torch / attn: above 1 "
              "means attn is faster (or, for memory, smaller).", "",
              f"Settings: attention T {','.join(map(str, args.T))}; memory T {','.join(map(str, args.mem_T))}; "
              f"GEMM up to {args.gemm_max}; {args.epochs} training epoch(s); {args.min_time} s per repetition, "
              f"{args.reps} repetition(s); topics {args.topics}.", ""]
    if args.quick:
        lines += ["**Quick run** (`--quick`): fewer shapes, short timing, few epochs; indicative only.", ""]
    lines += ["## Machine", "", table(["", ""], [
        ["CPU", f"{m['cpu']} ({m['cores']} cores, {m['logical_cpus']} logical CPUs, {m['threads_per_core']} "
                f"thread(s) per core; hypervisor: {m['hypervisor']})"],
        ["caches", m["caches"] or "?"],
        ["SIMD", f"AVX2 {'yes' if m['avx2'] else 'no'}; AVX-512: {' '.join(m['avx512']) or 'no'}"],
        ["memory", f"{m['memory_gib']:.1f} GiB"],
        ["OS", f"Linux {m['kernel']}, {m['glibc']}, THP {m['thp']}"],
        ["compiler", m["compiler"] or "?"],
        ["OpenBLAS", f"{m['openblas_package']} (Debian); attn links {m['attn_openblas']}"],
        ["PyTorch", f"{tv} (Debian python3-torch)"],
        ["threads", f"{args.threads} on both sides"],
        ["date", m["date"]],
    ]), ""]
    hp = "GLIBC_TUNABLES=glibc.malloc.hugetlb=1" if args.torch_hugepages else "no huge-page tunable"
    lines += ["## Configuration", "",
              f"- **attn**: Release build (-O2), float32, `--threads={args.threads}` (omp_set_num_threads + "
              "openblas_set_num_threads), the environment as inherited (plus OMP_NUM_THREADS; "
              "OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, as for torch).",
              f"- **PyTorch** ({blas_name}): `LD_LIBRARY_PATH={blas_dir or '(unchanged)'}` so that torch's "
              f"libblas.so.3 is that OpenBLAS build (no system change; `update-alternatives` untouched), " +
              (f"OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (OpenBLAS detects the core itself), " if not BLAS_CORE_FIX else
               f"OPENBLAS_CORETYPE={BLAS_CORE_FIX} on both sides (OpenBLAS's own detection falls back to its generic "
               "Prescott kernels on this CPU; docs/performance.md), ") + f"{hp}, "
              + f"torch.set_num_threads({args.threads}), OMP_NUM_THREADS={args.threads}. Inference cases run "
              "under torch.inference_mode; the encoder layer's forward runs in eval mode, where torch 1.13 takes "
              "its fused fast path.",
              f"- Choice rule: the OpenMP build of OpenBLAS, unless the pthread build is more than 10% faster on a "
              f"1024 matmul at {args.threads} thread(s) (`--torch-blas` overrides). Probe: {probe_txt}.", ""]
    if args.torch_blas == "best":
        other = sorted(k for k, v in theirs.items() if v.get("blas"))
        lines[-1:] = [f"- `--torch-blas best`: every timed torch case (attention, encoder layer, GEMM, decoding) "
                      f"also ran under the other OpenBLAS build, and the faster of the two is reported. Cases where "
                      f"the other build won: {', '.join(other) if other else 'none'}. Memory and training use "
                      f"{blas_name}.", ""]
    lines += ["## Method", "",
              "- Our side: Google Benchmark (`build/bench/*_bench --benchmark_format=json`), real time, "
              f"min time {args.min_time} s per repetition, median of {args.reps} repetition(s).",
              "- Torch side (bench/torch_bench.py): the same loop shape — one warm-up call, then per repetition "
              "calls until the min time has passed, the mean per call; the median over repetitions.",
              "- Attention in torch is the math path written out, `softmax((q/√Dh) kᵀ masked) v` (torch 1.13 has "
              "no F.scaled_dot_product_attention); ours is the public `scaled_dot_product_attention`.",
              "- Run on an idle machine: with other work on the cores, spinning OpenMP threads make multi-"
              "threaded timings of both sides meaningless (10× slowdowns were seen on a shared 2-core machine).",
              "- Regenerate: `make bench` (threads = nproc, or `make bench BENCH_THREADS=N`; "
              "`BENCH_ARGS=--quick` for a short run).", ""]
    for title, note, tab in sections:
        lines += [f"## {title}", "", note, "", tab, ""]
    return "\n".join(lines)


# ---- main -------------------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--python", default="/usr/bin/python3", help="the python3 that has python3-torch")
    p.add_argument("--quick", action="store_true",
                   help="short settings: T 128,512; GEMM up to 1024; memory T 1024; 1 epoch; min time 0.1 s, 1 rep")
    p.add_argument("--T", help="attention lengths, comma-separated (default 128,512,1024,2048,4096)")
    p.add_argument("--mem-T", help="memory lengths, comma-separated (default 4096,16384)")
    p.add_argument("--gemm-max", type=int, help="largest GEMM dimension (default 4096)")
    p.add_argument("--epochs", type=int, help="reverse-training epochs (default 25)")
    p.add_argument("--min-time", type=float, help="seconds per repetition (default 0.5)")
    p.add_argument("--reps", type=int, help="repetitions, median reported (default 3)")
    p.add_argument("--topics", default="attention,encoder_layer,decode,quantized,gemm,memory,train,train_base")
    p.add_argument("--train-precisions", default="f32,bf16",
                   help="precisions of the reverse-training comparison, comma-separated: f32 (both sides float32), "
                        "bf16 (attn --precision bf16, torch autocast) (default f32,bf16)")
    p.add_argument("--train-rounds", type=int, default=1,
                   help="alternating rounds of the training comparisons (attn, then torch), medians reported "
                        "(default 1)")
    p.add_argument("--torch-blas", choices=["auto", "best", "openmp", "pthread", "system"], default="best",
                   help="auto: the probe's choice; best: run the timed torch cases under both OpenBLAS builds "
                        "and keep each case's faster one (memory and training use the probe's choice)")
    p.add_argument("--no-torch-hugepages", dest="torch_hugepages", action="store_false")
    p.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    args = p.parse_args()
    unknown = [x for x in args.train_precisions.split(",") if x and x not in TRAIN_PRECISIONS]
    if unknown:
        p.error(f"--train-precisions: unknown precision(s) {', '.join(unknown)} (known: {', '.join(TRAIN_PRECISIONS)})")
    q = args.quick
    args.T = [int(x) for x in args.T.split(",")] if args.T else ([128, 512] if q else ALL_T)
    args.mem_T = [int(x) for x in args.mem_T.split(",")] if args.mem_T else ([1024] if q else ALL_MEM_T)
    args.gemm_max = args.gemm_max or (1024 if q else 4096)
    args.gemm = [s for s in ALL_GEMM if max(s) <= args.gemm_max]
    args.epochs = args.epochs or (1 if q else 25)
    args.min_time = args.min_time or (0.1 if q else 0.5)
    args.reps = args.reps or (1 if q else 3)
    topics = set(args.topics.split(","))

    global BLAS_CORE_FIX
    BLAS_CORE_FIX = blas_core_fix()
    if BLAS_CORE_FIX:
        log(f"OpenBLAS falls back to Prescott on this CPU: OPENBLAS_CORETYPE={BLAS_CORE_FIX} for both sides")
    machine = machine_info(args.build)
    torch_cfg = choose_torch_config(args)
    log(f"torch configuration: {torch_cfg[0]} ({torch_cfg[1] or 'system default'}), "
        f"huge pages {'on' if args.torch_hugepages else 'off'}, {args.threads} thread(s)")
    tenv = torch_env(args.threads, torch_cfg[1], args.torch_hugepages)
    ours, theirs, mem, train = {}, {}, {}, {}

    tlist = "|".join(str(t) for t in args.T)
    if "attention" in topics:
        ours.update(run_gbench(args, "attention_bench", f"^attention_forward(_backward)?/T:({tlist})/"))
    if "encoder_layer" in topics:
        ours.update(run_gbench(args, "encoder_layer_bench", "^encoder_layer_"))
    if "decode" in topics:
        ours.update(run_gbench(args, "decode_bench", "^decode_(greedy|beam)/"))
    if "quantized" in topics:
        ours.update(run_gbench(args, "decode_bench", "^decode_quantized/"))
    if "gemm" in topics:
        names = "|".join(f"gemm/M:{M}/N:{N}/K:{K}/" for M, N, K in args.gemm)
        ours.update(run_gbench(args, "gemm_bench", f"^({names}|fma_peak)"))
    torch_topics = [t for t in ("attention", "encoder_layer", "gemm", "decode") if t in topics]
    if "quantized" in topics:
        torch_topics.append("decode_quantized")
    if torch_topics:
        torch_argv = ["torch_bench.py", "--threads", str(args.threads), "run", "--topics",
                      ",".join(torch_topics), "--T", ",".join(map(str, args.T)),
                      "--gemm", ",".join(f"{M}x{N}x{K}" for M, N, K in args.gemm),
                      "--min-time", str(args.min_time), "--reps", str(args.reps)]
        r = run_torch(args, tenv, torch_argv)
        theirs = {x["name"]: {"ms": x["real_time_ms"]} for x in (r or [])}
        if args.torch_blas == "best":  # the same cases under the other OpenBLAS build; keep the faster
            for name, d in (("openblas-openmp", f"{LIBDIR}/openblas-openmp"),
                            ("openblas-pthread", f"{LIBDIR}/openblas-pthread")):
                if d == torch_cfg[1] or not os.path.exists(os.path.join(d, "libblas.so.3")):
                    continue
                r2 = run_torch(args, torch_env(args.threads, d, args.torch_hugepages), torch_argv)
                for x in (r2 or []):
                    if x["name"] not in theirs or x["real_time_ms"] < theirs[x["name"]]["ms"]:
                        theirs[x["name"]] = {"ms": x["real_time_ms"], "blas": name}
    if "memory" in topics:
        cap = int(mem_available_bytes() * 0.9)
        for T in args.mem_T:
            for mode in ("forward", "forward_backward"):
                extra = ["--backward"] if mode == "forward_backward" else []
                mem[("attn", T, mode)] = run_memory_case(
                    [os.path.join(args.build, "bench", "memory_bench"), "--T", str(T), "--threads",
                     str(args.threads)] + extra, attn_env(args.threads), cap)
                mem[("torch", T, mode)] = run_memory_case(
                    [args.python, f"{HERE}/torch_bench.py", "--threads", str(args.threads), "memory", "--T",
                     str(T)] + extra, tenv, cap)
    if "train" in topics:
        # Rounds of attn's run, then PyTorch's, alternating, so that both sides meet the machine's
        # slow and fast phases alike; each side's median round is reported. Each precision in each
        # round: float32 on both sides, then attn's --precision bf16 against torch.autocast.
        # PyTorch at the same thread count, and at one thread when that differs: a model this small
        # is often faster on one, and the ratio is taken against the faster of the two.
        keys = ["attn"] + [f"torch_{n}" for n in sorted({args.threads, 1}, reverse=True)]
        precisions = [x for x in args.train_precisions.split(",") if x]
        rounds = {prec: {k: [] for k in keys} for prec in precisions}
        for r in range(args.train_rounds):
            if args.train_rounds > 1:
                log(f"training round {r + 1} of {args.train_rounds}")
            for prec in precisions:
                if attn_train_available(args.build):
                    rounds[prec]["attn"].append(run_attn_train(args, prec))
                else:
                    rounds[prec]["attn"].append(
                        {"error": f"not available ({args.build}/attn has no `train` command)"})
                for k in keys[1:]:
                    rounds[prec][k].append(run_torch(args, tenv, [
                        "torch_reverse_train.py", "--epochs", str(args.epochs), "--threads", k.split("_")[1],
                        "--precision", prec]))
        for prec in precisions:
            train[prec] = {k: median_run(rounds[prec][k]) for k in keys}
            train[prec]["rounds"] = rounds[prec]

    base_train = {}
    if "train_base" in topics:
        # Alternating rounds as above; each side at each precision.
        base_train = {k: [] for k in ("attn_f32", "torch_f32", "attn_bf16", "torch_bf16")}
        for r in range(args.train_rounds):
            if args.train_rounds > 1:
                log(f"base-size training round {r + 1} of {args.train_rounds}")
            for prec in ("f32", "bf16"):
                if attn_train_available(args.build):
                    base_train[f"attn_{prec}"].append(run_attn_base_train(args, prec))
                else:
                    base_train[f"attn_{prec}"].append({"error": "not available"})
                base_train[f"torch_{prec}"].append(run_torch_base_train(args, tenv, prec))

    report = build_report(args, machine, torch_cfg, ours, theirs, mem, train, base_train)
    print(report)
    with open(args.out, "w") as f:
        f.write(report)
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
