// kernels/adam.h — the element-wise Adam / AdamW update of paper §5.3, on raw pointers.
// Follows torch.optim.Adam's single-tensor path operation for operation (no fused
// multiply-adds), so every ISA gives the same bits as the scalar loop and as PyTorch.
// The scalars of one step are formed once in double and rounded to T (adam_step_scalars).
// Not here: the optimizer's state, parameter lists or clipping (src/train/adam.cpp).
#pragma once

#include <cstdint>

namespace attn::kernels {

// The scalars of one update at step k (1-based) and learning rate lr, in the dtype T.
template <class T>
struct AdamStep {
  bool l2 = false;         // g += weight_decay * p before the moments (torch.optim.Adam)
  bool decoupled = false;  // p *= decay before the update (torch.optim.AdamW)
  T weight_decay = 0;
  T decay = 1;             // 1 - lr * weight_decay
  T one_minus_beta1 = 0;   // 1 - beta1
  T beta2 = 0;
  T one_minus_beta2 = 0;   // 1 - beta2
  T neg_step_size = 0;     // -lr / (1 - beta1^k)
  T bc2_sqrt = 1;          // sqrt(1 - beta2^k)
  T eps = 0;
};

template <class T>
AdamStep<T> adam_step_scalars(double lr, int64_t k, double beta1, double beta2, double eps,
                              double weight_decay, bool decoupled_weight_decay);

// Per element, with g the gradient (read only):
//   p = p * decay (decoupled);  g' = g + weight_decay * p (l2);
//   m = m + (1 - beta1) * (g' - m);  v = v * beta2 + (1 - beta2) * g' * g';
//   p = p + (-step_size) * (m / (sqrt(v) / bc2_sqrt + eps)).
// float runs the active ISA's vector kernel; threads split large tensors.
template <class T>
void adam_update(T* p, T* m, T* v, const T* g, int64_t n, const AdamStep<T>& s);

}  // namespace attn::kernels
