#!/usr/bin/python3
"""Instruction/response pairs from WordNet's dictionary, for `attn train --objective sft`
(docs/training.md, "Fine-tuning"):

    wordnet_pairs.py OUT_DIR [--wordnet DIR] [--valid-percent N] [--max-gloss-chars N] [--limit N]

Reads the WordNet 3.0 database of the Debian package wordnet-base (install it with
`apt-get install wordnet-base`; this script installs nothing), by default from
/usr/share/wordnet. For every lemma of one lowercase word (letters only) the prompt is
`define: WORD` and the response its first gloss: the definition of the lemma's first sense
(index.POS lists a lemma's synsets most frequent first), the gloss text after '|' up to its
first ';' (the usage examples that follow are dropped). A lemma in several parts of speech
takes the first of noun, verb, adjective, adverb in which it occurs. Words whose gloss is
longer than --max-gloss-chars are left out (a short run of a small model learns short answers).

The pairs are split by a hash of the word (SHA-256, its first 8 bytes modulo 100 below
--valid-percent go to valid): a word is in one file only, and the split does not depend on
the order or on the other words. Writes OUT_DIR/train.tsv and OUT_DIR/valid.tsv
(prompt<TAB>response, sorted by word; --limit keeps the first N training pairs of a seeded
shuffle) and prints the counts.
"""
import argparse
import hashlib
import os
import random
import re
import sys

POS_FILES = ["noun", "verb", "adj", "adv"]
WORD = re.compile(r"^[a-z]+$")


def first_offsets(index_path):
    """lemma -> the byte offset of its first synset, from an index.POS file."""
    out = {}
    with open(index_path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("  "):  # the licence header
                continue
            fields = line.split()
            # lemma pos synset_cnt p_cnt [ptr_symbol...] sense_cnt tagsense_cnt offsets...
            lemma, synset_cnt, p_cnt = fields[0], int(fields[2]), int(fields[3])
            offsets = fields[4 + p_cnt + 2:]
            if len(offsets) != synset_cnt:
                sys.exit(f"{index_path}: cannot parse the line for '{lemma}'")
            out[lemma] = int(offsets[0])
    return out


def gloss_at(data, offset):
    """The definition of the synset at `offset` of a data.POS file's bytes."""
    end = data.index(b"\n", offset)
    line = data[offset:end].decode("utf-8")
    if " | " not in line:
        return ""
    gloss = line.split(" | ", 1)[1].strip()
    return gloss.split(";", 1)[0].strip()


def bucket(word):
    return int.from_bytes(hashlib.sha256(word.encode("utf-8")).digest()[:8], "big") % 100


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--wordnet", default="/usr/share/wordnet", help="the WordNet database folder")
    ap.add_argument("--valid-percent", type=int, default=5)
    ap.add_argument("--max-gloss-chars", type=int, default=60)
    ap.add_argument("--limit", type=int, default=0, help="at most this many training pairs (0: all)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.wordnet, "index.noun")):
        sys.exit(f"no WordNet database in {args.wordnet}: install the Debian package wordnet-base")
    pairs, seen = {}, set()
    for name in POS_FILES:
        index = first_offsets(os.path.join(args.wordnet, "index." + name))
        with open(os.path.join(args.wordnet, "data." + name), "rb") as f:
            data = f.read()
        for lemma in sorted(index):
            if lemma in seen or not WORD.match(lemma):
                continue
            seen.add(lemma)  # its first part of speech decides, whether or not its gloss is kept
            gloss = gloss_at(data, index[lemma])
            if gloss and "\t" not in gloss and len(gloss) <= args.max_gloss_chars:
                pairs[lemma] = gloss
    train, valid = [], []
    for word in sorted(pairs):
        (valid if bucket(word) < args.valid_percent else train).append((word, pairs[word]))
    if args.limit and len(train) > args.limit:
        random.Random(args.seed).shuffle(train)
        train = sorted(train[: args.limit])
    os.makedirs(args.out_dir, exist_ok=True)
    for name, rows in (("train", train), ("valid", valid)):
        with open(os.path.join(args.out_dir, name + ".tsv"), "w", encoding="utf-8") as out:
            for word, gloss in rows:
                out.write(f"define: {word}\t{gloss}\n")
    print(f"{len(train)} training and {len(valid)} validation pairs in {args.out_dir}")


if __name__ == "__main__":
    main()
