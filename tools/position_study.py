#!/usr/bin/python3
"""The positional-encoding study of docs/positions.md: does the choice of positions matter?

    tools/position_study.py [--attn build/attn] [--out runs/positions] [--svg docs/positions.svg]

Trains the reverse and sort tasks with each positional scheme (sinusoidal, learned, rope,
alibi, none) through `attn train`, on source lengths 4..8, then measures greedy exact-sequence
and token accuracy with `attn eval` on fresh sequences of lengths 8, 10, 12 and 16. Writes
OUT/results.json (every number, the commands, times and the machine), OUT/table.md (the
table of docs/positions.md), OUT/samples.md (greedy outputs for the digits of pi at each test
length) and the SVG figure. Uses only the standard library; every seed is
fixed, so a rerun on the same machine and thread count gives the same accuracies.
It does not tune anything per scheme: every run has the same model, data and recipe.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

TASKS = ["reverse", "sort"]
POSITIONALS = ["sinusoidal", "learned", "rope", "alibi", "none"]
COLORS = {"sinusoidal": "#1f77b4", "learned": "#ff7f0e", "rope": "#2ca02c", "alibi": "#d62728", "none": "#7f7f7f"}
DASHES = {"sinusoidal": "", "learned": "6,3", "rope": "2,2", "alibi": "8,3,2,3", "none": "1,3"}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--attn", default="build/attn", help="the attn binary")
    p.add_argument("--out", default="runs/positions", help="folder for the runs, results.json and table.md")
    p.add_argument("--svg", default="docs/positions.svg", help="where the figure goes")
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated tasks")
    p.add_argument("--positionals", default=",".join(POSITIONALS), help="comma-separated positional schemes")
    p.add_argument("--min-length", type=int, default=4, help="shortest training source")
    p.add_argument("--length", type=int, default=8, help="longest training source (L)")
    p.add_argument("--test-lengths", default="",
                   help="comma-separated test lengths (default: the shortest trained, the middle, L, L+2, L+4, 2L)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--train-size", type=int, default=10000)
    p.add_argument("--valid-size", type=int, default=500, help="in-training validation examples (lengths as trained)")
    p.add_argument("--test-size", type=int, default=500, help="test examples per length")
    p.add_argument("--seed", type=int, default=0, help="initialisation, dropout and batch order")
    p.add_argument("--data-seed", type=int, default=1706, help="training data")
    p.add_argument("--test-seed", type=int, default=7, help="test data (an independent stream)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--skip-train", action="store_true", help="evaluate the runs already in --out")
    return p.parse_args()


def run(cmd):
    """Runs a command; returns (returncode, stdout, stderr, seconds)."""
    start = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr, time.monotonic() - start


def machine():
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "system": platform.platform()}


def last_metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return rows[-1], sum(r["seconds"] for r in rows)


def train(args, task, pos, run_dir):
    cmd = [args.attn, "train", "--task", task, "--length", str(args.length), "--min-length", str(args.min_length),
           "--positional", pos, "--epochs", str(args.epochs), "--train-size", str(args.train_size),
           "--valid-size", str(args.valid_size), "--seed", str(args.seed), "--data-seed", str(args.data_seed),
           "--threads", str(args.threads), "--quiet", "--no-report", "--samples", "0", "--force", "--out", run_dir]
    code, out, err, seconds = run(cmd)
    if code != 0:
        sys.exit(f"position_study: training failed: {' '.join(cmd)}\n{out}{err}")
    return cmd, seconds


def evaluate(args, task, run_dir, length):
    cmd = [args.attn, "eval", "--model", run_dir, "--task", task, "--length", str(length), "--min-length", "0",
           "--count", str(args.test_size), "--seed", str(args.test_seed), "--threads", str(args.threads), "--json"]
    code, out, err, seconds = run(cmd)
    if code != 0:
        message = (err or out).strip()
        if "max_len" in message:  # learned positions end at max_len: not measurable, not a failure of the study
            return {"na": "max_len", "message": message}
        sys.exit(f"position_study: evaluation failed: {' '.join(cmd)}\n{message}")
    m = json.loads(out)
    return {k: m[k] for k in ("exact_acc", "token_acc", "forced_token_acc", "loss", "examples")} | {"seconds": seconds}


PI_DIGITS = "31415926535897932384626433832795028841971693993751"


def samples(args, run_dir, lengths):
    """Greedy outputs for the first n digits of pi, one source per test length."""
    sources = [PI_DIGITS[:n] for n in lengths if n <= len(PI_DIGITS)]
    cmd = [args.attn, "translate", "--model", run_dir, "--threads", str(args.threads)]
    r = subprocess.run(cmd, input="\n".join(sources) + "\n", capture_output=True, text=True)
    if r.returncode != 0:
        return {src: "error: " + (r.stderr or r.stdout).strip() for src in sources}
    return dict(zip(sources, r.stdout.split("\n")))


def samples_md(results):
    lines = []
    for r in results:
        lines.append(f"{r['task']} / {r['positional']}:")
        for src, hyp in r["samples"].items():
            lines.append(f"    {src:>{max(len(s) for s in r['samples'])}} -> {hyp}")
    return "\n".join(lines) + "\n"


def cell(r):
    if "na" in r:
        return f"n/a ({r['na']})"
    return f"{100 * r['exact_acc']:.1f} / {100 * r['token_acc']:.1f}"


def table(results, lengths):
    """Greedy exact / token accuracy with training times, then teacher-forced token accuracy."""
    head = "| task | positions | " + " | ".join(f"length {n}" for n in lengths)
    rule = "|---|---|" + "---:|" * len(lengths)
    lines = [head + " | train time |", rule + "---:|"]
    for r in results:
        cells = [cell(r["eval"][str(n)]) for n in lengths]
        lines.append(f"| {r['task']} | {r['positional']} | " + " | ".join(cells) + f" | {r['train_seconds']:.0f} s |")
    lines += ["", head + " |", rule]
    for r in results:
        cells = [f"{100 * e['forced_token_acc']:.1f}" if "na" not in e else cell(e)
                 for e in (r["eval"][str(n)] for n in lengths)]
        lines.append(f"| {r['task']} | {r['positional']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def svg_figure(results, lengths, trained):
    """Exact and token accuracy by test length: one panel per task and metric."""
    tasks = sorted({r["task"] for r in results}, key=lambda t: TASKS.index(t) if t in TASKS else 99)
    metrics = [("exact_acc", "exact-sequence accuracy"), ("token_acc", "token accuracy")]
    pw, ph, ml, mt, gap = 300, 200, 60, 40, 70
    width = ml + len(metrics) * (pw + gap) + 110
    height = mt + len(tasks) * (ph + 70) + 10
    lo, hi = min(min(lengths), trained[0]), max(lengths)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">Accuracy by test length '
           f'(trained on lengths {trained[0]}..{trained[1]}; greedy decoding)</text>']
    for ti, task in enumerate(tasks):
        for mi, (key, label) in enumerate(metrics):
            x0, y0 = ml + mi * (pw + gap), mt + ti * (ph + 70) + 10
            px = lambda n: x0 + (n - lo) / max(1, hi - lo) * pw  # noqa: E731
            py = lambda v: y0 + ph - v * ph  # noqa: E731
            out.append(f'<text x="{x0 + pw / 2}" y="{y0 - 8}" text-anchor="middle">{task}: {label}</text>')
            # The trained range, shaded, and the grid.
            out.append(f'<rect x="{px(trained[0]):.1f}" y="{y0}" width="{px(trained[1]) - px(trained[0]):.1f}" '
                       f'height="{ph}" fill="#eeeeee"/>')
            for v in (0, 0.25, 0.5, 0.75, 1.0):
                out.append(f'<line x1="{x0}" y1="{py(v):.1f}" x2="{x0 + pw}" y2="{py(v):.1f}" stroke="#cccccc"/>')
                out.append(f'<text x="{x0 - 6}" y="{py(v) + 4:.1f}" text-anchor="end">{int(v * 100)}%</text>')
            for n in lengths:
                out.append(f'<text x="{px(n):.1f}" y="{y0 + ph + 16}" text-anchor="middle">{n}</text>')
            out.append(f'<text x="{x0 + pw / 2}" y="{y0 + ph + 32}" text-anchor="middle">test length</text>')
            out.append(f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="black"/>')
            for r in results:
                if r["task"] != task:
                    continue
                pts = [(px(n), py(r["eval"][str(n)][key])) for n in lengths if key in r["eval"][str(n)]]
                if not pts:
                    continue
                c, d = COLORS.get(r["positional"], "black"), DASHES.get(r["positional"], "")
                dash = f' stroke-dasharray="{d}"' if d else ""
                out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2"{dash} points="'
                           + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>')
                for x, y in pts:
                    out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{c}"/>')
    # Legend.
    lx, ly = ml + len(metrics) * (pw + gap) - 10, mt + 20
    for i, pos in enumerate(dict.fromkeys(r["positional"] for r in results)):
        c, d = COLORS.get(pos, "black"), DASHES.get(pos, "")
        dash = f' stroke-dasharray="{d}"' if d else ""
        out.append(f'<line x1="{lx}" y1="{ly + 18 * i}" x2="{lx + 28}" y2="{ly + 18 * i}" stroke="{c}" '
                   f'stroke-width="2"{dash}/>')
        out.append(f'<text x="{lx + 34}" y="{ly + 18 * i + 4}">{pos}</text>')
    out.append(f'<text x="{lx}" y="{ly + 18 * 5 + 10}" fill="#666666">shaded: trained</text>')
    out.append(f'<text x="{lx}" y="{ly + 18 * 6 + 10}" fill="#666666">lengths</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    args = parse_args()
    tasks = args.tasks.split(",")
    positionals = args.positionals.split(",")
    L = args.length
    lengths = ([int(n) for n in args.test_lengths.split(",")] if args.test_lengths
               else sorted({args.min_length, (args.min_length + L) // 2, L, L + 2, L + 4, 2 * L}))
    os.makedirs(args.out, exist_ok=True)
    info = {"machine": machine(), "loadavg_start": os.getloadavg(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "settings": {k: v for k, v in vars(args).items() if k not in ("svg",)}, "test_lengths": lengths}
    previous = {}  # --skip-train: what the training run recorded
    old_path = os.path.join(args.out, "results.json")
    if args.skip_train and os.path.exists(old_path):
        with open(old_path) as f:
            old = json.load(f)
        info["trained"] = old.get("trained") or {k: old.get(k) for k in
                                                 ("started", "wall_seconds", "loadavg_start", "loadavg_end")}
        previous = {(r["task"], r["positional"]): r for r in old.get("results", [])}
    results = []
    study_start = time.monotonic()
    for task in tasks:
        for pos in positionals:
            run_dir = os.path.join(args.out, f"{task}-{pos}")
            entry = {"task": task, "positional": pos, "run": run_dir}
            if not args.skip_train:
                entry["train_command"], entry["train_wall_seconds"] = train(args, task, pos, run_dir)
            else:
                for k in ("train_command", "train_wall_seconds"):
                    if k in previous.get((task, pos), {}):
                        entry[k] = previous[(task, pos)][k]
            final, entry["train_seconds"] = last_metrics(run_dir)
            entry["final_epoch"] = {k: final.get(k) for k in ("epoch", "step", "loss", "val_loss", "val_token_acc",
                                                              "val_exact_acc")}
            entry["eval"] = {str(n): evaluate(args, task, run_dir, n) for n in lengths}
            entry["samples"] = samples(args, run_dir, lengths)
            results.append(entry)
            print(f"{task:8s} {pos:10s} train {entry['train_seconds']:6.1f} s  "
                  + "  ".join(f"{n}: {cell(entry['eval'][str(n)])}" for n in lengths), flush=True)
    info["wall_seconds"] = time.monotonic() - study_start
    info["loadavg_end"] = os.getloadavg()
    info["results"] = results
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(info, f, indent=2)
    md = table(results, lengths)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(md)
    if os.path.dirname(args.svg):
        os.makedirs(os.path.dirname(args.svg), exist_ok=True)
    with open(args.svg, "w") as f:
        f.write(svg_figure(results, lengths, (args.min_length, L)))
    with open(os.path.join(args.out, "samples.md"), "w") as f:
        f.write(samples_md(results))
    print(md)
    print(f"wall time {info['wall_seconds']:.0f} s; results in {args.out}/results.json, figure {args.svg}")


if __name__ == "__main__":
    main()
