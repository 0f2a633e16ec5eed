// kernels/simd/vector_kernels.h — the table of float32 vector kernels, one table per ISA.
// vector_kernels.cpp is compiled once per ISA (scalar, AVX2+FMA, AVX-512F) and each build
// fills one VectorKernels; vector_kernels() hands out the active one (isa.h). The kernels
// work on one contiguous row or span: threading and the float64 paths stay in the callers
// (softmax.cpp, layer_norm.cpp, ...). Spans may have any length (tails use masked loads).
// Not here: float64 (the reference dtype of the gradient checks keeps the plain loops).
#pragma once

#include <cstdint>

#include "kernels/adam.h"
#include "kernels/simd/isa.h"

namespace attn::kernels::simd {

struct VectorKernels {
  Isa isa;

  // y[i] = exp(x[i]) within 1 ulp (tests/unit/kernels/vector_kernels_test.cpp), 0 below
  // -103.97 (under half the smallest subnormal), +inf above 88.72, NaN for NaN.
  void (*exp)(float* y, const float* x, int64_t n);

  // ---- one row of softmax.h's kernels (n = the row's length) ------------------------------
  void (*softmax_forward)(float* y, const float* x, int64_t n);
  void (*softmax_backward)(float* dx, const float* dy, const float* y, int64_t n);
  void (*log_softmax_forward)(float* y, const float* x, int64_t n);
  void (*log_softmax_backward)(float* dx, const float* dy, const float* y, int64_t n);

  // ---- one row of cross_entropy.h -----------------------------------------------------------
  // lse = log(sum_v exp(x[v])), sum_x = sum_v x[v].
  void (*cross_entropy_stats)(float* lse, float* sum_x, const float* x, int64_t n);
  // dx[v] += scale * (exp(x[v] - lse) - uniform).
  void (*cross_entropy_backward)(float* dx, const float* x, int64_t n, float lse, float scale,
                                 float uniform);

  // ---- one row of layer_norm.h (w, b may be null) ------------------------------------------
  void (*layer_norm_forward)(float* y, float* mean, float* rstd, const float* x, const float* w,
                             const float* b, int64_t D, float eps);
  void (*layer_norm_backward)(float* dx, const float* dy, const float* x, const float* w,
                              float mean, float rstd, int64_t D);
  // dw[i] += dy[i] * (x[i] - mean) * rstd and db[i] += dy[i] for i < n (either may be null):
  // one row's share of the parameter gradients, for a block of n columns.
  void (*norm_params_backward)(float* dw, float* db, const float* dy, const float* x, float mean,
                               float rstd, int64_t n);
  void (*rms_norm_forward)(float* y, float* rstd, const float* x, const float* w, int64_t D,
                           float eps);
  void (*rms_norm_backward)(float* dx, const float* dy, const float* x, const float* w, float rstd,
                            int64_t D);

  // ---- element-wise spans (elementwise.h) ------------------------------------------------
  void (*add)(float* out, const float* a, const float* b, int64_t n);  // out = a + b
  void (*sub)(float* out, const float* a, const float* b, int64_t n);  // out = a - b
  void (*mul)(float* out, const float* a, const float* b, int64_t n);  // out = a * b
  void (*scale)(float* out, const float* x, float s, int64_t n);       // out = x * s
  void (*accumulate)(float* dx, const float* g, float s, int64_t n);   // dx += g * s
  // accumulate(acc, xs[t], ws[t], n) for t = 0 .. count - 1 in turn: its bits, one pass over acc.
  void (*accumulate_rows)(float* acc, const float* const* xs, const float* ws, int64_t count, int64_t n);
  void (*accumulate_mul)(float* dx, const float* g, const float* other, int64_t n);  // dx += g * other
  void (*relu_forward)(float* y, const float* x, int64_t n);
  void (*relu_backward)(float* dx, const float* dy, const float* x, int64_t n);
  void (*gelu_forward)(float* y, const float* x, int64_t n);
  void (*gelu_backward)(float* dx, const float* dy, const float* x, int64_t n);
  void (*gelu_tanh_forward)(float* y, const float* x, int64_t n);
  void (*gelu_tanh_backward)(float* dx, const float* dy, const float* x, int64_t n);

  // ---- dropout (dropout.h): keep[i] is 0 or 1 ---------------------------------------------
  // keep[i] = field(i) >= t for i < n, where field(i) = bits 16f..16f+15 of draws[i / 4],
  // f = i % 4 (t <= 65535; t = 0 keeps all). Reads ceil(n / 4) draws, writes n bytes.
  void (*dropout_keep_from_draws)(uint8_t* keep, const uint64_t* draws, int64_t n, uint32_t t);
  // Eight xoshiro256** generators (Rng::next_u64) advanced together for `rounds` rounds:
  // state[w * 8 + l] is word w (0..3) of lane l, out[8r + l] = lane l's r-th output (r < rounds),
  // and state is left advanced. Integer only: the same bits on every ISA.
  void (*xoshiro_lanes)(uint64_t* out, uint64_t* state, int64_t rounds);
  // out = keep ? x * scale : 0 (also the writing backward, with dout for x), and the
  // accumulating backward dx += keep ? dout * scale : 0.
  void (*dropout_forward)(float* out, const uint8_t* keep, const float* x, float scale, int64_t n);
  void (*dropout_backward)(float* dx, const float* dout, const uint8_t* keep, float scale, int64_t n);
  // The fused residual and activation forms (the same bits as the two-op compositions):
  // out = residual + (keep ? x * scale : 0), and out = keep ? relu(x) * scale : 0 with
  // relu(x) = x < 0 ? 0 : x; relu_dropout's writing backward, from the forward's output y:
  // dx = 0 + (y > 0 ? dout * scale : 0).
  void (*dropout_add_forward)(float* out, const uint8_t* keep, const float* residual, const float* x,
                              float scale, int64_t n);
  void (*relu_dropout_forward)(float* out, const uint8_t* keep, const float* x, float scale, int64_t n);
  void (*relu_dropout_backward_write)(float* dx, const float* dout, const float* y, float scale, int64_t n);

  // ---- optimizer (adam.h): one span of parameters and their moments ------------------------
  void (*adam_update)(float* p, float* m, float* v, const float* g, int64_t n,
                      const AdamStep<float>& s);

  // ---- rows of the tiled attention kernels (attention_flash.h) -----------------------------
  // max(init, x[0], ..., x[n-1]); -inf entries (masked scores) take part like any other.
  float (*row_max)(const float* x, int64_t n, float init);
  // y[i] = exp(x[i] - m) and the sum of the y[i] returned; x[i] = -inf gives 0. y may be x.
  float (*exp_shifted_sum)(float* y, const float* x, float m, int64_t n);
  // ds[i] = p[i] * (dp[i] - d): one row of the softmax backward given d = sum_j p_j dp_j.
  // ds may be dp.
  void (*softmax_grad_shifted)(float* ds, const float* p, const float* dp, float d, int64_t n);
  // sum_i x[i] * y[i].
  float (*dot)(const float* x, const float* y, int64_t n);
  // out[j] = dot(x, ys[j], n) for j < count: dot's bits, several rows at a time.
  void (*dots)(float* out, const float* x, const float* const* ys, int64_t count, int64_t n);

  // ---- column sums (the bias gradient of ops/matmul.cpp's linear) --------------------------
  // db[j] += dy[0, j] + dy[1, j] + ... + dy[rows - 1, j] for j < cols, with row r at dy + r * ld,
  // added one row at a time in row order (the same bits as the scalar loop on every ISA).
  void (*column_sums)(float* db, const float* dy, int64_t rows, int64_t cols, int64_t ld);

  // ---- one slice of the short-sequence attention kernel (attention_short.h) ----------------
  // c[i * ldc + j] = alpha * sum_k a[i * lda + k] * b[j * ldb + k] for i < M, j < N: a b^T.
  void (*tile_nt)(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb,
                  int64_t M, int64_t N, int64_t K, float alpha);
  // c[i * ldc + n] = alpha * sum_k A(i, k) b[k * ldb + n] for i < M, n < N, with A(i, k) =
  // a[i * lda + k] (a b), or a[k * lda + i] when trans_a (a^T b); added to c when accumulate,
  // else written (c is not read).
  void (*tile_nn)(float* c, int64_t ldc, const float* a, int64_t lda, bool trans_a, const float* b,
                  int64_t ldb, int64_t M, int64_t N, int64_t K, float alpha, bool accumulate);
  // p = softmax(s) for `rows` rows of n entries (s rows ls apart, p rows lp apart; p is either
  // s itself, in place with ls == lp, or does not overlap it), and with d (rows lp apart) also
  // pd = p ∘ d. A row of -inf entries only (every key masked) becomes zeros instead of NaN.
  // Rows of at most the vector width give 0 for probabilities below exp(-87) (1.7e-38).
  void (*softmax_rows)(float* p, int64_t lp, const float* s, int64_t ls, float* pd, const float* d,
                       int64_t rows, int64_t n);
  // ds = p ∘ (ds' - <ds', p>) row by row with ds' = ds ∘ d (d null: ds' = ds), in place: ds
  // holds dL/dp on entry (rows lds apart) and dL/ds on return; p and d rows are n apart.
  void (*softmax_grad_rows)(float* ds, int64_t lds, const float* p, const float* d, int64_t rows, int64_t n);
};

// The kernels of the active ISA (active_isa()); may throw as active_isa() does. Fetch the
// table before an OpenMP region, never inside it.
const VectorKernels& vector_kernels();
// The kernels of one ISA, which must be supported (isa_supported).
const VectorKernels& vector_kernels(Isa isa);

namespace detail {
// Defined by the per-ISA builds of vector_kernels.cpp; the AVX tables exist only on x86-64.
extern const VectorKernels kScalarKernels;
extern const VectorKernels kAvx2Kernels;
extern const VectorKernels kAvx512Kernels;
}  // namespace detail

}  // namespace attn::kernels::simd
