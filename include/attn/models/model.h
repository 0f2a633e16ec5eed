// attn/models/model.h — the small interface the three model families share: the config,
// the Module (parameters, state_dict, train/eval), and the helpers every family needs to
// turn token ids into the stacks' input (paper §3.4-3.5: embedding x sqrt(D) + positions,
// then dropout) and to mask PAD keys. Training, decoding and the CLI work against this.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attn/models/config.h"
#include "attn/nn/dropout.h"
#include "attn/nn/embedding.h"
#include "attn/nn/module.h"
#include "attn/nn/positional.h"

namespace attn::models {

class Model : public nn::Module {
 public:
  const ModelConfig& config() const { return config_; }
  Arch arch() const { return config_.arch; }
  nn::Module& module() { return *this; }

  // ids I64 [B, T] -> Bool [B, T], true where ids == pad_id; undefined when pad_id is -1.
  Tensor padding_mask(const Tensor& ids) const;

  // The summed load-balancing loss (nn::MixtureOfExperts::aux_loss) of every MoE layer after
  // the last forward: a differentiable scalar, or undefined when the model has no experts (or
  // before its first forward). The trainer adds config().moe_aux_loss_weight times it.
  Tensor aux_loss() const;

  // Attention capture for inspection: on/off in every attention module, and the weights
  // [B, H, Tq, Tk] kept by the last forward, named like "decoder.layers.1.multihead_attn".
  // Linear self-attention forms no weights: turning capture on is an error for a single-stack
  // model with linear attention (an encoder-decoder still captures its cross-attention).
  void set_capture_attention(bool on);
  // Swaps the weights for int8 or bf16 copies made from their current values (nn/quantize.h)
  // and records the quantization in config(); the model then serves inference only. A model
  // that is quantized already is an error, and so is a NaN or Inf weight (named).
  void quantize(Quantization q);
  std::vector<std::pair<std::string, Tensor>> captured_attention();

 protected:
  // Validates the config.
  explicit Model(ModelConfig config);

  // Embedding init std: D^-0.5 when embeddings are scaled by sqrt(D) (so the scaled
  // embedding has unit variance, as fairseq does), 0.02 otherwise (GPT-2). Learned positions
  // use the same std.
  double embedding_init_std() const;
  // ids [B, T] -> dropout(embedding(ids) * sqrt(D) + positions[offset, offset + T)) [B, T, D].
  Tensor embed(const nn::Embedding& embedding, const nn::PositionalEncoding* positions,
               nn::Dropout& dropout, const Tensor& ids, int64_t offset = 0) const;
  // The same with each token's own position: positions I64 [B, T].
  Tensor embed_at(const nn::Embedding& embedding, const nn::PositionalEncoding* positions_table,
                  nn::Dropout& dropout, const Tensor& ids, const Tensor& positions) const;
  // nn.Transformer._reset_parameters: xavier_uniform_ on every parameter with dim > 1.
  static void xavier_init_matrices(const nn::Module& stack, Rng& rng);

  ModelConfig config_;
};

}  // namespace attn::models
