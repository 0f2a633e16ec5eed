#!/usr/bin/python3
"""Writes the live PyTorch references that the `torch` ctest label compares against.

Run by ctest (fixture `torch_fixtures`) with Debian's /usr/bin/python3 and python3-torch:
    make_fixtures.py OUT_DIR
Each case is one safetensors file OUT_DIR/<case>.safetensors holding
    param.<state_dict name>   the module's random weights (PyTorch's names)
    in.<name>                 inputs (float, I64 ids, BOOL masks: True = masked out)
    in.grad_weight            W, so that the scalar loss is sum(output * W)
    out.<name>                outputs
    grad.<param name>         d loss / d parameter
    grad_in.<name>            d loss / d input
and its metadata (string -> string) records the module's configuration.
Everything is regenerated on every run from fixed seeds; nothing is stored in the repo.
"""
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import attn_safetensors  # noqa: E402
from torch_export import Seq2Seq, causal, export  # noqa: E402

torch.set_num_threads(1)
OUT = sys.argv[1] if len(sys.argv) > 1 else "fixtures"
os.makedirs(OUT, exist_ok=True)
DTYPES = {"f32": torch.float32, "f64": torch.float64}


def save(name, tensors, meta):
    attn_safetensors.save(os.path.join(OUT, name + ".safetensors"), tensors,
                          {k: json.dumps(v) if not isinstance(v, str) else v for k, v in meta.items()})


def params_of(module, prefix="param."):
    return {prefix + k: v.detach().clone() for k, v in module.state_dict().items()}


def grads_of(module):
    return {"grad." + k: p.grad.detach().clone() for k, p in module.named_parameters() if p.grad is not None}


def padding(batch, length, pads):
    """Bool [batch, length], True on the last pads[b] positions of row b."""
    m = torch.zeros(batch, length, dtype=torch.bool)
    for b, n in enumerate(pads):
        if n:
            m[b, length - n:] = True
    return m


def mha_cases():
    D, H, B = 16, 4, 2
    for dname, dtype in DTYPES.items():
        for kind in ["self", "cross", "causal", "padding", "both"]:
            torch.manual_seed(10)
            mha = nn.MultiheadAttention(D, H, dropout=0.0, batch_first=True).to(dtype)
            with torch.no_grad():  # non-zero biases so that they are really compared
                mha.in_proj_bias.uniform_(-0.5, 0.5)
                mha.out_proj.bias.uniform_(-0.5, 0.5)
            tq = 5
            tk = 7 if kind == "cross" else 5
            q = torch.randn(B, tq, D, dtype=dtype, requires_grad=True)
            if kind == "cross":
                kv = torch.randn(B, tk, D, dtype=dtype, requires_grad=True)
                key = value = kv
            else:
                key = value = q
            attn_mask = causal(tq, tk) if kind in ("causal", "both") else None
            kpm = padding(B, tk, [0, 2]) if kind in ("padding", "both") else None
            out, weights = mha(q, key, value, attn_mask=attn_mask, key_padding_mask=kpm,
                               need_weights=True, average_attn_weights=False)
            W = torch.randn_like(out)
            (out * W).sum().backward()
            t = params_of(mha)
            t.update(grads_of(mha))
            t["in.query"] = q.detach()
            t["grad_in.query"] = q.grad.detach()
            if kind == "cross":
                t["in.key"] = kv.detach()
                t["grad_in.key"] = kv.grad.detach()
            if attn_mask is not None:
                t["in.attn_mask"] = attn_mask
            if kpm is not None:
                t["in.key_padding_mask"] = kpm
            t["in.grad_weight"] = W
            t["out.out"] = out.detach()
            t["out.weights"] = weights.detach()
            save(f"mha_{kind}_{dname}", t, {"d_model": D, "n_heads": H, "kind": kind})


def layer_cases():
    D, H, F_, B = 16, 4, 32, 2
    for dname, dtype in DTYPES.items():
        for norm_first in (False, True):
            for act in ("relu", "gelu"):
                tag = f"{'pre' if norm_first else 'post'}_{act}_{dname}"
                meta = {"d_model": D, "n_heads": H, "d_ff": F_, "norm_first": norm_first,
                        "activation": act, "norm_eps": 1e-5}
                # Encoder layer, padded batch (train mode with dropout 0: no fast path).
                torch.manual_seed(20)
                enc = nn.TransformerEncoderLayer(D, H, F_, dropout=0.0, activation=act,
                                                 batch_first=True, norm_first=norm_first).to(dtype)
                with torch.no_grad():
                    for name, p in enc.named_parameters():
                        if p.dim() == 1:
                            p.uniform_(-0.5, 0.5) if "bias" in name else p.uniform_(0.5, 1.5)
                x = torch.randn(B, 6, D, dtype=dtype, requires_grad=True)
                kpm = padding(B, 6, [0, 2])
                y = enc(x, src_key_padding_mask=kpm)
                W = torch.randn_like(y)
                (y * W).sum().backward()
                t = params_of(enc)
                t.update(grads_of(enc))
                t.update({"in.x": x.detach(), "in.key_padding_mask": kpm, "in.grad_weight": W,
                          "out.out": y.detach(), "grad_in.x": x.grad.detach()})
                save(f"enc_layer_{tag}", t, meta)

                # Decoder layer: causal self-attention, padding on both sides.
                torch.manual_seed(30)
                dec = nn.TransformerDecoderLayer(D, H, F_, dropout=0.0, activation=act,
                                                 batch_first=True, norm_first=norm_first).to(dtype)
                with torch.no_grad():
                    for name, p in dec.named_parameters():
                        if p.dim() == 1:
                            p.uniform_(-0.5, 0.5) if "bias" in name else p.uniform_(0.5, 1.5)
                tgt = torch.randn(B, 5, D, dtype=dtype, requires_grad=True)
                mem = torch.randn(B, 7, D, dtype=dtype, requires_grad=True)
                tkpm = padding(B, 5, [0, 1])
                mkpm = padding(B, 7, [2, 0])
                y = dec(tgt, mem, tgt_mask=causal(5, 5), tgt_key_padding_mask=tkpm,
                        memory_key_padding_mask=mkpm)
                W = torch.randn_like(y)
                (y * W).sum().backward()
                t = params_of(dec)
                t.update(grads_of(dec))
                t.update({"in.tgt": tgt.detach(), "in.memory": mem.detach(),
                          "in.tgt_key_padding_mask": tkpm, "in.memory_key_padding_mask": mkpm,
                          "in.grad_weight": W, "out.out": y.detach(),
                          "grad_in.tgt": tgt.grad.detach(), "grad_in.memory": mem.grad.detach()})
                save(f"dec_layer_{tag}", t, meta)


def transformer_cases():
    D, H, F_, V_SRC, V_TGT, PAD = 16, 4, 32, 11, 13, 0
    for dname, dtype in DTYPES.items():
        for norm_first in (False, True):
            for act in ("relu", "gelu"):
                if act == "gelu" and not norm_first:
                    continue
                torch.manual_seed(40)
                model = Seq2Seq(V_SRC, V_TGT, PAD, d_model=D, nhead=H, num_encoder_layers=2,
                                num_decoder_layers=2, dim_feedforward=F_, dropout=0.0,
                                activation=act, norm_first=norm_first).to(dtype)
                src = torch.tensor([[3, 4, 5, 6, 7, 8, 9], [5, 6, 7, 2, 0, 0, 0]])
                tgt_in = torch.tensor([[1, 9, 8, 7, 6, 5], [1, 4, 3, 2, 0, 0]])
                tgt_out = torch.tensor([[9, 8, 7, 6, 5, 2], [4, 3, 2, 2, 0, 0]])
                logits = model(src, tgt_in)
                loss = F.cross_entropy(logits.reshape(-1, V_TGT), tgt_out.reshape(-1),
                                       ignore_index=PAD, label_smoothing=0.1)
                loss.backward()
                t = params_of(model)
                t.update(grads_of(model))
                t.update({"in.src": src, "in.tgt_in": tgt_in, "in.tgt_out": tgt_out,
                          "out.logits": logits.detach(), "out.loss": loss.detach().reshape(())})
                meta = {"d_model": D, "n_heads": H, "d_ff": F_, "n_encoder_layers": 2,
                        "n_decoder_layers": 2, "src_vocab_size": V_SRC, "tgt_vocab_size": V_TGT,
                        "pad_id": PAD, "norm_first": norm_first, "activation": act,
                        "label_smoothing": 0.1}
                save(f"transformer_{'pre' if norm_first else 'post'}_{act}_{dname}", t, meta)


def op_cases():
    for dname, dtype in DTYPES.items():
        torch.manual_seed(50)
        x = torch.randn(4, 9, dtype=dtype) * 3
        w = torch.rand(9, dtype=dtype) + 0.5
        b = torch.randn(9, dtype=dtype)
        t = {"in.x": x, "in.w": w, "in.b": b,
             "out.softmax": torch.softmax(x, -1), "out.log_softmax": torch.log_softmax(x, -1),
             "out.gelu": F.gelu(x), "out.gelu_tanh": F.gelu(x, approximate="tanh"),
             "out.relu": F.relu(x), "out.silu": F.silu(x),
             "out.layer_norm": F.layer_norm(x, (9,), w, b, 1e-5)}
        # cross entropy with label smoothing and an ignored row, and its gradient
        logits = torch.randn(6, 5, dtype=dtype, requires_grad=True)
        targets = torch.tensor([1, 0, 4, -100, 2, 3])
        loss = F.cross_entropy(logits, targets, ignore_index=-100, label_smoothing=0.1)
        loss.backward()
        t.update({"in.logits": logits.detach(), "in.targets": targets,
                  "out.cross_entropy": loss.detach().reshape(()),
                  "grad_in.logits": logits.grad.detach()})
        save(f"ops_{dname}", t, {})


def adam_cases():
    """torch.optim.Adam (and AdamW) over 6 steps with given gradients and a varying lr."""
    for wd in (0.0, 0.01):
        for dname, dtype in DTYPES.items():
            torch.manual_seed(60)
            p1 = torch.randn(3, 4, dtype=dtype, requires_grad=True)
            p2 = torch.randn(5, dtype=dtype, requires_grad=True)
            t = {"in.p1": p1.detach().clone(), "in.p2": p2.detach().clone()}
            cls = torch.optim.AdamW if wd else torch.optim.Adam
            opt = cls([p1, p2], lr=1.0, betas=(0.9, 0.98), eps=1e-9, weight_decay=wd)
            lrs = [1e-3 * (k + 1) for k in range(6)]
            for k, lr in enumerate(lrs):
                for g in opt.param_groups:
                    g["lr"] = lr
                g1, g2 = torch.randn_like(p1), torch.randn_like(p2)
                p1.grad, p2.grad = g1, g2
                opt.step()
                t.update({f"in.step{k}.p1": g1, f"in.step{k}.p2": g2,
                          f"out.step{k}.p1": p1.detach().clone(), f"out.step{k}.p2": p2.detach().clone()})
            save(f"adam_wd{wd}_{dname}", t, {"lrs": lrs, "weight_decay": wd, "beta1": 0.9,
                                             "beta2": 0.98, "eps": 1e-9, "steps": len(lrs)})


def export_cases():
    """nn.Transformer models written by tools/torch_export.py as attn checkpoint folders
    (OUT/export_<name>/), with inputs and eval-mode logits in OUT/export_<name>.safetensors.
    The reference runs with grad enabled, which keeps PyTorch off its fused inference path."""
    variants = {
        "post_relu_f32": dict(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                          dim_feedforward=64, activation="relu", norm_first=False, vocab=(19, 23)),
        "pre_gelu_odd_f32": dict(d_model=24, nhead=6, num_encoder_layers=1, num_decoder_layers=3,
                             dim_feedforward=40, activation="gelu", norm_first=True, vocab=(7, 29)),
    }
    for name, v in variants.items():
        v = dict(v)
        src_vocab, tgt_vocab = v.pop("vocab")
        torch.manual_seed(70)
        model = Seq2Seq(src_vocab, tgt_vocab, 0, dropout=0.1, **v)
        model.encoder.enable_nested_tensor = False
        export(model, os.path.join(OUT, f"export_{name}"))
        model.eval()
        g = torch.Generator().manual_seed(71)
        src = torch.randint(3, src_vocab, (3, 9), generator=g)
        tgt = torch.randint(3, tgt_vocab, (3, 6), generator=g)
        src[1, 6:] = 0
        tgt[2, 4:] = 0
        tgt[:, 0] = 1
        logits = model(src, tgt)
        save(f"export_{name}", {"in.src": src, "in.tgt_in": tgt, "out.logits": logits.detach()}, {})


def param_count_case():
    block = nn.TransformerEncoderLayer(32, 4, 64, norm_first=True, batch_first=True)
    n = sum(p.numel() for p in block.parameters())
    save("param_count", {"param." + k: v for k, v in block.state_dict().items()},
         {"count": n, "d_model": 32, "n_heads": 4, "d_ff": 64})


if __name__ == "__main__":
    mha_cases()
    layer_cases()
    transformer_cases()
    op_cases()
    adam_cases()
    export_cases()
    param_count_case()
    print(f"wrote {len(os.listdir(OUT))} fixtures to {OUT} with torch {torch.__version__}")
