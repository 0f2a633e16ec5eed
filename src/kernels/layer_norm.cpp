// kernels/layer_norm.cpp — LayerNorm and RMSNorm over the last dimension, forward and backward.
// The "Add & Norm" of §3.1. Statistics use two passes (mean, then the centred sum of
// squares) for accuracy; the per-row mean and rstd are saved so the backward never
// recomputes them. Rows run in parallel; the dw/db reductions run in parallel over column
// blocks, each summing rows in order, so results do not depend on the thread count.
// float rows run the active ISA's vector kernels (simd/vector_kernels.cpp), double rows the
// plain loops below. Not done here: Welford single-pass statistics, strided inputs.
#include "kernels/layer_norm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/parallel_for.h"
#include "kernels/simd/vector_kernels.h"

namespace attn::kernels {

namespace {

// Below this many elements threads cost more than they save.
constexpr int64_t kParallelMin = 32768;
// Columns per task in the dw/db reductions (a few cache lines of each row).
constexpr int64_t kColumnBlock = 64;

// dw += sum_rows dy * (x - mean) * rstd and db += sum_rows dy (mean null: 0) with the vector
// kernel: columns in blocks across threads, rows in order within a block, as the loops below.
void norm_params_vector(const simd::VectorKernels& vk, float* dw, float* db, const float* dy,
                        const float* x, const float* mean, const float* rstd, int64_t rows,
                        int64_t D) {
  const int64_t blocks = (D + kColumnBlock - 1) / kColumnBlock;
  parallel_for(blocks, blocks > 1 && rows * D >= kParallelMin, [&](int64_t blk) {
    const int64_t i0 = blk * kColumnBlock, n = std::min(D, i0 + kColumnBlock) - i0;
    for (int64_t r = 0; r < rows; ++r)
      vk.norm_params_backward(dw ? dw + i0 : nullptr, db ? db + i0 : nullptr, dy + r * D + i0,
                              x + r * D + i0, mean ? mean[r] : 0.0f, rstd[r], n);
  });
}

}  // namespace

template <class T>
void layer_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t rows,
                        int64_t D, double eps) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    const float e = static_cast<float>(eps);
    parallel_for(rows, rows > 1 && rows * D >= kParallelMin,
                 [&](int64_t r) { vk.layer_norm_forward(y + r * D, mean + r, rstd + r, x + r * D, w, b, D, e); });
    return;
  }
  parallel_for(rows, rows > 1 && rows * D >= kParallelMin, [&](int64_t r) {
    const T* xr = x + r * D;  // [D]
    T* yr = y + r * D;        // [D]
    T m = 0;
    for (int64_t i = 0; i < D; ++i) m += xr[i];
    m /= static_cast<T>(D);
    T v = 0;  // biased variance, as nn.LayerNorm
    for (int64_t i = 0; i < D; ++i) {
      const T c = xr[i] - m;
      v += c * c;
    }
    v /= static_cast<T>(D);
    const T s = T(1) / std::sqrt(v + static_cast<T>(eps));
    for (int64_t i = 0; i < D; ++i) {
      const T xhat = (xr[i] - m) * s;
      yr[i] = xhat * (w ? w[i] : T(1)) + (b ? b[i] : T(0));
    }
    mean[r] = m;
    rstd[r] = s;
  });
}

// The row's sum into y, then the row kernel in place (it reads each block of its input before
// it stores that block of its output, so y may be its own input).
template <class T>
void add_layer_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* r, const T* w, const T* b, int64_t rows,
                            int64_t D, double eps) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    const float e = static_cast<float>(eps);
    parallel_for(rows, rows > 1 && rows * D >= kParallelMin, [&](int64_t i) {
      float* const yr = y + i * D;
      vk.add(yr, x + i * D, r + i * D, D);
      vk.layer_norm_forward(yr, mean + i, rstd + i, yr, w, b, D, e);
    });
    return;
  }
  parallel_for(rows, rows > 1 && rows * D >= kParallelMin, [&](int64_t i) {
    for (int64_t c = 0; c < D; ++c) y[i * D + c] = x[i * D + c] + r[i * D + c];
  });
  layer_norm_forward<T>(y, mean, rstd, y, w, b, rows, D, eps);
}

// Forward: xhat_i = (x_i - mean) * rstd, rstd = (var + eps)^(-1/2), y_i = xhat_i * w_i + b_i.
// Local derivatives (docs/derivations/layer_norm.md; llm.c doc/layernorm): with g = dy * w,
//   dx_i = rstd * (g_i - mean_j(g_j) - xhat_i * mean_j(g_j * xhat_j)),
//   dw_i = sum over rows of dy_i * xhat_i,  db_i = sum over rows of dy_i.
template <class T>
void layer_norm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean,
                         const T* rstd, int64_t rows, int64_t D) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    if (dx) {
      parallel_for(rows, rows > 1 && rows * D >= kParallelMin, [&](int64_t r) {
        vk.layer_norm_backward(dx + r * D, dy + r * D, x + r * D, w, mean[r], rstd[r], D);
      });
    }
    if (dw || db) norm_params_vector(vk, dw, db, dy, x, mean, rstd, rows, D);
    return;
  }
  if (dx) {
    parallel_for(rows, rows > 1 && rows * D >= kParallelMin, [&](int64_t r) {
      const T* xr = x + r * D;    // [D]
      const T* dyr = dy + r * D;  // [D]
      T* dxr = dx + r * D;        // [D]
      const T m = mean[r], s = rstd[r];
      T g_mean = 0, gx_mean = 0;
      for (int64_t i = 0; i < D; ++i) {
        const T g = dyr[i] * (w ? w[i] : T(1));
        g_mean += g;
        gx_mean += g * (xr[i] - m) * s;
      }
      g_mean /= static_cast<T>(D);
      gx_mean /= static_cast<T>(D);
      for (int64_t i = 0; i < D; ++i) {
        const T g = dyr[i] * (w ? w[i] : T(1));
        const T xhat = (xr[i] - m) * s;
        dxr[i] += s * (g - g_mean - xhat * gx_mean);
      }
    });
  }
  if (dw || db) {
    const int64_t blocks = (D + kColumnBlock - 1) / kColumnBlock;
    parallel_for(blocks, blocks > 1 && rows * D >= kParallelMin, [&](int64_t blk) {
      const int64_t i0 = blk * kColumnBlock, i1 = std::min(D, i0 + kColumnBlock);
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * D;    // [D]
        const T* dyr = dy + r * D;  // [D]
        const T m = mean[r], s = rstd[r];
        for (int64_t i = i0; i < i1; ++i) {
          if (dw) dw[i] += dyr[i] * (xr[i] - m) * s;
          if (db) db[i] += dyr[i];
        }
      }
    });
  }
}

template <class T>
void rms_norm_forward(T* y, T* rstd, const T* x, const T* w, int64_t rows, int64_t D, double eps) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    const float e = static_cast<float>(eps);
    parallel_for(rows, rows > 1 && rows * D >= kParallelMin,
                 [&](int64_t r) { vk.rms_norm_forward(y + r * D, rstd + r, x + r * D, w, D, e); });
    return;
  }
  parallel_for(rows, rows > 1 && rows * D >= kParallelMin, [&](int64_t r) {
    const T* xr = x + r * D;  // [D]
    T* yr = y + r * D;        // [D]
    T ms = 0;
    for (int64_t i = 0; i < D; ++i) ms += xr[i] * xr[i];
    ms /= static_cast<T>(D);
    const T s = T(1) / std::sqrt(ms + static_cast<T>(eps));
    for (int64_t i = 0; i < D; ++i) yr[i] = xr[i] * s * (w ? w[i] : T(1));
    rstd[r] = s;
  });
}

// Forward: y_i = x_i * rstd * w_i, rstd = (mean_j(x_j^2) + eps)^(-1/2).
// Local derivative: d rstd / dx_j = -rstd^3 * x_j / D, so with g = dy * w and xhat = x * rstd,
//   dx_j = g_j * rstd + sum_i g_i x_i * (-rstd^3 x_j / D) = rstd * (g_j - xhat_j * mean_i(g_i xhat_i)),
//   dw_i = sum over rows of dy_i * xhat_i.
// (The layer-norm formula without the mean terms, since nothing is centred.)
template <class T>
void rms_norm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd,
                       int64_t rows, int64_t D) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    if (dx) {
      parallel_for(rows, rows > 1 && rows * D >= kParallelMin,
                   [&](int64_t r) { vk.rms_norm_backward(dx + r * D, dy + r * D, x + r * D, w, rstd[r], D); });
    }
    // xhat = x * rstd is the layer-norm xhat with mean 0.
    if (dw) norm_params_vector(vk, dw, nullptr, dy, x, nullptr, rstd, rows, D);
    return;
  }
  if (dx) {
    parallel_for(rows, rows > 1 && rows * D >= kParallelMin, [&](int64_t r) {
      const T* xr = x + r * D;    // [D]
      const T* dyr = dy + r * D;  // [D]
      T* dxr = dx + r * D;        // [D]
      const T s = rstd[r];
      T gx_mean = 0;
      for (int64_t i = 0; i < D; ++i) gx_mean += dyr[i] * (w ? w[i] : T(1)) * xr[i] * s;
      gx_mean /= static_cast<T>(D);
      for (int64_t i = 0; i < D; ++i) {
        const T g = dyr[i] * (w ? w[i] : T(1));
        dxr[i] += s * (g - xr[i] * s * gx_mean);
      }
    });
  }
  if (dw) {
    const int64_t blocks = (D + kColumnBlock - 1) / kColumnBlock;
    parallel_for(blocks, blocks > 1 && rows * D >= kParallelMin, [&](int64_t blk) {
      const int64_t i0 = blk * kColumnBlock, i1 = std::min(D, i0 + kColumnBlock);
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * D;    // [D]
        const T* dyr = dy + r * D;  // [D]
        const T s = rstd[r];
        for (int64_t i = i0; i < i1; ++i) dw[i] += dyr[i] * xr[i] * s;
      }
    });
  }
}

template void layer_norm_forward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, int64_t, int64_t, double);
template void layer_norm_forward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, int64_t, int64_t, double);
template void add_layer_norm_forward<float>(float*, float*, float*, const float*, const float*, const float*,
                                            const float*, int64_t, int64_t, double);
template void add_layer_norm_forward<double>(double*, double*, double*, const double*, const double*, const double*,
                                             const double*, int64_t, int64_t, double);
template void layer_norm_backward<float>(float*, float*, float*, const float*, const float*,
                                         const float*, const float*, const float*, int64_t,
                                         int64_t);
template void layer_norm_backward<double>(double*, double*, double*, const double*, const double*,
                                          const double*, const double*, const double*, int64_t,
                                          int64_t);
template void rms_norm_forward<float>(float*, float*, const float*, const float*, int64_t, int64_t,
                                      double);
template void rms_norm_forward<double>(double*, double*, const double*, const double*, int64_t,
                                       int64_t, double);
template void rms_norm_backward<float>(float*, float*, const float*, const float*, const float*,
                                       const float*, int64_t, int64_t);
template void rms_norm_backward<double>(double*, double*, const double*, const double*,
                                        const double*, const double*, int64_t, int64_t);

}  // namespace attn::kernels
