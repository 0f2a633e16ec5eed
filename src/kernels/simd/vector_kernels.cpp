// kernels/simd/vector_kernels.cpp — the float32 vector kernels, written once over VecF<Isa>
// and compiled per ISA (cmake/isa_kernels.cmake: ATTN_SIMD_ISA = 0 scalar, 1 AVX2+FMA, 2 AVX-512F,
// -ffp-contract=off so only explicit fma() calls fuse), each build defining one table of
// vector_kernels.h: §3.1 layer norm, §3.2.1 softmax, §3.3 GELU/ReLU, §5.3 Adam, §5.4 dropout
// and cross entropy. All in an anonymous namespace, so the per-ISA copies never merge at link
// time. Not here: threads (the callers split rows and spans), float64, strided inputs.
#include <math.h>

#include <bit>
#include <cstdint>
#include <cstring>

#include "kernels/simd/vec.h"
#include "kernels/simd/vector_kernels.h"
#if ATTN_SIMD_ISA == 2
#include "kernels/transpose16.h"
#endif

#if !defined(ATTN_SIMD_ISA)
#error "vector_kernels.cpp is compiled through cmake/isa_kernels.cmake with ATTN_SIMD_ISA set"
#endif

namespace attn::kernels::simd {
namespace {

#if ATTN_SIMD_ISA == 2
constexpr Isa kIsa = Isa::Avx512;
#elif ATTN_SIMD_ISA == 1
constexpr Isa kIsa = Isa::Avx2;
#else
constexpr Isa kIsa = Isa::Scalar;
#endif

using V = VecF<kIsa>;
using R = V::reg;
constexpr int64_t W = V::width;
constexpr float kInf = __builtin_inff();

// ---- loop helpers ------------------------------------------------------------------------

// Calls body(i, k) on consecutive blocks of [0, n): k = W lanes, then one tail with k < W.
template <class F>
inline void for_blocks(int64_t n, F&& body) {
  int64_t i = 0;
  for (; i + W <= n; i += W) body(i, W);
  if (i < n) body(i, n - i);
}

// The k lanes at p, with `fill` in the lanes past a tail.
inline R load(const float* p, int64_t k, float fill = 0.0f) {
  return k == W ? V::load(p) : V::load_partial(p, k, fill);
}

inline void store(float* p, R v, int64_t k) {
  if (k == W)
    V::store(p, v);
  else
    V::store_partial(p, v, k);
}

inline R abs(R x) { return V::max(V::sub(V::zero(), x), x); }

// ---- exp ---------------------------------------------------------------------------------

// exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2] (Cody-Waite:
// ln 2 split in a 9-bit head, exact in n * head, and a tail), exp(r) by Cephes' expf
// polynomial (degree 7 in total). 2^n is applied as 2^(n>>1) * 2^(n - n>>1), so that n from
// -150 to 128 needs no special case: results overflow to +inf above 88.72 and underflow
// through the subnormals to 0 below -103.97. Measured against double exp over [-103, 88.7]:
// at most 1 ulp (AVX2, AVX-512); subnormal results within one subnormal step. NaN stays NaN
// (the clamps return their second operand). The scalar build calls the C library's expf
// instead, which is as accurate and faster one lane at a time.
inline R exp(R x) {
#if ATTN_SIMD_ISA == 0
  return expf(x);
#else
  x = V::max(V::set1(-104.0f), x);
  x = V::min(V::set1(89.0f), x);
  // Adding 1.5 * 2^23 rounds x / ln 2 to an integer and leaves it in the low mantissa bits.
  const R magic = V::set1(12582912.0f);
  const R t = V::add(V::mul(x, V::set1(1.44269504088896341f)), magic);
  const R n = V::sub(t, magic);
  const V::ireg ni = V::sub_i(V::as_int(t), V::as_int(magic));
  R r = V::fma(n, V::set1(-0.693359375f), x);
  r = V::fma(n, V::set1(2.12194440e-4f), r);
  R p = V::set1(1.9875691500e-4f);
  p = V::fma(p, r, V::set1(1.3981999507e-3f));
  p = V::fma(p, r, V::set1(8.3334519073e-3f));
  p = V::fma(p, r, V::set1(4.1665795894e-2f));
  p = V::fma(p, r, V::set1(1.6666665459e-1f));
  p = V::fma(p, r, V::set1(5.0000001201e-1f));
  p = V::add(V::fma(p, V::mul(r, r), r), V::set1(1.0f));
  const V::ireg n1 = V::sra_i(ni, 1);
  const V::ireg n2 = V::sub_i(ni, n1);
  const R s1 = V::as_float(V::shl_i(V::add_i(n1, V::set1_i(127)), 23));
  const R s2 = V::as_float(V::shl_i(V::add_i(n2, V::set1_i(127)), 23));
  return V::mul(V::mul(p, s1), s2);
#endif
}

void exp_span(float* y, const float* x, int64_t n) {
  for_blocks(n, [&](int64_t i, int64_t k) { store(y + i, exp(load(x + i, k)), k); });
}

// ---- softmax rows (softmax.h) ------------------------------------------------------------

float row_max(const float* x, int64_t n) {
  R m = V::set1(-kInf);
  for_blocks(n, [&](int64_t i, int64_t k) { m = V::max(load(x + i, k, -kInf), m); });
  return V::reduce_max(m);
}

// y = exp(x - m) stored, and the sum of y returned (tail lanes load -inf: exp gives 0).
float exp_shifted_sum(float* y, const float* x, float m, int64_t n) {
  const R vm = V::set1(m);
  R s = V::zero();
  for_blocks(n, [&](int64_t i, int64_t k) {
    const R e = exp(V::sub(load(x + i, k, -kInf), vm));
    store(y + i, e, k);
    s = V::add(s, e);
  });
  return V::reduce_add(s);
}

// The sum of exp(x - m), nothing stored (tail lanes load -inf: exp gives 0).
float exp_shifted_sum(const float* x, float m, int64_t n) {
  const R vm = V::set1(m);
  R s = V::zero();
  for_blocks(n, [&](int64_t i, int64_t k) { s = V::add(s, exp(V::sub(load(x + i, k, -kInf), vm))); });
  return V::reduce_add(s);
}

void fill(float* y, float value, int64_t n) {
  const R v = V::set1(value);
  for_blocks(n, [&](int64_t i, int64_t k) { store(y + i, v, k); });
}

void scale_span(float* out, const float* x, float s, int64_t n) {
  const R vs = V::set1(s);
  for_blocks(n, [&](int64_t i, int64_t k) { store(out + i, V::mul(load(x + i, k), vs), k); });
}

// y = exp(x - max) / sum exp(x - max); a row of -inf gives zeros.
void softmax_forward(float* y, const float* x, int64_t n) {
  const float m = row_max(x, n);
  if (m == -kInf) return fill(y, 0.0f, n);
  const float s = exp_shifted_sum(y, x, m, n);  // s >= 1: the max contributes exp(0)
  scale_span(y, y, 1.0f / s, n);
}

// Forward y_i = exp(x_i) / sum_j exp(x_j); dy_i/dx_j = y_i (delta_ij - y_j), so
// dx_j += y_j (dy_j - sum_i dy_i y_i).
void softmax_backward(float* dx, const float* dy, const float* y, int64_t n) {
  R acc = V::zero();
  for_blocks(n, [&](int64_t i, int64_t k) { acc = V::fma(load(dy + i, k), load(y + i, k), acc); });
  const R dot = V::set1(V::reduce_add(acc));
  for_blocks(n, [&](int64_t i, int64_t k) {
    const R g = V::sub(load(dy + i, k), dot);
    store(dx + i, V::fma(load(y + i, k), g, load(dx + i, k)), k);
  });
}

// y = x - max - log(sum exp(x - max)); a row of -inf stays -inf. y may be x (in place).
void log_softmax_forward(float* y, const float* x, int64_t n) {
  const float m = row_max(x, n);
  if (m == -kInf) return fill(y, -kInf, n);
  const float lse = m + logf(exp_shifted_sum(x, m, n));
  const R vl = V::set1(lse);
  for_blocks(n, [&](int64_t i, int64_t k) { store(y + i, V::sub(load(x + i, k), vl), k); });
}

// Forward y_i = x_i - log sum_j exp(x_j); dy_i/dx_j = delta_ij - exp(y_j), so
// dx_j += dy_j - exp(y_j) sum_i dy_i; a fully masked row (max y = -inf) gets nothing.
void log_softmax_backward(float* dx, const float* dy, const float* y, int64_t n) {
  if (row_max(y, n) == -kInf) return;
  R acc = V::zero();
  for_blocks(n, [&](int64_t i, int64_t k) { acc = V::add(acc, load(dy + i, k)); });
  const R s = V::set1(V::reduce_add(acc));
  for_blocks(n, [&](int64_t i, int64_t k) {
    const R d = V::sub(load(dy + i, k), V::mul(exp(load(y + i, k)), s));
    store(dx + i, V::add(load(dx + i, k), d), k);
  });
}

// ---- cross entropy rows (cross_entropy.h) --------------------------------------------------

void cross_entropy_stats(float* lse, float* sum_x, const float* x, int64_t n) {
  const float m = row_max(x, n);
  const R vm = V::set1(m);
  R s = V::zero(), sx = V::zero();
  for_blocks(n, [&](int64_t i, int64_t k) {
    s = V::add(s, exp(V::sub(load(x + i, k, -kInf), vm)));
    sx = V::add(sx, load(x + i, k));
  });
  *lse = m + logf(V::reduce_add(s));
  *sum_x = V::reduce_add(sx);
}

// Forward loss = (1 - eps)(lse - x_t) + eps/V sum_v (lse - x_v); d loss/d x_v = softmax_v - target_v.
// Here the dense part: dx_v += scale * (exp(x_v - lse) - eps / V).
void cross_entropy_backward(float* dx, const float* x, int64_t n, float lse, float scale,
                            float uniform) {
  const R vl = V::set1(lse), vs = V::set1(scale), vu = V::set1(uniform);
  for_blocks(n, [&](int64_t i, int64_t k) {
    const R p = V::sub(exp(V::sub(load(x + i, k), vl)), vu);
    store(dx + i, V::fma(vs, p, load(dx + i, k)), k);
  });
}

// ---- layer norm and RMS norm rows (layer_norm.h) -----------------------------------------

// Two passes: the mean, then the centred sum of squares (tail lanes load the mean: 0 added).
template <bool HasW, bool HasB>
void layer_norm_forward_t(float* y, float* mean, float* rstd, const float* x, const float* w,
                          const float* b, int64_t D, float eps) {
  R acc = V::zero();
  for_blocks(D, [&](int64_t i, int64_t k) { acc = V::add(acc, load(x + i, k)); });
  const float m = V::reduce_add(acc) / static_cast<float>(D);
  const R vm = V::set1(m);
  acc = V::zero();
  for_blocks(D, [&](int64_t i, int64_t k) {
    const R c = V::sub(load(x + i, k, m), vm);
    acc = V::fma(c, c, acc);
  });
  const float var = V::reduce_add(acc) / static_cast<float>(D);  // biased, as nn.LayerNorm
  const float s = 1.0f / __builtin_sqrtf(var + eps);
  const R vs = V::set1(s);
  for_blocks(D, [&](int64_t i, int64_t k) {
    R v = V::mul(V::sub(load(x + i, k), vm), vs);
    if constexpr (HasW && HasB)
      v = V::fma(v, load(w + i, k), load(b + i, k));
    else if constexpr (HasW)
      v = V::mul(v, load(w + i, k));
    else if constexpr (HasB)
      v = V::add(v, load(b + i, k));
    store(y + i, v, k);
  });
  *mean = m;
  *rstd = s;
}

void layer_norm_forward(float* y, float* mean, float* rstd, const float* x, const float* w,
                        const float* b, int64_t D, float eps) {
  if (w && b) return layer_norm_forward_t<true, true>(y, mean, rstd, x, w, b, D, eps);
  if (w) return layer_norm_forward_t<true, false>(y, mean, rstd, x, w, b, D, eps);
  if (b) return layer_norm_forward_t<false, true>(y, mean, rstd, x, w, b, D, eps);
  layer_norm_forward_t<false, false>(y, mean, rstd, x, w, b, D, eps);
}

// g = dy * w (dy alone without w); tail lanes load dy = 0, so g = 0 there.
template <bool HasW>
inline R grad_times_w(const float* dy, const float* w, int64_t i, int64_t k) {
  if constexpr (HasW)
    return V::mul(load(dy + i, k), load(w + i, k));
  else
    return load(dy + i, k);
}

// Forward xhat = (x - mean) rstd, y = xhat w + b. With g = dy w (derivation in
// docs/derivations/layer_norm.md): dx += rstd (g - mean(g) - xhat mean(g xhat)).
template <bool HasW>
void layer_norm_backward_t(float* dx, const float* dy, const float* x, const float* w, float mean,
                           float rstd, int64_t D) {
  const R vm = V::set1(mean), vs = V::set1(rstd);
  R ga = V::zero(), gxa = V::zero();
  for_blocks(D, [&](int64_t i, int64_t k) {
    const R g = grad_times_w<HasW>(dy, w, i, k);
    ga = V::add(ga, g);
    gxa = V::fma(g, V::mul(V::sub(load(x + i, k, mean), vm), vs), gxa);
  });
  const float inv_d = 1.0f / static_cast<float>(D);
  const R g_mean = V::set1(V::reduce_add(ga) * inv_d);
  const R gx_mean = V::set1(V::reduce_add(gxa) * inv_d);
  for_blocks(D, [&](int64_t i, int64_t k) {
    const R g = grad_times_w<HasW>(dy, w, i, k);
    const R xhat = V::mul(V::sub(load(x + i, k), vm), vs);
    const R inner = V::sub(V::sub(g, g_mean), V::mul(xhat, gx_mean));
    store(dx + i, V::fma(vs, inner, load(dx + i, k)), k);
  });
}

void layer_norm_backward(float* dx, const float* dy, const float* x, const float* w, float mean,
                         float rstd, int64_t D) {
  if (w) return layer_norm_backward_t<true>(dx, dy, x, w, mean, rstd, D);
  layer_norm_backward_t<false>(dx, dy, x, w, mean, rstd, D);
}

// Forward y = xhat w + b: dw += dy xhat, db += dy (one row, n columns).
void norm_params_backward(float* dw, float* db, const float* dy, const float* x, float mean,
                          float rstd, int64_t n) {
  const R vm = V::set1(mean), vs = V::set1(rstd);
  for_blocks(n, [&](int64_t i, int64_t k) {
    const R d = load(dy + i, k);
    if (dw) {
      const R xhat_dy = V::mul(V::mul(d, V::sub(load(x + i, k), vm)), vs);
      store(dw + i, V::add(load(dw + i, k), xhat_dy), k);
    }
    if (db) store(db + i, V::add(load(db + i, k), d), k);
  });
}

void rms_norm_forward(float* y, float* rstd, const float* x, const float* w, int64_t D, float eps) {
  R acc = V::zero();
  for_blocks(D, [&](int64_t i, int64_t k) {
    const R v = load(x + i, k);
    acc = V::fma(v, v, acc);
  });
  const float ms = V::reduce_add(acc) / static_cast<float>(D);
  const float s = 1.0f / __builtin_sqrtf(ms + eps);
  const R vs = V::set1(s);
  for_blocks(D, [&](int64_t i, int64_t k) {
    R v = V::mul(load(x + i, k), vs);
    if (w) v = V::mul(v, load(w + i, k));
    store(y + i, v, k);
  });
  *rstd = s;
}

// Forward y = x rstd w, rstd = (mean(x^2) + eps)^(-1/2). With g = dy w, xhat = x rstd:
// dx += rstd (g - xhat mean(g xhat)).
template <bool HasW>
void rms_norm_backward_t(float* dx, const float* dy, const float* x, const float* w, float rstd,
                         int64_t D) {
  const R vs = V::set1(rstd);
  R gxa = V::zero();
  for_blocks(D, [&](int64_t i, int64_t k) {
    gxa = V::fma(grad_times_w<HasW>(dy, w, i, k), V::mul(load(x + i, k), vs), gxa);
  });
  const R gx_mean = V::set1(V::reduce_add(gxa) / static_cast<float>(D));
  for_blocks(D, [&](int64_t i, int64_t k) {
    const R g = grad_times_w<HasW>(dy, w, i, k);
    const R xhat = V::mul(load(x + i, k), vs);
    store(dx + i, V::fma(vs, V::sub(g, V::mul(xhat, gx_mean)), load(dx + i, k)), k);
  });
}

void rms_norm_backward(float* dx, const float* dy, const float* x, const float* w, float rstd,
                       int64_t D) {
  if (w) return rms_norm_backward_t<true>(dx, dy, x, w, rstd, D);
  rms_norm_backward_t<false>(dx, dy, x, w, rstd, D);
}

// ---- element-wise spans (elementwise.h) ---------------------------------------------------
// Single IEEE operations per element (no fma): the same bits on every ISA.

void add_span(float* out, const float* a, const float* b, int64_t n) {
  for_blocks(n, [&](int64_t i, int64_t k) { store(out + i, V::add(load(a + i, k), load(b + i, k)), k); });
}
void sub_span(float* out, const float* a, const float* b, int64_t n) {
  for_blocks(n, [&](int64_t i, int64_t k) { store(out + i, V::sub(load(a + i, k), load(b + i, k)), k); });
}
void mul_span(float* out, const float* a, const float* b, int64_t n) {
  for_blocks(n, [&](int64_t i, int64_t k) { store(out + i, V::mul(load(a + i, k), load(b + i, k)), k); });
}

// dx += g * s (s = 1: add's gradient, s = -1: sub's; otherwise scale's backward).
void accumulate(float* dx, const float* g, float s, int64_t n) {
  const R vs = V::set1(s);
  for_blocks(n, [&](int64_t i, int64_t k) {
    store(dx + i, V::add(load(dx + i, k), V::mul(load(g + i, k), vs)), k);
  });
}

// accumulate(acc, xs[t], ws[t], n) for t = 0, 1, ..., count - 1 in turn (the same operations),
// in one pass over acc: four blocks of acc stay in registers while every row is added (four
// independent chains of additions), then the rest block by block.
void accumulate_rows(float* acc, const float* const* xs, const float* ws, int64_t count, int64_t n) {
  int64_t i0 = 0;
  for (; i0 + 4 * W <= n; i0 += 4 * W) {
    R a0 = V::load(acc + i0), a1 = V::load(acc + i0 + W), a2 = V::load(acc + i0 + 2 * W),
      a3 = V::load(acc + i0 + 3 * W);
    for (int64_t t = 0; t < count; ++t) {
      const R s = V::set1(ws[t]);
      const float* x = xs[t] + i0;
      a0 = V::add(a0, V::mul(V::load(x), s));
      a1 = V::add(a1, V::mul(V::load(x + W), s));
      a2 = V::add(a2, V::mul(V::load(x + 2 * W), s));
      a3 = V::add(a3, V::mul(V::load(x + 3 * W), s));
    }
    V::store(acc + i0, a0);
    V::store(acc + i0 + W, a1);
    V::store(acc + i0 + 2 * W, a2);
    V::store(acc + i0 + 3 * W, a3);
  }
  for_blocks(n - i0, [&](int64_t i, int64_t k) {
    R a = load(acc + i0 + i, k);
    for (int64_t t = 0; t < count; ++t) a = V::add(a, V::mul(load(xs[t] + i0 + i, k), V::set1(ws[t])));
    store(acc + i0 + i, a, k);
  });
}

// dx += g * other (mul's gradient: d(a b)/da = b).
void accumulate_mul(float* dx, const float* g, const float* other, int64_t n) {
  for_blocks(n, [&](int64_t i, int64_t k) {
    store(dx + i, V::add(load(dx + i, k), V::mul(load(g + i, k), load(other + i, k))), k);
  });
}

// y = x < 0 ? 0 : x (NaN passes through, as the scalar loop and PyTorch).
void relu_forward(float* y, const float* x, int64_t n) {
  const R z = V::zero();
  for_blocks(n, [&](int64_t i, int64_t k) {
    const R v = load(x + i, k);
    store(y + i, V::select(V::lt(v, z), z, v), k);
  });
}

// Forward y = max(x, 0): dy/dx = 1 for x > 0, else 0, so dx += x > 0 ? dy : 0.
void relu_backward(float* dx, const float* dy, const float* x, int64_t n) {
  const R z = V::zero();
  for_blocks(n, [&](int64_t i, int64_t k) {
    const R g = V::select(V::gt(load(x + i, k), z), load(dy + i, k), z);
    store(dx + i, V::add(load(dx + i, k), g), k);
  });
}

// ---- GELU ----------------------------------------------------------------------------------

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), for z >= 0: the Chebyshev fit of Numerical
// Recipes' erfcc (fractional error below 1.2e-7 for every z >= 0). `minus_z2` is -z^2. Vector
// builds only: the scalar build takes erfc from the C library (normal_cdf below).
#if ATTN_SIMD_ISA != 0
inline R erfc_nonneg(R z, R minus_z2) {
  const R t = V::div(V::set1(1.0f), V::fma(z, V::set1(0.5f), V::set1(1.0f)));
  R p = V::set1(0.17087277f);
  p = V::fma(p, t, V::set1(-0.82215223f));
  p = V::fma(p, t, V::set1(1.48851587f));
  p = V::fma(p, t, V::set1(-1.13520398f));
  p = V::fma(p, t, V::set1(0.27886807f));
  p = V::fma(p, t, V::set1(-0.18628806f));
  p = V::fma(p, t, V::set1(0.09678418f));
  p = V::fma(p, t, V::set1(0.37409196f));
  p = V::fma(p, t, V::set1(1.00002368f));
  p = V::fma(p, t, V::set1(-1.26551223f));
  return V::mul(t, exp(V::add(minus_z2, p)));
}
#endif

// Phi(x) = 0.5 erfc(-x / sqrt 2): with z = |x| / sqrt 2 and q = 0.5 erfc(z), Phi = q for
// x < 0 and 1 - q for x >= 0. Small relative error on both tails (no 1 + erf cancellation).
// The scalar build takes erfc from the C library.
inline R normal_cdf(R x, R z, R minus_z2) {
#if ATTN_SIMD_ISA == 0
  (void)z;
  (void)minus_z2;
  return 0.5f * erfcf(-x * kInvSqrt2);
#else
  const R q = V::mul(V::set1(0.5f), erfc_nonneg(z, minus_z2));
  return V::select(V::lt(x, V::zero()), q, V::sub(V::set1(1.0f), q));
#endif
}

// y = x Phi(x) (GELU, Hendrycks & Gimpel 2016; PyTorch's approximate='none').
void gelu_forward(float* y, const float* x, int64_t n) {
  for_blocks(n, [&](int64_t i, int64_t k) {
    const R v = load(x + i, k);
    const R z = V::mul(abs(v), V::set1(kInvSqrt2));
    const R minus_z2 = V::sub(V::zero(), V::mul(z, z));
    store(y + i, V::mul(v, normal_cdf(v, z, minus_z2)), k);
  });
}

// Forward y = x Phi(x); dy/dx = Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi).
void gelu_backward(float* dx, const float* dy, const float* x, int64_t n) {
  for_blocks(n, [&](int64_t i, int64_t k) {
    const R v = load(x + i, k);
    const R z = V::mul(abs(v), V::set1(kInvSqrt2));
    const R minus_z2 = V::sub(V::zero(), V::mul(z, z));  // -x^2 / 2
    const R pdf = V::mul(V::set1(kInvSqrt2Pi), exp(minus_z2));
    const R local = V::fma(v, pdf, normal_cdf(v, z, minus_z2));
    store(dx + i, V::fma(load(dy + i, k), local, load(dx + i, k)), k);
  });
}

constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluC = 0.044715f;

// s = sigmoid(2u) = 1 / (1 + e), e = exp(-2u), u = sqrt(2/pi) (x + 0.044715 x^3), so that
// 0.5 (1 + tanh u) = s with no cancellation for negative u (e = inf gives s = 0); `one_minus_s`
// gets 1 - s = e s, also without cancellation as s approaches 1.
inline R gelu_tanh_sigmoid(R v, R* one_minus_s = nullptr) {
  const R v2 = V::mul(v, v);
  const R u = V::mul(V::set1(kSqrt2OverPi), V::mul(v, V::fma(v2, V::set1(kGeluC), V::set1(1.0f))));
  const R e = exp(V::mul(V::set1(-2.0f), u));
  const R s = V::div(V::set1(1.0f), V::add(V::set1(1.0f), e));
  if (one_minus_s) *one_minus_s = V::select(V::lt(e, V::set1(kInf)), V::mul(e, s), V::set1(1.0f));
  return s;
}

// y = 0.5 x (1 + tanh u) = x sigmoid(2u) (PyTorch's approximate='tanh').
void gelu_tanh_forward(float* y, const float* x, int64_t n) {
  for_blocks(n, [&](int64_t i, int64_t k) {
    const R v = load(x + i, k);
    store(y + i, V::mul(v, gelu_tanh_sigmoid(v)), k);
  });
}

// Forward y = 0.5 x (1 + tanh u); dy/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u' with
// u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2). In s = sigmoid(2u): 1 + tanh u = 2s and
// 1 - tanh^2 u = 4 s (1 - s), so dy/dx = s + 2 x s (1 - s) u'.
void gelu_tanh_backward(float* dx, const float* dy, const float* x, int64_t n) {
  for_blocks(n, [&](int64_t i, int64_t k) {
    const R v = load(x + i, k);
    R one_minus_s;
    const R s = gelu_tanh_sigmoid(v, &one_minus_s);
    const R du = V::mul(V::set1(kSqrt2OverPi), V::fma(V::mul(v, v), V::set1(3.0f * kGeluC), V::set1(1.0f)));
    const R two_x_s = V::mul(V::mul(V::set1(2.0f), v), s);
    const R local = V::fma(V::mul(two_x_s, one_minus_s), du, s);
    store(dx + i, V::fma(load(dy + i, k), local, load(dx + i, k)), k);
  });
}

// ---- dropout (dropout.h) -------------------------------------------------------------------

// The keep mask of lanes [i, i + k): whole vectors read W bytes; a tail copies its k bytes
// into a zeroed block first, so no byte past the mask's end is read.
inline V::mask keep_mask(const uint8_t* keep, int64_t k) {
  if (k == W) return V::nonzero_u8(keep);
  uint8_t block[W] = {};
  for (int64_t j = 0; j < k; ++j) block[j] = keep[j];
  return V::nonzero_u8(block);
}

// keep[i] = field(i) >= t, field(i) = bits 16f..16f+15 of draws[i / 4], f = i % 4 (the mask
// definition of dropout.h). The vector builds compare whole vectors of 16-bit fields, which
// on x86 (little-endian) lie in memory in element order; the scalar build and every tail
// take the fields apart with shifts. Whole vectors only, so no byte past n is written.
void dropout_keep_from_draws(uint8_t* keep, const uint64_t* draws, int64_t n, uint32_t t) {
  int64_t i = 0;
#if ATTN_SIMD_ISA >= 1
  // AVX2 compares only signed 16-bit integers: flipping the top bit of both sides maps the
  // unsigned order onto the signed one, so drop = (t ^ 0x8000) > (field ^ 0x8000). Two
  // vectors of 16 fields pack to 32 bytes (per 128-bit lane, hence the 64-bit permute).
  // The AVX-512 build runs this too: AVX-512F alone (no BW) has no 16-bit or byte compares
  // at 512 bits, and widening the fields to 32-bit lanes measured slower (38 vs 31 us per
  // million elements).
  const __m256i bias = _mm256_set1_epi16(static_cast<short>(0x8000));
  const __m256i tv = _mm256_set1_epi16(static_cast<short>(t ^ 0x8000u));
  const __m256i one = _mm256_set1_epi8(1);
  for (; i + 32 <= n; i += 32) {
    const __m256i* d = reinterpret_cast<const __m256i*>(draws + i / 4);
    const __m256i a = _mm256_cmpgt_epi16(tv, _mm256_xor_si256(_mm256_loadu_si256(d), bias));
    const __m256i b = _mm256_cmpgt_epi16(tv, _mm256_xor_si256(_mm256_loadu_si256(d + 1), bias));
    const __m256i drop = _mm256_permute4x64_epi64(_mm256_packs_epi16(a, b), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(keep + i), _mm256_andnot_si256(drop, one));
  }
#else
  // Four compares in one 64-bit word: fields 0 and 2 (then 1 and 3) sit alone in 32-bit
  // slots, and (2^16 + field) - t keeps its bit 16 exactly when field >= t, with no borrow
  // leaving the slot. The four bits are then gathered into bytes 0..3 of w.
  const uint64_t lo16 = 0x0000FFFF0000FFFFull, bit16 = 0x0001000000010000ull;
  const uint64_t tt = (static_cast<uint64_t>(t) << 32) | t;
  for (; i + 4 <= n; i += 4) {
    const uint64_t r = draws[i / 4];
    const uint64_t even = (((r & lo16) | bit16) - tt) >> 16 & 0x0000000100000001ull;  // f 0, 2
    const uint64_t odd = ((((r >> 16) & lo16) | bit16) - tt) >> 16 & 0x0000000100000001ull;  // f 1, 3
    const uint64_t v = even | (odd << 8);  // bits 0, 8, 32, 40: fields 0, 1, 2, 3
    const uint32_t w = static_cast<uint32_t>(v | (v >> 16));  // bits 0, 8, 16, 24
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(keep + i, &w, 4);
    } else {
      for (int f = 0; f < 4; ++f) keep[i + f] = static_cast<uint8_t>(w >> (8 * f));
    }
  }
#endif
  for (; i < n; ++i) keep[i] = ((draws[i / 4] >> (16 * (i % 4))) & 0xFFFFu) >= t ? 1 : 0;
}

// Eight xoshiro256** lanes (Rng::next_u64 of src/core/rng.cpp) stepped together, as two
// halves of four 64-bit lanes in GCC vector types (lanes 0..3, then 4..7): every build uses
// the same code, 256-bit registers on AVX2 and AVX-512 (one 512-bit type measured slower on
// AVX2), pairs of 128-bit ones in the baseline build. The multiplications are shifts and adds
// (s1 * 5 = (s1 << 2) + s1, r * 9 = (r << 3) + r), which x86 has for 64-bit lanes where it has
// no 64-bit multiply before AVX-512DQ. The state stays in registers across the rounds (in the
// baseline build its 16 halves fill the register file and some spill); no function takes or
// returns a vector (that would change the ABI between the builds). Measured: 0.33 ns per draw
// on AVX2 and AVX-512, 0.74 in the baseline build, against ~0.9 for one serial generator.
void xoshiro_lanes(uint64_t* out, uint64_t* state, int64_t rounds) {
  typedef uint64_t u64x4 __attribute__((vector_size(32)));
  // One step of four lanes, writing their outputs to o (references only, so no vector crosses
  // a call boundary; it inlines, and the eight state vectors stay in registers).
  const auto step = [](uint64_t* o, u64x4& s0, u64x4& s1, u64x4& s2, u64x4& s3) {
    // result = rotl(s1 * 5, 7) * 9
    const u64x4 a = (s1 << 2) + s1;
    const u64x4 b = (a << 7) | (a >> 57);
    const u64x4 result = (b << 3) + b;
    std::memcpy(o, &result, sizeof(u64x4));
    const u64x4 t = s1 << 17;
    s2 ^= s0;
    s3 ^= s1;
    s1 ^= s2;
    s0 ^= s3;
    s2 ^= t;
    s3 = (s3 << 45) | (s3 >> 19);
  };
  // Word w of lanes 4h..4h+3 lies at state + 8w + 4h.
  const auto get = [state](u64x4& v, int w, int h) { std::memcpy(&v, state + 8 * w + 4 * h, sizeof(u64x4)); };
  const auto put = [state](const u64x4& v, int w, int h) { std::memcpy(state + 8 * w + 4 * h, &v, sizeof(u64x4)); };
  u64x4 a0, a1, a2, a3, b0, b1, b2, b3;  // words 0..3 of lanes 0..3 (a) and of lanes 4..7 (b)
  get(a0, 0, 0), get(a1, 1, 0), get(a2, 2, 0), get(a3, 3, 0);
  get(b0, 0, 1), get(b1, 1, 1), get(b2, 2, 1), get(b3, 3, 1);
  for (int64_t r = 0; r < rounds; ++r) {
    step(out + 8 * r, a0, a1, a2, a3);
    step(out + 8 * r + 4, b0, b1, b2, b3);
  }
  put(a0, 0, 0), put(a1, 1, 0), put(a2, 2, 0), put(a3, 3, 0);
  put(b0, 0, 1), put(b1, 1, 1), put(b2, 2, 1), put(b3, 3, 1);
}

// out = keep ? x * scale : 0 (one multiply: the same bits on every ISA).
void dropout_forward(float* out, const uint8_t* keep, const float* x, float scale, int64_t n) {
  const R vs = V::set1(scale), z = V::zero();
  for_blocks(n, [&](int64_t i, int64_t k) {
    store(out + i, V::select(keep_mask(keep + i, k), V::mul(load(x + i, k), vs), z), k);
  });
}

// Forward out = x * keep * scale; d out / dx = keep * scale, so dx += keep ? dout * scale : 0.
void dropout_backward(float* dx, const float* dout, const uint8_t* keep, float scale, int64_t n) {
  const R vs = V::set1(scale), z = V::zero();
  for_blocks(n, [&](int64_t i, int64_t k) {
    const R g = V::select(keep_mask(keep + i, k), V::mul(load(dout + i, k), vs), z);
    store(dx + i, V::add(load(dx + i, k), g), k);
  });
}

// out = residual + (keep ? x * scale : 0): dropout_forward's select, then one add, so a dropped
// element gives residual + 0.0f exactly as the unfused add does (-0 becomes +0 there too).
void dropout_add_forward(float* out, const uint8_t* keep, const float* residual, const float* x, float scale,
                         int64_t n) {
  const R vs = V::set1(scale), z = V::zero();
  for_blocks(n, [&](int64_t i, int64_t k) {
    const R d = V::select(keep_mask(keep + i, k), V::mul(load(x + i, k), vs), z);
    store(out + i, V::add(load(residual + i, k), d), k);
  });
}

// out = keep ? relu(x) * scale : 0 with relu_forward's select (x < 0 ? 0 : x: -0 and NaN pass
// through), then dropout_forward's: the composition's operations in its order.
void relu_dropout_forward(float* out, const uint8_t* keep, const float* x, float scale, int64_t n) {
  const R vs = V::set1(scale), z = V::zero();
  for_blocks(n, [&](int64_t i, int64_t k) {
    const R v = load(x + i, k);
    const R r = V::select(V::lt(v, z), z, v);
    store(out + i, V::select(keep_mask(keep + i, k), V::mul(r, vs), z), k);
  });
}

// Forward y = keep ? relu(x) * scale : 0; dy/dx = scale where keep and x > 0, else 0, and with
// scale >= 1 that is exactly where y > 0 (no product underflows; -0 and NaN give no y > 0). So
// dx = 0 + (y > 0 ? dout * scale : 0), written: the + 0 repeats the unfused relu_backward's
// accumulation into a zeroed buffer, which turns a -0 gradient into +0.
void relu_dropout_backward_write(float* dx, const float* dout, const float* y, float scale, int64_t n) {
  const R vs = V::set1(scale), z = V::zero();
  for_blocks(n, [&](int64_t i, int64_t k) {
    const R g = V::select(V::gt(load(y + i, k), z), V::mul(load(dout + i, k), vs), z);
    store(dx + i, V::add(z, g), k);
  });
}

// ---- Adam (adam.h) -------------------------------------------------------------------------
// torch.optim.Adam's single-tensor update, one IEEE operation at a time (no fma): the same
// bits as the scalar loop on every ISA.
void adam_update(float* p, float* m, float* v, const float* g, int64_t n, const AdamStep<float>& s) {
  const R wd = V::set1(s.weight_decay), decay = V::set1(s.decay);
  const R w1 = V::set1(s.one_minus_beta1), b2 = V::set1(s.beta2), c2 = V::set1(s.one_minus_beta2);
  const R step = V::set1(s.neg_step_size), bc2 = V::set1(s.bc2_sqrt), eps = V::set1(s.eps);
  for_blocks(n, [&](int64_t i, int64_t k) {
    R pi = load(p + i, k), gi = load(g + i, k);
    if (s.l2) gi = V::add(gi, V::mul(wd, pi));
    if (s.decoupled) pi = V::mul(pi, decay);
    R mi = load(m + i, k), vi = load(v + i, k);
    mi = V::add(mi, V::mul(w1, V::sub(gi, mi)));
    vi = V::add(V::mul(vi, b2), V::mul(c2, V::mul(gi, gi)));
    // Tail lanes load v = 0 and eps > 0, so the division stays finite there.
    const R denom = V::add(V::div(V::sqrt(vi), bc2), eps);
    pi = V::add(pi, V::mul(step, V::div(mi, denom)));
    store(p + i, pi, k);
    store(m + i, mi, k);
    store(v + i, vi, k);
  });
}

// ---- tiled attention rows (attention_flash.h) ---------------------------------------------

// max(init, max_i x[i]) (tail lanes load -inf).
float row_max_from(const float* x, int64_t n, float init) {
  const float m = row_max(x, n);
  return m > init ? m : init;
}

// Forward D = sum_j P_j dP_j, S -> P = softmax: dS_j = P_j (dP_j - D) (one row, D given).
void softmax_grad_shifted(float* ds, const float* p, const float* dp, float d, int64_t n) {
  const R vd = V::set1(d);
  for_blocks(n, [&](int64_t i, int64_t k) {
    store(ds + i, V::mul(load(p + i, k), V::sub(load(dp + i, k), vd)), k);
  });
}

float dot(const float* x, const float* y, int64_t n) {
  R acc = V::zero();
  for_blocks(n, [&](int64_t i, int64_t k) { acc = V::fma(load(x + i, k), load(y + i, k), acc); });
  return V::reduce_add(acc);
}

// out[j] = dot(x, ys[j], n) for j < count, four at a time (independent chains), each with dot's
// operations.
void dots(float* out, const float* x, const float* const* ys, int64_t count, int64_t n) {
  int64_t j = 0;
  for (; j + 4 <= count; j += 4) {
    const float *y0 = ys[j], *y1 = ys[j + 1], *y2 = ys[j + 2], *y3 = ys[j + 3];
    R a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
    for_blocks(n, [&](int64_t i, int64_t k) {
      const R xv = load(x + i, k);
      a0 = V::fma(xv, load(y0 + i, k), a0);
      a1 = V::fma(xv, load(y1 + i, k), a1);
      a2 = V::fma(xv, load(y2 + i, k), a2);
      a3 = V::fma(xv, load(y3 + i, k), a3);
    });
    out[j] = V::reduce_add(a0);
    out[j + 1] = V::reduce_add(a1);
    out[j + 2] = V::reduce_add(a2);
    out[j + 3] = V::reduce_add(a3);
  }
  for (; j < count; ++j) out[j] = dot(x, ys[j], n);
}

// ---- small products and softmax rows of the short-sequence attention (attention_short.h) --
// Sizes here are a few dozen at most: the kernels avoid horizontal sums and per-row calls,
// whose latency, not arithmetic, would dominate, and work on whole slices at a time.

// b^T for columns [j0, j0 + w) of the product, w <= W: bt[t * W + jj] = b[(j0 + jj) * ldb + t].
// AVX-512 moves 16 x 16 blocks through registers (lanes jj >= w become 0); the other builds copy
// one element at a time.
inline void transpose_block(float* bt, const float* b, int64_t ldb, int64_t j0, int64_t w, int64_t K) {
#if ATTN_SIMD_ISA == 2
  for (int64_t t0 = 0; t0 < K; t0 += 16) {
    const int64_t kt = K - t0 < 16 ? K - t0 : 16;
    const __mmask16 m = static_cast<__mmask16>((1u << kt) - 1u);
    __m512 v[16];  // unrolled loops: the 16 vectors stay in registers
#pragma GCC unroll 16
    for (int jj = 0; jj < 16; ++jj)
      v[jj] = jj < w ? _mm512_maskz_loadu_ps(m, b + (j0 + jj) * ldb + t0) : _mm512_setzero_ps();
    transpose16_avx512(v);
    // All 16 rows: those past K are never read, and t0 + 16 <= kTileMaxK rows fit the buffer.
#pragma GCC unroll 16
    for (int tt = 0; tt < 16; ++tt) _mm512_storeu_ps(bt + (t0 + tt) * W, v[tt]);
  }
#else
  for (int64_t jj = 0; jj < w; ++jj) {
    const float* bj = b + (j0 + jj) * ldb;
    for (int64_t t = 0; t < K; ++t) bt[t * W + jj] = bj[t];
  }
#endif
}

// Rows i0 .. i0 + Rows - 1 of alpha * A bb (+ c) for one block of k <= W columns: c_r = sum_t
// A(i0 + r, t) bb[t], bb's rows ldb apart, A(i, t) at a[i * step_i + t * step_k]. Each row is
// its own chain of FMAs over t in order; Rows chains side by side hide the FMA latency (a
// short slice has a dozen rows, so they are taken in one pass). The unrolled loops over r keep
// the accumulators in registers.
template <int Rows>
inline void store_rows(float* c, int64_t ldc, const float* a, int64_t step_i, int64_t step_k, const float* bb,
                       int64_t ldb, int64_t K, int64_t k, float alpha, bool accumulate) {
  R acc[Rows];
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r) acc[r] = V::zero();
  for (int64_t t = 0; t < K; ++t) {
    const R x = load(bb + t * ldb, k);
    const float* at = a + t * step_k;
#pragma GCC unroll 16
    for (int r = 0; r < Rows; ++r) acc[r] = V::fma(V::set1(at[r * step_i]), x, acc[r]);
  }
  const R va = V::set1(alpha);
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r) {
    float* row = c + r * ldc;
    const R s = V::mul(va, acc[r]);
    store(row, accumulate ? V::add(load(row, k), s) : s, k);
  }
}

// The most rows one pass takes: 16 accumulators and the operands fit AVX-512's 32 registers;
// AVX2 has 16 registers, the scalar build a handful.
constexpr int kMaxRows = ATTN_SIMD_ISA == 2 ? 16 : 8;

// store_rows over rows [0, M): passes of 8 rows while more than kMaxRows remain, then the rest
// in one pass.
inline void store_all_rows(float* c, int64_t ldc, const float* a, int64_t step_i, int64_t step_k, const float* bb,
                           int64_t ldb, int64_t M, int64_t K, int64_t k, float alpha, bool accumulate) {
  int64_t i = 0;
  for (; M - i > kMaxRows; i += 8)
    store_rows<8>(c + i * ldc, ldc, a + i * step_i, step_i, step_k, bb, ldb, K, k, alpha, accumulate);
  float* ci = c + i * ldc;
  const float* ai = a + i * step_i;
  switch (M - i) {
#define ATTN_ROWS_CASE(n) \
  case n:                 \
    return store_rows<n>(ci, ldc, ai, step_i, step_k, bb, ldb, K, k, alpha, accumulate);
    ATTN_ROWS_CASE(1)
    ATTN_ROWS_CASE(2)
    ATTN_ROWS_CASE(3)
    ATTN_ROWS_CASE(4)
    ATTN_ROWS_CASE(5)
    ATTN_ROWS_CASE(6)
    ATTN_ROWS_CASE(7)
    ATTN_ROWS_CASE(8)
#if ATTN_SIMD_ISA == 2
    ATTN_ROWS_CASE(9)
    ATTN_ROWS_CASE(10)
    ATTN_ROWS_CASE(11)
    ATTN_ROWS_CASE(12)
    ATTN_ROWS_CASE(13)
    ATTN_ROWS_CASE(14)
    ATTN_ROWS_CASE(15)
    ATTN_ROWS_CASE(16)
#endif
#undef ATTN_ROWS_CASE
    default:
      return;
  }
}

// c[i, :] = alpha * sum_t A(i, t) b[t, :] (+ c[i, :]), by blocks of W columns.
void tile_nn(float* c, int64_t ldc, const float* a, int64_t lda, bool trans_a, const float* b, int64_t ldb,
             int64_t M, int64_t N, int64_t K, float alpha, bool accumulate) {
  const int64_t step_i = trans_a ? 1 : lda, step_k = trans_a ? lda : 1;
  for_blocks(N, [&](int64_t n, int64_t k) {
    store_all_rows(c + n, ldc, a, step_i, step_k, b + n, ldb, M, K, k, alpha, accumulate);
  });
}

// c[i, j] = alpha * <a_i, b_j>. With K <= kTileMaxK the columns are taken W at a time: that
// block of b is transposed into a [K, W] buffer and the product runs as tile_nn's (no
// horizontal sums); longer rows fall back to one dot product per entry.
constexpr int64_t kTileMaxK = 256;

void tile_nt(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t M,
             int64_t N, int64_t K, float alpha) {
  if (K > kTileMaxK) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        R s = V::zero();
        for_blocks(K, [&](int64_t t, int64_t k) {
          s = V::fma(load(a + i * lda + t, k), load(b + j * ldb + t, k), s);
        });
        c[i * ldc + j] = alpha * V::reduce_add(s);
      }
    return;
  }
  alignas(64) float bt[kTileMaxK * W];
  for_blocks(N, [&](int64_t j, int64_t k) {
    transpose_block(bt, b, ldb, j, k, K);
    store_all_rows(c + j, ldc, a, lda, 1, bt, W, M, K, k, alpha, false);
  });
}

// p = softmax(s) row by row (`rows` rows of n entries; s rows ls apart, p rows lp apart):
// max subtracted, exp, divided by the sum; with d, also pd = p ∘ d (rows lp apart, d's too).
// A row of at most W entries stays in one register from load to store; where s and p are
// different buffers a row's load never waits for the previous row's store. In place (p == s)
// every entry is read before it is written. Longer rows take the span kernels. A row that is
// -inf everywhere (all keys masked) becomes zeros.
// Short rows set probabilities below exp(-87) (1.7e-38) to 0 rather than to their subnormal
// values, which cost several times a normal exp; the long-row path keeps them.
void softmax_rows(float* p, int64_t lp, const float* s, int64_t ls, float* pd, const float* d, int64_t rows,
                  int64_t n) {
  if (n == 0) return;
  for (int64_t i = 0; i < rows; ++i) {
    const float* x = s + i * ls;
    float* row = p + i * lp;
    if (n <= W) {
      const R v = load(x, n, -kInf);
      const float m = V::reduce_max(v);
      R e = V::zero();
      if (m != -kInf) {
        const R t = V::sub(v, V::set1(m)), cut = V::set1(-87.0f);
        e = V::select(V::lt(t, cut), V::zero(), exp(V::max(t, cut)));
        e = V::mul(e, V::set1(1.0f / V::reduce_add(e)));
      }
      store(row, e, n);
      if (d) store(pd + i * lp, V::mul(e, load(d + i * lp, n)), n);
      continue;
    }
    const float m = row_max(x, n);
    if (m == -kInf) {
      fill(row, 0.0f, n);
    } else {
      const float sum = exp_shifted_sum(row, x, m, n);  // >= 1: the maximum gives exp(0)
      scale_span(row, row, 1.0f / sum, n);
    }
    if (d) mul_span(pd + i * lp, row, d + i * lp, n);
  }
}

// dS = P ∘ (dP' - <dP', P>) row by row, in place in ds (rows lds apart; p and d rows n apart),
// where dP' = dP ∘ d (d may be null: dP' = dP): the softmax backward through the dropout.
void softmax_grad_rows(float* ds, int64_t lds, const float* p, const float* d, int64_t rows, int64_t n) {
  for (int64_t i = 0; i < rows; ++i) {
    float* g = ds + i * lds;
    const float* pi = p + i * n;
    if (n <= W) {
      R gv = load(g, n);
      if (d) gv = V::mul(gv, load(d + i * n, n));
      const R pv = load(pi, n);
      store(g, V::mul(pv, V::sub(gv, V::set1(V::reduce_add(V::mul(gv, pv))))), n);
    } else {
      if (d) mul_span(g, g, d + i * n, n);
      softmax_grad_shifted(g, pi, g, dot(g, pi, n), n);
    }
  }
}

// ---- column sums ---------------------------------------------------------------------------

// Forward b broadcast over the rows: y[r, j] = ... + b[j], so db[j] += sum_r dy[r, j]. Each
// column's running sum starts from db[j] and adds the rows in order (single IEEE additions: the
// same bits on every ISA); four registers of columns stay in registers across all rows.
void column_sums(float* db, const float* dy, int64_t rows, int64_t cols, int64_t ld) {
  int64_t j = 0;
  for (; j + 4 * W <= cols; j += 4 * W) {
    R a0 = V::load(db + j), a1 = V::load(db + j + W);
    R a2 = V::load(db + j + 2 * W), a3 = V::load(db + j + 3 * W);
    const float* p = dy + j;
    for (int64_t r = 0; r < rows; ++r, p += ld) {
      a0 = V::add(a0, V::load(p));
      a1 = V::add(a1, V::load(p + W));
      a2 = V::add(a2, V::load(p + 2 * W));
      a3 = V::add(a3, V::load(p + 3 * W));
    }
    V::store(db + j, a0);
    V::store(db + j + W, a1);
    V::store(db + j + 2 * W, a2);
    V::store(db + j + 3 * W, a3);
  }
  for (; j < cols; j += W) {  // one register (or a tail) at a time
    const int64_t k = cols - j < W ? cols - j : W;
    R a = load(db + j, k);
    const float* p = dy + j;
    for (int64_t r = 0; r < rows; ++r, p += ld) a = V::add(a, load(p, k));
    store(db + j, a, k);
  }
}

constexpr VectorKernels kTable = {
    .isa = kIsa,
    .exp = exp_span,
    .softmax_forward = softmax_forward,
    .softmax_backward = softmax_backward,
    .log_softmax_forward = log_softmax_forward,
    .log_softmax_backward = log_softmax_backward,
    .cross_entropy_stats = cross_entropy_stats,
    .cross_entropy_backward = cross_entropy_backward,
    .layer_norm_forward = layer_norm_forward,
    .layer_norm_backward = layer_norm_backward,
    .norm_params_backward = norm_params_backward,
    .rms_norm_forward = rms_norm_forward,
    .rms_norm_backward = rms_norm_backward,
    .add = add_span,
    .sub = sub_span,
    .mul = mul_span,
    .scale = scale_span,
    .accumulate = accumulate,
    .accumulate_rows = accumulate_rows,
    .accumulate_mul = accumulate_mul,
    .relu_forward = relu_forward,
    .relu_backward = relu_backward,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .gelu_tanh_forward = gelu_tanh_forward,
    .gelu_tanh_backward = gelu_tanh_backward,
    .dropout_keep_from_draws = dropout_keep_from_draws,
    .xoshiro_lanes = xoshiro_lanes,
    .dropout_forward = dropout_forward,
    .dropout_backward = dropout_backward,
    .dropout_add_forward = dropout_add_forward,
    .relu_dropout_forward = relu_dropout_forward,
    .relu_dropout_backward_write = relu_dropout_backward_write,
    .adam_update = adam_update,
    .row_max = row_max_from,
    .exp_shifted_sum = exp_shifted_sum,
    .softmax_grad_shifted = softmax_grad_shifted,
    .dot = dot,
    .dots = dots,
    .column_sums = column_sums,
    .tile_nt = tile_nt,
    .tile_nn = tile_nn,
    .softmax_rows = softmax_rows,
    .softmax_grad_rows = softmax_grad_rows,
};

}  // namespace

namespace detail {
#if ATTN_SIMD_ISA == 2
const VectorKernels kAvx512Kernels = kTable;
#elif ATTN_SIMD_ISA == 1
const VectorKernels kAvx2Kernels = kTable;
#else
const VectorKernels kScalarKernels = kTable;
#endif
}  // namespace detail

}  // namespace attn::kernels::simd
