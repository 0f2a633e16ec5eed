// attn/nn/linear.h — y = x W^T + b (nn.Linear), the projection behind every W in the paper
// (W_Q, W_K, W_V, W_O in §3.2.2, W_1, W_2 in §3.3, the pre-softmax output layer in §3.4).
// Parameters "weight" [Out, In] and "bias" [Out] with nn.Linear's default initialisation:
// weight U(-1/sqrt(In), 1/sqrt(In)) (kaiming_uniform_, a = sqrt(5)), bias the same bound.
// For inference the weight may be swapped for an int8 copy (with "weight_scale" [Out]) or a
// bf16 copy (nn/quantize.h); forward() then takes ops/quantize.h's product.
#pragma once

#include "attn/core/rng.h"
#include "attn/nn/module.h"

namespace attn::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias, DType dtype, Rng& rng);

  // x [..., In] -> [..., Out].
  Tensor forward(const Tensor& x) const;
  // relu(forward(x)); with an int8 or bf16 weight the product applies the ReLU as it stores
  // (quantized_linear_relu: the same bits, one pass less).
  Tensor forward_relu(const Tensor& x) const;
  bool quantized() const { return !is_floating(weight_.dtype()); }

  const Tensor& weight() const { return weight_; }  // [Out, In]
  const Tensor& bias() const { return bias_; }      // [Out], undefined without bias
  // The int8 weight's scales [Out]; undefined for a float or bf16 weight.
  const Tensor& weight_scale() const { return weight_scale_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  // Shares `w` [Out, In] as this layer's weight (tied output projection): the tensor is then
  // registered under both names and stored once, under the name registered first.
  void tie_weight(const Tensor& w);
  void quantize_own(QuantizeContext& ctx) override;

 private:
  int64_t in_, out_;
  Tensor weight_, bias_, weight_scale_;
};

}  // namespace attn::nn
