#!/usr/bin/env python3
"""bench/torch_reverse_train.py — the demo's reverse-digits training in torch.nn.Transformer,
the PyTorch twin of `attn train --task reverse` (paper §5, on the seed's toy task).

Same data: the 10,000 training and 1,000 validation sequences of 8 digits are regenerated
bit for bit with attn's generator (xoshiro256** seeded through splitmix64, data seed 1706,
train stream 0, validation stream 1; src/core/rng.cpp, src/train/tasks.cpp), with attn's ids
(PAD 0, BOS 1, EOS 2, UNK 3, digits 4..13). Same model and recipe: D=64, 4 heads, 2+2 layers,
d_ff 256, dropout 0.1 (sublayers, attention weights, embeddings), post-norm with a final norm
per stack, shared source/target embedding scaled by sqrt(D) and tied to the output projection
(plus a bias), sinusoidal positions, Adam (0.9, 0.98, 1e-9), Noam warm-up 400 scale 1, label
smoothing 0.1, batch 64, a fresh shuffle per epoch.

It prints one JSON line: training seconds (validation excluded), target tokens per second
(each target's symbols plus its EOS, as attn counts them), the wall time, and the validation
token accuracy of greedy decoding after the last epoch (attn's definition: positions right out
of len + 1, the EOS position included). --precision bf16 runs the forward pass under
torch.autocast("cpu", dtype=torch.bfloat16), the twin of `attn train --precision bf16`. Not here: checkpoints, the batch order of attn (a
different shuffle), or bit-identical initialisation.
"""
import argparse
import warnings
import json
import math
import time

import torch
import torch.nn.functional as F

MASK64 = (1 << 64) - 1
PAD, BOS, EOS, NUM_SPECIAL = 0, 1, 2, 4


# ---- attn's generator, for the same data ----------------------------------------------------------

def _mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def stream_seed(seed, stream):
    return _mix((seed + (stream + 1) * 0x9E3779B97F4A7C15) & MASK64)


class Xoshiro256ss:
    def __init__(self, seed):
        self.s = []
        x = seed
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & MASK64
            self.s.append(_mix(x))

    @staticmethod
    def _rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & MASK64

    def next_u64(self):
        s = self.s
        result = (self._rotl((s[1] * 5) & MASK64, 7) * 9) & MASK64
        t = (s[1] << 17) & MASK64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self._rotl(s[3], 45)
        return result

    def below(self, n):
        if n <= 1:
            return 0
        limit = MASK64 - MASK64 % n
        while True:
            r = self.next_u64()
            if r < limit:
                return r % n


def reverse_task(count, rng, length=8, symbols=10):
    src = [[NUM_SPECIAL + rng.below(symbols) for _ in range(length)] for _ in range(count)]
    return src, [s[::-1] for s in src]


# ---- the model ----------------------------------------------------------------------------------

def sinusoidal(max_len, d):
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe.float()


class Seq2Seq(torch.nn.Module):
    def __init__(self, vocab, d_model, heads, layers, d_ff, dropout, max_len=64):
        super().__init__()
        self.d_model = d_model
        self.transformer = torch.nn.Transformer(d_model, heads, layers, layers, d_ff, dropout,
                                                batch_first=True, norm_first=False)
        self.embedding = torch.nn.Embedding(vocab, d_model)
        torch.nn.init.normal_(self.embedding.weight, std=d_model ** -0.5)
        self.out_bias = torch.nn.Parameter(torch.zeros(vocab))
        self.dropout = torch.nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal(max_len, d_model))

    def embed(self, ids):
        x = self.embedding(ids) * math.sqrt(self.d_model) + self.pe[: ids.size(1)]
        return self.dropout(x)

    def encode(self, src):
        pad = src == PAD
        return self.transformer.encoder(self.embed(src), src_key_padding_mask=pad), pad

    def decode(self, tgt_in, memory, src_pad):
        T = tgt_in.size(1)
        causal = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        h = self.transformer.decoder(self.embed(tgt_in), memory, tgt_mask=causal,
                                     tgt_key_padding_mask=tgt_in == PAD, memory_key_padding_mask=src_pad)
        return F.linear(h, self.embedding.weight, self.out_bias)  # tied output projection

    def forward(self, src, tgt_in):
        memory, src_pad = self.encode(src)
        return self.decode(tgt_in, memory, src_pad)


def make_batch(src, tgt, idx):
    s = torch.tensor([src[i] for i in idx])
    t_in = torch.tensor([[BOS] + tgt[i] for i in idx])
    t_out = torch.tensor([tgt[i] + [EOS] for i in idx])
    return s, t_in, t_out


@torch.no_grad()
def greedy_token_accuracy(model, src, tgt, batch_size):
    model.eval()
    right = positions = 0
    for b in range(0, len(src), batch_size):
        idx = range(b, min(len(src), b + batch_size))
        s = torch.tensor([src[i] for i in idx])
        memory, src_pad = model.encode(s)
        longest = max(len(tgt[i]) for i in idx)
        ys = torch.full((len(idx), 1), BOS, dtype=torch.long)
        finished = torch.zeros(len(idx), dtype=torch.bool)
        for _ in range(longest + 1):
            nxt = model.decode(ys, memory, src_pad)[:, -1].argmax(-1)
            nxt = torch.where(finished, torch.full_like(nxt, PAD), nxt)
            finished |= nxt == EOS
            ys = torch.cat([ys, nxt.unsqueeze(1)], 1)
        for r, i in enumerate(idx):
            out = []
            for tok in ys[r, 1:].tolist():
                if tok in (EOS, PAD):
                    break
                out.append(tok)
            done = bool(finished[r])
            ref = tgt[i]
            positions += len(ref) + 1
            right += sum(1 for j in range(len(ref)) if j < len(out) and out[j] == ref[j])
            right += 1 if done and len(out) == len(ref) else 0
    model.train()
    return right / positions


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=0, help="initialisation, dropout and batch order")
    p.add_argument("--train-size", type=int, default=10000)
    p.add_argument("--valid-size", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--warmup", type=int, default=400)
    p.add_argument("--lr-scale", type=float, default=1.0)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    # The model's size and the task's length: the demo's by default (attn train's own defaults);
    # compare.py's base-size comparison sets D = 512, 8 heads, 6 + 6 layers, d_ff 2048.
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2, help="encoder and decoder layers each")
    p.add_argument("--d-ff", type=int, default=256)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--length", type=int, default=8, help="digits per sequence")
    p.add_argument("--precision", choices=["f32", "bf16"], default="f32",
                   help="bf16: the forward pass under torch.autocast('cpu', dtype=torch.bfloat16) "
                        "(attn train --precision bf16's twin); weights and Adam stay float32")
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    # torch 1.13 warns that its inference fast path uses prototype nested tensors.
    warnings.filterwarnings("ignore", message=".*nested tensors.*")
    wall0 = time.perf_counter()

    data_seed = 1706
    train_src, train_tgt = reverse_task(args.train_size, Xoshiro256ss(stream_seed(data_seed, 0)), args.length)
    valid_src, valid_tgt = reverse_task(args.valid_size, Xoshiro256ss(stream_seed(data_seed, 1)), args.length)
    vocab = NUM_SPECIAL + 10
    D = args.d_model
    model = Seq2Seq(vocab, D, args.heads, args.layers, args.d_ff, args.dropout, max_len=max(64, args.length + 2))
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    step = 0
    train_seconds = 0.0
    tokens = 0
    epochs = []
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(args.train_size).tolist()
        batches = [order[b:b + args.batch_size] for b in range(0, len(order), args.batch_size)]
        t0 = time.perf_counter()
        epoch_tokens = 0
        loss_sum = 0.0
        for idx in batches:
            s, t_in, t_out = make_batch(train_src, train_tgt, idx)
            step += 1
            lr = args.lr_scale * D ** -0.5 * min(step ** -0.5, step * args.warmup ** -1.5)
            for g in opt.param_groups:
                g["lr"] = lr
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                logits = model(s, t_in)
            loss = F.cross_entropy(logits.float().reshape(-1, vocab), t_out.reshape(-1), ignore_index=PAD,
                                   label_smoothing=args.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            n = int((t_out != PAD).sum())
            epoch_tokens += n
            loss_sum += loss.item() * n
        secs = time.perf_counter() - t0
        train_seconds += secs
        tokens += epoch_tokens
        epochs.append({"epoch": epoch, "loss": loss_sum / epoch_tokens, "seconds": secs,
                       "tokens_per_s": epoch_tokens / secs})
    acc = greedy_token_accuracy(model, valid_src, valid_tgt, args.batch_size) if args.valid_size else float("nan")
    print(json.dumps({
        "impl": "torch", "precision": args.precision, "epochs": args.epochs, "threads": torch.get_num_threads(),
        "train_seconds": train_seconds, "tokens": tokens, "tokens_per_s": tokens / train_seconds,
        "wall_seconds": time.perf_counter() - wall0, "val_token_acc": acc,
        "final_loss": epochs[-1]["loss"], "per_epoch": epochs,
    }))


if __name__ == "__main__":
    main()
