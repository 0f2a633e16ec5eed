#!/usr/bin/python3
"""Moves encoder-decoder Transformers between PyTorch and attn.

    torch_export.py export OUT_DIR [--d-model 512 --heads 8 ...]   a new random nn.Transformer
    torch_export.py roundtrip MODEL_DIR                             load into PyTorch, write back

Library use:
    model = Seq2Seq(src_vocab, tgt_vocab, pad_id, d_model=..., nhead=..., ...)  # an nn.Transformer
    export(model, "runs/m")          # config.json + model.safetensors that `attn` loads
    model = load("runs/m")           # an attn checkpoint as a PyTorch module

Seq2Seq subclasses torch.nn.Transformer, so its state_dict names are nn.Transformer's
("encoder.layers.0.self_attn.in_proj_weight", ..., "encoder.norm.weight") plus
"src_embedding.weight", "tgt_embedding.weight" and "generator.weight"/"generator.bias":
exactly the names of attn's EncoderDecoderModel (docs/checkpoint.md). Embeddings are
multiplied by sqrt(d_model) and sinusoidal positions are added, as in the paper.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attn_safetensors  # noqa: E402


def sinusoidal(length, d, dtype):
    """PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d))."""
    pe = torch.zeros(length, d, dtype=torch.float64)
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    i2 = torch.arange(0, d, 2, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos / torch.pow(10000.0, i2 / d))
    pe[:, 1::2] = torch.cos(pos / torch.pow(10000.0, i2[: d // 2] / d))
    return pe.to(dtype)


def causal(tq, tk):
    """Bool [tq, tk], True where query i may not see key j (bottom-right aligned)."""
    return torch.triu(torch.ones(tq, tk, dtype=torch.bool), diagonal=1 + tk - tq)


class Seq2Seq(nn.Transformer):
    """nn.Transformer with embeddings x sqrt(D), sinusoidal positions and an output layer."""

    def __init__(self, src_vocab, tgt_vocab, pad_id=0, **kw):
        kw.setdefault("batch_first", True)
        super().__init__(**kw)
        self.pad_id = pad_id
        self.activation_name = kw.get("activation", "relu")
        self.src_embedding = nn.Embedding(src_vocab, self.d_model)
        self.tgt_embedding = nn.Embedding(tgt_vocab, self.d_model)
        self.generator = nn.Linear(self.d_model, tgt_vocab)

    def embed(self, emb, ids):
        return emb(ids) * math.sqrt(self.d_model) + sinusoidal(ids.shape[1], self.d_model,
                                                               emb.weight.dtype)

    def forward(self, src, tgt):
        spm, tpm = src == self.pad_id, tgt == self.pad_id
        h = super().forward(self.embed(self.src_embedding, src), self.embed(self.tgt_embedding, tgt),
                            tgt_mask=causal(tgt.shape[1], tgt.shape[1]), src_key_padding_mask=spm,
                            tgt_key_padding_mask=tpm, memory_key_padding_mask=spm)
        return self.generator(h)

    def attn_config(self):
        enc = self.encoder.layers[0]
        return {
            "arch": "encoder_decoder",
            "d_model": self.d_model,
            "n_heads": self.nhead,
            "n_encoder_layers": len(self.encoder.layers),
            "n_decoder_layers": len(self.decoder.layers),
            "d_ff": enc.linear1.out_features,
            "dropout": enc.dropout.p,
            "attention_dropout": enc.self_attn.dropout,
            "activation": self.activation_name,
            "norm_first": enc.norm_first,
            "norm": "layer",
            "norm_eps": enc.norm1.eps,
            "final_norm": True,
            "positional": "sinusoidal",
            "src_vocab_size": self.src_embedding.num_embeddings,
            "tgt_vocab_size": self.tgt_embedding.num_embeddings,
            "share_embeddings": False,
            "tie_output": False,
            "scale_embeddings": True,
            "pad_id": self.pad_id,
            "dtype": "f64" if self.generator.weight.dtype == torch.float64 else "f32",
        }


def export(model, out_dir, extra_config=None):
    """Writes model as an attn checkpoint folder (config.json + model.safetensors)."""
    os.makedirs(out_dir, exist_ok=True)
    config = model.attn_config()
    config.update(extra_config or {})
    attn_safetensors.save(os.path.join(out_dir, "model.safetensors"), model.state_dict(),
                          {"format": "attn"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return config


# ModelConfig's defaults (include/attn/models/config.h, docs/checkpoint.md): attn reads an
# absent key as its default, so this reader must too (share_embeddings and tie_output default
# to true, scale_embeddings to true).
ATTN_DEFAULTS = {
    "arch": "encoder_decoder", "d_model": 512, "n_heads": 8, "n_encoder_layers": 6,
    "n_decoder_layers": 6, "d_ff": 2048, "dropout": 0.1, "attention_dropout": 0.1,
    "activation": "relu", "norm_first": False, "norm": "layer", "norm_eps": 1e-5,
    "final_norm": True, "positional": "sinusoidal", "max_len": 1024, "src_vocab_size": 37000,
    "tgt_vocab_size": 37000, "share_embeddings": True, "tie_output": True,
    "scale_embeddings": True, "pad_id": 0, "bos_id": 1, "eos_id": 2, "dtype": "f32", "seed": 0,
}


def load(model_dir):
    """Reads an attn encoder-decoder checkpoint into a Seq2Seq module."""
    with open(os.path.join(model_dir, "config.json")) as f:
        c = dict(ATTN_DEFAULTS, **json.load(f))
    if c["arch"] != "encoder_decoder":
        raise SystemExit(f"{model_dir}: only encoder_decoder checkpoints map to nn.Transformer")
    if c["share_embeddings"] or c["tie_output"] or c["positional"] != "sinusoidal" \
            or c["norm"] != "layer" or not c["final_norm"] or not c["scale_embeddings"]:
        raise SystemExit(f"{model_dir}: options outside nn.Transformer's (shared/tied embeddings, "
                         "non-sinusoidal positions, RMSNorm, no final norm or unscaled embeddings) "
                         "are not exported")
    act = c["activation"]
    if act not in ("relu", "gelu"):
        raise SystemExit(f"{model_dir}: activation {act} has no nn.Transformer equivalent")
    model = Seq2Seq(c["src_vocab_size"], c["tgt_vocab_size"], c["pad_id"],
                    d_model=c["d_model"], nhead=c["n_heads"],
                    num_encoder_layers=c["n_encoder_layers"], num_decoder_layers=c["n_decoder_layers"],
                    dim_feedforward=c["d_ff"], dropout=c["dropout"], activation=act,
                    layer_norm_eps=c["norm_eps"], norm_first=c["norm_first"])
    tensors, _ = attn_safetensors.load(os.path.join(model_dir, "model.safetensors"))
    if c["dtype"] == "f64":
        model = model.double()
    model.load_state_dict(tensors, strict=True)
    return model


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="write a new random nn.Transformer as an attn checkpoint")
    e.add_argument("out_dir")
    e.add_argument("--d-model", type=int, default=64)
    e.add_argument("--heads", type=int, default=4)
    e.add_argument("--encoder-layers", type=int, default=2)
    e.add_argument("--decoder-layers", type=int, default=2)
    e.add_argument("--d-ff", type=int, default=256)
    e.add_argument("--src-vocab", type=int, default=16)
    e.add_argument("--tgt-vocab", type=int, default=16)
    e.add_argument("--activation", choices=["relu", "gelu"], default="relu")
    e.add_argument("--norm-first", action="store_true")
    e.add_argument("--dropout", type=float, default=0.1)
    e.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("roundtrip", help="load an attn checkpoint into PyTorch and write it back")
    r.add_argument("model_dir")
    r.add_argument("out_dir")
    a = p.parse_args()
    if a.cmd == "export":
        torch.manual_seed(a.seed)
        m = Seq2Seq(a.src_vocab, a.tgt_vocab, 0, d_model=a.d_model, nhead=a.heads,
                    num_encoder_layers=a.encoder_layers, num_decoder_layers=a.decoder_layers,
                    dim_feedforward=a.d_ff, dropout=a.dropout, activation=a.activation,
                    norm_first=a.norm_first)
        export(m, a.out_dir)
        print(f"wrote {a.out_dir}")
    else:
        export(load(a.model_dir), a.out_dir)
        print(f"wrote {a.out_dir}")


if __name__ == "__main__":
    main()
