// kernels/adam.cpp — the Adam / AdamW element update (paper §5.3, Eq. 3's optimizer).
// float runs the active ISA's vector kernel (simd/vector_kernels.cpp) on chunks that OpenMP
// threads share once a tensor is large; double runs the plain loop below. Both perform the
// same IEEE operations in the same order, so the ISA and the thread count never change a bit.
// Not here: the moments' storage, step counts and the learning rate (src/train/adam.cpp).
#include "kernels/adam.h"

#include <cmath>
#include <type_traits>

#include "kernels/parallel_for.h"
#include "kernels/simd/parallel_chunks.h"
#include "kernels/simd/vector_kernels.h"

namespace attn::kernels {

namespace {
// Parameters below this many elements are updated on the calling thread.
constexpr int64_t kParallelMin = 1 << 16;
}  // namespace

template <class T>
AdamStep<T> adam_step_scalars(double lr, int64_t k, double beta1, double beta2, double eps,
                              double weight_decay, bool decoupled_weight_decay) {
  // Scalars are formed in double and rounded to T once, as PyTorch passes Python floats.
  AdamStep<T> s;
  s.l2 = weight_decay != 0.0 && !decoupled_weight_decay;
  s.decoupled = weight_decay != 0.0 && decoupled_weight_decay;
  s.weight_decay = static_cast<T>(weight_decay);
  s.decay = static_cast<T>(1.0 - lr * weight_decay);
  s.one_minus_beta1 = static_cast<T>(1.0 - beta1);
  s.beta2 = static_cast<T>(beta2);
  s.one_minus_beta2 = static_cast<T>(1.0 - beta2);
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(k));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(k));
  s.neg_step_size = -static_cast<T>(lr / bc1);
  s.bc2_sqrt = static_cast<T>(std::sqrt(bc2));
  s.eps = static_cast<T>(eps);
  return s;
}

// Forward of the optimizer step (no gradient flows through it):
//   m' = m + (1 - b1)(g - m),  v' = b2 v + (1 - b2) g^2,  p' = p - lr/(1 - b1^k) m' / (sqrt(v')/sqrt(1 - b2^k) + eps).
template <class T>
void adam_update(T* p, T* m, T* v, const T* g, int64_t n, const AdamStep<T>& s) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    simd::for_chunks(n, kParallelMin, [&](int64_t i, int64_t count) {
      vk.adam_update(p + i, m + i, v + i, g + i, count, s);
    });
  } else {
    parallel_for(n, n >= kParallelMin, [&](int64_t i) {
      T gi = g[i];
      if (s.l2) gi = gi + s.weight_decay * p[i];
      if (s.decoupled) p[i] = p[i] * s.decay;
      m[i] = m[i] + s.one_minus_beta1 * (gi - m[i]);
      v[i] = v[i] * s.beta2 + s.one_minus_beta2 * (gi * gi);
      const T denom = std::sqrt(v[i]) / s.bc2_sqrt + s.eps;
      p[i] = p[i] + s.neg_step_size * (m[i] / denom);
    });
  }
}

template AdamStep<float> adam_step_scalars<float>(double, int64_t, double, double, double, double,
                                                  bool);
template AdamStep<double> adam_step_scalars<double>(double, int64_t, double, double, double,
                                                    double, bool);
template void adam_update<float>(float*, float*, float*, const float*, int64_t,
                                 const AdamStep<float>&);
template void adam_update<double>(double*, double*, double*, const double*, int64_t,
                                  const AdamStep<double>&);

}  // namespace attn::kernels
