#!/usr/bin/python3
"""Independent BLEU and chrF values for tests/torch/metrics_nltk_test.cpp, from Debian's python3-nltk.

    nltk_metrics.py OUT.json

Writes, from fixed seeds:
  bleu: corpora of word tokens (hypotheses of at least 4 words, since NLTK counts a shorter one
        as one n-gram of each missing order and sacreBLEU as none) with NLTK's corpus_bleu:
        "exp" = SmoothingFunction().method3 (NIST geometric smoothing, sacreBLEU's default) and
        "none" = no smoothing (only where every order has a match; NLTK then floors to 1e-308);
        some cases also carry raw sentences whose tokens come from the 13a rules below.
  tok13a: raw strings and their tokens under sacreBLEU's 13a rules, applied with Python's re.
  chrf: single sentences with NLTK's sentence_chrf at beta 2 (the mean of per-order F-scores,
        which is sacreBLEU's chrF with eps_smoothing).
Scores are on sacreBLEU's 0-100 scale.
"""
import json
import random
import re
import sys
import warnings

from nltk.translate.bleu_score import SmoothingFunction, corpus_bleu
from nltk.translate.chrf_score import sentence_chrf

# mteval-v13a as sacreBLEU's Tokenizer13a + TokenizerRegexp apply it.
RULES_13A = [
    (re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),
    (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),
    (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),
]


def tok13a(line, rstrip=True):
    """Words of `line` under 13a; sacreBLEU strips trailing whitespace first (rstrip)."""
    if rstrip:
        line = line.rstrip()
    for a, b in [("<skipped>", ""), ("-\n", ""), ("\n", " "), ("&quot;", '"'), ("&amp;", "&"), ("&lt;", "<"),
                 ("&gt;", ">")]:
        line = line.replace(a, b)
    line = " {} ".format(line)
    for pattern, repl in RULES_13A:
        line = pattern.sub(repl, line)
    return line.split()


WORDS = ("the a cat dog sat ran on in under mat house garden quickly slowly and then big small red blue "
         "saw found it was is of to").split()
PUNCT = [".", ",", "!", "?", ";", ":", "(", ")", "'s", "-", "$5", "3.14", "1,000", "co-op", "&amp;", "U.S."]


def sentence(rng, lo, hi, punct=False):
    out = [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]
    if punct:
        for _ in range(rng.randint(1, 4)):
            out.insert(rng.randint(0, len(out)), rng.choice(PUNCT))
    return out


def perturb(rng, ref, rate):
    """A hypothesis made from a reference by substitutions, deletions, insertions and swaps."""
    hyp = list(ref)
    for _ in range(max(1, int(len(ref) * rate))):
        op = rng.randrange(4)
        i = rng.randrange(len(hyp))
        if op == 0:
            hyp[i] = rng.choice(WORDS)
        elif op == 1 and len(hyp) > 4:
            del hyp[i]
        elif op == 2:
            hyp.insert(i, rng.choice(WORDS))
        elif i + 1 < len(hyp):
            hyp[i], hyp[i + 1] = hyp[i + 1], hyp[i]
    while len(hyp) < 4:
        hyp.append(rng.choice(WORDS))
    return hyp


def nltk_scores(hyps, refs_per_segment):
    exp = corpus_bleu(refs_per_segment, hyps, smoothing_function=SmoothingFunction().method3)
    # Every order matched somewhere: no smoothing is well defined (and equals sacreBLEU's "none").
    none = None
    matched = []
    for n in range(1, 5):
        w = tuple(1.0 if k == n - 1 else 0.0 for k in range(4))
        matched.append(corpus_bleu(refs_per_segment, hyps, weights=w) > 1e-300)
    if all(matched):
        none = 100 * corpus_bleu(refs_per_segment, hyps)
    return 100 * exp, none


def bleu_case(name, hyps, refs_per_segment, raw_hyps=None, raw_refs=None):
    exp, none = nltk_scores(hyps, refs_per_segment)
    case = {"name": name, "hyps": hyps, "refs": refs_per_segment, "exp": exp, "none": none}
    if raw_hyps is not None:
        case["raw_hyps"] = raw_hyps
        case["raw_refs"] = raw_refs  # per segment, like refs
    return case


def main():
    warnings.filterwarnings("ignore")  # NLTK warns about zero counts, which some cases have on purpose
    out_path = sys.argv[1]
    rng = random.Random(20240606)
    bleu = []

    refs = [sentence(rng, 4, 18) for _ in range(60)]
    bleu.append(bleu_case("single_reference", [perturb(rng, r, 0.3) for r in refs], [[r] for r in refs]))

    refs = [[sentence(rng, 4, 15) for _ in range(3)] for _ in range(40)]
    bleu.append(bleu_case("three_references", [perturb(rng, rs[rng.randrange(3)], 0.4) for rs in refs], refs))

    ref = sentence(rng, 12, 12)
    bleu.append(bleu_case("single_sentence", [perturb(rng, ref, 0.2)], [[ref]]))
    # One substitution in every 4-gram window: no 4-gram matches, smoothing decides.
    ref = "a b c d e f g h".split()
    bleu.append(bleu_case("no_fourgram_match", ["a b c X e f Y h".split()], [[ref]]))
    bleu.append(bleu_case("no_overlap", ["w x y z".split(), "u v w x y".split()], [["a b c d".split()],
                                                                                   ["e f g h".split()]]))
    bleu.append(bleu_case("hypotheses_longer", [ref + ["i", "j"]], [[ref]]))
    bleu.append(bleu_case("hypotheses_shorter", [ref[:5]], [[ref]]))

    # Raw text with punctuation: tokens by the 13a rules, so corpus_bleu on the raw lines must agree.
    raw_refs = [" ".join(sentence(rng, 5, 14, punct=True)) for _ in range(40)]
    raw_hyps = [" ".join(perturb(rng, r.split(), 0.3)) for r in raw_refs]
    hyps = [tok13a(h) for h in raw_hyps]
    keep = [i for i, h in enumerate(hyps) if len(h) >= 4 and raw_refs[i].strip()]
    bleu.append(bleu_case("raw_text_13a", [hyps[i] for i in keep], [[tok13a(raw_refs[i])] for i in keep],
                          [raw_hyps[i] for i in keep], [[raw_refs[i]] for i in keep]))

    tricky = ["Hello, world!", "It costs $3.50.", "1,000 people in 1990-2000", "e.g. a co-op's (big) deal",
              "&quot;quoted&quot; &amp; &lt;tagged&gt;", "x<skipped>y", "hyphen-\nated\nlines", "a.b,c.d",
              "3.,4 .5 ,6", "end...", "tabs\tand  spaces  ", "{braces} [brackets] ~tilde~ `tick` ^caret_",
              "mail@example.com / path/to?q=1&r=2", "100%", "Straße, café.", "--double--dash", "9-",
              "a-\n", "", "   "]
    tricky += [" ".join(sentence(rng, 3, 8, punct=True)) for _ in range(30)]
    tok = [{"in": t, "out": " ".join(tok13a(t, rstrip=False))} for t in tricky]

    chrf = []
    pairs = [("the cat sat on the mat", "the cat sat on the mat"), ("cat", "hat"), ("ab", "abc"),
             ("the dog ran away", "a dog ran far away"), ("xyz", "abc")]
    for _ in range(20):
        r = sentence(rng, 3, 12)
        pairs.append((" ".join(perturb(rng, r, 0.3)), " ".join(r)))
    for hyp, ref in pairs:
        chrf.append({"hyp": hyp, "ref": ref, "eps_chrf": 100 * sentence_chrf(ref, hyp, beta=2.0)})

    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"bleu": bleu, "tok13a": tok, "chrf": chrf}, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
