// attn/nn/embedding.h — token embeddings (paper §3.4): a lookup table "weight" [V, D].
// The paper multiplies embeddings by sqrt(D); that scale is applied by the models
// (ModelConfig::scale_embeddings), not here, so this layer equals nn.Embedding.
// Initialisation N(0, std^2) with the std chosen by the caller (nn.Embedding uses 1).
// No padding_idx: PAD rows are ordinary rows; the models mask PAD positions instead.
// For inference the table may be swapped for an int8 copy (a scale per token row,
// "weight_scale" [V]) or a bf16 copy (nn/quantize.h); forward() then dequantizes the rows.
#pragma once

#include "attn/core/rng.h"
#include "attn/nn/module.h"

namespace attn::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, DType dtype, Rng& rng, double init_std = 1.0);

  // ids I64 [...] -> [..., D]; ids outside [0, V) are an error.
  Tensor forward(const Tensor& ids) const;

  const Tensor& weight() const { return weight_; }  // [V, D]
  const Tensor& weight_scale() const { return weight_scale_; }  // [V] for int8, else undefined
  int64_t num_embeddings() const { return num_; }
  int64_t dim() const { return dim_; }
  // Shares another embedding's table (shared source/target vocabulary); stored once.
  void tie_weight(const Tensor& w);
  void quantize_own(QuantizeContext& ctx) override;

 private:
  int64_t num_, dim_;
  Tensor weight_, weight_scale_;
};

}  // namespace attn::nn
