#!/usr/bin/env python3
"""check_layering.py — the layers of attn and which may include which, checked on the sources.

LAYERS below is the one statement of the layering: each layer names the layers it stands on,
and may include headers of those, of what they stand on in turn, and of itself; nothing else.
A private layer (kernels) is visible only to the layers that name it, never through them.
The checker reads every `#include` in include/attn/<layer>/, src/<layer>/ and cli/, resolves
it (attn/<layer>/..., a path under src/, or a path relative to the including file) and names
each one that reaches a layer the including file's layer does not stand on. It also checks
that docs/architecture.md shows this table as `--table` prints it. It does not compile
anything and does not look at tests/, bench/ or tools/, which may include any layer.

  check_layering.py ROOT               check the tree at ROOT; exit 1 on a violation
  check_layering.py --self-test ROOT   first show on synthetic trees that a planted upward
                                       include and a kernels include are caught, then check ROOT
  check_layering.py --table            print the table as docs/architecture.md shows it
"""
import os
import re
import sys
import tempfile

# layer: (the layers it stands on, what it holds). Bottom up.
LAYERS = {
    "core": ([], "Tensor, storage, dtypes, RNG, errors, the autograd tape, views"),
    "kernels": (["core"], "raw-pointer kernels, BLAS, per-ISA vector code (private to ops)"),
    "ops": (["core", "kernels"], "shape-checked differentiable operations"),
    "io": (["core"], "safetensors, atomic files, lines and TSV, vocabularies, run-folder names, JSON fields, BPE, SentencePiece"),
    "dist": (["core"], "data parallelism on MPI, or a one-process stand-in"),
    "report": (["core"], "SVG figures and the HTML report"),
    "nn": (["ops"], "the paper's layers and their descendants"),
    "models": (["nn", "io"], "model families, configuration, checkpoints"),
    "decode": (["models"], "greedy and beam search, sampling, LM decoding"),
    "lab": (["models", "report"], "the seeds' demonstrations"),
    "train": (["models", "decode", "dist"], "optimizer, data, objectives, the trainer"),
    "run": (["models", "decode", "io"], "running a model folder (never training)"),
    "model_figures": (["run", "report"], "seed 001's figures drawn from a model folder itself"),
    "run_report": (["run", "train", "report", "model_figures"], "a run folder's report.html and its figures"),
    "serve": (["run", "report", "model_figures"], "serving a model folder, and the attention explorer"),
    "umbrella": (["models"], "include/attn/attn.h"),
    "cli": (["train", "lab", "run", "run_report", "serve"], "the attn executable"),
}
PRIVATE = {"kernels"}
# Files that are a layer of their own.
FILE_LAYERS = {"include/attn/attn.h": "umbrella"}
SOURCE_EXTENSIONS = (".h", ".hpp", ".cpp", ".cc")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
TABLE_BEGIN = "<!-- layering table: tools/check_layering.py --table -->"
TABLE_END = "<!-- end of layering table -->"


def reach(layer):
    """The layers `layer` may include: itself, what it names, and what those reach publicly."""
    seen = {layer}
    for dep in LAYERS[layer][0]:
        seen.add(dep)
        seen |= {x for x in reach(dep) if x not in PRIVATE}
    return seen


def layer_of(rel):
    """The layer of a repository-relative path, or None when it belongs to none."""
    rel = rel.replace(os.sep, "/")
    if rel in FILE_LAYERS:
        return FILE_LAYERS[rel]
    parts = rel.split("/")
    if parts[0] == "cli":
        return "cli"
    if len(parts) >= 3 and parts[0] == "include" and parts[1] == "attn":
        name = parts[2]
    elif len(parts) >= 2 and parts[0] == "src":
        name = parts[1]
    else:
        return None
    return name if name in LAYERS else None


def resolve(root, including_rel, style, target):
    """The repository-relative path an include names, or None for a system header."""
    candidates = []
    if target.startswith("attn/"):
        candidates.append("include/" + target)
    if style == '"':
        candidates.append(os.path.normpath(os.path.join(os.path.dirname(including_rel), target)))
        candidates.append("src/" + target)
    for rel in candidates:
        if os.path.isfile(os.path.join(root, rel)):
            return rel.replace(os.sep, "/")
    if target.startswith("attn/"):
        return "include/" + target  # a missing header still names its layer
    return None


def scanned_files(root):
    for top in ("include/attn", "src", "cli"):
        base = os.path.join(root, top)
        for dirpath, _, names in os.walk(base):
            for name in sorted(names):
                if name.endswith(SOURCE_EXTENSIONS):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def violations(root):
    """(file, line, message) for every include that leaves its layer's reach."""
    found = []
    for rel in sorted(scanned_files(root)):
        layer = layer_of(rel)
        if layer is None:
            found.append((rel, 0, "is in no layer of tools/check_layering.py"))
            continue
        allowed = reach(layer)
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                target_rel = resolve(root, rel, m.group(1), m.group(2))
                if target_rel is None:
                    continue
                target = layer_of(target_rel)
                if target is None or target == layer:
                    continue
                if target_rel.startswith("src/") and target not in PRIVATE:
                    found.append((rel, number, f"{layer} includes {m.group(2)}, a private header of "
                                               f"layer {target} (src/{target}/ is for {target} only)"))
                elif target not in allowed:
                    why = ("only ops includes kernels" if target in PRIVATE
                           else f"{layer} stands on {', '.join(sorted(allowed - {layer})) or 'nothing'}")
                    found.append((rel, number, f"{layer} includes {m.group(2)} of layer {target} ({why})"))
    return found


def table():
    lines = ["| layer | stands on | holds |", "|---|---|---|"]
    for name, (deps, what) in LAYERS.items():
        lines.append(f"| {name} | {', '.join(deps) or '—'} | {what} |")
    return "\n".join(lines)


def doc_problems(root):
    path = os.path.join(root, "docs", "architecture.md")
    if not os.path.isfile(path):
        return []
    text = open(path, encoding="utf-8").read()
    if TABLE_BEGIN not in text or TABLE_END not in text:
        return [("docs/architecture.md", 0, "has no layering table between the markers")]
    shown = text.split(TABLE_BEGIN, 1)[1].split(TABLE_END, 1)[0].strip()
    if shown != table():
        return [("docs/architecture.md", 0,
                 "shows a layering table that differs from tools/check_layering.py --table")]
    return []


def check(root):
    problems = violations(root) + doc_problems(root)
    for rel, number, message in problems:
        print(f"{rel}:{number}: {message}")
    print(f"check_layering: {len(problems)} problem(s) in {root}")
    return len(problems)


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def self_test():
    """The control: a clean synthetic tree passes; planted bad includes are each reported."""
    with tempfile.TemporaryDirectory() as clean, tempfile.TemporaryDirectory() as bad:
        for root in (clean, bad):
            write(root, "include/attn/core/tensor.h", "#pragma once\n#include <vector>\n")
            write(root, "include/attn/nn/layer.h", '#include "attn/core/tensor.h"\n')
            write(root, "src/kernels/gemm.h", '#include "attn/core/tensor.h"\n')
            write(root, "src/ops/matmul.cpp", '#include "kernels/gemm.h"\n#include "attn/core/tensor.h"\n')
            write(root, "src/decode/common.h", "#pragma once\n")
            write(root, "src/decode/beam.cpp", '#include "common.h"\n#include "attn/nn/layer.h"\n')
        write(bad, "src/core/tensor.cpp", '#include "attn/core/tensor.h"\n#include "attn/nn/layer.h"\n')
        write(bad, "src/nn/layer.cpp", '#include "attn/nn/layer.h"\n#include "kernels/gemm.h"\n')
        write(bad, "src/train/trainer.cpp", '#include "decode/common.h"\n')
        expected = [
            ("src/core/tensor.cpp", 2, "layer nn"),
            ("src/nn/layer.cpp", 2, "only ops includes kernels"),
            ("src/train/trainer.cpp", 1, "a private header of layer decode"),
        ]
        if violations(clean):
            print("check_layering self-test: the clean tree was reported:", violations(clean))
            return False
        got = violations(bad)
        ok = len(got) == len(expected) and all(
            g[0] == e[0] and g[1] == e[1] and e[2] in g[2] for g, e in zip(got, expected))
        if not ok:
            print("check_layering self-test: expected", expected, "got", got)
            return False
    print("check_layering self-test: the planted includes are caught")
    return True


def main(argv):
    if argv[1:] == ["--table"]:
        print(table())
        return 0
    if len(argv) == 3 and argv[1] == "--self-test":
        if not self_test():
            return 2
        return 1 if check(argv[2]) else 0
    if len(argv) == 2 and not argv[1].startswith("-"):
        return 1 if check(argv[1]) else 0
    print(__doc__.strip().split("\n\n", 1)[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
