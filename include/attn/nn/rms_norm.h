// attn/nn/rms_norm.h — nn.RMSNorm over the last dimension (Zhang & Sennrich 2019):
//   y = x / sqrt(mean(x^2) + eps) * weight.
// One parameter "weight" [D] (ones); no mean subtraction and no bias, unlike LayerNorm.
#pragma once

#include "attn/nn/norm.h"

namespace attn::nn {

class RMSNorm : public Norm {
 public:
  RMSNorm(int64_t dim, double eps = 1e-5, DType dtype = DType::F32);

  // x [..., D] -> [..., D].
  Tensor forward(const Tensor& x) const override;

  const Tensor& weight() const { return weight_; }  // [D]
  double eps() const { return eps_; }

 private:
  int64_t dim_;
  double eps_;
  Tensor weight_;
};

}  // namespace attn::nn
