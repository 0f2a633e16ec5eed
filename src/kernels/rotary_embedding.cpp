// kernels/rotary_embedding.cpp — the rotary position embedding (RoPE) kernel pair (RoFormer, Eq. 34): the rotation of each
// feature pair by a position-dependent angle and, for the backward, the inverse rotation. One
// table of cos/sin per (batch row, position) is computed in double and shared by all heads.
// Parallel over B*T rows with OpenMP; no SIMD of its own.
#include "kernels/rotary_embedding.h"

#include <cmath>
#include <vector>

#include "kernels/parallel_for.h"

namespace attn::kernels {

namespace {

// Below this many elements a call stays on one thread.
constexpr int64_t kParallelWork = 32768;

// Rotates every head of one (b, t) row by the angles whose cos/sin are c, s [Dh/2], with the
// sign of sin given by `sign` (+1 forward, -1 inverse), accumulating into out when `add`.
template <class T>
void rotate_row(T* out, const T* x, const double* c, const double* s, double sign, int64_t H, int64_t row_stride,
                int64_t Dh, bool half, bool add) {
  const int64_t n = Dh / 2;
  for (int64_t h = 0; h < H; ++h) {
    const T* xr = x + h * row_stride;
    T* orow = out + h * row_stride;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t ia = half ? i : 2 * i, ib = half ? i + n : 2 * i + 1;
      const double a = static_cast<double>(xr[ia]), b = static_cast<double>(xr[ib]);
      const double sn = sign * s[i];
      const T ra = static_cast<T>(a * c[i] - b * sn), rb = static_cast<T>(a * sn + b * c[i]);
      if (add) {
        orow[ia] += ra;
        orow[ib] += rb;
      } else {
        orow[ia] = ra;
        orow[ib] = rb;
      }
    }
  }
}

// Forward (sign +1, overwrite) or backward (sign -1, accumulate) over the whole tensor.
template <class T>
void rotate_all(T* out, const T* x, const int64_t* positions, int64_t pos_stride_b, int64_t B, int64_t H,
                int64_t T_, int64_t Dh, double theta, bool half, double sign, bool add) {
  const int64_t n = Dh / 2;
  // Inverse frequencies theta^(-2i / Dh), i = 0 .. Dh/2 - 1.
  std::vector<double> inv_freq(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    inv_freq[static_cast<size_t>(i)] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(Dh));
  const int64_t rows = B * T_;
  parallel_ranges(rows, rows > 1 && rows * H * Dh >= kParallelWork, [&](int64_t row_begin, int64_t row_end) {
    std::vector<double> c(static_cast<size_t>(n)), s(static_cast<size_t>(n));  // [Dh/2] each
    for (int64_t row = row_begin; row < row_end; ++row) {
      const int64_t b = row / T_, t = row % T_;
      const double p = static_cast<double>(positions[b * pos_stride_b + t]);
      for (int64_t i = 0; i < n; ++i) {
        const double angle = p * inv_freq[static_cast<size_t>(i)];
        c[static_cast<size_t>(i)] = std::cos(angle);
        s[static_cast<size_t>(i)] = std::sin(angle);
      }
      // Element (b, h, t, :) sits at ((b * H + h) * T + t) * Dh; heads are T * Dh apart.
      const int64_t base = (b * H * T_ + t) * Dh;
      rotate_row(out + base, x + base, c.data(), s.data(), sign, H, T_ * Dh, Dh, half, add);
    }
  });
}

}  // namespace

template <class T>
void rotary_embedding_forward(T* out, const T* x, const int64_t* positions, int64_t pos_stride_b, int64_t B,
                              int64_t H, int64_t T_, int64_t Dh, double theta, bool half) {
  rotate_all(out, x, positions, pos_stride_b, B, H, T_, Dh, theta, half, 1.0, false);
}

// Backward of out = R(angle) x per pair: d out_a/d x_a = cos, d out_a/d x_b = -sin,
// d out_b/d x_a = sin, d out_b/d x_b = cos, so dx = R^T dout = R(-angle) dout.
template <class T>
void rotary_embedding_backward(T* dx, const T* dout, const int64_t* positions, int64_t pos_stride_b, int64_t B,
                               int64_t H, int64_t T_, int64_t Dh, double theta, bool half) {
  rotate_all(dx, dout, positions, pos_stride_b, B, H, T_, Dh, theta, half, -1.0, true);
}

template void rotary_embedding_forward<float>(float*, const float*, const int64_t*, int64_t, int64_t, int64_t,
                                              int64_t, int64_t, double, bool);
template void rotary_embedding_forward<double>(double*, const double*, const int64_t*, int64_t, int64_t, int64_t,
                                               int64_t, int64_t, double, bool);
template void rotary_embedding_backward<float>(float*, const float*, const int64_t*, int64_t, int64_t, int64_t,
                                               int64_t, int64_t, double, bool);
template void rotary_embedding_backward<double>(double*, const double*, const int64_t*, int64_t, int64_t, int64_t,
                                                int64_t, int64_t, double, bool);

}  // namespace attn::kernels
