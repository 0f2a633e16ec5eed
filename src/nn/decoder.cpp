// DecoderLayer and Decoder (paper §3.1): masked self-attention, attention over the encoder
// output, and FFN, each wrapped in a residual connection and a norm (post- or pre-norm).
#include "attn/nn/decoder.h"

#include "attn/ops/ops.h"

namespace attn::nn {

DecoderLayer::DecoderLayer(const LayerOptions& o, Rng& rng) : options_(o) {
  // Registration order gives nn.TransformerDecoderLayer's state_dict order.
  self_attn_ = register_module(
      "self_attn", std::make_shared<MultiHeadAttention>(o.d_model, o.n_heads, o.attention_dropout, o.dtype, rng));
  cross_attn_ = register_module(
      "multihead_attn",
      std::make_shared<MultiHeadAttention>(o.d_model, o.n_heads, o.attention_dropout, o.dtype, rng));
  ff_ = std::make_shared<FeedForward>(o.d_model, o.d_ff, o.activation, o.dropout, o.dtype, rng);
  register_module("linear1", ff_->linear1());
  register_module("dropout", ff_->dropout());
  register_module("linear2", ff_->linear2());
  norm1_ = register_module("norm1", make_norm(o.norm, o.d_model, o.norm_eps, o.dtype));
  norm2_ = register_module("norm2", make_norm(o.norm, o.d_model, o.norm_eps, o.dtype));
  norm3_ = register_module("norm3", make_norm(o.norm, o.d_model, o.norm_eps, o.dtype));
  dropout1_ = register_module("dropout1", std::make_shared<Dropout>(o.dropout, rng.next_u64()));
  dropout2_ = register_module("dropout2", std::make_shared<Dropout>(o.dropout, rng.next_u64()));
  dropout3_ = register_module("dropout3", std::make_shared<Dropout>(o.dropout, rng.next_u64()));
}

Tensor DecoderLayer::forward(const Tensor& x, const Tensor& memory, const AttentionMasks& self_masks,
                             const AttentionMasks& cross_masks) {
  const int64_t D = options_.d_model;
  ATTN_CHECK(x.dim() == 3 && x.size(2) == D, "DecoderLayer", "expected x [B, T, ", D, "], got ", x.str());
  ATTN_CHECK(memory.dim() == 3 && memory.size(2) == D && memory.size(0) == x.size(0), "DecoderLayer",
             "expected memory [", x.size(0), ", S, ", D, "], got ", memory.str());
  if (options_.norm_first) {
    Tensor h = norm1_->forward(x);                                                       // [B, T, D]
    Tensor out = add(x, dropout1_->forward(self_attn_->forward(h, h, h, self_masks)));  // [B, T, D]
    h = norm2_->forward(out);                                                            // [B, T, D]
    out = add(out, dropout2_->forward(cross_attn_->forward(h, memory, memory, cross_masks)));  // [B, T, D]
    h = norm3_->forward(out);                                                            // [B, T, D]
    return add(out, dropout3_->forward(ff_->forward(h)));                                // [B, T, D]
  }
  Tensor sa = self_attn_->forward(x, x, x, self_masks);                          // [B, T, D]
  Tensor out = norm1_->forward(add(x, dropout1_->forward(sa)));                  // [B, T, D]
  Tensor ca = cross_attn_->forward(out, memory, memory, cross_masks);            // [B, T, D]
  out = norm2_->forward(add(out, dropout2_->forward(ca)));                       // [B, T, D]
  Tensor ff = ff_->forward(out);                                                 // [B, T, D]
  return norm3_->forward(add(out, dropout3_->forward(ff)));                      // [B, T, D]
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
