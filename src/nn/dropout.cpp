// Dropout: the dropout op with this module's own generator and train/eval flag.
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

}  // namespace attn::nn
