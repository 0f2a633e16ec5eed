// kernels/reduce.cpp — sum over all elements and over one dimension, float sums in double.
// Used by the losses (§5.4 label-smoothed cross entropy is averaged with mean) and by bias
// gradients. Parallel (OpenMP, static schedule) from kParallelMin elements; the result then
// depends on the thread count only through rounding of the double partial sums.
// Not done here: pairwise/Kahan summation (double accumulation is enough for f32).
#include "kernels/reduce.h"

#include <algorithm>

#include "kernels/parallel_for.h"

namespace attn::kernels {

namespace {
constexpr int64_t kParallelMin = 32768;
}  // namespace

template <class T>
void sum_forward(T* out, const T* x, int64_t n) {
  double acc = 0;
  if (n >= kParallelMin && threads_available()) {
#pragma omp parallel for reduction(+ : acc) schedule(static)
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]);
  }
  out[0] = static_cast<T>(acc);
}

template <class T>
void sum_backward(T* dx, const T* dout, int64_t n) {
  const T g = dout[0];
  parallel_for(n, n >= kParallelMin, [&](int64_t i) { dx[i] += g; });
}

template <class T>
void sum_dim_forward(T* out, const T* x, int64_t outer, int64_t n, int64_t inner) {
  if (inner == 1) {  // summing the last dimension: one contiguous row per output
    parallel_for(outer, outer * n >= kParallelMin && outer > 1, [&](int64_t o) {
      const T* row = x + o * n;  // [n]
      double acc = 0;
      for (int64_t k = 0; k < n; ++k) acc += static_cast<double>(row[k]);
      out[o] = static_cast<T>(acc);
    });
    return;
  }
  // Columns in blocks of kBlock, each block summed in double over the n rows it spans.
  constexpr int64_t kBlock = 64;
  const int64_t nblocks = (inner + kBlock - 1) / kBlock;
  parallel_for(outer * nblocks, outer * n * inner >= kParallelMin, [&](int64_t item) {
    const int64_t o = item / nblocks, blk = item % nblocks;
    const int64_t i0 = blk * kBlock, i1 = std::min(inner, i0 + kBlock);
    double acc[kBlock] = {};
    const T* base = x + o * n * inner;  // [n, inner]
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = i0; i < i1; ++i) acc[i - i0] += static_cast<double>(base[k * inner + i]);
    for (int64_t i = i0; i < i1; ++i) out[o * inner + i] = static_cast<T>(acc[i - i0]);
  });
}

template <class T>
void sum_dim_backward(T* dx, const T* dout, int64_t outer, int64_t n, int64_t inner) {
  parallel_for(outer * n, outer * n * inner >= kParallelMin, [&](int64_t item) {
    const int64_t o = item / n;
    T* row = dx + item * inner;     // [inner], row k = item % n of slice o
    const T* g = dout + o * inner;  // [inner]
    for (int64_t i = 0; i < inner; ++i) row[i] += g[i];
  });
}

#define ATTN_INSTANTIATE(T)                                                        \
  template void sum_forward<T>(T*, const T*, int64_t);                             \
  template void sum_backward<T>(T*, const T*, int64_t);                            \
  template void sum_dim_forward<T>(T*, const T*, int64_t, int64_t, int64_t);       \
  template void sum_dim_backward<T>(T*, const T*, int64_t, int64_t, int64_t);
ATTN_INSTANTIATE(float)
ATTN_INSTANTIATE(double)
#undef ATTN_INSTANTIATE

}  // namespace attn::kernels
