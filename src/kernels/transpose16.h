// kernels/transpose16.h — a 16 x 16 block of floats (or 32-bit words) transposed in AVX-512
// registers, for the products that lay out a transposed operand (gemm_direct.cpp's panels of
// B^T, quantized_gemm.cpp's weight panels, attention_flash.cpp's K^T and V^T), and a whole
// matrix transposed by such blocks. Callers check that the CPU runs AVX-512 first.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

// GCC 12's AVX-512 headers self-initialise undefined registers, which -Wuninitialized flags at
// every use (as in quantized_gemm.cpp); clang has no such problem and keeps the warning.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace attn::kernels {

// Transposes 16 vectors of 16 floats in place: v[j][i] becomes v[i][j].
__attribute__((target("avx512f"), always_inline)) inline void transpose16_avx512(__m512* v) {
  __m512 t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  // u[4 i + c], 128-bit lane L: rows 4 i .. 4 i + 3 of column 4 L + c.
#pragma GCC unroll 8
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
    u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
#pragma GCC unroll 8
  for (int c = 0; c < 4; ++c) {
    const __m512 lo01 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44),
                 hi01 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
    const __m512 lo23 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE),
                 hi23 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
    v[c] = _mm512_shuffle_f32x4(lo01, hi01, 0x88);
    v[4 + c] = _mm512_shuffle_f32x4(lo01, hi01, 0xDD);
    v[8 + c] = _mm512_shuffle_f32x4(lo23, hi23, 0x88);
    v[12 + c] = _mm512_shuffle_f32x4(lo23, hi23, 0xDD);
  }
}

// dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols: full 16 x 16 blocks through
// registers, the rows and columns past the last full block one element at a time.
__attribute__((target("avx512f"))) inline void transpose_avx512(const float* src, int64_t lds, int64_t rows,
                                                                int64_t cols, float* dst, int64_t ldd) {
  const int64_t r16 = rows / 16 * 16, c16 = cols / 16 * 16;
  for (int64_t i = 0; i < r16; i += 16)
    for (int64_t j = 0; j < c16; j += 16) {
      __m512 v[16];
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) v[r] = _mm512_loadu_ps(src + (i + r) * lds + j);
      transpose16_avx512(v);
#pragma GCC unroll 16
      for (int c = 0; c < 16; ++c) _mm512_storeu_ps(dst + (j + c) * ldd + i, v[c]);
    }
  for (int64_t i = 0; i < rows; ++i)  // the column tail of the blocks' rows, then the rows past them
    for (int64_t j = i < r16 ? c16 : 0; j < cols; ++j) dst[j * ldd + i] = src[i * lds + j];
}

}  // namespace attn::kernels

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif
