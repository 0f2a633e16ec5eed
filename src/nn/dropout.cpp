// Dropout: the dropout ops (plain, and fused with the residual add or with ReLU) with this
// module's own generator and train/eval flag.
#include "attn/nn/dropout.h"

#include "attn/ops/ops.h"

namespace attn::nn {

Dropout::Dropout(double p, uint64_t seed) : p_(p), rng_(seed) {
  ATTN_CHECK(p >= 0.0 && p < 1.0, "Dropout", "p must be in [0, 1), got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p_ == 0.0) return x;
  return dropout(x, p_, true, rng_);  // [...]
}

Tensor Dropout::add_to(const Tensor& residual, const Tensor& x) {
  return dropout_add(residual, x, p_, is_training(), rng_);  // [...]
}

Tensor Dropout::forward_relu(const Tensor& x) {
  return relu_dropout(x, p_, is_training(), rng_);  // [...]
}

}  // namespace attn::nn
