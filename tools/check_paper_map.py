#!/usr/bin/env python3
"""Checks that docs/paper-map.md reaches the code in one step.

Every code reference in the map is written in backticks as `path` or `path:name`, where path
is relative to the repository root and name a function, type or constant (qualified names
such as `Model::embed` allowed). This script checks that each path exists, that each name is
defined in that file (a definition or declaration of it, not a mere mention in a comment),
and that every Markdown link to a local file (the derivation notes) resolves.

Usage: check_paper_map.py [--root DIR] [--map FILE]. Exit status 0 when every reference holds,
1 with one line per broken reference otherwise. Not here: checking that the prose is right.
"""
import argparse
import os
import re
import sys

# `path` or `path:name`: a repository path with an extension, optionally a C++ name.
REF = re.compile(r"`([A-Za-z0-9_./-]+\.(?:h|cpp|py|md|sh|txt|cmake))(?::([A-Za-z_~][A-Za-z0-9_:~]*))?`")
# A backticked token that looks like a path but not like a file reference: a folder.
FOLDER = re.compile(r"`((?:include|src|cli|tools|tests|bench|docs)/[A-Za-z0-9_./-]*/)`")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def strip_comments(text):
    """The C++ text without // and /* */ comments (string literals are left alone)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def defines(code, name):
    """Whether `name` (possibly qualified, A::b) is defined or declared in the C++ code."""
    parts = name.split("::")
    last = re.escape(parts[-1])
    if len(parts) > 1:
        # A::b( in a definition, or class A { ... b( ... } in a declaration.
        qual = r"\b" + r"\s*::\s*".join(re.escape(p) for p in parts) + r"\b"
        if re.search(qual, code):
            return True
        owner = re.escape(parts[-2])
        if re.search(r"\b(?:class|struct|enum(?:\s+class)?)\s+" + owner + r"\b", code) and \
                re.search(r"[\w&*>\]]\s+[&*]?" + last + r"\s*\(", code):
            return True
        return False
    patterns = [
        r"\b(?:class|struct|enum(?:\s+class)?|using|namespace)\s+" + last + r"\b",  # a type
        r"[\w&*>\]]\s+[&*]?" + last + r"\s*\(",  # a function: return type then name(
        r"\b(?:constexpr|const)\b[^;=(]*\b" + last + r"\s*[=\[{]",  # a constant
        r"\bdef\s+" + last + r"\s*\(",  # Python
    ]
    return any(re.search(p, code) for p in patterns)


def check(root, map_path):
    errors = []
    with open(map_path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    refs = 0
    shown = os.path.relpath(map_path, root)
    for number, line in enumerate(lines, 1):
        for m in REF.finditer(line):
            path, name = m.group(1), m.group(2)
            refs += 1
            full = os.path.join(root, path)
            if not os.path.isfile(full):
                errors.append(f"{shown}:{number}: '{path}' does not exist")
                continue
            if name:
                with open(full, encoding="utf-8", errors="replace") as src:
                    code = src.read()
                if path.endswith((".h", ".cpp")):
                    code = strip_comments(code)
                if not defines(code, name):
                    errors.append(f"{shown}:{number}: '{name}' is not defined in '{path}'")
        for m in FOLDER.finditer(line):
            refs += 1
            if not os.path.isdir(os.path.join(root, m.group(1))):
                errors.append(f"{shown}:{number}: folder '{m.group(1)}' does not exist")
        for m in LINK.finditer(line):
            target = m.group(1)
            if "://" in target:
                continue
            refs += 1
            if not os.path.exists(os.path.join(os.path.dirname(map_path), target)):
                errors.append(f"{shown}:{number}: link '{target}' does not resolve")
    if refs == 0:
        errors.append(f"{shown}: no code references found")
    return errors, refs


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(here), help="repository root")
    parser.add_argument("--map", help="the map to check (default ROOT/docs/paper-map.md)")
    args = parser.parse_args()
    map_path = args.map or os.path.join(args.root, "docs", "paper-map.md")
    errors, refs = check(args.root, map_path)
    for e in errors:
        print(e)
    print(f"paper map: {refs} references, {len(errors)} broken")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
