// EncoderLayer and Encoder (paper §3.1): self-attention and FFN sublayers, each wrapped in a
// residual connection and a norm, post-norm (the paper) or pre-norm.
#include "attn/nn/encoder.h"

#include "attn/ops/ops.h"

namespace attn::nn {

EncoderLayer::EncoderLayer(const LayerOptions& o, Rng& rng) : options_(o) {
  // Registration order gives nn.TransformerEncoderLayer's state_dict order.
  self_attn_ = register_module(
      "self_attn", std::make_shared<MultiHeadAttention>(o.d_model, o.n_heads, o.attention_dropout, o.dtype, rng));
  ff_ = std::make_shared<FeedForward>(o.d_model, o.d_ff, o.activation, o.dropout, o.dtype, rng);
  register_module("linear1", ff_->linear1());
  register_module("dropout", ff_->dropout());
  register_module("linear2", ff_->linear2());
  norm1_ = register_module("norm1", make_norm(o.norm, o.d_model, o.norm_eps, o.dtype));
  norm2_ = register_module("norm2", make_norm(o.norm, o.d_model, o.norm_eps, o.dtype));
  dropout1_ = register_module("dropout1", std::make_shared<Dropout>(o.dropout, rng.next_u64()));
  dropout2_ = register_module("dropout2", std::make_shared<Dropout>(o.dropout, rng.next_u64()));
}

Tensor EncoderLayer::forward(const Tensor& x, const AttentionMasks& masks) {
  ATTN_CHECK(x.dim() == 3 && x.size(2) == options_.d_model, "EncoderLayer", "expected x [B, T, ",
             options_.d_model, "], got ", x.str());
  if (options_.norm_first) {
    Tensor h = norm1_->forward(x);                                          // [B, T, D]
    Tensor out = add(x, dropout1_->forward(self_attn_->forward(h, h, h, masks)));  // [B, T, D]
    Tensor h2 = norm2_->forward(out);                                       // [B, T, D]
    return add(out, dropout2_->forward(ff_->forward(h2)));                  // [B, T, D]
  }
  Tensor sa = self_attn_->forward(x, x, x, masks);                          // [B, T, D]
  Tensor out = norm1_->forward(add(x, dropout1_->forward(sa)));             // [B, T, D]
  Tensor ff = ff_->forward(out);                                            // [B, T, D]
  return norm2_->forward(add(out, dropout2_->forward(ff)));                 // [B, T, D]
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

}  // namespace attn::nn
