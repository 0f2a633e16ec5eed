#!/usr/bin/env python3
"""bench/torch_bench.py — PyTorch twins of attention_bench, encoder_layer_bench, gemm_bench, decode_bench
and memory_bench, on the same shapes, dtype (float32) and thread count.

  probe       which BLAS library torch loaded, and a 1024 matmul's GFLOP/s
  run         timings; prints a JSON list of {"name", "real_time_ms"} with our benchmark names
  memory      one peak-RSS case per process (like memory_bench); prints one JSON line

Attention is the math path written out (torch 1.13 has no F.scaled_dot_product_attention):
(q * scale) @ k^T, masked_fill of the causal mask, softmax, @ v. Timing mirrors Google
Benchmark: per repetition, run until --min-time seconds have passed, take the mean; report
the median over --reps repetitions. The configuration (BLAS library, huge pages, threads)
is chosen by compare.py through the environment; this script only reports what it got.
"""
import argparse
import copy
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F


# ---- environment ---------------------------------------------------------------------------

def loaded_blas():
    """The BLAS/LAPACK shared objects mapped into this process (after importing torch)."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and ("blas" in parts[5] or "lapack" in parts[5]):
                libs.add(parts[5])
    return sorted(libs)


def matmul_gflops(n=1024, min_time=0.5):
    a, b = torch.randn(n, n), torch.randn(n, n)
    sec = time_it(lambda: torch.mm(a, b), min_time, 1)
    return 2.0 * n ** 3 / sec / 1e9


def status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# ---- timing ----------------------------------------------------------------------------------

def time_it(fn, min_time, reps):
    """Seconds per call: per repetition, repeat until min_time has passed and take the mean;
    then the median over repetitions. One untimed warm-up call first."""
    fn()
    means = []
    for _ in range(reps):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= min_time:
                break
        means.append(elapsed / n)
    return statistics.median(means)


# ---- the cases -------------------------------------------------------------------------------

B_ATT, H_ATT, DH_ATT = 4, 8, 64


def attention(q, k, v, causal_mask):
    """softmax(q k^T / sqrt(Dh) + mask) v, the math path; causal_mask: bool [T, T], True = masked."""
    scores = torch.matmul(q * (1.0 / math.sqrt(q.size(-1))), k.transpose(-2, -1))  # [B, H, T, T]
    if causal_mask is not None:
        scores = scores.masked_fill(causal_mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)  # [B, H, T, Dh]


def qkv(T, requires_grad, B=B_ATT, H=H_ATT, Dh=DH_ATT):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(B, H, T, Dh, generator=g).requires_grad_(requires_grad) for _ in range(3)]


def causal(T, on):
    return torch.ones(T, T, dtype=torch.bool).triu(1) if on else None


def attention_cases(Ts, min_time, reps):
    out = []
    for T in Ts:
        for c in (0, 1):
            mask = causal(T, c)
            q, k, v = qkv(T, False)

            def fwd():
                with torch.inference_mode():
                    attention(q, k, v, mask)
            out.append((f"attention_forward/T:{T}/causal:{c}", time_it(fwd, min_time, reps)))

            qg, kg, vg = qkv(T, True)
            dout = torch.randn(B_ATT, H_ATT, T, DH_ATT)

            def fwd_bwd():
                attention(qg, kg, vg, mask).backward(dout)
                qg.grad = kg.grad = vg.grad = None
            out.append((f"attention_forward_backward/T:{T}/causal:{c}", time_it(fwd_bwd, min_time, reps)))
    return out


def encoder_layer_cases(min_time, reps):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.1, batch_first=True, norm_first=False)
    x = torch.randn(8, 128, 512)
    dy = torch.randn(8, 128, 512)
    out = []

    # Forward: eval + inference mode, which lets torch 1.13 take its fused "fast path"
    # (torch._transformer_encoder_layer_fwd), its fastest inference configuration.
    layer.eval()

    def fwd():
        with torch.inference_mode():
            layer(x)
    out.append(("encoder_layer_forward", time_it(fwd, min_time, reps)))

    # Reduced-precision inference (encoder_layer_bench's forward with int8 / bf16 weights):
    # quantize_dynamic on the layer's nn.Linear modules (linear1, linear2; the attention's
    # projections are not nn.Linear to it and stay float32) and torch.autocast bf16, both through
    # the layer's own unfused post-norm steps (_sa_block, _ff_block), which torch 1.13's fused
    # fast path would otherwise refuse (quantized weights) or fail on (autocast).
    qlayer = torch.ao.quantization.quantize_dynamic(copy.deepcopy(layer), {torch.nn.Linear}, dtype=torch.qint8)

    def fwd_int8():  # the layer's own post-norm steps: its fast path cannot take quantized weights
        with torch.inference_mode():
            h = qlayer.norm1(x + qlayer._sa_block(x, None, None))
            qlayer.norm2(h + qlayer._ff_block(h))
    out.append(("encoder_layer_forward_int8_weights", time_it(fwd_int8, min_time, reps)))

    def fwd_bf16():  # the same steps: the fused fast path refuses autocast's bf16 tensors
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            h = layer.norm1(x + layer._sa_block(x, None, None))
            layer.norm2(h + layer._ff_block(h))
    out.append(("encoder_layer_forward_bf16_weights", time_it(fwd_bf16, min_time, reps)))

    layer.train()

    def fwd_bwd():
        layer(x).backward(dy)
        layer.zero_grad(set_to_none=True)
    out.append(("encoder_layer_forward_backward", time_it(fwd_bwd, min_time, reps)))

    # bf16 mixed precision: torch.autocast on the float32 layer (encoder_layer_bench's
    # encoder_layer_forward_backward_bf16, attn's --precision bf16).
    def fwd_bwd_bf16():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = layer(x)
        y.float().backward(dy)
        layer.zero_grad(set_to_none=True)
    out.append(("encoder_layer_forward_backward_bf16", time_it(fwd_bwd_bf16, min_time, reps)))
    return out


# ---- greedy decoding (decode_bench.cpp's twin) ---------------------------------------------------

DEC_VOCAB, DEC_SRC, DEC_NEW, DEC_D, DEC_H = 1000, 32, 64, 512, 8


class BaseSeq2Seq(torch.nn.Module):
    """The paper's base model around torch.nn.Transformer (6+6 layers, D=512, h=8, d_ff=2048,
    post-norm, ReLU, dropout 0): shared embedding x sqrt(D), sinusoidal positions, output layer."""

    def __init__(self):
        super().__init__()
        self.transformer = torch.nn.Transformer(DEC_D, DEC_H, 6, 6, 2048, dropout=0.0, batch_first=True)
        self.embed = torch.nn.Embedding(DEC_VOCAB, DEC_D)
        self.out = torch.nn.Linear(DEC_D, DEC_VOCAB)
        pos = torch.arange(256, dtype=torch.float64).unsqueeze(1)
        div = torch.pow(10000.0, torch.arange(0, DEC_D, 2, dtype=torch.float64) / DEC_D)
        pe = torch.zeros(256, DEC_D, dtype=torch.float64)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos / div), torch.cos(pos / div)
        self.register_buffer("pe", pe.float())

    def embed_at(self, ids, offset):
        return self.embed(ids) * math.sqrt(DEC_D) + self.pe[offset:offset + ids.size(1)]

    def encode(self, src):
        return self.transformer.encoder(self.embed_at(src, 0))


def greedy_recompute(model, src):
    """The usual way: the encoder once, then the whole decoder over the prefix at every step."""
    memory = model.encode(src)
    ys = torch.ones(src.size(0), 1, dtype=torch.long)  # BOS = 1
    for _ in range(DEC_NEW):
        T = ys.size(1)
        mask = model.transformer.generate_square_subsequent_mask(T)
        h = model.transformer.decoder(model.embed_at(ys, 0), memory, tgt_mask=mask)
        ys = torch.cat([ys, model.out(h[:, -1]).argmax(-1, keepdim=True)], 1)
    return ys[:, 1:]


def _heads(x, B):
    return x.view(B, -1, DEC_H, DEC_D // DEC_H).transpose(1, 2)  # [B, H, T, Dh]


def _attend(q, k, v, B):
    w = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(DEC_D // DEC_H), dim=-1)
    return torch.matmul(w, v).transpose(1, 2).reshape(B, -1, DEC_D)  # [B, T, D]


def greedy_kv_cache(model, src, memory=None):
    """A PyTorch loop with its own KV cache over the same modules: cross-attention K/V once per
    source, self-attention K/V grown by one position per step (post-norm layers, as nn.Transformer)."""
    B, D = src.size(0), DEC_D
    memory = model.encode(src) if memory is None else memory
    layers = model.transformer.decoder.layers
    cross = []
    for l in layers:
        W, b = l.multihead_attn.in_proj_weight, l.multihead_attn.in_proj_bias
        cross.append((_heads(F.linear(memory, W[D:2 * D], b[D:2 * D]), B),
                      _heads(F.linear(memory, W[2 * D:], b[2 * D:]), B)))
    self_k, self_v = [None] * len(layers), [None] * len(layers)
    tok = torch.ones(B, 1, dtype=torch.long)
    out = []
    for t in range(DEC_NEW):
        x = model.embed_at(tok, t)
        for i, l in enumerate(layers):
            sa = l.self_attn
            q, k, v = F.linear(x, sa.in_proj_weight, sa.in_proj_bias).split(D, dim=-1)
            k, v = _heads(k, B), _heads(v, B)
            self_k[i] = k if self_k[i] is None else torch.cat([self_k[i], k], 2)
            self_v[i] = v if self_v[i] is None else torch.cat([self_v[i], v], 2)
            x = l.norm1(x + sa.out_proj(_attend(_heads(q, B), self_k[i], self_v[i], B)))
            ca = l.multihead_attn
            q = F.linear(x, ca.in_proj_weight[:D], ca.in_proj_bias[:D])
            x = l.norm2(x + ca.out_proj(_attend(_heads(q, B), cross[i][0], cross[i][1], B)))
            x = l.norm3(x + l.linear2(F.relu(l.linear1(x))))
        x = model.transformer.decoder.norm(x)
        tok = model.out(x[:, -1]).argmax(-1, keepdim=True)
        out.append(tok)
    return torch.cat(out, 1)


def decode_cases(min_time, reps):
    torch.manual_seed(0)
    model = BaseSeq2Seq().eval()
    out = []
    for B in (1, 8):
        src = torch.randint(4, DEC_VOCAB, (B, DEC_SRC), generator=torch.Generator().manual_seed(7))
        with torch.inference_mode():
            a, b = greedy_recompute(model, src), greedy_kv_cache(model, src)
        if a.shape != (B, DEC_NEW) or not torch.equal(a, b):
            raise SystemExit(f"decode B={B}: the KV-cache loop does not reproduce nn.Transformer's tokens")

        def recompute():
            with torch.inference_mode():
                greedy_recompute(model, src)

        def cached():
            with torch.inference_mode():
                greedy_kv_cache(model, src)
        out.append((f"decode_greedy/B:{B}/kv:0", time_it(recompute, min_time, reps)))
        out.append((f"decode_greedy/B:{B}/kv:1", time_it(cached, min_time, reps)))
    return out


def decode_quantized_cases(min_time, reps):
    """decode_bench's decode_quantized twin for greedy decoding (B 1 and 8): the KV-cache loop
    above in float32 (q:0), with PyTorch's dynamic int8 quantization (q:1:
    torch.ao.quantization.quantize_dynamic on the decoder's nn.Linear layers, linear1 and
    linear2, and the output layer; the attention projections that the loop calls as F.linear,
    MultiheadAttention's out_proj, which PyTorch does not quantize dynamically, and the encoder
    stay float32)
    and under torch.autocast("cpu", torch.bfloat16) (q:2). No beam-search twin."""
    torch.manual_seed(0)
    model = BaseSeq2Seq().eval()
    # The decoder and the output layer: the encoder's nn.TransformerEncoder fast path refuses
    # quantized linear layers (it runs once per search, float32 on both sides).
    dq = torch.ao.quantization.default_dynamic_qconfig
    qmodel = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {"transformer.decoder": dq, "out": dq},
                                                    dtype=torch.qint8)
    out = []
    for B in (1, 8):
        src = torch.randint(4, DEC_VOCAB, (B, DEC_SRC), generator=torch.Generator().manual_seed(7))

        def f32():
            with torch.inference_mode():
                greedy_kv_cache(model, src)

        def int8():
            with torch.inference_mode():
                greedy_kv_cache(qmodel, src)

        def bf16():  # the encoder outside autocast: its fast path refuses it (once per search)
            with torch.inference_mode():
                memory = model.encode(src)
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    greedy_kv_cache(model, src, memory)
        for q, fn in ((0, f32), (1, int8), (2, bf16)):
            out.append((f"decode_quantized/B:{B}/beam:1/q:{q}", time_it(fn, min_time, reps)))
    return out


GEMM_SHAPES = "256x256x256,512x512x512,1024x1024x1024,2048x2048x2048,4096x4096x4096," \
              "1024x1536x512,1024x2048x512,1024x512x2048"  # as in gemm_bench.cpp


def gemm_cases(shapes, min_time, reps):
    out = []
    for M, N, K in shapes:
        a, b, c = torch.randn(M, K), torch.randn(K, N), torch.empty(M, N)
        sec = time_it(lambda: torch.mm(a, b, out=c), min_time, reps)
        out.append((f"gemm/M:{M}/N:{N}/K:{K}", sec))
    return out


# ---- commands ----------------------------------------------------------------------------------

def cmd_probe(args):
    info = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "blas_libraries": loaded_blas(),
        "matmul_1024_gflops": matmul_gflops(1024, args.min_time),
        "blas_info": next((p for p in torch.__config__.show().replace(",", "\n").split("\n")
                           if "BLAS_INFO" in p), "").strip(),
    }
    print(json.dumps(info))


def cmd_run(args):
    topics = args.topics.split(",")
    results = []
    if "attention" in topics:
        results += attention_cases([int(t) for t in args.T.split(",")], args.min_time, args.reps)
    if "encoder_layer" in topics:
        results += encoder_layer_cases(args.min_time, args.reps)
    if "decode" in topics:
        results += decode_cases(args.min_time, args.reps)
    if "decode_quantized" in topics:
        results += decode_quantized_cases(args.min_time, args.reps)
    if "gemm" in topics:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.gemm.split(",") if s]
        results += gemm_cases(shapes, args.min_time, args.reps)
    print(json.dumps([{"name": n, "real_time_ms": s * 1e3} for n, s in results]))


def cmd_memory(args):
    rec = {"impl": "torch", "mode": "forward_backward" if args.backward else "forward", "B": args.B,
           "H": args.H, "T": args.T, "Dh": args.Dh, "causal": args.causal}
    try:
        q, k, v = qkv(args.T, args.backward, args.B, args.H, args.Dh)
        dout = torch.randn(args.B, args.H, args.T, args.Dh) if args.backward else None
        mask = causal(args.T, args.causal)
        reset = reset_peak()
        before = status_kb("VmRSS")
        if args.backward:
            attention(q, k, v, mask).backward(dout)
        else:
            with torch.inference_mode():
                attention(q, k, v, mask)
        peak = status_kb("VmHWM")
        rec.update(rss_before_kb=before, peak_kb=peak, delta_kb=peak - before, peak_reset=reset)
        print(json.dumps(rec))
    except (RuntimeError, MemoryError) as e:
        rec["error"] = "out of memory" if ("alloc" in str(e) or isinstance(e, MemoryError)) else str(e)[:200]
        print(json.dumps(rec))
        sys.exit(3)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave torch's default)")
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("probe")
    pr.add_argument("--min-time", type=float, default=0.5)
    r = sub.add_parser("run")
    r.add_argument("--topics", default="attention,encoder_layer,gemm,decode")
    r.add_argument("--T", default="128,512,1024,2048,4096")
    r.add_argument("--gemm", default=GEMM_SHAPES, help="MxNxK shapes, comma-separated")
    r.add_argument("--min-time", type=float, default=0.5)
    r.add_argument("--reps", type=int, default=3)
    m = sub.add_parser("memory")
    m.add_argument("--T", type=int, required=True)
    m.add_argument("--B", type=int, default=B_ATT)
    m.add_argument("--H", type=int, default=H_ATT)
    m.add_argument("--Dh", type=int, default=DH_ATT)
    m.add_argument("--backward", action="store_true")
    m.add_argument("--causal", action="store_true")
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    {"probe": cmd_probe, "run": cmd_run, "memory": cmd_memory}[args.cmd](args)


if __name__ == "__main__":
    main()
