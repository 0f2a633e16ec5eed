// attn/nn/layer_norm.h — nn.LayerNorm over the last dimension (paper §3.1):
//   y = (x - mean) / sqrt(var + eps) * weight + bias, biased variance.
// Parameters "weight" [D] (ones) and "bias" [D] (zeros). No elementwise_affine=False mode.
#pragma once

#include "attn/nn/norm.h"

namespace attn::nn {

class LayerNorm : public Norm {
 public:
  LayerNorm(int64_t dim, double eps = 1e-5, DType dtype = DType::F32);

  // x [..., D] -> [..., D].
  Tensor forward(const Tensor& x) const override;

  const Tensor& weight() const { return weight_; }  // [D]
  const Tensor& bias() const { return bias_; }      // [D]
  double eps() const { return eps_; }

 protected:
  Tensor forward_add(const Tensor& residual, const Tensor& x) const override;

 private:
  int64_t dim_;
  double eps_;
  Tensor weight_, bias_;
};

}  // namespace attn::nn
