#!/usr/bin/env python3
"""An English text corpus from the fortune(6) files, one fortune per line, with a held-out split.

Fortune files hold entries separated by lines that are only '%'. Each entry becomes one line:
overstruck characters (x BACKSPACE y, old underlining and bold) keep the last character,
other control characters go, and runs of whitespace (the line breaks included) become one
space. Entries longer than --max-chars are dropped, duplicates kept once, and the split into
train.txt / valid.txt / test.txt is by a hash of the entry's text. It does not keep the
line layout of poems and ASCII art (the ascii-art file is skipped).

    tools/fortunes_to_text.py --dir /usr/share/games/fortunes --out data/fortunes
"""
import argparse
import hashlib
import json
import os
import re
import sys

OVERSTRIKE = re.compile(r"[^\n]\x08")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
SKIPPED_FILES = {"ascii-art"}


def entries(path):
    """The raw entries of one fortune file."""
    with open(path, encoding="utf-8", errors="strict") as f:
        text = f.read()
    entry = []
    for line in text.split("\n"):
        if line.rstrip("\r") == "%":
            yield "\n".join(entry)
            entry = []
        else:
            entry.append(line)
    if any(line.strip() for line in entry):
        yield "\n".join(entry)


def one_line(entry):
    """An entry as one line: overstrikes resolved, control characters dropped, whitespace collapsed."""
    # 'a BACKSPACE b' prints b over a: keep the character after the backspace.
    entry = OVERSTRIKE.sub("", entry)
    entry = CONTROL.sub(" ", entry)
    return " ".join(entry.split())


def split_of(text, valid_percent, test_percent):
    bucket = int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) % 1000
    if bucket < test_percent * 10:
        return "test"
    if bucket < (test_percent + valid_percent) * 10:
        return "valid"
    return "train"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="/usr/share/games/fortunes", help="folder of fortune files")
    parser.add_argument("--out", required=True, help="folder for train.txt, valid.txt, test.txt, counts.json")
    parser.add_argument("--min-chars", type=int, default=20, help="shorter entries are dropped")
    parser.add_argument("--max-chars", type=int, default=120, help="longer entries are dropped")
    parser.add_argument("--valid-percent", type=float, default=5.0)
    parser.add_argument("--test-percent", type=float, default=5.0)
    args = parser.parse_args()

    if not os.path.isdir(args.dir):
        sys.exit(f"fortunes_to_text: no folder {args.dir} (apt-get install fortunes)")
    files = sorted(name for name in os.listdir(args.dir)
                   if "." not in name and name not in SKIPPED_FILES
                   and os.path.isfile(os.path.join(args.dir, name)) and not os.path.islink(os.path.join(args.dir, name)))
    if not files:
        sys.exit(f"fortunes_to_text: no fortune files in {args.dir}")
    counts = {"files": len(files), "entries": 0, "too_short": 0, "too_long": 0, "duplicate": 0}
    seen = set()
    splits = {"train": [], "valid": [], "test": []}
    for name in files:
        for entry in entries(os.path.join(args.dir, name)):
            counts["entries"] += 1
            line = one_line(entry)
            if len(line) < args.min_chars:
                counts["too_short"] += 1
                continue
            if len(line) > args.max_chars:
                counts["too_long"] += 1
                continue
            if line in seen:
                counts["duplicate"] += 1
                continue
            seen.add(line)
            splits[split_of(line, args.valid_percent, args.test_percent)].append(line)

    os.makedirs(args.out, exist_ok=True)
    for name, lines in splits.items():
        with open(os.path.join(args.out, f"{name}.txt"), "w", encoding="utf-8", newline="\n") as f:
            for line in lines:
                f.write(line + "\n")
        counts[name] = len(lines)
        counts[f"{name}_chars"] = sum(len(line) for line in lines)
    with open(os.path.join(args.out, "counts.json"), "w", encoding="utf-8") as f:
        json.dump(counts, f, indent=2)
        f.write("\n")

    # Self-check: every written line is one clean entry within the limits, and no text is in two splits.
    where = {}
    for name in splits:
        with open(os.path.join(args.out, f"{name}.txt"), encoding="utf-8") as f:
            lines = f.read().split("\n")[:-1]
        if len(lines) != counts[name] or not lines:
            sys.exit(f"fortunes_to_text: {name}.txt holds {len(lines)} lines, expected {counts[name]} (> 0)")
        for line in lines:
            if (not args.min_chars <= len(line) <= args.max_chars or line != " ".join(line.split())
                    or CONTROL.search(line) or "\t" in line):
                sys.exit(f"fortunes_to_text: bad line in {name}.txt: {line!r}")
            if where.setdefault(line, name) != name:
                sys.exit(f"fortunes_to_text: {line!r} is in both {where[line]}.txt and {name}.txt")
    if counts["train"] < 5 * (counts["valid"] + counts["test"]):
        sys.exit(f"fortunes_to_text: only {counts['train']} training lines")
    assert one_line("_\x08a_\x08b  c\n\t-- d") == "ab c -- d"
    assert list(entries_from_text("x\n%\ny\nz\n%\n")) == ["x", "y\nz"]
    print(json.dumps(counts))


def entries_from_text(text):
    """entries() on a string, for the self-check."""
    import tempfile
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".fortune", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        yield from entries(path)
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
