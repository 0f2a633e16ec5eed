// kernels/gemm_direct.cpp — gemm_direct.h's float GEMM: register tiles of MR rows of C times
// NV vectors of 16 columns (NV <= 4), one panel of up to 64 columns of C at a time.
//
// For each panel of 64 columns the 64 columns of op(B) are laid out as K rows of 64 floats in a
// buffer the thread keeps (op(B) = B^T is transposed there in 16 x 16 blocks; op(B) = B is
// copied unless B is a single panel already): K x 64 floats, 16 KiB for K = 64, stay in L1/L2
// while every row tile of C passes over them. The tile keeps MR x NV accumulators in registers
// (6 x 4 for a full panel, 24 of the 32 vector registers): per k it loads NV vectors of the
// panel's row k and broadcasts MR elements of op(A) from A itself (row-major A: one element of
// each of MR rows; A^T: MR consecutive elements of row k), 24 fused multiply-adds per 10 loads.
// A narrower last panel masks its last vector and takes taller tiles (up to 14 rows).
#include "kernels/gemm_direct.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/parallel_for.h"
#include "kernels/simd/isa.h"
#include "kernels/thread_scratch.h"
#include "kernels/transpose16.h"

namespace attn::kernels {

bool gemm_direct_supported() {
#if defined(__x86_64__)
  return simd::active_isa() == simd::Isa::Avx512;
#else
  return false;
#endif
}

bool use_direct(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K) {
  return !(trans_a && trans_b) && M >= kDirectMinRows && M * N * K >= kDirectMinWork && K <= kDirectMaxK &&
         !threads_available() && gemm_direct_supported();
}

#if defined(__x86_64__)

// GCC takes the target of a region from `#pragma GCC target`; clang ignores that pragma and takes
// the target attribute applied to every function of the region instead (as gemm.cpp).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
// GCC 12's AVX-512 headers self-initialise undefined registers, which -Wuninitialized flags at
// every use (as in gemm.cpp); clang has no such problem and keeps the warning.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace {

constexpr int64_t kPanel = 64;  // columns of C per panel: four vectors of 16

// Rows of C per register tile for NV vectors of columns: 24 accumulators for two to four
// vectors; 14 for one vector, where the loads (one vector and 14 broadcasts per k) bound the tile
// before the registers do.
constexpr int tile_rows(int nv) { return nv == 4 ? 6 : nv == 3 ? 8 : nv == 2 ? 12 : 14; }

// C[m, 16 v + j] for m < MR, v < NV (the last vector's lanes under `mask`): the tile's sums over
// k of op(A)[m, k] * P[k * ldp + 16 v + j], then the epilogue of gemm_direct.h. `a` points at
// op(A)[0, 0] of the tile: row-major A (TA = false) holds op(A)[m, k] at a[m * lda + k], A^T at
// a[k * lda + m].
template <int MR, int NV, bool TA>
void tile(const float* a, int64_t lda, const float* p, int64_t ldp, float* c, int64_t ldc, int64_t K, float alpha,
          float beta, const float* bias, __mmask16 mask) {
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* row = p + k * ldp;
    __m512 b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      b[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(mask, row + 16 * v) : _mm512_loadu_ps(row + 16 * v);
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      const __m512 x = _mm512_set1_ps(TA ? a[k * lda + m] : a[m * lda + k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_fmadd_ps(x, b[v], acc[m][v]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* out = c + m * ldc + 16 * v;
      const __mmask16 lanes = v == NV - 1 ? mask : __mmask16(0xFFFF);
      __m512 r = _mm512_mul_ps(va, acc[m][v]);
      if (bias != nullptr) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(lanes, bias + 16 * v));
      if (beta != 0.0f) r = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(lanes, out), r);
      _mm512_mask_storeu_ps(out, lanes, r);
    }
}

// The tile of the last `rest` rows (1 <= rest <= R) of a panel: one instance per height.
template <int R, int NV, bool TA>
void tail_tile(int64_t rest, const float* a, int64_t lda, const float* p, int64_t ldp, float* c, int64_t ldc, int64_t K,
               float alpha, float beta, const float* bias, __mmask16 mask) {
  if constexpr (R >= 1) {
    if (rest == R) return tile<R, NV, TA>(a, lda, p, ldp, c, ldc, K, alpha, beta, bias, mask);
    tail_tile<R - 1, NV, TA>(rest, a, lda, p, ldp, c, ldc, K, alpha, beta, bias, mask);
  }
}

// Every row of C against one panel (NV vectors): full tiles of tile_rows(NV) rows, then one tile
// of the remaining rows.
template <int NV, bool TA>
void panel_rows(int64_t M, const float* A, int64_t lda, const float* p, int64_t ldp, float* c, int64_t ldc, int64_t K,
                float alpha, float beta, const float* bias, __mmask16 mask) {
  constexpr int MR = tile_rows(NV);
  const auto a_at = [&](int64_t m) { return TA ? A + m : A + m * lda; };
  int64_t m = 0;
  for (; m + MR <= M; m += MR) tile<MR, NV, TA>(a_at(m), lda, p, ldp, c + m * ldc, ldc, K, alpha, beta, bias, mask);
  if (m < M) tail_tile<MR - 1, NV, TA>(M - m, a_at(m), lda, p, ldp, c + m * ldc, ldc, K, alpha, beta, bias, mask);
}

// P[k * ldp + j] = B[(n0 + j) * ldb + k] for j < w, k < K: op(B) = B^T's columns n0 .. n0 + w - 1.
void pack_transposed(const float* B, int64_t ldb, int64_t n0, int64_t w, int64_t K, float* P, int64_t ldp) {
  transpose_avx512(B + n0 * ldb, ldb, w, K, P, ldp);
}

template <bool TA>
void panels(bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
            int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  float* const scratch = thread_scratch<float, 2>(K * kPanel);
  for (int64_t n0 = 0; n0 < N; n0 += kPanel) {
    const int64_t w = std::min(kPanel, N - n0);
    const int nv = static_cast<int>((w + 15) / 16);
    const __mmask16 mask = w % 16 == 0 ? __mmask16(0xFFFF) : __mmask16((1u << (w % 16)) - 1);
    const float* p = B + n0;
    int64_t ldp = ldb;
    if (trans_b) {
      ldp = nv * 16;
      pack_transposed(B, ldb, n0, w, K, scratch, ldp);
      p = scratch;
    } else if (N > kPanel) {  // one panel is read in place; more would alias in L1 by the row stride
      ldp = nv * 16;
      for (int64_t k = 0; k < K; ++k) std::memcpy(scratch + k * ldp, B + k * ldb + n0, sizeof(float) * w);
      p = scratch;
    }
    float* c = C + n0;
    const float* b = bias != nullptr ? bias + n0 : nullptr;
    switch (nv) {
      case 4:
        panel_rows<4, TA>(M, A, lda, p, ldp, c, ldc, K, alpha, beta, b, mask);
        break;
      case 3:
        panel_rows<3, TA>(M, A, lda, p, ldp, c, ldc, K, alpha, beta, b, mask);
        break;
      case 2:
        panel_rows<2, TA>(M, A, lda, p, ldp, c, ldc, K, alpha, beta, b, mask);
        break;
      default:
        panel_rows<1, TA>(M, A, lda, p, ldp, c, ldc, K, alpha, beta, b, mask);
        break;
    }
  }
}

}  // namespace

void gemm_direct(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  if (M <= 0 || N <= 0) return;
  if (trans_a)
    panels<true>(trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
  else
    panels<false>(trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

#else  // not x86-64: gemm_direct_supported() is false and nothing calls this

void gemm_direct(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
                 float*, int64_t, const float*) {}

#endif

}  // namespace attn::kernels
