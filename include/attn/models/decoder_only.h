// attn/models/decoder_only.h — a GPT-style causal language model: token embedding
// (x sqrt(D) if configured) + positions, n_decoder_layers self-attention blocks (the
// EncoderLayer class with a causal mask), an optional final norm, and an output head "lm_head"
// [V, D] without bias, tied to the embedding or not. state_dict names:
//   embedding.weight, [pos_embedding.weight,] layers.N.*, [norm.*,] lm_head.weight
// (with tie_output, lm_head.weight is an alias of embedding.weight, stored once).
#pragma once

#include <memory>

#include "attn/models/model.h"
#include "attn/nn/encoder.h"
#include "attn/nn/linear.h"

namespace attn::models {

class DecoderOnlyModel : public Model {
 public:
  explicit DecoderOnlyModel(const ModelConfig& config);

  // ids I64 [B, T] -> logits [B, T, V]; position t sees positions <= t that are not PAD.
  Tensor forward(const Tensor& ids);
  // ids [B, T] -> the last block's (normed) output [B, T, D].
  Tensor hidden(const Tensor& ids);
  // hidden [B, T, D] -> logits [B, T, V].
  Tensor logits(const Tensor& hidden) const;

  nn::Encoder& blocks() { return *blocks_; }
  nn::Embedding& embedding() { return *embedding_; }
  nn::Linear& lm_head() { return *lm_head_; }

 private:
  std::shared_ptr<nn::Embedding> embedding_;
  std::shared_ptr<nn::PositionalEncoding> positions_;
  std::shared_ptr<nn::Encoder> blocks_;  // its "layers" and "norm" are registered at the root
  std::shared_ptr<nn::Linear> lm_head_;
  std::shared_ptr<nn::Dropout> dropout_;
};

}  // namespace attn::models
