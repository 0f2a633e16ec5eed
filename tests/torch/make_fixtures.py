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


# ---- GPT-2: a Hugging Face-style folder and PyTorch's forward over its tensors ---------------

def gpt2_bytes_to_unicode():
    """OpenAI's bytes_to_unicode: printable bytes map to themselves, the other 68 to U+0100...."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


GPT2_MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ s", "r e", "a t", "e n", "Ġ w", "o r",
               "i s", "Ġ o", "l l", "Ġ he", "Ġ c", "a n", "e d", "Ġc at", "Ġ h", "Ġh i", "Ġhi ll"]


def gpt2_vocab():
    """256 byte tokens (in byte order), one token per merge, then <|endoftext|>."""
    byte_map = gpt2_bytes_to_unicode()
    vocab = {byte_map[b]: b for b in range(256)}
    for m in GPT2_MERGES:
        vocab.setdefault(m.replace(" ", ""), len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    return vocab


def gpt2_encode_ascii(text, vocab):
    """GPT-2 BPE for lowercase ASCII words separated by single spaces (there the pattern's
    pieces are just ' ?[a-z]+'): each piece's bytes merged by lowest rank, as encoder.py."""
    import re
    byte_map = gpt2_bytes_to_unicode()
    ranks = {tuple(m.split(" ")): r for r, m in enumerate(GPT2_MERGES)}
    assert re.fullmatch(r"[a-z]+( [a-z]+)*", text)
    ids = []
    for piece in re.findall(r" ?[a-z]+", text):
        word = [byte_map[b] for b in piece.encode()]
        while len(word) > 1:
            pairs = [(ranks.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(word, word[1:]))]
            rank, _ = min(pairs)
            if rank == 1 << 30:
                break
            a, b = GPT2_MERGES[rank].split(" ")
            merged, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        ids += [vocab[w] for w in word]
    return ids


def gpt2_forward(sd, cfg, ids):
    """GPT2LMHeadModel's forward in eval mode over Hugging Face's tensor names; Conv1D is
    y = x W + b with W [in, out] (addmm, as transformers.pytorch_utils.Conv1D)."""
    import math
    D, H, L, eps = cfg["n_embd"], cfg["n_head"], cfg["n_layer"], cfg["layer_norm_epsilon"]
    B, T = ids.shape
    Dh = D // H

    def conv1d(x, name):
        y = torch.addmm(sd[name + ".bias"], x.reshape(-1, x.shape[-1]), sd[name + ".weight"])
        return y.view(*x.shape[:-1], -1)

    def ln(x, name):
        return F.layer_norm(x, (D,), sd[name + ".weight"], sd[name + ".bias"], eps)

    def gelu_new(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    keep = torch.tril(torch.ones(T, T, dtype=torch.bool))  # HF's causal "bias" buffer
    x = sd["wte.weight"][ids] + sd["wpe.weight"][torch.arange(T)]
    for layer in range(L):
        p = f"h.{layer}."
        q, k, v = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn").split(D, dim=2)
        q, k, v = (t.view(B, T, H, Dh).transpose(1, 2) for t in (q, k, v))
        w = (q @ k.transpose(-1, -2)) / math.sqrt(Dh)
        w = torch.where(keep, w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        a = (torch.softmax(w, dim=-1) @ v).transpose(1, 2).reshape(B, T, D)
        x = x + conv1d(a, p + "attn.c_proj")
        x = x + conv1d(gelu_new(conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    return ln(x, "ln_f") @ sd["wte.weight"].T  # lm_head tied to wte


def gpt2_greedy(sd, cfg, prompt, steps):
    """Greedy continuation, recomputing the whole prefix each step. Fails when the top two
    logits of a step are within 1e-3 (a near tie that rounding could flip)."""
    seq = prompt.clone()
    for _ in range(steps):
        last = gpt2_forward(sd, cfg, seq)[:, -1]
        top = torch.topk(last, 2, dim=-1).values
        assert (top[:, 0] - top[:, 1]).min() > 1e-3, "near tie in the greedy fixture; change the seed"
        seq = torch.cat([seq, last.argmax(-1, keepdim=True)], dim=1)
    return seq


def gpt2_cases():
    """A random small GPT-2 saved as a Hugging Face folder OUT/gpt2_small (config.json with the
    usual extra keys, model.safetensors under HF names with the old mask buffers, vocab.json,
    merges.txt), and gpt2_small_{f32,f64}.safetensors with PyTorch's logits and greedy
    continuations in each dtype (the f64 case upcasts the stored f32 weights)."""
    vocab = gpt2_vocab()
    V = len(vocab)
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
           "n_embd": 32, "n_head": 4, "n_layer": 2, "n_inner": None, "n_positions": 24, "n_ctx": 24,
           "vocab_size": V, "layer_norm_epsilon": 1e-5, "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1,
           "bos_token_id": vocab["<|endoftext|>"], "eos_token_id": vocab["<|endoftext|>"],
           "initializer_range": 0.02, "summary_type": "cls_index", "use_cache": True,
           "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}}}
    D, L, P, Fdim = cfg["n_embd"], cfg["n_layer"], cfg["n_positions"], 4 * cfg["n_embd"]
    torch.manual_seed(90)

    def rand(*shape, std=0.3, mean=0.0):
        return torch.randn(*shape) * std + mean

    sd = {"wte.weight": rand(V, D, std=0.5), "wpe.weight": rand(P, D, std=0.2)}
    for layer in range(L):
        p = f"h.{layer}."
        sd.update({p + "ln_1.weight": rand(D, std=0.1, mean=1.0), p + "ln_1.bias": rand(D, std=0.1),
                   p + "attn.c_attn.weight": rand(D, 3 * D), p + "attn.c_attn.bias": rand(3 * D, std=0.1),
                   p + "attn.c_proj.weight": rand(D, D), p + "attn.c_proj.bias": rand(D, std=0.1),
                   p + "ln_2.weight": rand(D, std=0.1, mean=1.0), p + "ln_2.bias": rand(D, std=0.1),
                   p + "mlp.c_fc.weight": rand(D, Fdim), p + "mlp.c_fc.bias": rand(Fdim, std=0.1),
                   p + "mlp.c_proj.weight": rand(Fdim, D, std=0.15), p + "mlp.c_proj.bias": rand(D, std=0.1)})
    sd.update({"ln_f.weight": rand(D, std=0.1, mean=1.0), "ln_f.bias": rand(D, std=0.1)})

    folder = os.path.join(OUT, "gpt2_small")
    os.makedirs(folder, exist_ok=True)
    stored = dict(sd)
    for layer in range(L):  # the causal-mask buffers older checkpoints carry
        stored[f"h.{layer}.attn.bias"] = torch.tril(torch.ones(P, P, dtype=torch.bool)).view(1, 1, P, P)
    attn_safetensors.save(os.path.join(folder, "model.safetensors"), stored, {"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(GPT2_MERGES) + "\n")

    g = torch.Generator().manual_seed(91)
    ids = torch.randint(0, V, (2, 9), generator=g)
    prompt_text = "the cat is on the hill"
    prompt = torch.tensor([gpt2_encode_ascii(prompt_text, vocab)])
    steps = P - prompt.shape[1]
    for dname, dtype in DTYPES.items():
        sdt = {k: v.to(dtype) for k, v in sd.items()}
        with torch.no_grad():
            logits = gpt2_forward(sdt, cfg, ids)
            greedy = gpt2_greedy(sdt, cfg, prompt, steps)
        save(f"gpt2_small_{dname}", {"in.ids": ids, "in.prompt": prompt, "out.logits": logits, "out.greedy": greedy},
             {"folder": "gpt2_small", "prompt_text": prompt_text, "steps": steps})


# ---- fine-tuning (issue 21): the SFT response-only loss and DPO on the small GPT-2 -------------

def finetune_cases():
    """The small GPT-2 of gpt2_cases (run first) as the policy and a perturbed copy saved as a
    second Hugging Face folder OUT/gpt2_small_ref as DPO's reference. Three (prompt, chosen,
    rejected) id triples; GPT-2 rows are prompt + response with no <bos>, each response closed by
    <|endoftext|>. Written from the formulas:
        sft_loss = sum over response positions (and <eos>) of -log p / their count
        log pi(y) = sum of log p over y's tokens and <eos>, given the prompt
        dpo_loss = mean of -log sigmoid(beta ((pi(c) - ref(c)) - (pi(r) - ref(r))))
    finetune_gpt2_{f32,f64}.safetensors hold the ids, both losses, the four log-probability
    vectors and the gradients of each loss under Hugging Face's names (grad_sft.*, grad_dpo.*)."""
    import shutil
    src = os.path.join(OUT, "gpt2_small")
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    sd = {k: v for k, v in attn_safetensors.load(os.path.join(src, "model.safetensors"))[0].items()
          if not k.endswith(".attn.bias")}
    V, eot = cfg["vocab_size"], cfg["eos_token_id"]
    torch.manual_seed(92)
    ref_sd = {k: v + 0.05 * torch.randn_like(v) for k, v in sd.items()}
    ref_dir = os.path.join(OUT, "gpt2_small_ref")
    os.makedirs(ref_dir, exist_ok=True)
    attn_safetensors.save(os.path.join(ref_dir, "model.safetensors"), ref_sd, {"format": "pt"})
    for name in ("config.json", "vocab.json", "merges.txt"):
        shutil.copy(os.path.join(src, name), os.path.join(ref_dir, name))

    g = torch.Generator().manual_seed(93)
    def ids(n):
        return torch.randint(0, V - 1, (n,), generator=g)  # never <|endoftext|>
    triples = [(ids(3), ids(4), ids(2)), (ids(5), ids(1), ids(3)), (ids(1), ids(2), ids(5))]
    beta = 0.5

    def logp(weights, prompt, response):
        """log p(response <eos> | prompt) and the response positions' count."""
        row = torch.cat([prompt, response])
        target = torch.cat([row[1:], torch.tensor([eot])])
        logits = gpt2_forward(weights, cfg, row[None])[0]
        lp = torch.log_softmax(logits, dim=-1).gather(1, target[:, None])[:, 0]
        return lp[len(prompt) - 1:].sum(), len(response) + 1

    for dname, dtype in DTYPES.items():
        pol = {k: v.to(dtype).clone().requires_grad_(True) for k, v in sd.items()}
        ref = {k: v.to(dtype) for k, v in ref_sd.items()}
        total, count = 0, 0
        for p, c, _ in triples:
            s, n = logp(pol, p, c)
            total, count = total - s, count + n
        sft_loss = total / count
        sft_loss.backward()
        grad_sft = {"grad_sft." + k: v.grad.detach().clone() for k, v in pol.items()}
        for v in pol.values():
            v.grad = None
        pc = torch.stack([logp(pol, p, c)[0] for p, c, _ in triples])
        pr = torch.stack([logp(pol, p, r)[0] for p, _, r in triples])
        with torch.no_grad():
            rc = torch.stack([logp(ref, p, c)[0] for p, c, _ in triples])
            rr = torch.stack([logp(ref, p, r)[0] for p, _, r in triples])
        dpo = -F.logsigmoid(beta * ((pc - rc) - (pr - rr))).mean()
        dpo.backward()
        grad_dpo = {"grad_dpo." + k: v.grad.detach().clone() for k, v in pol.items()}
        t = {"out.sft_loss": sft_loss.detach().reshape(1), "out.dpo_loss": dpo.detach().reshape(1),
             "out.policy_chosen": pc.detach(), "out.policy_rejected": pr.detach(),
             "out.ref_chosen": rc, "out.ref_rejected": rr, **grad_sft, **grad_dpo}
        for k, (p, c, r) in enumerate(triples):
            t.update({f"in.prompt{k}": p, f"in.chosen{k}": c, f"in.rejected{k}": r})
        save(f"finetune_gpt2_{dname}", t, {"folder": "gpt2_small", "ref_folder": "gpt2_small_ref", "beta": beta,
                                           "pairs": len(triples)})


# ---- the descendants (issue 5): RoPE, ALiBi, grouped-query attention, sliding window, SwiGLU,
# RMSNorm, pre-norm; written here from their papers' formulas with plain torch ops -------------

def rope_interleaved_ref(x, pos, theta):
    """RoPE on pairs (2i, 2i+1), as complex multiplication (Meta's LLaMA reference code):
    x [B, H, T, Dh], pos [B, T]."""
    Dh = x.shape[-1]
    freqs = 1.0 / (theta ** (torch.arange(0, Dh, 2, dtype=torch.float64) / Dh))
    angles = pos.to(torch.float64)[:, None, :, None] * freqs  # [B, 1, T, Dh/2]
    rot = torch.polar(torch.ones_like(angles), angles)
    xc = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], Dh // 2, 2).contiguous())
    return torch.view_as_real(xc * rot).reshape(x.shape).to(x.dtype)


def rope_half_ref(x, pos, theta):
    """RoPE on pairs (i, i + Dh/2), as Hugging Face's rotate_half: x cos + rotate_half(x) sin."""
    Dh = x.shape[-1]
    freqs = 1.0 / (theta ** (torch.arange(0, Dh, 2, dtype=torch.float64) / Dh))
    angles = pos.to(torch.float64)[:, None, :, None] * freqs
    emb = torch.cat([angles, angles], dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., : Dh // 2], x[..., Dh // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def alibi_slopes_ref(n):
    """The ALiBi paper's get_slopes (ofirpress/attention_with_linear_biases)."""
    import math

    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + alibi_slopes_ref(2 * closest)[0::2][: n - closest]


def attention_ref(q, k, v, causal=False, window=0, slopes=None, kpm=None):
    """softmax(q k^T / sqrt(Dh) + bias) v with K/V heads repeated for grouped-query attention,
    bottom-right causal alignment, a sliding window and ALiBi's -m |i' - j|."""
    H, Hkv, Tq, Tk = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    i = torch.arange(Tq)[:, None] + (Tk - Tq)
    j = torch.arange(Tk)[None, :]
    if slopes is not None:
        m = torch.tensor(slopes, dtype=q.dtype)[:, None, None]
        s = s - m * (i - j).abs().to(q.dtype)
    masked = torch.zeros(Tq, Tk, dtype=torch.bool)
    if causal:
        masked = masked | (j > i)
    if window:
        masked = masked | (j <= i - window)
    s = s.masked_fill(masked, float("-inf"))
    if kpm is not None:
        s = s.masked_fill(kpm[:, None, None, :], float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def rope_cases():
    B, H, T, Dh = 2, 3, 5, 8
    for dname, dtype in DTYPES.items():
        for pairing, ref in (("interleaved", rope_interleaved_ref), ("half", rope_half_ref)):
            torch.manual_seed(80)
            x = torch.randn(B, H, T, Dh, dtype=dtype, requires_grad=True)
            pos = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 52, 1000]])
            y = ref(x, pos, 10000.0)
            W = torch.randn_like(y)
            (y * W).sum().backward()
            save(f"rope_{pairing}_{dname}", {"in.x": x.detach(), "in.positions": pos, "in.grad_weight": W,
                                            "out.out": y.detach(), "grad_in.x": x.grad.detach()},
                 {"theta": 10000.0, "pairing": pairing})


def alibi_gqa_cases():
    """Attention with ALiBi (6 heads: not a power of two), 2 K/V heads, causal and bottom-right
    (Tq < Tk), key padding, and a sliding window variant; the slopes themselves."""
    B, H, Hkv, Tq, Tk, Dh = 2, 6, 2, 4, 7, 4
    for dname, dtype in DTYPES.items():
        for window in (0, 3):
            torch.manual_seed(81)
            q = torch.randn(B, H, Tq, Dh, dtype=dtype, requires_grad=True)
            k = torch.randn(B, Hkv, Tk, Dh, dtype=dtype, requires_grad=True)
            v = torch.randn(B, Hkv, Tk, Dh, dtype=dtype, requires_grad=True)
            kpm = padding(B, Tk, [0, 2])
            kpm[1] = torch.tensor([0, 1, 0, 0, 0, 0, 0], dtype=torch.bool)
            slopes = alibi_slopes_ref(H)
            y = attention_ref(q, k, v, causal=True, window=window, slopes=slopes, kpm=kpm)
            W = torch.randn_like(y)
            (y * W).sum().backward()
            save(f"alibi_gqa_w{window}_{dname}",
                 {"in.q": q.detach(), "in.k": k.detach(), "in.v": v.detach(), "in.key_padding_mask": kpm,
                  "in.grad_weight": W, "out.out": y.detach(), "out.slopes": torch.tensor(slopes, dtype=torch.float64),
                  "grad_in.q": q.grad.detach(), "grad_in.k": k.grad.detach(), "grad_in.v": v.grad.detach()},
                 {"window": window, "n_heads": H, "n_kv_heads": Hkv})
    for n in (1, 3, 5, 8, 12, 20):
        save(f"alibi_slopes_{n}_f64", {"out.slopes": torch.tensor(alibi_slopes_ref(n), dtype=torch.float64)}, {"n": n})


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight (torch 2.4's nn.RMSNorm, written out)."""

    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class VariantSelfAttention(nn.Module):
    """Causal self-attention with packed in_proj [D + 2 Hkv Dh, D] (q rows, then k, then v),
    RoPE or ALiBi, grouped K/V heads and a sliding window; attn's state_dict names."""

    def __init__(self, D, H, Hkv, positional, pairing, theta, window):
        super().__init__()
        self.D, self.H, self.Hkv, self.Dh = D, H, Hkv, D // H
        self.positional, self.pairing, self.theta, self.window = positional, pairing, theta, window
        rows = D + 2 * Hkv * self.Dh
        self.in_proj_weight = nn.Parameter(torch.randn(rows, D) / D ** 0.5)
        self.in_proj_bias = nn.Parameter(torch.randn(rows) * 0.3)
        self.out_proj = nn.Linear(D, D)

    def forward(self, x, kpm):
        B, T, _ = x.shape
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
        kv = self.Hkv * self.Dh
        q, k, v = qkv[..., : self.D], qkv[..., self.D: self.D + kv], qkv[..., self.D + kv:]
        q = q.view(B, T, self.H, self.Dh).transpose(1, 2)
        k = k.view(B, T, self.Hkv, self.Dh).transpose(1, 2)
        v = v.view(B, T, self.Hkv, self.Dh).transpose(1, 2)
        slopes = None
        if self.positional == "rope":
            pos = torch.arange(T)[None, :].expand(B, T)
            ref = rope_half_ref if self.pairing == "half" else rope_interleaved_ref
            q, k = ref(q, pos, self.theta), ref(k, pos, self.theta)
        elif self.positional == "alibi":
            slopes = alibi_slopes_ref(self.H)
        o = attention_ref(q, k, v, causal=True, window=self.window, slopes=slopes, kpm=kpm)
        return self.out_proj(o.transpose(1, 2).reshape(B, T, self.D))


class VariantBlock(nn.Module):
    """attn's EncoderLayer used as a causal block: post-norm or pre-norm residuals around the
    attention above and an FFN (relu/gelu, or SwiGLU with linear1 = [gate; up] [2F, D])."""

    def __init__(self, D, H, Hkv, F_, act, norm, norm_first, positional, pairing, theta, window, eps):
        super().__init__()
        self.self_attn = VariantSelfAttention(D, H, Hkv, positional, pairing, theta, window)
        self.linear1 = nn.Linear(D, 2 * F_ if act == "swiglu" else F_)
        self.linear2 = nn.Linear(F_, D)
        make = (lambda: RMSNorm(D, eps)) if norm == "rms" else (lambda: nn.LayerNorm(D, eps=eps))
        self.norm1, self.norm2 = make(), make()
        self.act, self.norm_first = act, norm_first

    def ffn(self, x):
        h = self.linear1(x)
        if self.act == "swiglu":
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.relu(h) if self.act == "relu" else F.gelu(h)
        return self.linear2(h)

    def forward(self, x, kpm):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), kpm)
            return x + self.ffn(self.norm2(x))
        x = self.norm1(x + self.self_attn(x, kpm))
        return self.norm2(x + self.ffn(x))


def variant_block_cases():
    D, H, F_, B, T = 16, 4, 24, 2, 7
    variants = {
        "llama": dict(Hkv=2, act="swiglu", norm="rms", norm_first=True, positional="rope", pairing="half",
                      theta=10000.0, window=0),
        "rope_interleaved": dict(Hkv=4, act="gelu", norm="layer", norm_first=False, positional="rope",
                                 pairing="interleaved", theta=500.0, window=0),
        "alibi_mqa_window": dict(Hkv=1, act="relu", norm="layer", norm_first=True, positional="alibi",
                                 pairing="interleaved", theta=10000.0, window=3),
        "gqa_swiglu_window": dict(Hkv=2, act="swiglu", norm="rms", norm_first=False, positional="none",
                                  pairing="interleaved", theta=10000.0, window=4),
    }
    for name, v in variants.items():
        for dname, dtype in DTYPES.items():
            torch.manual_seed(82)
            block = VariantBlock(D, H, F_=F_, eps=1e-5, **v).to(dtype)
            with torch.no_grad():
                for pname, p in block.named_parameters():
                    if "norm" in pname:
                        p.uniform_(0.5, 1.5) if "weight" in pname else p.uniform_(-0.5, 0.5)
            x = torch.randn(B, T, D, dtype=dtype, requires_grad=True)
            kpm = padding(B, T, [0, 2])
            y = block(x, kpm)
            W = torch.randn_like(y)
            (y * W).sum().backward()
            t = params_of(block)
            t.update(grads_of(block))
            t.update({"in.x": x.detach(), "in.key_padding_mask": kpm, "in.grad_weight": W,
                      "out.out": y.detach(), "grad_in.x": x.grad.detach()})
            meta = {"d_model": D, "n_heads": H, "d_ff": F_, "norm_eps": 1e-5, **v}
            save(f"variant_block_{name}_{dname}", t, meta)


def bf16_round(t):
    """bf16(t) as float64: through float32, rounded to nearest even (attn's bf16_from_float)."""
    return t.float().bfloat16().double()


class Bf16Linear(torch.autograd.Function):
    """attn's linear under --precision bf16, in float64: both operands of each of the three
    products rounded to bf16 (x W^T forward; dy W and dy^T x backward), exact float64 sums;
    the bias and its gradient untouched."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        ctx.has_bias = b is not None
        y = bf16_round(x) @ bf16_round(w).t()
        return y + b if b is not None else y

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gx = bf16_round(g) @ bf16_round(w)
        g2, x2 = g.reshape(-1, g.shape[-1]), x.reshape(-1, x.shape[-1])
        gw = bf16_round(g2).t() @ bf16_round(x2)
        gb = g2.sum(0) if ctx.has_bias else None
        return gx, gw, gb


def bf16_cases():
    """One encoder layer's forward and backward (the gradients of a training step) in bf16 mixed
    precision, two ways: torch.autocast("cpu", dtype=torch.bfloat16) on float32, and attn's
    scheme emulated in float64 (Bf16Linear in place of F.linear: bf16 operands in every linear's
    three products, everything else, attention's own products included, in float64)."""
    D, H, F_, B, T = 64, 4, 256, 2, 10
    torch.manual_seed(60)
    enc = nn.TransformerEncoderLayer(D, H, F_, dropout=0.0, activation="gelu", batch_first=True)
    with torch.no_grad():
        for name, p in enc.named_parameters():
            if p.dim() == 1:
                p.uniform_(-0.5, 0.5) if "bias" in name else p.uniform_(0.5, 1.5)
    x = torch.randn(B, T, D)
    kpm = padding(B, T, [0, 3])
    W = torch.randn(B, T, D)
    t = params_of(enc)
    t.update({"in.x": x, "in.key_padding_mask": kpm, "in.grad_weight": W})

    xa = x.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = enc(xa, src_key_padding_mask=kpm)
    (y.float() * W).sum().backward()
    t.update({"out.autocast": y.detach().float(), "grad_in.autocast": xa.grad.detach()})
    t.update({"grad_autocast." + k: p.grad.detach().clone() for k, p in enc.named_parameters()})
    enc.zero_grad()

    enc64 = enc.double()
    xe = x.double().requires_grad_(True)
    plain = F.linear
    F.linear = lambda inp, w, b=None: Bf16Linear.apply(inp, w, b)
    try:
        y = enc64(xe, src_key_padding_mask=kpm)
    finally:
        F.linear = plain
    (y * W.double()).sum().backward()
    t.update({"out.emulated": y.detach().float(), "grad_in.emulated": xe.grad.detach().float()})
    t.update({"grad_emulated." + k: p.grad.detach().float() for k, p in enc64.named_parameters()})
    save("bf16_enc_layer_f32", t, {"d_model": D, "n_heads": H, "d_ff": F_, "norm_first": False,
                                   "activation": "gelu", "norm_eps": 1e-5})


if __name__ == "__main__":
    mha_cases()
    layer_cases()
    transformer_cases()
    op_cases()
    adam_cases()
    export_cases()
    param_count_case()
    rope_cases()
    alibi_gqa_cases()
    variant_block_cases()
    gpt2_cases()
    finetune_cases()
    bf16_cases()
    print(f"wrote {len(os.listdir(OUT))} fixtures to {OUT} with torch {torch.__version__}")
