// The sublayer factories of LayerOptions: which self-attention a layer holds (softmax or
// linear) and its mixture-of-experts FFN. The layers themselves are in encoder.cpp/decoder.cpp.
#include "attn/nn/layer_options.h"

#include "attn/core/error.h"
#include "attn/nn/linear_attention.h"

namespace attn::nn {

const char* attention_kind_name(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::Softmax: return "softmax";
    case AttentionKind::Linear: return "linear";
  }
  return "?";
}

AttentionKind parse_attention_kind(const std::string& name) {
  if (name == "softmax") return AttentionKind::Softmax;
  if (name == "linear") return AttentionKind::Linear;
  fail("attention", "unknown attention '", name, "' (expected softmax or linear)");
}

std::shared_ptr<AttentionModule> make_self_attention(const LayerOptions& o, Rng& rng) {
  if (o.attention_kind == AttentionKind::Softmax)
    return std::make_shared<MultiHeadAttention>(o.d_model, o.n_heads, o.attention_dropout, o.dtype, rng, o.attention);
  const AttentionOptions& a = o.attention;
  ATTN_CHECK(!a.rope && !a.alibi && a.window == 0 && (a.n_kv_heads == 0 || a.n_kv_heads == o.n_heads),
             "make_self_attention", "linear attention supports none of rope, alibi, a sliding window or grouped ",
             "key/value heads; got rope ", a.rope, ", alibi ", a.alibi, ", window ", a.window, ", n_kv_heads ",
             a.n_kv_heads, " of ", o.n_heads);
  return std::make_shared<LinearAttention>(o.d_model, o.n_heads, o.dtype, rng);
}

std::shared_ptr<MixtureOfExperts> make_moe(const LayerOptions& o, Rng& rng) {
  MoEOptions m;
  m.d_model = o.d_model;
  m.d_ff = o.d_ff;
  m.n_experts = o.n_experts;
  m.top_k = o.expert_top_k;
  m.capacity_factor = o.expert_capacity_factor;
  m.activation = o.activation;
  m.dropout = o.dropout;
  m.dtype = o.dtype;
  return std::make_shared<MixtureOfExperts>(m, rng);
}

}  // namespace attn::nn
