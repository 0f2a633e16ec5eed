// DecoderOnlyModel: a GPT-style causal language model built from the encoder layer class.
#include "attn/models/decoder_only.h"

#include "attn/ops/ops.h"

namespace attn::models {

DecoderOnlyModel::DecoderOnlyModel(const ModelConfig& config) : Model(config) {
  const ModelConfig& c = config_;
  Rng rng(c.seed);
  blocks_ = std::make_shared<nn::Encoder>(c.layer_options(), c.n_decoder_layers, c.final_norm, rng);
  xavier_init_matrices(*blocks_, rng);
  const double std = embedding_init_std();
  embedding_ = std::make_shared<nn::Embedding>(c.vocab_size(), c.d_model, c.dtype, rng, std);  // [V, D]
  positions_ = nn::make_positional(c.positional, c.max_len, c.d_model, c.dtype, rng, std);
  lm_head_ = std::make_shared<nn::Linear>(c.d_model, c.vocab_size(), false, c.dtype, rng);     // [V, D]
  dropout_ = std::make_shared<nn::Dropout>(c.dropout, rng.next_u64());

  register_module("embedding", embedding_);
  if (c.positional == nn::PositionalKind::Learned) register_module("pos_embedding", positions_);
  for (const auto& [name, child] : blocks_->children()) register_module(name, child);  // layers, norm
  register_module("lm_head", lm_head_);
  register_module("dropout", dropout_);
  if (c.tie_output) lm_head_->tie_weight(embedding_->weight());
}

Tensor DecoderOnlyModel::hidden(const Tensor& ids) {
  Tensor x = embed(*embedding_, positions_.get(), *dropout_, ids);  // [B, T, D]
  nn::AttentionMasks masks;
  masks.causal = true;                             // position t sees positions <= t
  masks.key_padding_mask = padding_mask(ids);      // [B, T], true at PAD
  return blocks_->forward(x, masks);               // [B, T, D]
}

Tensor DecoderOnlyModel::logits(const Tensor& hidden) const {
  return lm_head_->forward(hidden);  // [B, T, V]
}

Tensor DecoderOnlyModel::forward(const Tensor& ids) { return logits(hidden(ids)); }

}  // namespace attn::models
