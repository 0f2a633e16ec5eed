// attn/ops/optim.h — the arithmetic of optimizers, for train/: Adam's fused element update on
// memory the optimizer owns, and an in-place gradient sum. Both run the kernels' code
// (src/kernels/adam.h, the vector kernels), so results are the same bits on every ISA and
// thread count. Not here: optimizer state, parameter lists, clipping or learning rates
// (attn/train/adam.h, attn/train/schedule.h); nothing here is recorded by autograd.
#pragma once

#include <cstdint>

#include "attn/core/tensor.h"

namespace attn {

// One Adam update's settings: the learning rate, the tensor's 1-based update count (for the
// bias corrections) and the optimizer's hyper-parameters (train::AdamOptions documents them).
struct AdamUpdate {
  double lr = 0;
  int64_t step = 1;
  double beta1 = 0.9;
  double beta2 = 0.98;
  double eps = 1e-9;
  double weight_decay = 0;
  bool decoupled_weight_decay = true;
};

// adam_update: one Adam / AdamW update of n elements in place, torch.optim.Adam's single-tensor
// arithmetic (p parameters, m and v moments, g the gradient, read only); the step's scalars are
// formed in double and rounded once to the dtype. float runs the active ISA's vector kernel and
// threads split large spans. Unchecked and never throws, so it may run inside parallel regions.
void adam_update(float* p, float* m, float* v, const float* g, int64_t n, const AdamUpdate& u);
void adam_update(double* p, double* m, double* v, const double* g, int64_t n, const AdamUpdate& u);

// add_into: dst += src in place, one IEEE addition per element in index order (float runs the
// vector kernel's add); both contiguous, of one shape and one floating dtype (checked).
void add_into(const Tensor& dst, const Tensor& src);

}  // namespace attn
