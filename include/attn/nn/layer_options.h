// attn/nn/layer_options.h — the hyper-parameters shared by encoder and decoder layers
// (paper §3.1-3.3), grouped in one struct instead of a long argument list, plus the attention
// descendants (GQA, RoPE, ALiBi, sliding window, linear attention) of the layers'
// self-attentions and the mixture-of-experts FFN that can replace the paper's dense one.
// The layers build their sublayers through make_self_attention and make_moe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "attn/core/dtype.h"
#include "attn/core/rng.h"
#include "attn/nn/attention.h"
#include "attn/nn/feed_forward.h"
#include "attn/nn/moe.h"
#include "attn/nn/norm.h"

namespace attn::nn {

// Softmax: the paper's scaled dot-product attention (MultiHeadAttention, with every option of
// AttentionOptions). Linear: elu+1 kernel attention (LinearAttention): no attention dropout, no
// weights to capture, and none of rope, alibi, window or grouped key/value heads.
enum class AttentionKind { Softmax, Linear };
// "softmax" / "linear", and back (an unknown name is an error).
const char* attention_kind_name(AttentionKind kind);
AttentionKind parse_attention_kind(const std::string& name);

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
  // Self-attention variants. Cross-attention (DecoderLayer::multihead_attn) is always softmax
  // attention and takes only n_kv_heads from here: it has no positions of its own and no
  // causal mask.
  AttentionOptions attention;
  AttentionKind attention_kind = AttentionKind::Softmax;
  // Mixture of experts in place of the FFN: n_experts > 0 experts of width d_ff each (the
  // layer's child "moe"), expert_top_k per token, capacity as MoEOptions::capacity_factor.
  int64_t n_experts = 0;
  int64_t expert_top_k = 2;
  double expert_capacity_factor = 0.0;
};

// The layer's self-attention: MultiHeadAttention(d_model, n_heads, attention_dropout, dtype,
// attention) or LinearAttention(d_model, n_heads, dtype); the latter rejects the options it
// does not implement (rope, alibi, window, n_kv_heads below n_heads).
std::shared_ptr<AttentionModule> make_self_attention(const LayerOptions& options, Rng& rng);
// The MoE FFN of a layer with n_experts > 0 (activation, dropout, dtype from the options).
std::shared_ptr<MixtureOfExperts> make_moe(const LayerOptions& options, Rng& rng);

}  // namespace attn::nn
