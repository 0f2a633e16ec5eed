#!/usr/bin/env python3
"""English-German word and phrase pairs from a FreeDict dictd dictionary, as TSV corpora.

Reads dictd's two files (FREEDICT.index: headword<TAB>offset<TAB>length, the numbers in
dictd's base-64 digits; FREEDICT.dict.dz: the entries, gzip-compressed) and keeps one pair
per headword: the headword and the first translation of its first sense, both short phrases
of letters. The held-out split is by headword (a hash of the lower-cased headword), so no
headword is in two splits. Writes train.tsv, valid.tsv, test.tsv and counts.json to --out.
It does not tokenize, and it does not try to keep alternative translations as references.

    tools/freedict_to_tsv.py --dict /usr/share/dictd/freedict-eng-deu --out data/freedict
"""
import argparse
import gzip
import hashlib
import json
import os
import re
import sys

DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
DIGIT_VALUE = {c: i for i, c in enumerate(DIGITS)}

# A short phrase: words of English and German letters joined by single spaces, hyphens or
# apostrophes; nothing else (no digits, dots of abbreviations, slashes, brackets, accented
# loan words). The closed alphabet keeps every held-out character in the training vocabulary.
LETTERS = "A-Za-zÄÖÜäöüß"
PHRASE = re.compile(f"^[{LETTERS}]+(?:[-' ][{LETTERS}]+)*$")


def dictd_number(text):
    """A dictd base-64 number: most significant digit first."""
    value = 0
    for c in text:
        if c not in DIGIT_VALUE:
            raise ValueError(f"not a dictd base-64 number: {text!r}")
        value = value * 64 + DIGIT_VALUE[c]
    return value


def read_entries(prefix):
    """(offset, text) of every distinct entry, in the order of the .dict file."""
    with gzip.open(prefix + ".dict.dz") as f:
        data = f.read()
    spans = set()
    with open(prefix + ".index", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 3:
                raise ValueError(f"{prefix}.index line {number}: expected 3 tab-separated fields, got {len(fields)}")
            offset, length = dictd_number(fields[1]), dictd_number(fields[2])
            if offset + length > len(data):
                raise ValueError(f"{prefix}.index line {number}: entry ends at {offset + length}, past the data ({len(data)})")
            spans.add((offset, length))
    for offset, length in sorted(spans):
        yield offset, data[offset:offset + length].decode("utf-8")


def strip_tags(text):
    """Drops <grammar> and [domain] annotations and collapses spaces."""
    text = re.sub(r"<[^>]*>", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    return " ".join(text.split())


def parse_entry(text):
    """(headword, first translation) of an entry, or None when it has no translation line.

    An entry is 'headword /ipa/ (symbol)' on its first line, then the first sense's
    comma-separated translations on the second; examples, notes and cross-references follow."""
    lines = text.split("\n")
    if len(lines) < 2:
        return None
    head = lines[0]
    slash = head.find(" /")
    if slash >= 0:
        head = head[:slash]
    head = " ".join(head.split())
    sense = strip_tags(lines[1])
    if not head or not sense:
        return None
    first = sense.split(",")[0].strip()
    return head, first


def is_short_phrase(text, max_words, max_chars):
    return len(text) <= max_chars and len(text.split(" ")) <= max_words and PHRASE.match(text) is not None


def split_of(headword, valid_percent, test_percent):
    """'test', 'valid' or 'train' from a hash of the lower-cased headword (stable across runs and machines)."""
    bucket = int(hashlib.sha256(headword.lower().encode("utf-8")).hexdigest()[:8], 16) % 1000
    if bucket < test_percent * 10:
        return "test"
    if bucket < (test_percent + valid_percent) * 10:
        return "valid"
    return "train"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dict", default="/usr/share/dictd/freedict-eng-deu",
                        help="dictd files without the extension (.index and .dict.dz)")
    parser.add_argument("--out", required=True, help="folder for train.tsv, valid.tsv, test.tsv, counts.json")
    parser.add_argument("--max-words", type=int, default=3, help="words in a headword or translation at most")
    parser.add_argument("--max-chars", type=int, default=24, help="characters in a headword or translation at most")
    parser.add_argument("--valid-percent", type=float, default=1.0, help="share of headwords held out for validation")
    parser.add_argument("--test-percent", type=float, default=2.0, help="share of headwords held out for the test")
    parser.add_argument("--max-valid", type=int, default=1000, help="validation pairs kept at most (the first by hash order)")
    parser.add_argument("--max-test", type=int, default=2000, help="test pairs kept at most (the first by hash order)")
    args = parser.parse_args()

    for ext in (".index", ".dict.dz"):
        if not os.path.isfile(args.dict + ext):
            sys.exit(f"freedict_to_tsv: no {args.dict + ext} (apt-get install dict-freedict-eng-deu)")
    counts = {"entries": 0, "no_translation": 0, "not_short": 0, "duplicate_headword": 0}
    seen = set()
    splits = {"train": [], "valid": [], "test": []}
    for _, text in read_entries(args.dict):
        counts["entries"] += 1
        pair = parse_entry(text)
        if pair is None:
            counts["no_translation"] += 1
            continue
        head, first = pair
        if not (is_short_phrase(head, args.max_words, args.max_chars)
                and is_short_phrase(first, args.max_words, args.max_chars)):
            counts["not_short"] += 1
            continue
        key = head.lower()
        if key in seen:
            counts["duplicate_headword"] += 1
            continue
        seen.add(key)
        splits[split_of(head, args.valid_percent, args.test_percent)].append((head, first))

    # The held-out sets are capped by a second, independent order (the hash of the pair), so
    # the kept examples do not depend on where a headword stands in the dictionary.
    for name, cap in (("valid", args.max_valid), ("test", args.max_test)):
        rows = splits[name]
        if len(rows) > cap:
            rows.sort(key=lambda p: hashlib.sha256(("\t".join(p)).encode("utf-8")).hexdigest())
            counts[f"{name}_dropped_by_cap"] = len(rows) - cap
            splits[name] = rows[:cap]

    os.makedirs(args.out, exist_ok=True)
    for name, rows in splits.items():
        with open(os.path.join(args.out, f"{name}.tsv"), "w", encoding="utf-8", newline="\n") as f:
            for head, first in rows:
                f.write(f"{head}\t{first}\n")
        counts[name] = len(rows)
        counts[f"{name}_source_chars"] = sum(len(h) for h, _ in rows)
        counts[f"{name}_target_chars"] = sum(len(t) for _, t in rows)
    with open(os.path.join(args.out, "counts.json"), "w", encoding="utf-8") as f:
        json.dump(counts, f, indent=2)
        f.write("\n")

    # Self-check: the split is by headword, every line is one short pair with one tab, and
    # the written files read back as what was kept.
    heads = {}
    for name in splits:
        with open(os.path.join(args.out, f"{name}.tsv"), encoding="utf-8") as f:
            lines = f.read().split("\n")
        if lines[-1] != "":
            sys.exit(f"freedict_to_tsv: {name}.tsv does not end with a newline")
        lines = lines[:-1]
        if len(lines) != counts[name] or (name != "train" and not lines):
            sys.exit(f"freedict_to_tsv: {name}.tsv holds {len(lines)} lines, expected {counts[name]} (> 0)")
        for line in lines:
            fields = line.split("\t")
            if len(fields) != 2 or not all(is_short_phrase(x, args.max_words, args.max_chars) for x in fields):
                sys.exit(f"freedict_to_tsv: bad line in {name}.tsv: {line!r}")
            other = heads.setdefault(fields[0].lower(), name)
            if other != name:
                sys.exit(f"freedict_to_tsv: headword {fields[0]!r} is in both {other}.tsv and {name}.tsv")
    train_chars = set()
    for head, first in splits["train"]:
        train_chars.update(head + first)
    for name in ("valid", "test"):
        missing = {c for head, first in splits[name] for c in head + first} - train_chars
        if missing:
            sys.exit(f"freedict_to_tsv: {name}.tsv uses characters the training pairs lack: {sorted(missing)}")
    if counts["train"] < 10 * (counts["valid"] + counts["test"]):
        sys.exit(f"freedict_to_tsv: only {counts['train']} training pairs")
    assert dictd_number("B") == 1 and dictd_number("BA") == 64 and dictd_number("/") == 63
    assert parse_entry("cat /kˈat/\nKatze <fem> [zool.], Kater <masc>\n") == ("cat", "Katze")
    assert not is_short_phrase("sb.", 3, 24) and not is_short_phrase("a  b", 3, 24)
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
