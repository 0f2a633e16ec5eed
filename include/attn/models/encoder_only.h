// attn/models/encoder_only.h — a BERT-style bidirectional encoder: token embedding
// (x sqrt(D) if configured) + positions, n_encoder_layers EncoderLayer blocks (PAD keys
// masked), an optional final norm, and a masked-LM head (BERT's: dense D->D, activation,
// norm, then "decoder" D->V with bias, tied to the embedding when tie_output). Names:
//   embedding.weight, [pos_embedding.weight,] layers.N.*, [norm.*,] mlm_head.dense.*,
//   mlm_head.norm.*, mlm_head.decoder.weight (alias of embedding.weight when tied), mlm_head.decoder.bias
// A classification head is left to the caller (encode() gives the hidden states).
#pragma once

#include <memory>

#include "attn/models/model.h"
#include "attn/nn/encoder.h"
#include "attn/nn/feed_forward.h"
#include "attn/nn/linear.h"
#include "attn/nn/norm.h"

namespace attn::models {

// BERT's prediction head: decoder(norm(act(dense(h)))).
class MaskedLMHead : public nn::Module {
 public:
  MaskedLMHead(const ModelConfig& config, Rng& rng);
  // hidden [B, T, D] -> logits [B, T, V].
  Tensor forward(const Tensor& hidden) const;
  nn::Linear& decoder() { return *decoder_; }

 private:
  nn::Activation activation_;
  std::shared_ptr<nn::Linear> dense_;
  std::shared_ptr<nn::Norm> norm_;
  std::shared_ptr<nn::Linear> decoder_;
};

class EncoderOnlyModel : public Model {
 public:
  explicit EncoderOnlyModel(const ModelConfig& config);

  // ids I64 [B, T] -> masked-LM logits [B, T, V].
  Tensor forward(const Tensor& ids);
  // ids [B, T] -> hidden states [B, T, D].
  Tensor encode(const Tensor& ids);

  nn::Encoder& blocks() { return *blocks_; }
  nn::Embedding& embedding() { return *embedding_; }
  MaskedLMHead& mlm_head() { return *mlm_head_; }

 private:
  std::shared_ptr<nn::Embedding> embedding_;
  std::shared_ptr<nn::PositionalEncoding> positions_;
  std::shared_ptr<nn::Encoder> blocks_;  // its "layers" and "norm" are registered at the root
  std::shared_ptr<MaskedLMHead> mlm_head_;
  std::shared_ptr<nn::Dropout> dropout_;
};

}  // namespace attn::models
