#!/usr/bin/env python3
"""bench/torch_translate_train.py — the PyTorch twin of a real translation run (docs/real-data.md,
tools/debian_translation.sh): torch.nn.Transformer trained on the same token ids for a given
wall-clock budget, then its test-set translations.

    torch_translate_train.py --train TRAIN.ids --valid VALID.ids --test TEST.src.ids --vocab-size V
        --seconds S --out PREFIX [--beams 1,4 --alpha 0.6] [model and recipe options]

Inputs are id files written by `attn vocab encode` (the shared SentencePiece vocabulary of the
attn run, so both sides read exactly the same ids): TRAIN.ids and VALID.ids hold
"SOURCE_IDS<TAB>TARGET_IDS" per line, TEST.src.ids the source ids per line. attn's special ids:
PAD 0, BOS 1, EOS 2, UNK 3; no EOS is appended to a source (attn does not either).

Same model and recipe as `attn train` with the options the run script passes: post-norm with a
final norm per stack, shared source/target embedding scaled by sqrt(D) and tied to the output
projection (plus a bias), sinusoidal positions, dropout on sublayers, attention weights and
embeddings, Adam (0.9, 0.98, 1e-9), Noam warm-up, label smoothing; batches as attn cuts them:
the epoch's order shuffled, sorted by (source length, target length), cut at --batch-size
examples and --max-tokens padded tokens (an example costs max(source length, target length + 1)),
the batch order shuffled.

Training stops at the first step boundary after --seconds of training (validation excluded);
then the test sources are translated with each of --beams (1: greedy; k > 1: beam search with
GNMT's length penalty ((5 + len) / 6)^alpha counting the EOS; at most source length + 50 tokens,
as attn's defaults) and written as ids to PREFIX.greedy.ids, PREFIX.beam4.ids, ..., one line per
source. The script prints one JSON line: steps, epochs (fractional), training seconds, target
tokens per second, validation loss, decoding seconds.
"""
import argparse
import json
import math
import os
import random
import sys
import time
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reverse_train import Seq2Seq  # noqa: E402  (the same model class as the demo twin)

PAD, BOS, EOS = 0, 1, 2


def read_pairs(path):
    pairs = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line:
                continue
            parts = line.split("\t")
            if len(parts) != 2:
                sys.exit("%s:%d: expected SOURCE_IDS<TAB>TARGET_IDS" % (path, n))
            src, tgt = [int(x) for x in parts[0].split()], [int(x) for x in parts[1].split()]
            if src and tgt:
                pairs.append((src, tgt))
    return pairs


def read_sources(path):
    with open(path, encoding="utf-8") as f:
        return [[int(x) for x in line.split()] for line in f]


def cost(pair):
    return max(len(pair[0]), len(pair[1]) + 1)


def plan_epoch(pairs, batch_size, max_tokens, rng):
    order = list(range(len(pairs)))
    rng.shuffle(order)
    order.sort(key=lambda i: (len(pairs[i][0]), len(pairs[i][1])))
    batches, cur, longest = [], [], 0
    for i in order:
        c = cost(pairs[i])
        grow = max(longest, c)
        if cur and ((batch_size and len(cur) + 1 > batch_size) or (max_tokens and grow * (len(cur) + 1) > max_tokens)):
            batches.append(cur)
            cur, grow = [], c
        cur.append(i)
        longest = grow
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def pad_rows(rows):
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows], dtype=torch.long)


def make_batch(pairs, idx):
    src = pad_rows([pairs[i][0] for i in idx])
    t_in = pad_rows([[BOS] + pairs[i][1] for i in idx])
    t_out = pad_rows([pairs[i][1] + [EOS] for i in idx])
    return src, t_in, t_out


@torch.no_grad()
def valid_loss(model, pairs, vocab, batch_size, max_tokens):
    model.eval()
    total, n = 0.0, 0
    for idx in plan_epoch(pairs, batch_size, max_tokens, random.Random(0)):
        s, t_in, t_out = make_batch(pairs, idx)
        logits = model(s, t_in)
        total += float(F.cross_entropy(logits.reshape(-1, vocab), t_out.reshape(-1), ignore_index=PAD,
                                       reduction="sum"))
        n += int((t_out != PAD).sum())
    model.train()
    return total / max(n, 1)


@torch.no_grad()
def greedy(model, sources, max_extra=50):
    memory, src_pad = model.encode(pad_rows(sources))
    B = len(sources)
    cap = torch.tensor([len(s) + max_extra for s in sources])
    ys = torch.full((B, 1), BOS, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)
    for step in range(int(cap.max())):
        nxt = model.decode(ys, memory, src_pad)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, EOS), nxt)
        ys = torch.cat([ys, nxt.unsqueeze(1)], 1)
        done |= (nxt == EOS) | (step + 1 >= cap)
        if bool(done.all()):
            break
    out = []
    for b, row in enumerate(ys[:, 1:].tolist()):
        hyp = []
        for tok in row[: int(cap[b])]:
            if tok == EOS:
                break
            hyp.append(tok)
        out.append(hyp)
    return out


@torch.no_grad()
def beam(model, source, k, alpha, max_extra=50):
    """One source, k beams; finished hypotheses ranked by log-prob / ((5 + len) / 6)^alpha, len
    counting the EOS; stops when no live beam can beat the best finished one."""
    memory, src_pad = model.encode(pad_rows([source]))
    live = [(0.0, [BOS])]
    finished = []
    limit = len(source) + max_extra
    for step in range(limit):
        ys = pad_rows([h for _, h in live])
        logp = F.log_softmax(model.decode(ys, memory.expand(len(live), -1, -1),
                                          src_pad.expand(len(live), -1))[:, -1].double(), -1)
        cand = []
        for r, (score, hyp) in enumerate(live):
            top = torch.topk(logp[r], k)
            for v, tok in zip(top.values.tolist(), top.indices.tolist()):
                cand.append((score + v, hyp + [tok]))
        cand.sort(key=lambda c: -c[0])
        live = []
        for score, hyp in cand:
            if hyp[-1] == EOS:
                length = len(hyp) - 1
                finished.append((score / ((5.0 + length) / 6.0) ** alpha, hyp[1:-1]))
            else:
                live.append((score, hyp))
            if len(live) == k:
                break
        if finished:
            best = max(f[0] for f in finished)
            # the best a live beam can still reach: its score now under the largest penalty
            bound = max(s for s, _ in live) / ((5.0 + limit) / 6.0) ** alpha if live else -math.inf
            if not live or best >= bound:
                break
    if not finished:
        score, hyp = live[0]
        finished.append((score, hyp[1:]))
    return max(finished, key=lambda f: f[0])[1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", required=True)
    p.add_argument("--valid", required=True)
    p.add_argument("--test", required=True, help="test source ids, one line per source")
    p.add_argument("--out", required=True, help="prefix of the translation files (ids, one line per source)")
    p.add_argument("--vocab-size", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True, help="training budget (validation excluded)")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=3, help="encoder and decoder layers each")
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--warmup", type=int, default=4000)
    p.add_argument("--lr-scale", type=float, default=1.0)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--beams", default="1,4", help="decodings to write, comma-separated beam sizes (1: greedy)")
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    warnings.filterwarnings("ignore", message=".*nested tensors.*")

    train, valid, test = read_pairs(args.train), read_pairs(args.valid), read_sources(args.test)
    longest = max(max(len(s), len(t) + 1) for s, t in train + valid)
    longest = max(longest, max(len(s) for s in test) + 52)
    V, D = args.vocab_size, args.d_model
    model = Seq2Seq(V, D, args.heads, args.layers, args.d_ff, args.dropout, max_len=longest)
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)

    step, epoch, tokens, train_seconds = 0, 0, 0, 0.0
    batches_done = 0
    stop = False
    while not stop:
        plan = plan_epoch(train, args.batch_size, args.max_tokens, rng)
        for bi, idx in enumerate(plan):
            t0 = time.perf_counter()
            s, t_in, t_out = make_batch(train, idx)
            step += 1
            lr = args.lr_scale * D ** -0.5 * min(step ** -0.5, step * args.warmup ** -1.5)
            for g in opt.param_groups:
                g["lr"] = lr
            logits = model(s, t_in)
            loss = F.cross_entropy(logits.reshape(-1, V), t_out.reshape(-1), ignore_index=PAD,
                                   label_smoothing=args.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            tokens += int((t_out != PAD).sum())
            train_seconds += time.perf_counter() - t0
            if step % 200 == 0:
                print("step %d  epoch %.2f  loss %.4f  %.0f s" % (step, epoch + (bi + 1) / len(plan), float(loss),
                                                                 train_seconds), file=sys.stderr, flush=True)
            if train_seconds >= args.seconds:
                batches_done = bi + 1
                stop = True
                break
        if not stop:
            epoch += 1
    epochs = epoch + batches_done / len(plan)

    vloss = valid_loss(model, valid, V, args.batch_size, args.max_tokens)
    model.eval()
    decode_seconds = {}
    for k in [int(x) for x in args.beams.split(",")]:
        name = "greedy" if k <= 1 else "beam%d" % k
        t0 = time.perf_counter()
        if k <= 1:
            order = sorted(range(len(test)), key=lambda i: len(test[i]))
            by_index = {}
            for b in range(0, len(order), 64):
                idx = order[b:b + 64]
                for i, h in zip(idx, greedy(model, [test[i] for i in idx])):
                    by_index[i] = h
            hyps = [by_index[i] for i in range(len(test))]
        else:
            hyps = [beam(model, s, k, args.alpha) for s in test]
        decode_seconds[name] = time.perf_counter() - t0
        with open("%s.%s.ids" % (args.out, name), "w", encoding="utf-8") as f:
            for h in hyps:
                f.write(" ".join(str(t) for t in h) + "\n")
    print(json.dumps({
        "impl": "torch", "threads": torch.get_num_threads(), "steps": step, "epochs": epochs,
        "train_seconds": train_seconds, "tokens": tokens, "tokens_per_s": tokens / train_seconds,
        "val_loss": vloss, "decode_seconds": decode_seconds,
    }))


if __name__ == "__main__":
    main()
