// EncoderLayer and Encoder (paper §3.1): self-attention and FFN sublayers, each wrapped in a
// residual connection and a norm, post-norm (the paper) or pre-norm; and the cached causal path
// of a GPT block, where only the self-attention differs (it reads and grows the KV cache).
#include "attn/nn/encoder.h"

#include "attn/ops/ops.h"

namespace attn::nn {

EncoderLayer::EncoderLayer(const LayerOptions& o, Rng& rng) : options_(o) {
  // Registration order gives nn.TransformerEncoderLayer's state_dict order.
  self_attn_ = register_module("self_attn", make_self_attention(o, rng));
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
  dropout1_ = register_module("dropout1", std::make_shared<Dropout>(o.dropout, rng.next_u64()));
  dropout2_ = register_module("dropout2", std::make_shared<Dropout>(o.dropout, rng.next_u64()));
}

MultiHeadAttention& EncoderLayer::self_attn() {
  auto* mha = dynamic_cast<MultiHeadAttention*>(self_attn_.get());
  ATTN_CHECK(mha != nullptr, "EncoderLayer", "self_attn() is softmax attention; this layer has ",
             attention_kind_name(options_.attention_kind), " attention (use self_attention())");
  return *mha;
}

FeedForward& EncoderLayer::feed_forward() {
  ATTN_CHECK(ff_ != nullptr, "EncoderLayer", "this layer has a mixture of ", options_.n_experts,
             " experts instead of a dense FFN (use moe())");
  return *ff_;
}

Tensor EncoderLayer::ffn(const Tensor& x) { return moe_ ? moe_->forward(x) : ff_->forward(x); }

Tensor EncoderLayer::forward(const Tensor& x, const AttentionMasks& masks) {
  ATTN_CHECK(x.dim() == 3 && x.size(2) == options_.d_model, "EncoderLayer", "expected x [B, T, ",
             options_.d_model, "], got ", x.str());
  if (options_.norm_first) {
    Tensor h = norm1_->forward(x);                                           // [B, T, D]
    Tensor out = dropout1_->add_to(x, self_attn_->forward(h, h, h, masks));  // [B, T, D]
    Tensor h2 = norm2_->forward(out);                                        // [B, T, D]
    return dropout2_->add_to(out, ffn(h2));                                  // [B, T, D]
  }
  Tensor sa = self_attn_->forward(x, x, x, masks);                           // [B, T, D]
  Tensor out = norm1_->forward_residual(x, sa, *dropout1_);                  // [B, T, D]
  Tensor ff = ffn(out);                                                      // [B, T, D]
  return norm2_->forward_residual(out, ff, *dropout2_);                      // [B, T, D]
}

Tensor EncoderLayer::forward_cached(const Tensor& x, LayerKV& kv, const AttentionMasks& masks) {
  ATTN_CHECK(x.dim() == 3 && x.size(2) == options_.d_model, "EncoderLayer", "expected x [N, T, ",
             options_.d_model, "], got ", x.str());
  auto attend = [&](const Tensor& h) { return self_attn_->forward_cached(h, kv.self, masks); };
  if (options_.norm_first) {
    Tensor out = dropout1_->add_to(x, attend(norm1_->forward(x)));  // [N, T, D]
    return dropout2_->add_to(out, ffn(norm2_->forward(out)));       // [N, T, D]
  }
  Tensor out = norm1_->forward_residual(x, attend(x), *dropout1_);  // [N, T, D]
  return norm2_->forward_residual(out, ffn(out), *dropout2_);       // [N, T, D]
}

Encoder::Encoder(const LayerOptions& options, int64_t n_layers, bool final_norm, Rng& rng) {
  ATTN_CHECK(n_layers >= 0, "Encoder", "n_layers must be non-negative, got ", n_layers);
  auto list = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < n_layers; ++i) {
    layers_.push_back(std::make_shared<EncoderLayer>(options, rng));
    list->push_back(layers_.back());
  }
  if (final_norm)
    norm_ = register_module("norm", make_norm(options.norm, options.d_model, options.norm_eps, options.dtype));
}

Tensor Encoder::forward(const Tensor& x, const AttentionMasks& masks) {
  Tensor h = x;  // [B, S, D]
  for (auto& layer : layers_) h = layer->forward(h, masks);  // [B, S, D]
  if (norm_) h = norm_->forward(h);                          // [B, S, D]
  return h;
}

Tensor Encoder::forward_cached(const Tensor& x, KVCache& cache, const AttentionMasks& masks) {
  ATTN_CHECK(cache.num_layers() == num_layers(), "Encoder", "the cache has ", cache.num_layers(),
             " layers, the stack ", num_layers());
  ATTN_CHECK(x.dim() == 3, "Encoder", "expected x [N, T, D], got ", x.str());
  const int64_t T = x.size(1);
  // Every layer holds the same positions; the new ones join them (a window may have dropped
  // the oldest, and then their flags are dropped too).
  const int64_t held = num_layers() > 0 ? cache.layer(0).self.positions() : 0;
  ATTN_CHECK(cache.length() >= held + T, "Encoder", "append the new positions' padding flags to the cache first");
  AttentionMasks layer_masks;
  layer_masks.key_padding_mask = cache.self_padding_last(held + T);  // [N, T' + T] or undefined
  layer_masks.positions = masks.positions;
  Tensor h = x;  // [N, T, D]
  for (int64_t i = 0; i < num_layers(); ++i) h = layer(i).forward_cached(h, cache.layer(i), layer_masks);  // [N, T, D]
  if (norm_) h = norm_->forward(h);  // [N, T, D]
  return h;
}

}  // namespace attn::nn
