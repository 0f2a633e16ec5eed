// DecoderLayer and Decoder (paper §3.1): masked self-attention, attention over the encoder
// output, and FFN, each wrapped in a residual connection and a norm (post- or pre-norm).
#include "attn/nn/decoder.h"

#include "attn/ops/ops.h"

namespace attn::nn {

DecoderLayer::DecoderLayer(const LayerOptions& o, Rng& rng) : options_(o) {
  // Registration order gives nn.TransformerDecoderLayer's state_dict order.
  self_attn_ = register_module("self_attn", make_self_attention(o, rng));
  AttentionOptions cross;  // grouped K/V heads only: no positions, no causal mask over memory
  cross.n_kv_heads = o.attention.n_kv_heads;
  cross_attn_ = register_module(
      "multihead_attn",
      std::make_shared<MultiHeadAttention>(o.d_model, o.n_heads, o.attention_dropout, o.dtype, rng, cross));
  if (o.n_experts > 0) {
    moe_ = register_module("moe", make_moe(o, rng));
  } else {
    ff_ = std::make_shared<FeedForward>(o.d_model, o.d_ff, o.activation, o.dropout, o.dtype, rng);
    register_module("linear1", ff_->linear1());
    register_module("dropout", ff_->dropout());
    register_module("linear2", ff_->linear2());
  }
  norm1_ = register_module("norm1", make_norm(o.norm, o.d_model, o.norm_eps, o.dtype));
  norm2_ = register_module("norm2", make_norm(o.norm, o.d_model, o.norm_eps, o.dtype));
  norm3_ = register_module("norm3", make_norm(o.norm, o.d_model, o.norm_eps, o.dtype));
  dropout1_ = register_module("dropout1", std::make_shared<Dropout>(o.dropout, rng.next_u64()));
  dropout2_ = register_module("dropout2", std::make_shared<Dropout>(o.dropout, rng.next_u64()));
  dropout3_ = register_module("dropout3", std::make_shared<Dropout>(o.dropout, rng.next_u64()));
}

MultiHeadAttention& DecoderLayer::self_attn() {
  auto* mha = dynamic_cast<MultiHeadAttention*>(self_attn_.get());
  ATTN_CHECK(mha != nullptr, "DecoderLayer", "self_attn() is softmax attention; this layer has ",
             attention_kind_name(options_.attention_kind), " attention (use self_attention())");
  return *mha;
}

FeedForward& DecoderLayer::feed_forward() {
  ATTN_CHECK(ff_ != nullptr, "DecoderLayer", "this layer has a mixture of ", options_.n_experts,
             " experts instead of a dense FFN (use moe())");
  return *ff_;
}

Tensor DecoderLayer::ffn(const Tensor& x) { return moe_ ? moe_->forward(x) : ff_->forward(x); }

Tensor DecoderLayer::forward(const Tensor& x, const Tensor& memory, const AttentionMasks& self_masks,
                             const AttentionMasks& cross_masks) {
  const int64_t D = options_.d_model;
  ATTN_CHECK(x.dim() == 3 && x.size(2) == D, "DecoderLayer", "expected x [B, T, ", D, "], got ", x.str());
  ATTN_CHECK(memory.dim() == 3 && memory.size(2) == D && memory.size(0) == x.size(0), "DecoderLayer",
             "expected memory [", x.size(0), ", S, ", D, "], got ", memory.str());
  if (options_.norm_first) {
    Tensor h = norm1_->forward(x);                                                       // [B, T, D]
    Tensor out = dropout1_->add_to(x, self_attn_->forward(h, h, h, self_masks));         // [B, T, D]
    h = norm2_->forward(out);                                                            // [B, T, D]
    out = dropout2_->add_to(out, cross_attn_->forward(h, memory, memory, cross_masks));  // [B, T, D]
    h = norm3_->forward(out);                                                            // [B, T, D]
    return dropout3_->add_to(out, ffn(h));                                               // [B, T, D]
  }
  Tensor sa = self_attn_->forward(x, x, x, self_masks);                          // [B, T, D]
  Tensor out = norm1_->forward_residual(x, sa, *dropout1_);                      // [B, T, D]
  Tensor ca = cross_attn_->forward(out, memory, memory, cross_masks);            // [B, T, D]
  out = norm2_->forward_residual(out, ca, *dropout2_);                           // [B, T, D]
  Tensor ff = ffn(out);                                                          // [B, T, D]
  return norm3_->forward_residual(out, ff, *dropout3_);                          // [B, T, D]
}

Tensor DecoderLayer::forward_cached(const Tensor& x_t, LayerKV& cache, const Tensor& self_padding,
                                    const Tensor& memory_padding, const std::vector<int64_t>& row_sources,
                                    const Tensor& positions) {
  const int64_t D = options_.d_model;
  ATTN_CHECK(x_t.dim() == 3 && x_t.size(1) >= 1 && x_t.size(2) == D, "DecoderLayer",
             "expected the new positions x_t [N, T, ", D, "], got ", x_t.str());
  ATTN_CHECK(cache.cross.k.defined() && cache.cross.v.defined(), "DecoderLayer",
             "cached decoding needs the cross-attention K/V in the cache (Decoder::init_cache)");
  AttentionMasks self_masks;  // new position i sees every cached one, itself and the new ones before it
  self_masks.key_padding_mask = self_padding;
  self_masks.positions = positions;
  if (options_.norm_first) {
    Tensor h = norm1_->forward(x_t);                                                         // [N, T, D]
    Tensor out = dropout1_->add_to(x_t, self_attn_->forward_cached(h, cache.self, self_masks));  // [N, T, D]
    h = norm2_->forward(out);                                                                // [N, T, D]
    out = dropout2_->add_to(out, cross_attn_->forward_cached(h, cache.cross, memory_padding, row_sources));  // [N, T, D]
    h = norm3_->forward(out);                                                                // [N, T, D]
    return dropout3_->add_to(out, ffn(h));                                                   // [N, T, D]
  }
  Tensor sa = self_attn_->forward_cached(x_t, cache.self, self_masks);                              // [N, T, D]
  Tensor out = norm1_->forward_residual(x_t, sa, *dropout1_);                                       // [N, T, D]
  Tensor ca = cross_attn_->forward_cached(out, cache.cross, memory_padding, row_sources);           // [N, T, D]
  out = norm2_->forward_residual(out, ca, *dropout2_);                                              // [N, T, D]
  Tensor ff = ffn(out);                                                                             // [N, T, D]
  return norm3_->forward_residual(out, ff, *dropout3_);                                             // [N, T, D]
}

Decoder::Decoder(const LayerOptions& options, int64_t n_layers, bool final_norm, Rng& rng) {
  ATTN_CHECK(n_layers >= 0, "Decoder", "n_layers must be non-negative, got ", n_layers);
  auto list = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < n_layers; ++i) {
    layers_.push_back(std::make_shared<DecoderLayer>(options, rng));
    list->push_back(layers_.back());
  }
  if (final_norm)
    norm_ = register_module("norm", make_norm(options.norm, options.d_model, options.norm_eps, options.dtype));
}

Tensor Decoder::forward(const Tensor& x, const Tensor& memory, const AttentionMasks& self_masks,
                        const AttentionMasks& cross_masks) {
  Tensor h = x;  // [B, T, D]
  for (auto& layer : layers_) h = layer->forward(h, memory, self_masks, cross_masks);  // [B, T, D]
  if (norm_) h = norm_->forward(h);                                                    // [B, T, D]
  return h;
}

}  // namespace attn::nn

namespace attn::nn {

KVCache Decoder::init_cache(const Tensor& memory, const Tensor& memory_padding) {
  ATTN_CHECK(memory.defined() && memory.dim() == 3, "Decoder", "memory must be [N, S, D], got ",
             memory.defined() ? memory.str() : "undefined");
  ATTN_CHECK(!memory_padding.defined() ||
                 (memory_padding.dtype() == DType::Bool && memory_padding.shape() == (Shape{memory.size(0), memory.size(1)})),
             "Decoder", "memory_padding must be bool [", memory.size(0), ", ", memory.size(1), "], got ",
             memory_padding.str());
  KVCache cache(num_layers());
  for (int64_t i = 0; i < num_layers(); ++i) {
    LayerKV& l = cache.layer(i);
    l.cross = layer(i).multihead_attn().project_memory_kv(memory);  // k, v [N, H, S, Dh]
  }
  cache.set_memory_padding(memory_padding);
  return cache;
}

Tensor Decoder::forward_cached(const Tensor& x_t, KVCache& cache, const Tensor& positions) {
  ATTN_CHECK(cache.num_layers() == num_layers(), "Decoder", "the cache has ", cache.num_layers(),
             " layers, the decoder ", num_layers());
  ATTN_CHECK(x_t.dim() == 3, "Decoder", "expected the new positions x_t [N, T, D], got ", x_t.str());
  const int64_t T = x_t.size(1);
  // The positions the layers hold (all of them, or the last W under a sliding window) + the new ones.
  const int64_t held = num_layers() > 0 ? cache.layer(0).self.positions() : 0;
  ATTN_CHECK(cache.length() >= held + T, "Decoder", "append the new positions' target padding flags to the cache first");
  const Tensor self_padding = cache.self_padding_last(held + T);  // [N, T'+T] or undefined
  Tensor h = x_t;                                    // [N, T, D]
  for (int64_t i = 0; i < num_layers(); ++i)
    h = layer(i).forward_cached(h, cache.layer(i), self_padding, cache.memory_padding(), cache.row_sources(),
                                positions);  // [N, T, D]
  if (norm_) h = norm_->forward(h);  // [N, T, D]
  return h;
}

}  // namespace attn::nn
