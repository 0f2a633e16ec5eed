#!/usr/bin/env python3
"""translation_baselines.py — the two baselines a translation model must beat, as hypothesis files.

    tools/translation_baselines.py --train TRAIN.tsv --test TEST.tsv --out DIR

Writes DIR/ref.txt (the test targets), DIR/copy.txt (each test source copied unchanged) and
DIR/memory.txt (a translation memory: the target of the training pair whose source is most
similar to the test source, by the Dice coefficient of their sets of character 3-grams, with
spaces at both ends; ties go to the earlier training pair; a source with no 3-gram in common
with any training source gets an empty line). Score them with
    attn eval --hyp DIR/copy.txt --ref DIR/ref.txt --metric bleu,chrf
(the same corpus BLEU and chrF as `attn eval --metric` on a model's outputs).
"""
import argparse
import os
from collections import defaultdict


def read_tsv(path):
    pairs = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 2:
                raise SystemExit("%s line %d: expected two tab-separated fields" % (path, i))
            pairs.append((parts[0], parts[1]))
    return pairs


def grams(s, n=3):
    s = " " + s.lower() + " "
    return {s[i:i + n] for i in range(max(1, len(s) - n + 1))}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--train", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    train, test = read_tsv(args.train), read_tsv(args.test)
    index = defaultdict(list)  # 3-gram -> training pairs that have it
    sizes = []
    for i, (src, _) in enumerate(train):
        g = grams(src)
        sizes.append(len(g))
        for x in g:
            index[x].append(i)
    # Very common 3-grams (in more than 5% of the sources) add little and cost the most: they
    # are left out of the candidate counts but not out of the Dice denominator.
    common = len(train) // 20
    memory = []
    for src, _ in test:
        g = grams(src)
        shared = defaultdict(int)
        for x in g:
            postings = index.get(x, ())
            if len(postings) <= common:
                for i in postings:
                    shared[i] += 1
        best, best_score = None, 0.0
        for i, c in shared.items():
            score = 2.0 * c / (len(g) + sizes[i])
            if score > best_score or (score == best_score and best is not None and i < best):
                best, best_score = i, score
        memory.append(train[best][1] if best is not None else "")
    os.makedirs(args.out, exist_ok=True)
    for name, lines in (("ref.txt", [t for _, t in test]), ("copy.txt", [s for s, _ in test]),
                        ("memory.txt", memory)):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    print("wrote %d lines each: ref.txt, copy.txt, memory.txt in %s" % (len(test), args.out))


if __name__ == "__main__":
    main()
