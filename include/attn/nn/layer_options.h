// attn/nn/layer_options.h — the hyper-parameters shared by encoder and decoder layers
// (paper §3.1-3.3), grouped in one struct instead of a long argument list, plus the attention
// descendants (GQA, RoPE, ALiBi, sliding window) of the layers' attentions.
#pragma once

#include <cstdint>

#include "attn/core/dtype.h"
#include "attn/nn/attention.h"
#include "attn/nn/feed_forward.h"
#include "attn/nn/norm.h"

namespace attn::nn {

struct LayerOptions {
  int64_t d_model = 512;
  int64_t n_heads = 8;
  int64_t d_ff = 2048;
  double dropout = 0.1;            // on sublayer outputs and inside the FFN
  double attention_dropout = 0.1;  // on attention weights (PyTorch uses `dropout` for both)
  Activation activation = Activation::ReLU;  // or SwiGLU (gated; linear1 is then [2F, D])
  bool norm_first = false;         // false: the paper's post-norm; true: pre-norm
  NormKind norm = NormKind::Layer;
  double norm_eps = 1e-5;
  DType dtype = DType::F32;
  // Self-attention variants. Cross-attention (DecoderLayer::multihead_attn) takes only
  // n_kv_heads from here: it has no positions of its own and no causal mask.
  AttentionOptions attention;
};

}  // namespace attn::nn
