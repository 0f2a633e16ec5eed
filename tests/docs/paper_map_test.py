#!/usr/bin/env python3
"""docs/paper-map.md reaches the code: every `path:name` it gives exists (tools/check_paper_map.py),
and the checker itself catches a wrong path, a wrong name, a name found only in a comment, and a
dead link (the controls, on a small tree made here). Prints 'N passed, N failed'; exit 1 on failure."""
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import check_paper_map  # noqa: E402

results = []


def expect(name, ok, detail=""):
    results.append(ok)
    print(("ok     " if ok else "FAILED ") + name + ("" if ok else ": " + detail))


# The real map: every reference holds, and there are enough of them to mean something.
errors, refs = check_paper_map.check(ROOT, os.path.join(ROOT, "docs", "paper-map.md"))
expect("the paper map's references all resolve", not errors, "\n".join(errors))
expect("the paper map names at least 30 code references", refs >= 30, f"{refs} references")

# Controls: a tree with one good reference of each kind and one planted fault of each kind.
with tempfile.TemporaryDirectory() as root:
    os.makedirs(os.path.join(root, "src"))
    os.makedirs(os.path.join(root, "docs", "derivations"))
    with open(os.path.join(root, "src", "model.cpp"), "w") as f:
        f.write("// Model::forward_all is only mentioned here\n"
                "namespace attn {\nTensor Model::embed(const Tensor& x) {\n  return x;\n}\n"
                "struct Options { int n; };\nconstexpr int kWidth = 4;\n}\n")
    with open(os.path.join(root, "docs", "derivations", "note.md"), "w") as f:
        f.write("# a note\n")
    good = ("| a | `src/model.cpp:Model::embed` `src/model.cpp:Options` `src/model.cpp:kWidth` "
            "[note](derivations/note.md) |\n")
    faults = {
        "missing file": "| b | `src/missing.cpp:embed` |\n",
        "wrong name": "| c | `src/model.cpp:Model::unembed` |\n",
        "name only in a comment": "| d | `src/model.cpp:Model::forward_all` |\n",
        "dead link": "| e | [gone](derivations/gone.md) |\n",
    }
    map_path = os.path.join(root, "docs", "paper-map.md")
    with open(map_path, "w") as f:
        f.write(good)
    errors, refs = check_paper_map.check(root, map_path)
    expect("control: a correct map passes", not errors and refs == 4, f"{errors} {refs}")
    for what, line in faults.items():
        with open(map_path, "w") as f:
            f.write(good + line)
        errors, _ = check_paper_map.check(root, map_path)
        expect(f"control: a {what} is reported", len(errors) == 1 and ":2:" in errors[0], str(errors))

failed = results.count(False)
print(f"{len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
