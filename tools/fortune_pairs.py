#!/usr/bin/python3
"""Preference triples from a text file of fortunes (tools/fortunes_to_text.py), for
`attn train --objective dpo` (docs/training.md, "Fine-tuning"):

    fortune_pairs.py IN.txt OUT.tsv [--seed N] [--limit N]

Every line of at least --min-words words is cut after half its words: the prompt is the first
half, the chosen response the real rest of the line (with its leading space), the rejected one
the rest of another line drawn at random. A reader can check the rule: chosen is the fortune's
own ending. TSV: prompt<TAB>chosen<TAB>rejected (tabs never occur in the lines).
"""
import argparse
import random


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="at most this many triples (0: all)")
    ap.add_argument("--min-words", type=int, default=6)
    args = ap.parse_args()
    with open(args.input, encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f if len(l.split()) >= args.min_words and "\t" not in l]
    cuts = []
    for line in lines:
        words = line.split(" ")
        half = len(words) // 2
        cuts.append((" ".join(words[:half]), " " + " ".join(words[half:])))
    rng = random.Random(args.seed)
    order = list(range(len(cuts)))
    rng.shuffle(order)
    if args.limit:
        order = order[: args.limit]
    with open(args.output, "w", encoding="utf-8") as out:
        for k in order:
            prompt, chosen = cuts[k]
            other = k
            while other == k or cuts[other][1] == chosen:
                other = rng.randrange(len(cuts))
            out.write(f"{prompt}\t{chosen}\t{cuts[other][1]}\n")


if __name__ == "__main__":
    main()
