// kernels/softmax.cpp — row-wise softmax and log_softmax, forward and backward.
// The attention weights of §3.2.1 (Eq. 1) and the output distribution of §3.4. Each row is
// max-subtracted before exp so that large logits do not overflow. Rows run in parallel
// (OpenMP) once the block is large; float rows run the active ISA's vector kernel
// (simd/vector_kernels.cpp, its own exp), double rows the plain loops below (std::exp).
// Not done here: strided rows, masking (callers mask by writing -inf; a fully masked row
// yields zeros, never NaN).
#include "kernels/softmax.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/parallel_for.h"
#include "kernels/simd/vector_kernels.h"

namespace attn::kernels {

namespace {

// Below this many elements threads cost more than they save.
constexpr int64_t kParallelMin = 32768;

// Largest element of a row (-inf for an empty or fully -inf row).
template <class T>
T row_max(const T* x, int64_t cols) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t c = 0; c < cols; ++c) m = x[c] > m ? x[c] : m;
  return m;
}

// True when no element of the row exceeds -inf, i.e. the row is fully masked.
template <class T>
bool fully_masked(T max) {
  return max == -std::numeric_limits<T>::infinity();
}

}  // namespace

template <class T>
void softmax_forward(T* y, const T* x, int64_t rows, int64_t cols) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    parallel_for(rows, rows > 1 && rows * cols >= kParallelMin,
                 [&](int64_t r) { vk.softmax_forward(y + r * cols, x + r * cols, cols); });
    return;
  }
  parallel_for(rows, rows > 1 && rows * cols >= kParallelMin, [&](int64_t r) {
    const T* xr = x + r * cols;  // [cols]
    T* yr = y + r * cols;        // [cols]
    const T m = row_max(xr, cols);
    if (fully_masked(m)) {
      // Every logit is -inf: exp(x - max) would be exp(NaN). Define the result as zeros.
      for (int64_t c = 0; c < cols; ++c) yr[c] = T(0);
      return;
    }
    T s = 0;
    for (int64_t c = 0; c < cols; ++c) {
      yr[c] = std::exp(xr[c] - m);
      s += yr[c];
    }
    const T inv = T(1) / s;  // s >= 1: the max element contributes exp(0)
    for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
  });
}

// Forward: y_i = exp(x_i) / sum_j exp(x_j).
// Local derivative: dy_i/dx_j = y_i (delta_ij - y_j), so
//   dx_j = sum_i dy_i y_i (delta_ij - y_j) = y_j (dy_j - sum_i dy_i y_i)
// (the Jacobian-vector product of marian's SoftmaxNodeOp). A fully masked row has y = 0
// and therefore gets dx = 0 without a special case.
template <class T>
void softmax_backward(T* dx, const T* dy, const T* y, int64_t rows, int64_t cols) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    parallel_for(rows, rows > 1 && rows * cols >= kParallelMin,
                 [&](int64_t r) { vk.softmax_backward(dx + r * cols, dy + r * cols, y + r * cols, cols); });
    return;
  }
  parallel_for(rows, rows > 1 && rows * cols >= kParallelMin, [&](int64_t r) {
    const T* dyr = dy + r * cols;  // [cols]
    const T* yr = y + r * cols;    // [cols]
    T* dxr = dx + r * cols;        // [cols]
    T dot = 0;
    for (int64_t c = 0; c < cols; ++c) dot += dyr[c] * yr[c];
    for (int64_t c = 0; c < cols; ++c) dxr[c] += yr[c] * (dyr[c] - dot);
  });
}

template <class T>
void log_softmax_forward(T* y, const T* x, int64_t rows, int64_t cols) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    parallel_for(rows, rows > 1 && rows * cols >= kParallelMin,
                 [&](int64_t r) { vk.log_softmax_forward(y + r * cols, x + r * cols, cols); });
    return;
  }
  parallel_for(rows, rows > 1 && rows * cols >= kParallelMin, [&](int64_t r) {
    const T* xr = x + r * cols;  // [cols]
    T* yr = y + r * cols;        // [cols]
    const T m = row_max(xr, cols);
    if (fully_masked(m)) {
      // log(0) for every entry: -inf, and the backward treats the row as constant.
      for (int64_t c = 0; c < cols; ++c) yr[c] = -std::numeric_limits<T>::infinity();
      return;
    }
    T s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(xr[c] - m);
    const T lse = m + std::log(s);  // log(sum_j exp(x_j))
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] - lse;
  });
}

// Forward: y_i = x_i - log(sum_j exp(x_j)).
// Local derivative: dy_i/dx_j = delta_ij - softmax_j = delta_ij - exp(y_j), so
//   dx_j = dy_j - exp(y_j) * sum_i dy_i.
// A fully masked row (y all -inf) has no finite input to move: its gradient is defined as 0.
template <class T>
void log_softmax_backward(T* dx, const T* dy, const T* y, int64_t rows, int64_t cols) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    parallel_for(rows, rows > 1 && rows * cols >= kParallelMin,
                 [&](int64_t r) { vk.log_softmax_backward(dx + r * cols, dy + r * cols, y + r * cols, cols); });
    return;
  }
  parallel_for(rows, rows > 1 && rows * cols >= kParallelMin, [&](int64_t r) {
    const T* dyr = dy + r * cols;  // [cols]
    const T* yr = y + r * cols;    // [cols]
    T* dxr = dx + r * cols;        // [cols]
    if (fully_masked(row_max(yr, cols))) return;
    T s = 0;
    for (int64_t c = 0; c < cols; ++c) s += dyr[c];
    for (int64_t c = 0; c < cols; ++c) dxr[c] += dyr[c] - std::exp(yr[c]) * s;
  });
}

template void softmax_forward<float>(float*, const float*, int64_t, int64_t);
template void softmax_forward<double>(double*, const double*, int64_t, int64_t);
template void softmax_backward<float>(float*, const float*, const float*, int64_t, int64_t);
template void softmax_backward<double>(double*, const double*, const double*, int64_t, int64_t);
template void log_softmax_forward<float>(float*, const float*, int64_t, int64_t);
template void log_softmax_forward<double>(double*, const double*, int64_t, int64_t);
template void log_softmax_backward<float>(float*, const float*, const float*, int64_t, int64_t);
template void log_softmax_backward<double>(double*, const double*, const double*, int64_t,
                                           int64_t);

}  // namespace attn::kernels
