// Linear: y = x W^T + b over the last dimension, nn.Linear's names and initialisation.
#include "attn/nn/linear.h"

#include <cmath>

#include "attn/nn/init.h"
#include "attn/nn/quantize.h"
#include "attn/ops/ops.h"
#include "attn/ops/quantize.h"

namespace attn::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, DType dtype, Rng& rng)
    : in_(in_features), out_(out_features) {
  ATTN_CHECK(in_features > 0 && out_features > 0, "Linear", "sizes must be positive, got in ",
             in_features, ", out ", out_features);
  ATTN_CHECK(is_floating(dtype), "Linear", "dtype must be f32 or f64, got ", dtype_name(dtype));
  weight_ = register_parameter("weight", quantizable_weight({out_, in_}, dtype));  // [Out, In]
  linear_weight_uniform_(weight_, rng);
  if (bias) {
    bias_ = register_parameter("bias", Tensor::zeros({out_}, dtype));  // [Out]
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
    uniform_(bias_, -bound, bound, rng);
  }
}

Tensor Linear::forward(const Tensor& x) const {
  ATTN_CHECK(x.dim() >= 1 && x.size(-1) == in_, "Linear", "expected input [..., ", in_, "], got ",
             x.str());
  return linear_any(x, weight_, weight_scale_, bias_);  // [..., Out]: linear(x, W, b) for a float W
}

Tensor Linear::forward_relu(const Tensor& x) const {
  if (!quantized()) return relu(forward(x));
  ATTN_CHECK(x.dim() >= 1 && x.size(-1) == in_, "Linear", "expected input [..., ", in_, "], got ",
             x.str());
  return quantized_linear_relu(x, weight_, weight_scale_, bias_);  // [..., Out]
}

void Linear::quantize_own(QuantizeContext& ctx) {
  const QuantizedWeight& q = ctx.get(weight_, ctx.prefix + "weight");
  swap_parameter("weight", q.weight);
  weight_ = q.weight;
  if (q.scale.defined()) weight_scale_ = register_constant("weight_scale", q.scale);
}

void Linear::tie_weight(const Tensor& w) {
  replace_parameter("weight", w);
  weight_ = w;
}

}  // namespace attn::nn
