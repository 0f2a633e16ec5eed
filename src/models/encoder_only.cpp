// EncoderOnlyModel: a BERT-style bidirectional encoder with a masked-LM head.
#include "attn/models/encoder_only.h"

#include "attn/ops/ops.h"

namespace attn::models {

MaskedLMHead::MaskedLMHead(const ModelConfig& c, Rng& rng) : activation_(c.activation) {
  dense_ = register_module("dense", std::make_shared<nn::Linear>(c.d_model, c.d_model, true, c.dtype, rng));
  norm_ = register_module("norm", nn::make_norm(c.norm, c.d_model, c.norm_eps, c.dtype));
  decoder_ = register_module("decoder", std::make_shared<nn::Linear>(c.d_model, c.vocab_size(), true, c.dtype, rng));
}

Tensor MaskedLMHead::forward(const Tensor& hidden) const {
  Tensor h = dense_->forward(hidden);         // [B, T, D]
  h = nn::apply_activation(activation_, h);   // [B, T, D]
  h = norm_->forward(h);                      // [B, T, D]
  return decoder_->forward(h);                // [B, T, V]
}

EncoderOnlyModel::EncoderOnlyModel(const ModelConfig& config) : Model(config) {
  const ModelConfig& c = config_;
  Rng rng(c.seed);
  blocks_ = std::make_shared<nn::Encoder>(c.layer_options(), c.n_encoder_layers, c.final_norm, rng);
  xavier_init_matrices(*blocks_, rng);
  const double std = embedding_init_std();
  embedding_ = std::make_shared<nn::Embedding>(c.vocab_size(), c.d_model, c.dtype, rng, std);  // [V, D]
  positions_ = nn::make_positional(c.positional, c.max_len, c.d_model, c.dtype, rng, std);
  mlm_head_ = std::make_shared<MaskedLMHead>(c, rng);
  dropout_ = std::make_shared<nn::Dropout>(c.dropout, rng.next_u64());

  register_module("embedding", embedding_);
  if (c.positional == nn::PositionalKind::Learned) register_module("pos_embedding", positions_);
  for (const auto& [name, child] : blocks_->children()) register_module(name, child);  // layers, norm
  register_module("mlm_head", mlm_head_);
  register_module("dropout", dropout_);
  if (c.tie_output) mlm_head_->decoder().tie_weight(embedding_->weight());
}

Tensor EncoderOnlyModel::encode(const Tensor& ids) {
  Tensor x = embed(*embedding_, positions_.get(), *dropout_, ids);  // [B, T, D]
  nn::AttentionMasks masks;
  masks.key_padding_mask = padding_mask(ids);  // [B, T], true at PAD
  return blocks_->forward(x, masks);           // [B, T, D]
}

Tensor EncoderOnlyModel::forward(const Tensor& ids) { return mlm_head_->forward(encode(ids)); }

}  // namespace attn::models
