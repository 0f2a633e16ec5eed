// kernels/cross_entropy.cpp — fused log-softmax + negative log-likelihood with label smoothing.
// §5.4's label smoothing as PyTorch defines it: the target distribution is
// (1 - eps) * onehot(t) + eps / V (the uniform part includes the true class). One pass for
// the row max, one for the log-sum-exp; the backward recomputes softmax from the saved lse.
// Rows run in parallel when large; float rows use the active ISA's vector kernels
// (simd/vector_kernels.cpp), double rows the plain loops. Not done here: class weights, reductions other than mean,
// probability (soft) targets.
#include "kernels/cross_entropy.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/parallel_for.h"
#include "kernels/simd/vector_kernels.h"

namespace attn::kernels {

namespace {

// Below this many elements threads cost more than they save.
constexpr int64_t kParallelMin = 32768;

}  // namespace

template <class T>
void cross_entropy_forward(T* losses, T* lse_out, const T* logits, const int64_t* targets,
                           int64_t N, int64_t V, int64_t ignore_index, double label_smoothing) {
  const T eps = static_cast<T>(label_smoothing);
  const simd::VectorKernels* vk = nullptr;
  if constexpr (std::is_same_v<T, float>) vk = &simd::vector_kernels();
  parallel_for(N, N > 1 && N * V >= kParallelMin, [&](int64_t n) {
    const int64_t t = targets[n];
    if (t == ignore_index) {
      losses[n] = T(0);
      lse_out[n] = T(0);
      return;
    }
    const T* x = logits + n * V;  // [V]
    T lse = 0, sum_x = 0;
    if constexpr (std::is_same_v<T, float>) {
      vk->cross_entropy_stats(&lse, &sum_x, x, V);
    } else {
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t v = 0; v < V; ++v) m = x[v] > m ? x[v] : m;
      T s = 0;
      for (int64_t v = 0; v < V; ++v) {
        s += std::exp(x[v] - m);
        sum_x += x[v];
      }
      lse = m + std::log(s);
    }
    // -log p[t] = lse - x[t];  sum_v -log p[v] = V * lse - sum_v x[v].
    // Terms with a zero coefficient are skipped so that a -inf logit cannot make 0 * inf.
    T loss = 0;
    if (eps != T(1)) loss += (T(1) - eps) * (lse - x[t]);
    if (eps != T(0)) loss += eps * (lse - sum_x / static_cast<T>(V));
    losses[n] = loss;
    lse_out[n] = lse;
  });
}

// Forward: loss = (1 - eps) * (lse - x_t) + eps / V * sum_v (lse - x_v), lse = log sum_v exp(x_v).
// Local derivative: d lse / d x_v = softmax_v, d x_t / d x_v = [v == t], so
//   d loss / d x_v = (1 - eps) * (softmax_v - [v == t]) + eps / V * (V * softmax_v - 1)
//                  = softmax_v - ((1 - eps) * [v == t] + eps / V).
// The mean over n_valid rows and the incoming gradient are folded into `scale`.
template <class T>
void cross_entropy_backward(T* dlogits, const T* lse, const T* logits, const int64_t* targets,
                            int64_t N, int64_t V, int64_t ignore_index, double label_smoothing,
                            T scale) {
  const T eps = static_cast<T>(label_smoothing);
  const T uniform = eps / static_cast<T>(V);
  const simd::VectorKernels* vk = nullptr;
  if constexpr (std::is_same_v<T, float>) vk = &simd::vector_kernels();
  parallel_for(N, N > 1 && N * V >= kParallelMin, [&](int64_t n) {
    const int64_t t = targets[n];
    if (t == ignore_index) return;
    const T* x = logits + n * V;  // [V]
    T* dx = dlogits + n * V;      // [V]
    const T l = lse[n];
    if constexpr (std::is_same_v<T, float>)
      vk->cross_entropy_backward(dx, x, V, l, scale, uniform);
    else
      for (int64_t v = 0; v < V; ++v) dx[v] += scale * (std::exp(x[v] - l) - uniform);
    dx[t] -= scale * (T(1) - eps);
  });
}

template void cross_entropy_forward<float>(float*, float*, const float*, const int64_t*, int64_t,
                                           int64_t, int64_t, double);
template void cross_entropy_forward<double>(double*, double*, const double*, const int64_t*,
                                            int64_t, int64_t, int64_t, double);
template void cross_entropy_backward<float>(float*, const float*, const float*, const int64_t*,
                                            int64_t, int64_t, int64_t, double, float);
template void cross_entropy_backward<double>(double*, const double*, const double*,
                                             const int64_t*, int64_t, int64_t, int64_t, double,
                                             double);

}  // namespace attn::kernels
