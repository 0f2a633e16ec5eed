// kernels/quantized_gemm.cpp — the int8 and bf16 products of quantized_gemm.h. Each path's
// inner kernels are compiled here under a target attribute (as gemm.cpp's small-M rows) and
// chosen by QuantPath; the float parts every path shares (activation quantization, the int8
// dequantization, the bf16 lane tree's scalar form) are ordinary code compiled once, so they
// give the same bits whichever path computed the sums. This file is built with
// -ffp-contract=off (CMakeLists.txt): no a * b + c is fused behind the kernels' back.
//
// Blocking: the weight rows are split into blocks of kNBlock rows (the OpenMP work items);
// inside a block the activation rows go in chunks of kMChunk, and the kernels keep a few weight
// rows (NR) times a few activation rows (MR) of accumulators in registers while streaming K.
// Tails of N and M reuse the last valid row (computed again, never stored), so the register
// kernels have fixed shapes. Many activation rows take packed weight panels instead (the
// "panels" sections below): the work items are panels of 64 weight rows times ranges of
// activation rows; each thread packs a panel once per call into a buffer it keeps, and the
// kernels hold 4 x 4 (bf16) or 6 x 4 (int8) vectors of accumulators, 16 outputs per vector.
#include "kernels/quantized_gemm.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "attn/core/dtype.h"
#include "attn/core/error.h"
#include "kernels/batch_invariant.h"
#include "kernels/parallel_for.h"
#include "kernels/simd/isa.h"
#include "kernels/thread_scratch.h"
#include "kernels/transpose16.h"

// GCC 12's AVX-512 headers self-initialise undefined registers, which -Wuninitialized flags at
// every use (cmake/isa_kernels.cmake says the same of the vector kernels).
// Clang has neither the problem nor -Wmaybe-uninitialized, and keeps the warning.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace attn::kernels {

namespace {

constexpr int64_t kNBlock = 16;             // weight rows per work item
constexpr int64_t kMChunk = 32;             // activation rows per accumulator tile
constexpr int64_t kParallelMin = 1 << 16;  // weight elements (N * K) below which one thread works

constexpr int64_t kRowsParallelMin = 1 << 16;  // activation elements below which one thread quantizes

// Calls f(n0, n1) for consecutive blocks of weight rows, over the OpenMP threads when the
// weight is large and the caller is not inside a parallel region already.
template <class F>
void for_row_blocks(int64_t N, int64_t K, const F& f) {
  const int64_t blocks = (N + kNBlock - 1) / kNBlock;
  const bool parallel = N * K >= kParallelMin && blocks > 1 && !omp_in_parallel() && omp_get_max_threads() > 1;
  parallel_for(blocks, parallel, [&](int64_t b) { f(b * kNBlock, std::min(N, (b + 1) * kNBlock)); });
}

// The dequantization every int8 path shares: y[n] = float(acc[n - n0]) * (x_scale * w_scale[n])
// (+ bias[n], a separate rounded add) for n in [n0, n1) (the file is built without
// contraction, so the bits are those of the formula; dequantize_tile_avx512 gives the same).
inline void dequantize_row(float* y, const int32_t* acc, float x_scale, const float* w_scale, const float* bias,
                           int64_t n0, int64_t n1, bool relu) {
  for (int64_t n = n0; n < n1; ++n) {
    const float v = static_cast<float>(acc[n - n0]) * (x_scale * w_scale[n]);
    const float out = bias != nullptr ? v + bias[n] : v;
    y[n] = relu && out < 0.0f ? 0.0f : out;
  }
}

// ---- bf16 scalar pieces --------------------------------------------------------------------

// One of vdpbf16ps's float32 steps, acc + a b rounded once, with its output flush: the result
// becomes a zero of its sign when the exact value is tiny (|v| < 2^-126) before rounding, as
// x86's flush-to-zero decides, even where it rounds up to 2^-126. a and b are bf16 values, so
// a b is exact in double, and TwoSum gives the exact sum as s + e to compare with 2^-126.
inline float dp_step(float a, float b, float acc) {
  const float r = std::fma(a, b, acc);
  const float tiny = 0x1p-126f;
  if (!(std::fabs(r) <= tiny)) return r;                       // normal, infinite or NaN
  if (std::fabs(r) < tiny) return std::copysign(0.0f, r);       // subnormal or zero
  const double p = static_cast<double>(a) * static_cast<double>(b), c = acc;
  const double sum = c + p, bv = sum - c, err = (c - (sum - bv)) + (p - bv);  // sum + err == c + p
  const bool below = std::fabs(sum) < 0x1p-126 || (err != 0.0 && std::signbit(err) != std::signbit(sum));
  return below ? std::copysign(0.0f, r) : r;
}

// vdpbf16ps's input treatment: a subnormal bf16 reads as a zero of its sign.
inline float bf16_operand(uint16_t b) { return float_from_bf16((b & 0x7F80u) == 0 ? static_cast<uint16_t>(b & 0x8000u) : b); }

// The 16 lanes added as the header's tree.
inline float lane_tree(const float* l) {
  float t8[8], t4[4];
  for (int i = 0; i < 8; ++i) t8[i] = l[i] + l[i + 8];
  for (int i = 0; i < 4; ++i) t4[i] = t8[i] + t8[i + 4];
  const float t20 = t4[0] + t4[2], t21 = t4[1] + t4[3];
  return t20 + t21;
}

// The scalar emulation of one output's bf16 sum (x, w: K bf16 each).
float dot_bf16_scalar(const uint16_t* x, const uint16_t* w, int64_t K) {
  float lanes[16] = {};
  for (int64_t c = 0; c < K; c += 32) {
    for (int i = 0; i < 16; ++i) {
      const int64_t k0 = c + 2 * i;
      const float xo = k0 + 1 < K ? bf16_operand(x[k0 + 1]) : 0.0f, wo = k0 + 1 < K ? bf16_operand(w[k0 + 1]) : 0.0f;
      const float xe = k0 < K ? bf16_operand(x[k0]) : 0.0f, we = k0 < K ? bf16_operand(w[k0]) : 0.0f;
      lanes[i] = dp_step(xo, wo, lanes[i]);
      lanes[i] = dp_step(xe, we, lanes[i]);
    }
  }
  return lane_tree(lanes);
}

// sums[m * ld + (n - n0)] for m < M, n in [n0, n1): one kernel per path.
void bf16_block_scalar(float* sums, int64_t ld, const uint16_t* x, int64_t ldx, int64_t M, const uint16_t* w,
                       int64_t n0, int64_t n1, int64_t K) {
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t m = 0; m < M; ++m) sums[m * ld + (n - n0)] = dot_bf16_scalar(x + m * ldx, w + n * K, K);
}

void s8_block_scalar(int32_t* acc, int64_t ld, const int8_t* x, int64_t M, const int8_t* w, int64_t n0, int64_t n1,
                     int64_t K) {
  for (int64_t n = n0; n < n1; ++n) {
    const int8_t* wr = w + n * K;
    for (int64_t m = 0; m < M; ++m) {
      const int8_t* xr = x + m * K;
      int32_t s = 0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<int32_t>(xr[k]) * static_cast<int32_t>(wr[k]);
      acc[m * ld + (n - n0)] = s;
    }
  }
}

constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52: (v + kRound) - kRound is rint(v), ties to even

// One row of quantize_rows_s8 (quantized_gemm.h): the reference.
void quantize_row_s8_scalar(int8_t* qr, float* scale, const float* xr, int64_t K) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t k = 0; k < K; ++k) {
    const float a = std::fabs(xr[k]);
    finite = finite && a <= 3.4028234663852886e38f;  // false for Inf and NaN
    amax = a > amax ? a : amax;
  }
  if (!finite || amax == 0.0f) {
    std::memset(qr, 0, static_cast<size_t>(K));
    *scale = finite ? 1.0f : std::nanf("");
    return;
  }
  const double inv = 127.0 / static_cast<double>(amax);  // in double: no overflow for tiny amax
  for (int64_t k = 0; k < K; ++k) {
    const double v = std::clamp((static_cast<double>(xr[k]) * inv + kRound) - kRound, -127.0, 127.0);
    qr[k] = static_cast<int8_t>(v);
  }
  *scale = amax / 127.0f;
}

void f32_to_bf16_scalar(uint16_t* out, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_from_float(x[i]);
}

#if defined(__x86_64__)

// ---- AVX2 ----------------------------------------------------------------------------------

// MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6) while it lives (or until
// restore()): the float32 FMAs that emulate vdpbf16ps then flush what it flushes, a result tiny
// before rounding and a subnormal operand. The thread's own MXCSR; kernels set it around their
// accumulation loops only (the tree's additions do not flush).
class FlushToZero {
 public:
  explicit FlushToZero(bool on = true) : saved_(_mm_getcsr()) {
    if (on) _mm_setcsr(saved_ | 0x8040u);
  }
  ~FlushToZero() { restore(); }
  FlushToZero(const FlushToZero&) = delete;
  FlushToZero& operator=(const FlushToZero&) = delete;
  void restore() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
};

// One activation row reads each weight once, straight from memory when the weights are larger
// than the cache. The int8 row kernel below then takes eight weight rows side by side, and the
// hardware prefetcher, which follows a stream only within its 4 KiB page, falls behind on eight
// interleaved streams (about 25-30 GB/s read at M = 1 on one Zen 5 VM, against 60-70 GB/s for
// the float32 kernel's single stream). While one group of rows is read, the kernel asks for the
// same cache line of the next group (`ahead` = the group's bytes). Measured with gemm_bench's
// quantized_rows (weights rotated through 96 MiB, 2 threads, three alternating rounds, us):
// N x K = 1536 x 512, 24.5-31.2 -> 17.8-20.4; 2048 x 512, 31.5-40.3 -> 23.0-26.3; 512 x 2048
// (16 KiB ahead), 23-26 either way. The same prefetch in the bf16 row kernel measured within
// the machine's noise, so it is not there. A prefetch past the weights' end is a hint the CPU
// drops (it never faults); the address is formed as an integer.
inline void prefetch_ahead(const void* p, int64_t ahead) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(ahead)),
               _MM_HINT_T0);
}

#define ATTN_AVX2 __attribute__((target("avx2,fma")))

ATTN_AVX2 inline __m256i bf16_rne_avx2(__m256i u) {
  const __m256i exp = _mm256_set1_epi32(0x7F800000), abs = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)),
                       _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))),
      16);
  const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i zero = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000));
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), exp);
  const __m256i is_small = _mm256_cmpeq_epi32(_mm256_and_si256(u, exp), _mm256_setzero_si256());
  __m256i r = _mm256_blendv_epi8(rounded, nan, is_nan);
  return _mm256_blendv_epi8(r, zero, is_small);
}

ATTN_AVX2 void f32_to_bf16_avx2(uint16_t* out, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16_rne_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    const __m256i b = bf16_rne_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8)));
    // packus interleaves the 128-bit halves: [a0-3 b0-3 a4-7 b4-7] -> [a0-7 b0-7].
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  f32_to_bf16_scalar(out + i, x + i, n - i);
}

// t8 = lo + hi, then the 8 -> 1 part of lane_tree.
ATTN_AVX2 inline float tree_avx2(__m256 lo, __m256 hi) {
  const __m256 t8 = _mm256_add_ps(lo, hi);
  const __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
  const __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
  return _mm_cvtss_f32(_mm_add_ss(t2, _mm_shuffle_ps(t2, t2, 1)));
}

// One emulated vdpbf16ps step on 8 lanes: 16 bf16 of x and w (8 dwords each). The caller runs
// it under MXCSR's flush-to-zero and denormals-are-zero (FlushToZero), which flush what
// vdpbf16ps flushes.
ATTN_AVX2 inline __m256 dp_step_avx2(__m256 acc, __m256i x, __m256i w) {
  const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  acc = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(x, hi_mask)),
                        _mm256_castsi256_ps(_mm256_and_si256(w, hi_mask)), acc);
  return _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(x, 16)),
                         _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)), acc);
}

// MR activation rows (x padded with zeros to a multiple of 32) against one weight row.
template <int MR>
ATTN_AVX2 void bf16_rows_avx2(float* sums, int64_t ld, const uint16_t* const* xr, const uint16_t* w, int64_t K) {
  FlushToZero ftz;
  __m256 lo[MR], hi[MR];
  for (int i = 0; i < MR; ++i) lo[i] = hi[i] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; k += 32) {
    __m256i w0, w1;
    if (k + 32 <= K) {
      w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k));
      w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k + 16));
    } else {
      alignas(32) uint16_t tail[32] = {};
      std::memcpy(tail, w + k, static_cast<size_t>(K - k) * sizeof(uint16_t));
      w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
      w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail + 16));
    }
    for (int i = 0; i < MR; ++i) {
      lo[i] = dp_step_avx2(lo[i], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr[i] + k)), w0);
      hi[i] = dp_step_avx2(hi[i], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr[i] + k + 16)), w1);
    }
  }
  ftz.restore();  // the tree adds as lane_tree does, without flushing
  for (int i = 0; i < MR; ++i) sums[i * ld] = tree_avx2(lo[i], hi[i]);
}

ATTN_AVX2 void bf16_block_avx2(float* sums, int64_t ld, const uint16_t* x, int64_t ldx, int64_t M,
                               const uint16_t* w, int64_t n0, int64_t n1, int64_t K) {
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t m = 0; m < M; m += 4) {
      const uint16_t* xr[4];
      for (int i = 0; i < 4; ++i) xr[i] = x + std::min(m + i, M - 1) * ldx;
      float* s = sums + m * ld + (n - n0);
      switch (std::min<int64_t>(4, M - m)) {
        case 1: bf16_rows_avx2<1>(s, ld, xr, w + n * K, K); break;
        case 2: bf16_rows_avx2<2>(s, ld, xr, w + n * K, K); break;
        case 3: bf16_rows_avx2<3>(s, ld, xr, w + n * K, K); break;
        default: bf16_rows_avx2<4>(s, ld, xr, w + n * K, K); break;
      }
    }
  }
}

// MR activation rows against NR = 2 weight rows, the exact int8 sums by the sign trick.
template <int MR>
ATTN_AVX2 void s8_rows_avx2(int32_t* acc, int64_t ld, const int8_t* const* xr, const int8_t* const* wr, int64_t K) {
  constexpr int NR = 2;
  __m256i a[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) a[i][j] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    __m256i wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[j] + k));
    for (int i = 0; i < MR; ++i) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr[i] + k));
      const __m256i ax = _mm256_abs_epi8(xv);
      for (int j = 0; j < NR; ++j) {
        const __m256i p16 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv[j], xv));  // no saturation: |.| <= 127
        a[i][j] = _mm256_add_epi32(a[i][j], _mm256_madd_epi16(p16, ones));
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      alignas(32) int32_t l[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(l), a[i][j]);
      uint32_t s = 0;  // integer sums: any order gives the same value (mod 2^32)
      for (int t = 0; t < 8; ++t) s += static_cast<uint32_t>(l[t]);
      for (int64_t kk = k; kk < K; ++kk)
        s += static_cast<uint32_t>(static_cast<int32_t>(xr[i][kk]) * static_cast<int32_t>(wr[j][kk]));
      acc[i * ld + j] = static_cast<int32_t>(s);
    }
  }
}

ATTN_AVX2 void s8_block_avx2(int32_t* acc, int64_t ld, const int8_t* x, int64_t M, const int8_t* w, int64_t n0,
                             int64_t n1, int64_t K) {
  for (int64_t n = n0; n < n1; n += 2) {
    const int8_t* wr[2] = {w + n * K, w + std::min(n + 1, n1 - 1) * K};
    for (int64_t m = 0; m < M; m += 4) {
      const int8_t* xr[4];
      for (int i = 0; i < 4; ++i) xr[i] = x + std::min(m + i, M - 1) * K;
      int32_t tile[4 * 2];
      const int mr = static_cast<int>(std::min<int64_t>(4, M - m));
      switch (mr) {
        case 1: s8_rows_avx2<1>(tile, 2, xr, wr, K); break;
        case 2: s8_rows_avx2<2>(tile, 2, xr, wr, K); break;
        case 3: s8_rows_avx2<3>(tile, 2, xr, wr, K); break;
        default: s8_rows_avx2<4>(tile, 2, xr, wr, K); break;
      }
      for (int i = 0; i < mr; ++i)
        for (int j = 0; j < 2 && n + j < n1; ++j) acc[(m + i) * ld + (n + j - n0)] = tile[i * 2 + j];
    }
  }
}

// ---- AVX-512 -------------------------------------------------------------------------------

#define ATTN_AVX512 __attribute__((target("avx512f,avx512bw,avx2,fma")))
#define ATTN_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16,avx2,fma")))
#define ATTN_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma")))

// bf16_from_float of 16 floats, in the low halves of 16 int32 lanes, by integer rounding.
ATTN_AVX512 inline __m512i bf16_lanes_avx512(__m512i u) {
  const __m512i exp = _mm512_set1_epi32(0x7F800000), abs = _mm512_set1_epi32(0x7FFFFFFF);
  __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)),
                       _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))),
      16);
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs), exp);
  const __mmask16 is_small = _mm512_testn_epi32_mask(u, exp);
  r = _mm512_mask_mov_epi32(r, is_nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
  return _mm512_mask_mov_epi32(r, is_small, _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)));
}

// The same by vcvtneps2bf16.
ATTN_AVX512_BF16 inline __m512i bf16_lanes_avx512_bf16(__m512 v) {
  const __m256bh b = _mm512_cvtneps_pbh(v);
  __m256i bits;
  std::memcpy(&bits, &b, sizeof bits);
  return _mm512_cvtepu16_epi32(bits);
}

ATTN_AVX512 void f32_to_bf16_avx512(uint16_t* out, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_cvtepi32_epi16(bf16_lanes_avx512(_mm512_loadu_si512(x + i))));
  f32_to_bf16_scalar(out + i, x + i, n - i);
}

ATTN_AVX512_BF16 void f32_to_bf16_avx512_bf16(uint16_t* out, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    std::memcpy(out + i, &b, sizeof b);
  }
  f32_to_bf16_scalar(out + i, x + i, n - i);
}

// bf16_from_float of 16 floats in the low halves of 16 int32 lanes: vcvtneps2bf16 when kNative,
// else the integer rounding (the same bits).
template <bool kNative>
ATTN_AVX512_BF16 inline __m512i round16(__m512 v) {
  if constexpr (kNative)
    return bf16_lanes_avx512_bf16(v);
  else
    return bf16_lanes_avx512(_mm512_castps_si512(v));
}

// Rows [r0, r1) of x (K floats each, row_stride apart) as bf16 rows out[r * ld_out + k], zeros
// from K to ld_out, in one pass: whole vectors, the last chunk of K masked, then the zeros (the
// per-row conversion call and the fill after it cost more than the rounding for K of 64).
template <bool kNative>
ATTN_AVX512_BF16 void pack_bf16_rows_avx512(uint16_t* out, int64_t ld_out, const float* x, int64_t r0, int64_t r1,
                                            int64_t K, int64_t row_stride) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * row_stride;
    uint16_t* o = out + r * ld_out;
    int64_t k = 0;
    for (; k + 16 <= K; k += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + k),
                          _mm512_cvtepi32_epi16(round16<kNative>(_mm512_loadu_ps(xr + k))));
    for (; k < ld_out; k += 16) {  // the last chunk of K with zeros after it, then zeros
      const __mmask16 in = static_cast<__mmask16>(k >= K ? 0 : (1u << (K - k)) - 1);
      const __mmask16 dst = static_cast<__mmask16>(ld_out - k >= 16 ? 0xFFFF : (1u << (ld_out - k)) - 1);
      const __m512i b = in == 0 ? _mm512_setzero_si512() : round16<kNative>(_mm512_maskz_loadu_ps(in, xr + k));
      _mm512_mask_cvtepi32_storeu_epi16(o + k, dst, b);
    }
  }
}

// v[i] = the 32-bit word i of each of 16 rows, the rows `row_bytes` apart from `first`: a 16 x 16
// block of words loaded along the rows and transposed in registers. Rows from `live` on and
// words from `words` on are zeros (masked loads only then). How the weight panels are packed.
ATTN_AVX512 inline void load_words_transposed16(__m512* v, const void* first, int64_t row_bytes, int64_t live,
                                               int64_t words) {
  const __mmask16 mask = static_cast<__mmask16>(words >= 16 ? 0xFFFF : (1u << words) - 1);
  const char* base = static_cast<const char*>(first);
  for (int r = 0; r < 16; ++r) {
    const void* src = base + r * row_bytes;
    v[r] = r >= live ? _mm512_setzero_ps() : words >= 16 ? _mm512_loadu_ps(src) : _mm512_maskz_loadu_ps(mask, src);
  }
  transpose16_avx512(v);
}

// Two rows of 16 floats as 16 words a[l] | b[l] << 16 in bf16 (vcvtne2ps2bf16 rounds both, then
// one word shuffle interleaves them): bf16_lanes_avx512_bf16's bits, three instructions per 32
// values where the conversion of each half, its widening and the shift-or took eight.
ATTN_AVX512_BF16 inline __m512i bf16_pairs_avx512_bf16(__m512 a, __m512 b) {
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                              6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512bh h = _mm512_cvtne2ps_pbh(b, a);  // a's 16 values in the low half, b's in the high
  __m512i w;
  std::memcpy(&w, &h, sizeof w);
  return _mm512_permutexvar_epi16(interleave, w);
}

// Rows [r0, r0 + 16) of a transposed operand (element (r, k) at x[r + k * k_stride]) as bf16
// rows out[r * ld_out + k] for k < K16, a multiple of 16, with vcvtne2ps2bf16: each pair of
// source rows k, k + 1 rounded and interleaved into 16 words (row r's pair), then the 8 x 16
// block of words transposed in three steps: 24 shuffles and 16 conversions per 256 values where
// the float transpose and conversion took 64 and 16 (half the time, measured). Same bits.
ATTN_AVX512_BF16 void pack_bf16_columns_pairs(uint16_t* out, int64_t ld_out, const float* x, int64_t r0, int64_t K16,
                                              int64_t k_stride) {
  const __m512i rows_low = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
  const __m512i rows_high = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  for (int64_t k0 = 0; k0 < K16; k0 += 16) {
    // The next block's rows, ahead of their loads (they lie k_stride apart: no stream to detect).
    for (int64_t k = k0 + 16; k < std::min(k0 + 32, K16); ++k)
      _mm_prefetch(reinterpret_cast<const char*>(x + r0 + k * k_stride), _MM_HINT_T0);
    __m512i w[8];  // w[p], word pair l: row r0 + l's values k0 + 2p, k0 + 2p + 1
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {
      const float* s = x + r0 + (k0 + 2 * p) * k_stride;
      w[p] = bf16_pairs_avx512_bf16(_mm512_loadu_ps(s), _mm512_loadu_ps(s + k_stride));
    }
    // t[2i] in 128-bit lane L: rows 4L, 4L + 1, pairs 2i and 2i + 1; t[2i + 1]: rows 4L + 2, 4L + 3.
    __m512i t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm512_unpacklo_epi32(w[2 * i], w[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_epi32(w[2 * i], w[2 * i + 1]);
    }
    // u[j] in lane L: row 4L + j, pairs 0..3; u[4 + j]: its pairs 4..7.
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      u[4 * h] = _mm512_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
      u[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
      u[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
      u[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
    }
    uint16_t* dst = out + r0 * ld_out + k0;
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {  // each half of a and b: one row's 16 values
      const __m512i a = _mm512_permutex2var_epi64(u[j], rows_low, u[4 + j]);   // rows j, 4 + j
      const __m512i b = _mm512_permutex2var_epi64(u[j], rows_high, u[4 + j]);  // rows 8 + j, 12 + j
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j * ld_out), _mm512_castsi512_si256(a));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (4 + j) * ld_out), _mm512_extracti64x4_epi64(a, 1));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (8 + j) * ld_out), _mm512_castsi512_si256(b));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (12 + j) * ld_out), _mm512_extracti64x4_epi64(b, 1));
    }
  }
}

// Rows [r0, r0 + 16) (fewer at the end) of an operand whose rows are contiguous (element (r, k)
// at x[r + k * k_stride], a transposed matrix) as bf16 rows out[r * ld_out + k], k < K: 16 x 16
// blocks loaded along r, transposed in registers and converted (vcvtneps2bf16 when kNative, else
// the integer rounding: the same bits), so that both the reads and the writes are contiguous.
// kNative with 16 rows: whole blocks of 16 values by pack_bf16_columns_pairs, the rest here.
template <bool kNative>
ATTN_AVX512_BF16 void pack_bf16_columns_avx512(uint16_t* out, int64_t ld_out, const float* x, int64_t rows,
                                               int64_t r0, int64_t K, int64_t k_stride) {
  const int64_t nr = std::min<int64_t>(16, rows - r0);
  const __mmask16 rmask = static_cast<__mmask16>(nr == 16 ? 0xFFFF : (1u << nr) - 1);
  int64_t first = 0;
  if (kNative && nr == 16) {
    first = K / 16 * 16;
    pack_bf16_columns_pairs(out, ld_out, x, r0, first, k_stride);
  }
  for (int64_t k0 = first; k0 < K; k0 += 16) {
    const int64_t nk = std::min<int64_t>(16, K - k0);
    const __mmask16 kmask = static_cast<__mmask16>(nk == 16 ? 0xFFFF : (1u << nk) - 1);
    // The next block's rows, ahead of their loads (they lie k_stride apart: no stream to detect).
    for (int64_t k = k0 + 16; k < std::min(k0 + 32, K); ++k)
      _mm_prefetch(reinterpret_cast<const char*>(x + r0 + k * k_stride), _MM_HINT_T0);
    __m512 v[16];
    for (int64_t k = 0; k < 16; ++k)
      v[k] = k >= nk     ? _mm512_setzero_ps()
             : nr == 16 ? _mm512_loadu_ps(x + r0 + (k0 + k) * k_stride)
                        : _mm512_maskz_loadu_ps(rmask, x + r0 + (k0 + k) * k_stride);
    transpose16_avx512(v);
    for (int64_t r = 0; r < nr; ++r) {
      const __m512i b = kNative ? bf16_lanes_avx512_bf16(v[r]) : bf16_lanes_avx512(_mm512_castps_si512(v[r]));
      uint16_t* dst = out + (r0 + r) * ld_out + k0;
      if (nk == 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(b));
      else
        _mm512_mask_cvtepi32_storeu_epi16(dst, kmask, b);
    }
  }
}

// quantize_row_s8_scalar's bits with AVX-512: the same maximum (exact in any order), the same
// double product and round-to-nearest-even (vrndscalepd), the same clamp.
ATTN_AVX512 void quantize_row_s8_avx512(int8_t* qr, float* scale, const float* xr, int64_t K) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512 flt_max = _mm512_set1_ps(3.4028234663852886e38f);
  __m512 vmax = _mm512_setzero_ps();
  __mmask16 finite = 0xFFFF;
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 mask = static_cast<__mmask16>(K - k >= 16 ? 0xFFFF : (1u << (K - k)) - 1);
    const __m512 x = mask == 0xFFFF ? _mm512_loadu_ps(xr + k) : _mm512_maskz_loadu_ps(mask, xr + k);
    const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), abs_mask));
    finite &= _mm512_cmp_ps_mask(a, flt_max, _CMP_LE_OQ);  // false for Inf and NaN
    vmax = _mm512_max_ps(vmax, a);
  }
  const float amax = _mm512_reduce_max_ps(vmax);
  if (finite != 0xFFFF || amax == 0.0f) {
    std::memset(qr, 0, static_cast<size_t>(K));
    *scale = finite == 0xFFFF ? 1.0f : std::nanf("");
    return;
  }
  const __m512d inv = _mm512_set1_pd(127.0 / static_cast<double>(amax));
  const __m512d lo = _mm512_set1_pd(-127.0), hi = _mm512_set1_pd(127.0);
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 mask = static_cast<__mmask16>(K - k >= 16 ? 0xFFFF : (1u << (K - k)) - 1);
    const __m512 v = mask == 0xFFFF ? _mm512_loadu_ps(xr + k) : _mm512_maskz_loadu_ps(mask, xr + k);
    __m512d d0 = _mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), inv);
    __m512d d1 = _mm512_mul_pd(
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))), inv);
    d0 = _mm512_min_pd(_mm512_max_pd(_mm512_roundscale_pd(d0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), lo), hi);
    d1 = _mm512_min_pd(_mm512_max_pd(_mm512_roundscale_pd(d1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), lo), hi);
    const __m512i i32 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtpd_epi32(d0)), _mm512_cvtpd_epi32(d1), 1);
    if (mask == 0xFFFF)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qr + k), _mm512_cvtepi32_epi8(i32));
    else
      _mm512_mask_cvtepi32_storeu_epi8(qr + k, mask, i32);
  }
  *scale = amax / 127.0f;
}

// dequantize_row for at most 16 outputs (one block of weight rows) in one vector per row: the
// same conversion, products and add, so the same bits.
static_assert(kNBlock == 16, "dequantize_tile_avx512 holds one block of weight rows");
ATTN_AVX512 inline __m512 relu_avx512(__m512 v) {  // v < 0 ? 0 : v, relu_forward's select
  const __m512 zero = _mm512_setzero_ps();
  return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero);
}

// Rows m < rows of a tile (acc[m * 16 + n - n0], row scales x_scale[m]) into y + m * ldy. A whole
// block (16 outputs) takes plain loads and stores, its weight scales and bias loaded once per
// tile: masked loads and stores cost several times more on AMD's Zen 5.
ATTN_AVX512 void dequantize_tile_avx512(float* y, int64_t ldy, const int32_t* acc, const float* x_scale, int64_t rows,
                                        const float* w_scale, const float* bias, int64_t n0, int64_t n1, bool relu) {
  if (n1 - n0 == 16) {
    const __m512 ws = _mm512_loadu_ps(w_scale + n0);
    const __m512 b = bias != nullptr ? _mm512_loadu_ps(bias + n0) : _mm512_setzero_ps();
    for (int64_t m = 0; m < rows; ++m) {
      const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(x_scale[m]), ws);
      __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(acc + m * 16)), scale);
      if (bias != nullptr) v = _mm512_add_ps(v, b);
      if (relu) v = relu_avx512(v);
      _mm512_storeu_ps(y + m * ldy + n0, v);
    }
    return;
  }
  const __mmask16 mask = static_cast<__mmask16>((1u << (n1 - n0)) - 1);
  const __m512 ws = _mm512_maskz_loadu_ps(mask, w_scale + n0);
  const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias + n0) : _mm512_setzero_ps();
  for (int64_t m = 0; m < rows; ++m) {
    const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(x_scale[m]), ws);
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(mask, acc + m * 16)), scale);
    if (bias != nullptr) v = _mm512_add_ps(v, b);
    if (relu) v = relu_avx512(v);
    _mm512_mask_storeu_ps(y + m * ldy + n0, mask, v);
  }
}

inline __mmask32 tail_mask32(int64_t left) { return left >= 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1; }
inline __mmask64 tail_mask64(int64_t left) { return left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1; }

// Four vectors of 16 float lanes -> their four lane trees (lane_tree's additions, the same
// pairs in the same order, done in vector lanes): t8 per vector from its 256-bit halves; the
// four t8 gathered as 128-bit blocks so that one add gives every t4; then t4[0] + t4[2] and
// t4[1] + t4[3], and their sum, inside each 128-bit block (element 0 of block i is output i).
ATTN_AVX512 inline __m256d t8_avx512(__m512 v) {
  return _mm256_castps_pd(
      _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

ATTN_AVX512 inline __m128 trees4_avx512(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 z = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(t8_avx512(a0)), t8_avx512(a1), 1));
  const __m512 w = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(t8_avx512(a2)), t8_avx512(a3), 1));
  const __m512 lo = _mm512_shuffle_f32x4(z, w, _MM_SHUFFLE(2, 0, 2, 0));  // t8[0:4] of a0..a3
  const __m512 hi = _mm512_shuffle_f32x4(z, w, _MM_SHUFFLE(3, 1, 3, 1));  // t8[4:8] of a0..a3
  const __m512 t4 = _mm512_add_ps(lo, hi);
  const __m512 t2 = _mm512_add_ps(t4, _mm512_permute_ps(t4, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 t1 = _mm512_add_ps(t2, _mm512_permute_ps(t2, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), t1));
}

// MR activation rows against NR weight rows of bf16 sums: with vdpbf16ps (kNative) or its
// AVX-512F emulation (bf16 widened by a shift or a mask, two FMAs under FlushToZero). Both are
// compiled for the BF16 target; the emulation uses no BF16 instruction (the Avx512 path runs
// it on CPUs without them, and the tests force that path).
template <int MR, int NR, bool kNative>
ATTN_AVX512_BF16 void bf16_rows_avx512(float* sums, int64_t ld, const uint16_t* const* xr, const uint16_t* const* wr,
                                       int64_t K) {
  static_assert(NR % 4 == 0, "weight rows go in groups of four");
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  FlushToZero ftz(!kNative);  // the emulation's flush
  __m512 a[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) a[i][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 32) {
    const bool whole = K - k >= 32;  // plain loads then (masked ones are slow on AMD's Zen 5)
    const __mmask32 mask = tail_mask32(K - k);
    __m512i w[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) w[j] = whole ? _mm512_loadu_si512(wr[j] + k) : _mm512_maskz_loadu_epi16(mask, wr[j] + k);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512i x = whole ? _mm512_loadu_si512(xr[i] + k) : _mm512_maskz_loadu_epi16(mask, xr[i] + k);
      if constexpr (kNative) {
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) a[i][j] = _mm512_dpbf16_ps(a[i][j], (__m512bh)x, (__m512bh)w[j]);
      } else {
        const __m512 xo = _mm512_castsi512_ps(_mm512_and_si512(x, hi_mask));
        const __m512 xe = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) {
          const __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(w[j], hi_mask));
          const __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(w[j], 16));
          a[i][j] = _mm512_fmadd_ps(xo, wo, a[i][j]);
          a[i][j] = _mm512_fmadd_ps(xe, we, a[i][j]);
        }
      }
    }
  }
  ftz.restore();  // the tree adds without flushing
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; j += 4)
      _mm_storeu_ps(sums + i * ld + j, trees4_avx512(a[i][j], a[i][j + 1], a[i][j + 2], a[i][j + 3]));
}

// sums of weight rows [n0, n1) against M activation rows (x: row stride ldx), as s8_block_vnni
// blocks them: one activation row takes eight weight rows at a time, more rows four at a time.
template <bool kNative>
ATTN_AVX512_BF16 void bf16_block_avx512(float* sums, int64_t ld, const uint16_t* x, int64_t ldx, int64_t M,
                                        const uint16_t* w, int64_t n0, int64_t n1, int64_t K) {
  for (int64_t m = 0; m < M; m += 4) {
    const int mr = static_cast<int>(std::min<int64_t>(4, M - m));
    const int nr = mr == 1 ? 8 : 4;
    const uint16_t* xr[4];
    for (int i = 0; i < 4; ++i) xr[i] = x + std::min(m + i, M - 1) * ldx;
    for (int64_t n = n0; n < n1; n += nr) {
      const uint16_t* wr[8];
      for (int j = 0; j < nr; ++j) wr[j] = w + std::min(n + j, n1 - 1) * K;
      float tile[4 * 8];
      switch (mr) {
        case 1: bf16_rows_avx512<1, 8, kNative>(tile, 8, xr, wr, K); break;
        case 2: bf16_rows_avx512<2, 4, kNative>(tile, 8, xr, wr, K); break;
        case 3: bf16_rows_avx512<3, 4, kNative>(tile, 8, xr, wr, K); break;
        default: bf16_rows_avx512<4, 4, kNative>(tile, 8, xr, wr, K); break;
      }
      for (int i = 0; i < mr; ++i)
        for (int j = 0; j < nr && n + j < n1; ++j) sums[(m + i) * ld + (n + j - n0)] = tile[i * 8 + j];
    }
  }
}

// Four vectors of 16 int32 lanes -> their four lane sums (integer sums: the order does not
// change the value, mod 2^32). Two rounds of unpack-and-add inside the 128-bit lanes leave
// [sum a0, sum a1, sum a2, sum a3] per 128-bit lane; the four 128-bit lanes are then added.
ATTN_AVX512_VNNI inline __m128i sums4_vnni(__m512i a0, __m512i a1, __m512i a2, __m512i a3) {
  const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(a0, a1), _mm512_unpackhi_epi32(a0, a1));
  const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(a2, a3), _mm512_unpackhi_epi32(a2, a3));
  const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
  const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// MR activation rows (s8) against NR weight rows with vpdpbusd, which multiplies u8 by s8: the
// weights are the u8 operand, shifted by 128 (one XOR of the sign bit per loaded vector), so
// out[i * ld + j] = sum_k (w[j][k] + 128) x[i][k]; the caller takes 128 sum_k x[i][k] back. The
// shift sits on the weights so that its correction depends on the activation row only (one sum
// per row per call) and no weight row sums are needed. K tails load zeros (masked), which the
// shift turns into 128 * 0 = 0 products.
template <int MR, int NR>
ATTN_AVX512_VNNI void s8_rows_vnni(int32_t* out, int64_t ld, const int8_t* const* xr, const int8_t* const* wr,
                                   int64_t K) {
  static_assert(NR % 4 == 0, "weight rows go in groups of four");
  __m512i a[MR][NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) a[i][j] = _mm512_setzero_si512();
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t k = 0; k < K; k += 64) {
    // Whole chunks with plain loads: masked byte loads are several times slower on AMD's Zen 5.
    const bool whole = K - k >= 64;
    const __mmask64 mask = tail_mask64(K - k);
    __m512i w[NR];
    if constexpr (MR == 1) {
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) prefetch_ahead(wr[j] + k, NR * K);
    }
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j)
      w[j] = _mm512_xor_si512(whole ? _mm512_loadu_si512(wr[j] + k) : _mm512_maskz_loadu_epi8(mask, wr[j] + k), flip);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512i x = whole ? _mm512_loadu_si512(xr[i] + k) : _mm512_maskz_loadu_epi8(mask, xr[i] + k);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) a[i][j] = _mm512_dpbusd_epi32(a[i][j], w[j], x);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; j += 4)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i * ld + j),
                       sums4_vnni(a[i][j], a[i][j + 1], a[i][j + 2], a[i][j + 3]));
}

// The exact accumulators of weight rows [n0, n1) against M activation rows x (s8, row stride
// K) with vpdpbusd; x_shift[m] = 128 sum_k x[m][k] (mod 2^32). One activation row takes eight
// weight rows at a time (eight independent accumulator chains), more rows four at a time; tails
// reuse the last valid row, computed again and never stored.
ATTN_AVX512_VNNI void s8_block_vnni(int32_t* acc, int64_t ld, const int8_t* x, int64_t M, const int8_t* w, int64_t n0,
                                    int64_t n1, int64_t K, const uint32_t* x_shift) {
  for (int64_t m = 0; m < M; m += 4) {
    const int mr = static_cast<int>(std::min<int64_t>(4, M - m));
    const int nr = mr == 1 ? 8 : 4;
    const int8_t* xr[4];
    for (int i = 0; i < 4; ++i) xr[i] = x + std::min(m + i, M - 1) * K;
    for (int64_t n = n0; n < n1; n += nr) {
      const int8_t* wr[8];
      for (int j = 0; j < nr; ++j) wr[j] = w + std::min(n + j, n1 - 1) * K;
      int32_t tile[4 * 8];
      switch (mr) {
        case 1: s8_rows_vnni<1, 8>(tile, 8, xr, wr, K); break;
        case 2: s8_rows_vnni<2, 4>(tile, 8, xr, wr, K); break;
        case 3: s8_rows_vnni<3, 4>(tile, 8, xr, wr, K); break;
        default: s8_rows_vnni<4, 4>(tile, 8, xr, wr, K); break;
      }
      for (int i = 0; i < mr; ++i)
        for (int j = 0; j < nr && n + j < n1; ++j)
          acc[(m + i) * ld + (n + j - n0)] =
              static_cast<int32_t>(static_cast<uint32_t>(tile[i * 8 + j]) - x_shift[m + i]);
    }
  }
}

// ---- bf16 on packed weight panels (many activation rows) ------------------------------------
// The header's order written with the outputs across the vector lanes instead of the lanes of
// one output's sum: a weight panel of 64 rows is packed so that one vector holds, for 16
// outputs, the same pair of k positions (panel[((i C + c) 4 + j) 16 + l] = the dword
// (w[n][k0], w[n][k0 + 1]), n = n0 + 16 j + l, k0 = 32 c + 2 i, C = ceil(K / 32); zeros past N
// and K). Then vdpbf16ps with the activation pair broadcast does for 16 outputs what the header
// does in lane i of one output: for lane class i (0..15), an accumulator starts at +0 and takes
// the pairs k0 = 32 c + 2 i for c = 0, 1, ..., C - 1 in order, zeros past K included. The 16
// lane classes are stored and added as the header's tree, one vector addition per pair of
// lanes: t8 = P[q] + P[q + 8], and so on. Each output therefore sees exactly the header's
// operations and its bits do not depend on the kernel (the tests compare with the scalar
// emulation bit for bit). No horizontal sums, and an activation pair feeds 64 outputs. The
// steps run on vdpbf16ps or, equally, on its two FMAs under FlushToZero (bf16_panel_classes).
constexpr int64_t kPanelRows = 64;       // weight rows (outputs) per packed panel: 4 vectors of 16
// Activation rows per register tile: 6 x 4 accumulators for vdpbf16ps, 4 x 4 for its emulation
// (which also holds the panel's 8 widened vectors).
template <bool kNative>
constexpr int kPanelMR = kNative ? 6 : 4;
constexpr int64_t kPanelMinRows = 32;    // activation rows from which the bf16 products pack panels
constexpr int64_t kS8PanelMinRows = 16;  // and the int8 products
constexpr int64_t kPanelParallelMin = int64_t{1} << 18;  // multiply-adds below which one thread works
constexpr int64_t kPackParallelMin = int64_t{1} << 16;   // elements below which one thread packs

// A number per panel product, so that a thread reuses the panel it packed last only within the
// same call (weights change between calls at the same address while training).
std::atomic<uint64_t> g_panel_call{0};

// How a panel product is split: `parts` ranges of `rows_per` activation rows per panel (a
// multiple of mr), over `threads` threads, so that every thread has work.
struct PanelSplit {
  int threads;
  int64_t parts, rows_per;
};

PanelSplit panel_split(int64_t M, int64_t N, int64_t K, int mr) {
  const int64_t panels = (N + kPanelRows - 1) / kPanelRows;
  PanelSplit s{!omp_in_parallel() && M * N * K >= kPanelParallelMin ? omp_get_max_threads() : 1, 1, 0};
  while (panels * s.parts < 2 * s.threads && M / (2 * s.parts) >= 8 * mr) s.parts *= 2;
  s.rows_per = ((M + s.parts - 1) / s.parts + mr - 1) / mr * mr;
  return s;
}

// Runs body(p, m0, m1, panel) for every work item of a panel product: panel p of 64 weight rows
// times the activation rows [m0, m1), over the threads as `split` says. pack(panel, p) first
// fills the thread's panel buffer (`words` 32-bit words), unless it already holds panel p of
// this call; the buffer is kept between calls (a fresh page costs more than packing).
template <class Pack, class Body>
void for_panel_items(int64_t M, int64_t N, const PanelSplit& split, int64_t words, const Pack& pack,
                     const Body& body) {
  const int64_t items = (N + kPanelRows - 1) / kPanelRows * split.parts;
  const uint64_t call = g_panel_call.fetch_add(1, std::memory_order_relaxed) + 1;
  parallel_for(items, split.threads > 1 && items > 1, [&](int64_t item) {
    thread_local std::vector<uint32_t, LineAligned<uint32_t>> panel;
    thread_local uint64_t packed_call = 0;
    thread_local int64_t packed_panel = -1;
    const int64_t p = item / split.parts, m0 = (item % split.parts) * split.rows_per;
    const int64_t m1 = std::min(M, m0 + split.rows_per);
    if (m0 >= m1) return;
    if (packed_call != call || packed_panel != p) {
      if (panel.size() < static_cast<size_t>(words)) panel.resize(static_cast<size_t>(words));
      pack(panel.data(), p);
      packed_call = call;
      packed_panel = p;
    }
    body(p, m0, m1, static_cast<const uint32_t*>(panel.data()));
  });
}

// out[i] = float_from_bf16(x[i]), n a multiple of 16.
ATTN_AVX512 void widen_bf16_avx512(float* out, const uint16_t* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    _mm512_storeu_si512(out + i, _mm512_slli_epi32(v, 16));
  }
}

// Packs weight rows [n0, n0 + 64) of w (rows of K bf16, row stride ldw, both even) as the panel
// layout above; rows past N and pairs past K are zeros. For each 16 rows and 32 k positions,
// the 16 x 16 block of pairs is loaded along the rows and transposed in registers: vector i
// then holds pair i of the 16 rows, one whole store. (One gather per vector took 4.6% of the
// bf16 encoder layer's time on AMD's Zen 5; the transposes take 2.6-3.5%.)
ATTN_AVX512 void pack_bf16_panel(uint32_t* panel, const uint16_t* w, int64_t ldw, int64_t n0, int64_t N, int64_t K,
                                 int64_t pitch = 0) {
  const int64_t C = (K + 31) / 32;
  if (pitch == 0) pitch = C * 64;
  for (int j = 0; j < 4; ++j) {
    const int64_t nb = n0 + 16 * j;
    const int64_t live = std::clamp<int64_t>(N - nb, 0, 16);
    for (int64_t c = 0; c < C; ++c) {
      // The rows' next chunks, ahead of their loads (16 rows ldw apart: 16 streams at once).
      if (c + 4 < C)
        for (int64_t r = 0; r < live; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(w + (nb + r) * ldw + 32 * (c + 4)), _MM_HINT_T0);
      __m512 v[16];  // pairs that start before K
      load_words_transposed16(v, w + nb * ldw + 32 * c, 2 * ldw, live, (K - 32 * c + 1) / 2);
      for (int i = 0; i < 16; ++i)
        _mm512_storeu_ps(reinterpret_cast<float*>(panel + i * pitch + (c * 4 + j) * 16), v[i]);
    }
  }
}

// The same panel when weight row n is column n of a float matrix B [K, N] (row stride ldb), as
// the backward products of training have it (op(B) = B): word (i, c, j, l) =
// bf16(B[k0][n]) | bf16(B[k0 + 1][n]) << 16 with bf16_from_float's bits (bf16_lanes_avx512),
// zeros past N and K. Two rows of B make 16 words, so no transpose is needed (the rows-then-
// panel route rounded B into transposed rows first, then transposed those again). kNative
// rounds by vcvtneps2bf16 (round16): the same bits.
template <bool kNative>
ATTN_AVX512_BF16 void pack_bf16_panel_from_columns(uint32_t* panel, const float* B, int64_t ldb, int64_t n0, int64_t N,
                                                   int64_t K, int64_t pitch = 0) {
  const int64_t C = (K + 31) / 32;
  if (pitch == 0) pitch = C * 64;
  const __m512i zero = _mm512_setzero_si512();
  int64_t live[4];
  __mmask16 mask[4];
  for (int j = 0; j < 4; ++j) {
    live[j] = std::clamp<int64_t>(N - (n0 + 16 * j), 0, 16);
    mask[j] = static_cast<__mmask16>(live[j] >= 16 ? 0xFFFF : (1u << live[j]) - 1);
  }
  for (int64_t c = 0; c < C; ++c)
    for (int i = 0; i < 16; ++i) {
      const int64_t k0 = 32 * c + 2 * i;
      uint32_t* out = panel + i * pitch + c * 64;
      // The rows 8 pairs on, ahead of their loads (the rows lie ldb apart: no stream to detect).
      for (int64_t k = k0 + 16; k < std::min(k0 + 18, K); ++k)
        for (int j = 0; j < 4; ++j)
          if (live[j] > 0) _mm_prefetch(reinterpret_cast<const char*>(B + k * ldb + n0 + 16 * j), _MM_HINT_T0);
      if (kNative && live[3] == 16 && k0 + 1 < K) {  // a whole pair of 64-value rows: both rounded at once
        const float* b0 = B + k0 * ldb + n0;
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j)
          _mm512_storeu_si512(out + 16 * j,
                              bf16_pairs_avx512_bf16(_mm512_loadu_ps(b0 + 16 * j), _mm512_loadu_ps(b0 + ldb + 16 * j)));
        continue;
      }
      for (int j = 0; j < 4; ++j) {
        __m512i half[2] = {zero, zero};  // bf16 of B[k0 + h][n0 + 16 j .. + 15] in the low halves
        for (int h = 0; h < 2; ++h) {
          if (k0 + h >= K || live[j] == 0) continue;
          const float* src = B + (k0 + h) * ldb + n0 + 16 * j;
          half[h] = round16<kNative>(live[j] == 16 ? _mm512_loadu_ps(src) : _mm512_maskz_loadu_ps(mask[j], src));
        }
        _mm512_storeu_si512(out + 16 * j, _mm512_or_si512(half[0], _mm512_slli_epi32(half[1], 16)));
      }
    }
}

// The 16 lane-class accumulators of MR activation rows against a packed panel:
// part[((i MR + m) 4 + j) 16 + l], the activation pair broadcast. The rows are read where they
// lie, with k in natural order (zeros from K to the next multiple of 32): for vdpbf16ps
// (kNative) bf16 rows, whose dword 16 c + i is the pair (x[k0], x[k0 + 1]), k0 = 32 c + 2 i; for
// the emulation the same values widened to floats (x[k0] and x[k0 + 1] at 32 c + 2 i). So lane
// class i reads one dword (two floats) per 64 (128) bytes, each line reused by the 16 classes
// from L1. The emulation does each vdpbf16ps step as its two float32
// FMAs, odd position first (exact products of bf16 values, one rounding each), under
// FlushToZero, which flushes what vdpbf16ps flushes: a result that is tiny before rounding, and
// subnormal operands (the tests compare the bits). Where vdpbf16ps is slow (bf16_path's probe),
// these FMAs outrun it (docs/quantization.md). Both are compiled for the BF16 target; the
// emulation uses no BF16 instruction.
template <int MR, bool kNative, class X>
ATTN_AVX512_BF16 void bf16_panel_classes(float* part, const X* const* xr, const uint32_t* panel, int64_t C) {
  static_assert(std::is_same_v<X, std::conditional_t<kNative, uint16_t, float>>, "bf16 rows for vdpbf16ps, floats else");
  FlushToZero ftz(!kNative);
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int i = 0; i < 16; ++i) {
    __m512 a[MR][4];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) a[m][j] = _mm512_setzero_ps();
    const uint32_t* p = panel + i * C * 64;
    for (int64_t c = 0; c < C; ++c, p += 64) {
      __m512i b[4];
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) b[j] = _mm512_loadu_si512(p + 16 * j);
      if constexpr (kNative) {
#pragma GCC unroll 8
        for (int m = 0; m < MR; ++m) {
          int32_t pair;
          std::memcpy(&pair, xr[m] + 32 * c + 2 * i, sizeof pair);
          const __m512i xv = _mm512_set1_epi32(pair);
#pragma GCC unroll 4
          for (int j = 0; j < 4; ++j) a[m][j] = _mm512_dpbf16_ps(a[m][j], (__m512bh)xv, (__m512bh)b[j]);
        }
      } else {
        __m512 bo[4], be[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          bo[j] = _mm512_castsi512_ps(_mm512_and_si512(b[j], hi_mask));
          be[j] = _mm512_castsi512_ps(_mm512_slli_epi32(b[j], 16));
        }
#pragma GCC unroll 8
        for (int m = 0; m < MR; ++m) {
          const __m512 xe = _mm512_set1_ps(xr[m][32 * c + 2 * i]);
          const __m512 xo = _mm512_set1_ps(xr[m][32 * c + 2 * i + 1]);
#pragma GCC unroll 4
          for (int j = 0; j < 4; ++j) {
            a[m][j] = _mm512_fmadd_ps(xo, bo[j], a[m][j]);
            a[m][j] = _mm512_fmadd_ps(xe, be[j], a[m][j]);
          }
        }
      }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) _mm512_storeu_ps(part + ((i * MR + m) * 4 + j) * 16, a[m][j]);
  }
}

// The epilogue of 16 sums s of one row, `live` (1-16) of them stored: out[i] + s when
// accumulating, else s (+ bias[i]), then ReLU when `relu`; stored at out, or rounded to bf16 at
// outb when outb is not null (bf16_lanes_avx512: bf16_from_float's bits). Whole vectors by plain
// stores (a masked store costs more on AMD's Zen 5).
ATTN_AVX512 inline void bf16_store16(__m512 s, int64_t live, float* out, const float* bias, bool accumulate, bool relu,
                                     uint16_t* outb) {
  const __mmask16 mask = static_cast<__mmask16>(live == 16 ? 0xFFFF : (1u << live) - 1);
  __m512 v = s;
  if (accumulate)
    v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, out), s);
  else if (bias != nullptr)
    v = _mm512_add_ps(s, _mm512_maskz_loadu_ps(mask, bias));
  if (relu) v = relu_avx512(v);
  if (outb != nullptr) {
    const __m256i h = _mm512_cvtepi32_epi16(bf16_lanes_avx512(_mm512_castps_si512(v)));
    if (live == 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(outb), h);
    else
      _mm512_mask_storeu_epi16(outb, static_cast<__mmask32>(mask), _mm512_castsi256_si512(h));
  } else if (live == 16) {
    _mm512_storeu_ps(out, v);
  } else {
    _mm512_mask_storeu_ps(out, mask, v);
  }
}

// The tree of the lane classes and the epilogue for MR rows of one panel: y = sum (+ bias), or
// y + sum when accumulating; rows past `rows` and columns past N are not stored. With yb, the
// results go there instead, rounded to bf16 (bf16_lanes_avx512: bf16_from_float's bits).
template <int MR>
ATTN_AVX512 void bf16_panel_finish(const float* part, int rows, float* y, int64_t ldy, int64_t n0, int64_t N,
                                   const float* bias, bool accumulate, bool relu, uint16_t* yb, int64_t ldyb) {
  for (int m = 0; m < rows; ++m)
    for (int j = 0; j < 4; ++j) {
      const int64_t nb = n0 + 16 * j;
      if (nb >= N) break;
      const int64_t live = std::min<int64_t>(N - nb, 16);
      const float* pj = part + (m * 4 + j) * 16;  // lane class i at pj + i * MR * 64
      // Unrolled, so that t8 and t4 stay in registers (kept on the stack, their store and
      // reload took a third of the product's time on AMD's Zen 5).
      __m512 t8[8], t4[4];
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q)
        t8[q] = _mm512_add_ps(_mm512_loadu_ps(pj + q * MR * 64), _mm512_loadu_ps(pj + (q + 8) * MR * 64));
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) t4[q] = _mm512_add_ps(t8[q], t8[q + 4]);
      const __m512 s = _mm512_add_ps(_mm512_add_ps(t4[0], t4[2]), _mm512_add_ps(t4[1], t4[3]));
      bf16_store16(s, live, yb != nullptr ? nullptr : y + m * ldy + nb, bias != nullptr ? bias + nb : nullptr,
                   accumulate, relu, yb != nullptr ? yb + m * ldyb + nb : nullptr);
    }
}

// y[m, n] = sum (+ bias[n]), or y[m, n] + sum when accumulating, then ReLU when `relu`, for
// the bf16 products of M activation rows xb (bf16, row stride ldb >= 32 ceil(K / 32), zeros from
// K on) and the weight rows w [N, K] (row stride ldw, even), on packed panels (the AVX-512
// paths: vdpbf16ps when kNative, else its FMA emulation). With yb (not accumulating), the
// results are stored rounded to bf16 at yb[m * ldyb + n] instead of y. With wcols, the weight
// rows are the columns of the float matrix wcols [K, N] (row stride ldwc) and w is unused.
template <bool kNative>
void bf16_panels(int64_t M, int64_t N, int64_t K, const uint16_t* xb, int64_t ldb, const uint16_t* w, int64_t ldw,
                 const float* bias, bool accumulate, float* y, int64_t ldy, bool relu = false,
                 uint16_t* yb = nullptr, int64_t ldyb = 0, const float* wcols = nullptr, int64_t ldwc = 0) {
  const int64_t C = (K + 31) / 32;
  const PanelSplit split = panel_split(M, N, K, kPanelMR<kNative>);
  using X = std::conditional_t<kNative, uint16_t, float>;
  const X* xp;
  int64_t ldp;
  if constexpr (kNative) {
    xp = xb;
    ldp = ldb;
  } else {
    // The emulation's operands: the rows widened to floats, C * 32 per row.
    ldp = C * 32;
    float* const xw = thread_scratch<float, 1>(M * ldp);
    parallel_for(M, split.threads > 1 && M * ldp >= kPackParallelMin,
                 [&](int64_t m) { widen_bf16_avx512(xw + m * ldp, xb + m * ldb, ldp); });
    xp = xw;
  }
  const auto pack = [&](uint32_t* panel, int64_t p) {
    if (wcols != nullptr)
      pack_bf16_panel_from_columns<kNative>(panel, wcols, ldwc, p * kPanelRows, N, K);
    else
      pack_bf16_panel(panel, w, ldw, p * kPanelRows, N, K);
  };
  for_panel_items(M, N, split, C * 16 * 64, pack, [&](int64_t p, int64_t m0, int64_t m1, const uint32_t* panel) {
    constexpr int MR = kPanelMR<kNative>;
    alignas(64) float part[16 * MR * 4 * 16];
    for (int64_t m = m0; m < m1; m += MR) {
      const X* xr[MR];
      for (int r = 0; r < MR; ++r) xr[r] = xp + std::min(m + r, m1 - 1) * ldp;
      bf16_panel_classes<MR, kNative>(part, xr, panel, C);
      bf16_panel_finish<MR>(part, static_cast<int>(std::min<int64_t>(MR, m1 - m)), yb ? y : y + m * ldy, ldy,
                            p * kPanelRows, N, bias, accumulate, relu, yb ? yb + m * ldyb : nullptr, ldyb);
    }
  });
}

// ---- bf16 and int8 on AMX tiles (Intel's Sapphire Rapids and later) -------------------------
// Two formulations: this one, on the packed panels (the bf16 products of 256 rows or more), and
// the weight rows as tiles further below (fewer bf16 rows, and the int8 products).
// tdpbf16ps multiplies a tile of 16 activation rows x 32 k (bf16, natural order) by a tile of
// 16 pairs of k x 16 outputs (the weight pairs, as the panel holds them) and adds the products
// into 16 x 16 float32 sums: 16,384 flops per instruction, about 15 times the float32 FMA rate
// of a core (3.2 TFLOP/s measured per core, register operands). The panel layout above is the
// B tile's, with pair rows `pitch` dwords apart: pair row i of chunk c for outputs 16 j .. 16 j +
// 15 lies at panel + i pitch + (4 c + j) 16, so a tile is loaded with a row stride of 4 pitch
// bytes. bf16_amx skews the pitch by 128 bytes past the 256 C of the plain layout: at 256 C (a
// multiple of 4 KiB when C is a multiple of 16) a tile's 16 rows fell on one L1 cache set.
// The accumulation order inside the instruction is the hardware's own (not the lanes' tree of
// the other paths): each output's sum runs over the chunks c = 0, 1, ... in order from +0, with
// float32 sums, denormals read as zero and flushed; the tests bound it against float64 (K + 5
// roundings) and check what the order must give: a row's bits alone and in any batch, and under
// any thread count, are the same. Tiles: 0-3 the sums of 2 x 2 blocks (32 rows x 32 outputs),
// 4-5 the activation rows, 6-7 the weight pairs. A block of fewer rows configures its tiles with
// the rows it has (the instructions then touch no memory past the last row).
#define ATTN_AMX __attribute__((target("avx512f,avx512bw,avx2,fma,amx-tile,amx-bf16")))

struct alignas(64) AmxConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Asks Linux for the AMX tile data state (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): without
// it the first tile instruction faults. Once per process; false where the kernel refuses.
bool amx_permitted() {
  static const bool permitted = [] {
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return permitted;
}

// Whether the CPU has AMX-TILE (cpuid leaf 7 EDX bit 24) and the OS saves the tile state (XCR0
// bits 17 and 18); and AMX-BF16 (bit 22), AMX-INT8 (bit 25). Asked once (cpuid traps to the
// hypervisor in a VM).
bool cpu_has_amx_tiles() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!(d & (1u << 24))) return false;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE: xgetbv works
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & (3u << 17)) == (3u << 17);
  }();
  return has;
}

bool cpu_has_amx_feature(int bit) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return cpu_has_amx_tiles() && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << bit)) != 0;
}

bool cpu_has_amx_bf16() {
  static const bool has = cpu_has_amx_feature(22);
  return has;
}

bool cpu_has_amx_int8() {
  static const bool has = cpu_has_amx_feature(25);
  return has;
}

// Configures the tiles for a block of `rows` activation rows (1..32): row tile 0 takes
// min(rows, 16), row tile 1 the rest (unconfigured when none).
ATTN_AMX void amx_configure(int rows) {
  AmxConfig cfg;
  const int r0 = std::min(rows, 16), r1 = rows - r0;
  for (int t : {0, 1, 4}) cfg.rows[t] = static_cast<uint8_t>(r0), cfg.colsb[t] = 64;
  if (r1 > 0)
    for (int t : {2, 3, 5}) cfg.rows[t] = static_cast<uint8_t>(r1), cfg.colsb[t] = 64;
  for (int t : {6, 7}) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  // GCC's ldtilecfg asm names only the first 8 bytes of the 64 as its input: without this
  // barrier the other stores may be dropped as dead.
  __asm__ volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

// out[m * ldo + o] = the sums of activation rows a[m * lda ..] (bf16, 32 C per row, zeros from
// K on; m < rows) against outputs 32 half + o of the panel, o < 32. kTwo: rows > 16.
template <bool kTwo>
ATTN_AMX void amx_block(float* out, int64_t ldo, const uint16_t* a, int64_t lda, const uint32_t* panel, int64_t C,
                        int64_t pitch, int half) {
  const int64_t a_stride = lda * 2, b_stride = pitch * 4;
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (kTwo) {
    _tile_zero(2);
    _tile_zero(3);
  }
  __asm__ volatile("" ::: "memory");  // the rows and the panel are written before the tiles read them
  for (int64_t c = 0; c < C; ++c) {
    const uint32_t* b = panel + (c * 4 + 2 * half) * 16;
    // The next chunk's lines into L1, ahead of its tile loads (without this the products waited
    // on the panel's tile loads from L2: most of the kernel's samples sat on them).
    if (c + 1 < C)
      for (int i = 0; i < 16; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(b + 64 + i * pitch), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b + 64 + i * pitch + 16), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(a + 32 * (c + 1) + i * lda), _MM_HINT_T0);
        if constexpr (kTwo) _mm_prefetch(reinterpret_cast<const char*>(a + 32 * (c + 1) + (16 + i) * lda), _MM_HINT_T0);
      }
    _tile_loadd(4, a + 32 * c, a_stride);
    _tile_loadd(6, b, b_stride);
    _tile_loadd(7, b + 16, b_stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (kTwo) {
      _tile_loadd(5, a + 16 * lda + 32 * c, a_stride);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, out, ldo * 4);
  _tile_stored(1, out + 16, ldo * 4);
  if constexpr (kTwo) {
    _tile_stored(2, out + 16 * ldo, ldo * 4);
    _tile_stored(3, out + 16 * ldo + 16, ldo * 4);
  }
  __asm__ volatile("" ::: "memory");  // and `out` is read after the stores
}

// The epilogue of amx_block's sums for `rows` rows and the outputs [n0, n0 + 32) below N, as
// bf16_panel_finish does it after its tree.
ATTN_AVX512_BF16 void amx_finish(const float* part, int rows, float* y, int64_t ldy, int64_t n0, int64_t N,
                                 const float* bias, bool accumulate, bool relu, uint16_t* yb, int64_t ldyb) {
  if (yb != nullptr && !accumulate && n0 + 32 <= N) {  // whole bf16 outputs (the AMX path has vcvtneps2bf16)
    const __m512 b0 = bias != nullptr ? _mm512_loadu_ps(bias + n0) : _mm512_setzero_ps();
    const __m512 b1 = bias != nullptr ? _mm512_loadu_ps(bias + n0 + 16) : _mm512_setzero_ps();
    for (int m = 0; m < rows; ++m) {
      __m512 v0 = _mm512_load_ps(part + m * 32), v1 = _mm512_load_ps(part + m * 32 + 16);
      if (bias != nullptr) {  // the sum plus the bias, as bf16_store16 (no bias: the sum itself, not s + 0)
        v0 = _mm512_add_ps(v0, b0);
        v1 = _mm512_add_ps(v1, b1);
      }
      if (relu) {
        v0 = relu_avx512(v0);
        v1 = relu_avx512(v1);
      }
      const __m256bh h0 = _mm512_cvtneps_pbh(v0), h1 = _mm512_cvtneps_pbh(v1);
      std::memcpy(yb + m * ldyb + n0, &h0, sizeof h0);
      std::memcpy(yb + m * ldyb + n0 + 16, &h1, sizeof h1);
    }
    return;
  }
  if (yb == nullptr && !relu && n0 + 32 <= N) {  // whole float outputs: the same adds, no branch per vector
    if (accumulate) {
      for (int m = 0; m < rows; ++m)
        for (int j = 0; j < 2; ++j) {
          float* const o = y + m * ldy + n0 + 16 * j;
          _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), _mm512_load_ps(part + m * 32 + 16 * j)));
        }
      return;
    }
    if (bias != nullptr) {
      const __m512 b0 = _mm512_loadu_ps(bias + n0), b1 = _mm512_loadu_ps(bias + n0 + 16);
      for (int m = 0; m < rows; ++m) {
        float* const o = y + m * ldy + n0;
        _mm512_storeu_ps(o, _mm512_add_ps(_mm512_load_ps(part + m * 32), b0));
        _mm512_storeu_ps(o + 16, _mm512_add_ps(_mm512_load_ps(part + m * 32 + 16), b1));
      }
      return;
    }
  }
  for (int m = 0; m < rows; ++m)
    for (int j = 0; j < 2; ++j) {
      const int64_t nb = n0 + 16 * j;
      if (nb >= N) break;
      const int64_t live = std::min<int64_t>(N - nb, 16);
      bf16_store16(_mm512_loadu_ps(part + m * 32 + 16 * j), live, yb != nullptr ? nullptr : y + m * ldy + nb,
                   bias != nullptr ? bias + nb : nullptr, accumulate, relu,
                   yb != nullptr ? yb + m * ldyb + nb : nullptr);
    }
}

ATTN_AMX void amx_release() { _tile_release(); }

// bf16_panels' product on AMX tiles, for any M (a row's sums do not depend on the rows beside
// it); same arguments. Every panel of the call is packed first, once, into one buffer shared by
// the threads (pitch skewed, above); then the work items are ranges of activation rows (about
// 1 MiB of them, so that they stay in the core's L2 cache while its thread goes over every
// panel) times panels, the ranges outermost, where each item used to be one panel against all
// rows. xb's row stride should not be a multiple of 1 KiB: a tile's 16 rows then fall on few L1
// cache sets (bf16_row_pitch). With wcols, op(B)'s rows are the columns of a float matrix (any
// K).
void bf16_amx(int64_t M, int64_t N, int64_t K, const uint16_t* xb, int64_t ldb, const uint16_t* w, int64_t ldw,
              const float* bias, bool accumulate, float* y, int64_t ldy, bool relu = false, uint16_t* yb = nullptr,
              int64_t ldyb = 0, const float* wcols = nullptr, int64_t ldwc = 0) {
  const int64_t C = (K + 31) / 32, P = (N + kPanelRows - 1) / kPanelRows;
  const int64_t pitch = C * 64 + 32, words = 16 * pitch;  // a pair row's dwords, 128 bytes of skew
  const bool parallel = !omp_in_parallel() && M * N * K >= kPanelParallelMin;
  uint32_t* const panels = thread_scratch<uint32_t, 4>(P * words);
  parallel_for(P, parallel && N * K >= kPackParallelMin, [&](int64_t p) {
    if (wcols != nullptr)
      pack_bf16_panel_from_columns<true>(panels + p * words, wcols, ldwc, p * kPanelRows, N, K, pitch);
    else
      pack_bf16_panel(panels + p * words, w, ldw, p * kPanelRows, N, K, pitch);
  });
  // Ranges of equal size (a multiple of 32 rows), enough of them for every thread to have work.
  constexpr int64_t kRangeBytes = int64_t{1} << 20;
  const int64_t most = std::max<int64_t>(32, kRangeBytes / (ldb * 2) / 32 * 32);
  int64_t ranges = (M + most - 1) / most;
  if (parallel)
    while (ranges * P < 2 * omp_get_max_threads() && ranges * 32 < M) ++ranges;
  const int64_t rows_per = ((M + ranges - 1) / ranges + 31) / 32 * 32;
  ranges = (M + rows_per - 1) / rows_per;
  const bool direct = !accumulate && bias == nullptr && !relu && yb == nullptr;
  parallel_for(ranges * P, parallel, [&](int64_t item) {
    const int64_t p = item % P, m0 = item / P * rows_per, m1 = std::min(M, m0 + rows_per);
    const uint32_t* const panel = panels + p * words;
    alignas(64) float part[32 * 32];
    int configured = 0;
    for (int64_t m = m0; m < m1; m += 32) {
      const int rows = static_cast<int>(std::min<int64_t>(32, m1 - m));
      if (rows != configured) {
        amx_configure(rows);
        configured = rows;
      }
      for (int half = 0; half < 2; ++half) {
        const int64_t n0 = p * kPanelRows + 32 * half;
        if (n0 >= N) break;
        if (direct && rows == 32 && n0 + 32 <= N) {  // the sums are the outputs: stored in place
          amx_block<true>(y + m * ldy + n0, ldy, xb + m * ldb, ldb, panel, C, pitch, half);
          continue;
        }
        if (rows > 16)
          amx_block<true>(part, 32, xb + m * ldb, ldb, panel, C, pitch, half);
        else
          amx_block<false>(part, 32, xb + m * ldb, ldb, panel, C, pitch, half);
        amx_finish(part, rows, yb ? y : y + m * ldy, ldy, n0, N, bias, accumulate, relu, yb ? yb + m * ldyb : nullptr,
                   ldyb);
      }
    }
    amx_release();
  });
}

// Activation rows from which the bf16 products on AMX pack the weight into panels (bf16_amx)
// instead of reading the weight rows as tiles (bf16_amx_rows); both give the same bits.
constexpr int64_t kAmxPanelMinRows = 256;

// The same sums with the operands' roles swapped: the weight rows are the A tiles, read where
// they lie (16 rows x 64 bytes: no panel to pack, which at a few activation rows cost more than
// the product), and the activations the B tiles, packed once per call as dwords: for the 16
// rows [16 q, 16 q + 16), xp_q[(c 16 + i) 16 + m] = dword i of chunk c of row 16 q + m (bf16:
// the pair (x[32 c + 2 i], x[32 c + 2 i + 1]); int8: the four bytes from 64 c + 4 i), zeros past
// M and K. A tile of sums then holds 16 outputs x 16 rows, transposed into rows before the
// epilogue. For bf16 each sum takes the same products in the same k order as in bf16_amx, and
// tdpbf16ps gives the same bits either way round (the tests compare the two formulations on
// every shape); int8 sums (tdpbssd, both factors signed: no 128 shift) are exact in any order,
// so they are VNNI's accumulators bit for bit.
//
// Tiles, for two row chunks: 2 j + q the sums of weight block j and row chunk q (j, q < 2),
// 4 + j the weight rows, 6 + q the activations. For one row chunk (at most 16 activation rows)
// they are spent differently: 0-1 the sums of two weight blocks, 2-5 their weight rows, 6-7 the
// activations, consecutive chunks of K on alternate tiles, so that a chunk's loads need not
// wait for the products reading the last one. Few rows still leave the tiles slower than the
// vector kernels (a tile load takes about 16 ns per KiB here, from L1, and feeds 16 x 32
// weights to so few rows): at one row 1.3-1.8x the AVX-512 path's time, hence
// bf16_path_for_rows and kAmxS8MinRows. The last chunk of K and a last block of fewer than 16
// weight rows are read from small zero-padded copies, so no tile reads past a row or past the
// weight. (GCC's tile intrinsics paste the tile number into the instruction's text, so it must
// be a literal: hence the spelled-out tile sets.)
#define ATTN_AMX_ANY __attribute__((target("avx512f,avx512bw,avx2,fma,amx-tile,amx-bf16,amx-int8")))

// Activation rows from which the amx_int8 path runs the tiles; fewer take VNNI's kernels (the
// same accumulators, so the choice changes no bit).
constexpr int64_t kAmxS8MinRows = 16;

// Configures the tiles for row chunks of cols0 and cols1 (0: none) rows.
ATTN_AMX_ANY void amx_configure_rows(int cols0, int cols1) {
  AmxConfig cfg;
  const auto set = [&cfg](std::initializer_list<int> tiles, int cols) {
    for (int t : tiles) cfg.rows[t] = 16, cfg.colsb[t] = static_cast<uint16_t>(4 * cols);
  };
  if (cols1 == 0) {
    set({0, 1, 6, 7}, cols0);
    set({2, 3, 4, 5}, 16);
  } else {
    set({0, 2, 6}, cols0);
    set({1, 3, 7}, cols1);
    set({4, 5}, 16);
  }
  __asm__ volatile("" : : "r"(&cfg) : "memory");  // as amx_configure
  _tile_loadconfig(&cfg);
}

// C += A B on the tiles: tdpbssd (int8) or tdpbf16ps (bf16).
#define ATTN_AMX_DP(kInt8, c, a, b) \
  do {                              \
    if constexpr (kInt8)            \
      _tile_dpbssd(c, a, b);        \
    else                            \
      _tile_dpbf16ps(c, a, b);      \
  } while (0)

// One chunk of K for two row chunks: their activations, then each weight block's rows.
template <bool kInt8, int NB>
ATTN_AMX_ANY inline void amx_step2(const void* w0, int64_t s0, const void* w1, int64_t s1, const uint32_t* x0,
                                   const uint32_t* x1) {
  _tile_loadd(6, x0, 64);
  _tile_loadd(7, x1, 64);
  _tile_loadd(4, w0, s0);
  ATTN_AMX_DP(kInt8, 0, 4, 6);
  ATTN_AMX_DP(kInt8, 1, 4, 7);
  if constexpr (NB > 1) {
    _tile_loadd(5, w1, s1);
    ATTN_AMX_DP(kInt8, 2, 5, 6);
    ATTN_AMX_DP(kInt8, 3, 5, 7);
  }
}

// One chunk of K for one row chunk, on tile set kSet.
template <bool kInt8, int NB, int kSet>
ATTN_AMX_ANY inline void amx_step1(const void* w0, int64_t s0, const void* w1, int64_t s1, const uint32_t* x) {
  if constexpr (kSet == 0) {
    _tile_loadd(6, x, 64);
    _tile_loadd(2, w0, s0);
    ATTN_AMX_DP(kInt8, 0, 2, 6);
    if constexpr (NB > 1) {
      _tile_loadd(3, w1, s1);
      ATTN_AMX_DP(kInt8, 1, 3, 6);
    }
  } else {
    _tile_loadd(7, x, 64);
    _tile_loadd(4, w0, s0);
    ATTN_AMX_DP(kInt8, 0, 4, 7);
    if constexpr (NB > 1) {
      _tile_loadd(5, w1, s1);
      ATTN_AMX_DP(kInt8, 1, 5, 7);
    }
  }
}

// The weight side of a work item: blocks of 16 rows, block j's rows at rows[j] (row stride
// ld[j] bytes) and, when K ends in a partial chunk, that chunk's 64 bytes of row r at
// tail[j] + 64 r, zeros from K on.
struct AmxWeights {
  const char* rows[4];
  int64_t ld[4];
  const char* tail[4];
  int blocks;
};

// The blocks of weight rows [n0, n0 + live) of w (row stride ldw bytes, K_bytes bytes of data
// per row, C chunks of 64 bytes): the weight itself, or zero-padded copies kept per thread.
AmxWeights amx_weights(const char* w, int64_t ldw, int64_t n0, int64_t live, int64_t K_bytes, int64_t C) {
  thread_local std::vector<char, LineAligned<char>> tails, last;
  const bool partial = K_bytes % 64 != 0;
  AmxWeights b{};
  b.blocks = static_cast<int>((live + 15) / 16);
  if (live % 16 != 0) {  // the partial block: whole chunks, zero rows up to 16
    last.assign(static_cast<size_t>(16 * C * 64), char{0});
    const int64_t first = live / 16 * 16;
    for (int64_t r = first; r < live; ++r)
      std::memcpy(last.data() + (r - first) * C * 64, w + (n0 + r) * ldw, static_cast<size_t>(K_bytes));
  }
  if (partial) {
    tails.assign(static_cast<size_t>(64 * 64), char{0});
    for (int64_t r = 0; r < live; ++r)
      std::memcpy(tails.data() + r * 64, w + (n0 + r) * ldw + 64 * (C - 1),
                  static_cast<size_t>(K_bytes - 64 * (C - 1)));
  }
  for (int j = 0; j < b.blocks; ++j) {
    const bool copied = live % 16 != 0 && j == b.blocks - 1;
    b.rows[j] = copied ? last.data() : w + (n0 + 16 * j) * ldw;
    b.ld[j] = copied ? C * 64 : ldw;
    b.tail[j] = partial ? tails.data() + 16 * j * 64 : nullptr;
  }
  return b;
}

// The sums of nb (1-2) weight blocks from block j of `wb` against the row chunks (mb = 1 or 2)
// whose packed activations start at xq[q], over C chunks: with two row chunks, tile 2 j' + q at
// part[(2 j' + q) 256 + r 16 + m]; with one, tile j' at part[j' 256 + r 16 + m] (j' < nb).
template <bool kInt8, int NB, int MB>
ATTN_AMX_ANY void amx_tile(int32_t* part, const AmxWeights& wb, int j, const uint32_t* const* xq, int64_t C,
                           bool partial) {
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (MB > 1 && NB > 1) {
    _tile_zero(2);
    _tile_zero(3);
  }
  __asm__ volatile("" ::: "memory");  // the copies are written before the tiles read them
  const char* const w0 = wb.rows[j];
  const char* const w1 = wb.rows[j + NB - 1];
  const int64_t s0 = wb.ld[j], s1 = wb.ld[j + NB - 1];
  const int64_t full = partial ? C - 1 : C;
  if constexpr (MB > 1) {
    for (int64_t c = 0; c < full; ++c)
      amx_step2<kInt8, NB>(w0 + 64 * c, s0, w1 + 64 * c, s1, xq[0] + c * 256, xq[1] + c * 256);
    if (partial) amx_step2<kInt8, NB>(wb.tail[j], 64, wb.tail[j + NB - 1], 64, xq[0] + full * 256, xq[1] + full * 256);
    _tile_stored(0, part, 64);
    _tile_stored(1, part + 256, 64);
    if constexpr (NB > 1) {
      _tile_stored(2, part + 512, 64);
      _tile_stored(3, part + 768, 64);
    }
  } else {
    int64_t c = 0;
    for (; c + 1 < full; c += 2) {
      amx_step1<kInt8, NB, 0>(w0 + 64 * c, s0, w1 + 64 * c, s1, xq[0] + c * 256);
      amx_step1<kInt8, NB, 1>(w0 + 64 * (c + 1), s0, w1 + 64 * (c + 1), s1, xq[0] + (c + 1) * 256);
    }
    if (c < full) amx_step1<kInt8, NB, 0>(w0 + 64 * c, s0, w1 + 64 * c, s1, xq[0] + c * 256);
    if (partial) amx_step1<kInt8, NB, 1>(wb.tail[j], 64, wb.tail[j + NB - 1], 64, xq[0] + full * 256);
    _tile_stored(0, part, 64);
    if constexpr (NB > 1) _tile_stored(1, part + 256, 64);
  }
  __asm__ volatile("" ::: "memory");  // and `part` is read after the stores
}

ATTN_AMX_ANY void amx_release_any() { _tile_release(); }

// Packs activation rows [16 q, 16 q + 16) (rows of `row_bytes` bytes at x, `data_bytes` of
// them data, the rest up to 64 C zeros or absent) as dwords: out[(c 16 + i) 16 + m].
ATTN_AVX512 void amx_pack_rows(uint32_t* out, const char* x, int64_t row_bytes, int64_t data_bytes, int64_t rows,
                               int64_t C) {
  for (int64_t c = 0; c < C; ++c) {
    __m512 v[16];
    load_words_transposed16(v, x + 64 * c, row_bytes, rows, std::min<int64_t>(16, (data_bytes - 64 * c + 3) / 4));
    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(reinterpret_cast<float*>(out + (c * 16 + i) * 16), v[i]);
  }
}

// The 16 x 16 block of 32-bit sums at `block` (row r = output, column m = activation row)
// transposed: out[m * ld + r].
ATTN_AVX512 void amx_transpose(void* out, int64_t ld, const int32_t* block) {
  __m512 v[16];
  for (int r = 0; r < 16; ++r) v[r] = _mm512_loadu_ps(reinterpret_cast<const float*>(block + r * 16));
  transpose16_avx512(v);
  for (int m = 0; m < 16; ++m) _mm512_storeu_ps(static_cast<float*>(out) + m * ld, v[m]);
}

// The product of M activation rows (packed as above: xp, Q = ceil(M / 16) row chunks of C
// chunks) and the weight rows w (row stride ldw bytes, K_bytes bytes of data), over work items
// of 64 weight rows times ranges of activation rows (as panel_split divides them). For every
// weight block j (16 rows from n0 = its first output) and row chunk (first row m, `cols` rows),
// sums(m, cols, n0, block) hands over the 16 x 16 block of sums (row r = output n0 + r, column
// = activation row m + column).
template <bool kInt8, class Sums>
void amx_product(int64_t M, int64_t N, const uint32_t* xp, int64_t C, const char* w, int64_t ldw, int64_t K_bytes,
                 const PanelSplit& split, const Sums& sums) {
  const bool partial = K_bytes % 64 != 0;
  const int64_t items = (N + kPanelRows - 1) / kPanelRows * split.parts;
  parallel_for(items, split.threads > 1 && items > 1, [&](int64_t item) {
    const int64_t p = item / split.parts, m0 = (item % split.parts) * split.rows_per;
    const int64_t m1 = std::min(M, m0 + split.rows_per);
    if (m0 >= m1) return;
    const int64_t n0 = p * kPanelRows;
    const AmxWeights wb = amx_weights(w, ldw, n0, std::min<int64_t>(kPanelRows, N - n0), K_bytes, C);
    alignas(64) int32_t part[4 * 256];
    int configured0 = -1, configured1 = -1;
    for (int64_t m = m0; m < m1; m += 32) {  // rows_per is a multiple of 32: chunks of 16 from m
      const int rows = static_cast<int>(std::min<int64_t>(32, m1 - m));
      const int cols[2] = {std::min(rows, 16), rows - std::min(rows, 16)};
      if (cols[0] != configured0 || cols[1] != configured1) {
        amx_configure_rows(cols[0], cols[1]);
        configured0 = cols[0];
        configured1 = cols[1];
      }
      const uint32_t* const x0 = xp + (m / 16) * C * 256;
      const uint32_t* xq[2] = {x0, cols[1] > 0 ? x0 + C * 256 : x0};
      const int mb = cols[1] > 0 ? 2 : 1;
      for (int j = 0; j < wb.blocks; j += 2) {
        const int nb = std::min(2, wb.blocks - j);
        if (mb == 2 && nb == 2)
          amx_tile<kInt8, 2, 2>(part, wb, j, xq, C, partial);
        else if (mb == 2)
          amx_tile<kInt8, 1, 2>(part, wb, j, xq, C, partial);
        else if (nb == 2)
          amx_tile<kInt8, 2, 1>(part, wb, j, xq, C, partial);
        else
          amx_tile<kInt8, 1, 1>(part, wb, j, xq, C, partial);
        for (int jj = 0; jj < nb; ++jj)
          for (int q = 0; q < mb; ++q)
            sums(m + 16 * q, cols[q], n0 + 16 * (j + jj), part + (mb == 2 ? 2 * jj + q : jj) * 256);
      }
    }
    amx_release_any();
  });
}

// bf16_amx in this formulation, for bf16 weight rows w (K even: the caller pads an odd K), same
// arguments. It measured as fast as the panels or faster from 64 to 1,024 rows, and about
// twice as fast at 32.
void bf16_amx_rows(int64_t M, int64_t N, int64_t K, const uint16_t* xb, int64_t ldb, const uint16_t* w, int64_t ldw,
                   const float* bias, bool accumulate, float* y, int64_t ldy, bool relu, uint16_t* yb, int64_t ldyb) {
  const int64_t C = (K + 31) / 32, Q = (M + 15) / 16;
  const PanelSplit split = panel_split(M, N, K, 32);
  uint32_t* const xp = thread_scratch<uint32_t, 2>(Q * C * 256);
  parallel_for(Q, split.threads > 1 && M * K >= kPackParallelMin, [&](int64_t q) {
    amx_pack_rows(xp + q * C * 256, reinterpret_cast<const char*>(xb + 16 * q * ldb), ldb * 2, C * 64,
                  std::min<int64_t>(16, M - 16 * q), C);
  });
  amx_product<false>(M, N, xp, C, reinterpret_cast<const char*>(w), ldw * 2, K * 2, split,
                     [&](int64_t m, int cols, int64_t n0, const int32_t* block) {
                       alignas(64) float rows_out[16 * 32];
                       amx_transpose(rows_out, 32, block);
                       amx_finish(rows_out, cols, yb ? y : y + m * ldy, ldy, n0, std::min(N, n0 + 16), bias, accumulate,
                                  relu, yb ? yb + m * ldyb : nullptr, ldyb);
                     });
}

// The int8 accumulators of activation rows xq (s8 [M, K], contiguous) and weight rows w [N, K]
// on the tiles, handed to out(m0, rows, n0, n1, acc) as s8_driver's.
template <class Out>
void s8_amx(const int8_t* xq, int64_t M, const int8_t* w, int64_t N, int64_t K, const Out& out) {
  const int64_t C = (K + 63) / 64, Q = (M + 15) / 16;
  const PanelSplit split = panel_split(M, N, K, 32);
  // The activations as dwords of four k (a K that is not a multiple of 4 is first copied with
  // zeros to whole words).
  const int8_t* xs = xq;
  int64_t ldx = K;
  if (K % 4 != 0) {
    ldx = (K + 3) / 4 * 4;
    int8_t* const padded = thread_scratch<int8_t, 1>(M * ldx);
    for (int64_t m = 0; m < M; ++m) {
      std::copy(xq + m * K, xq + (m + 1) * K, padded + m * ldx);
      std::fill(padded + m * ldx + K, padded + (m + 1) * ldx, int8_t{0});
    }
    xs = padded;
  }
  uint32_t* const xp = thread_scratch<uint32_t, 3>(Q * C * 256);
  parallel_for(Q, split.threads > 1 && M * K >= kPackParallelMin, [&](int64_t q) {
    amx_pack_rows(xp + q * C * 256, reinterpret_cast<const char*>(xs + 16 * q * ldx), ldx, ldx,
                  std::min<int64_t>(16, M - 16 * q), C);
  });
  amx_product<true>(M, N, xp, C, reinterpret_cast<const char*>(w), K, K, split,
                    [&](int64_t m, int cols, int64_t n0, const int32_t* block) {
                      alignas(64) int32_t acc[16 * 16];
                      amx_transpose(acc, 16, block);
                      out(m, cols, n0, std::min(N, n0 + 16), acc);
                    });
}

// ---- int8 on packed weight panels (many activation rows) ------------------------------------
// Integer sums are exact in any order, so the panel kernel may walk K as it likes: a panel of
// 64 weight rows holds, per group of four k positions q, one vector per 16 rows,
// panel[(q 4 + j) 16 + l] = the bytes w[n][4 q .. 4 q + 3] + 128 (n = n0 + 16 j + l; rows past N
// hold weight 0), and vpdpbusd takes the activation's four bytes broadcast: one activation
// word feeds 64 outputs and no lane sums are left to add. The shift is taken back as in
// s8_rows_vnni. Needs K % 4 == 0 (whole words).
constexpr int kS8PanelMR = 6;                // activation rows per register tile: 24 accumulators
constexpr int64_t kS8PanelQBlock = 128;      // words of K per block: 64 rows x 512 bytes = 32 KiB of panel
constexpr int64_t kS8RowChunk = 16 * kS8PanelMR;  // activation rows whose accumulators are kept across blocks

// Packs weight rows [n0, n0 + 64) of w (rows of K int8, K % 4 == 0) as the panel layout above,
// by 16 x 16 blocks of words loaded along the rows and transposed in registers (as
// pack_bf16_panel: one gather per vector cost several times more).
ATTN_AVX512_VNNI void pack_s8_panel(uint32_t* panel, const int8_t* w, int64_t n0, int64_t N, int64_t K) {
  const int64_t Q = K / 4;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int j = 0; j < 4; ++j) {
    const int64_t nb = n0 + 16 * j;
    const int64_t live = std::clamp<int64_t>(N - nb, 0, 16);
    for (int64_t q0 = 0; q0 < Q; q0 += 16) {
      const int64_t words = std::min<int64_t>(16, Q - q0);
      __m512 v[16];
      load_words_transposed16(v, w + nb * K + 4 * q0, K, live, words);
      for (int i = 0; i < words; ++i)
        _mm512_storeu_si512(panel + ((q0 + i) * 4 + j) * 16, _mm512_xor_si512(_mm512_castps_si512(v[i]), flip));
    }
  }
}

// out[(j MR + m) 16 + l] = sum_k w[n][k] x[m][k] for MR activation rows xr (s8, K = 4 Q bytes
// each) against a packed panel: the shifted weights' sums less x_shift[m] (mod 2^32), so that
// each block of 16 weight rows is a tile of the layout s8_driver hands out (row stride kNBlock).
// K may come in blocks (Q words each, xr and panel at the block's start): the first block starts
// from zeros, later ones from out, and only the last takes the shift back.
template <int MR>
ATTN_AVX512_VNNI void s8_panel_rows(int32_t* out, bool first, bool last, const int8_t* const* xr,
                                    const uint32_t* x_shift, const uint32_t* panel, int64_t Q) {
  __m512i a[MR][4];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j)
      a[m][j] = first ? _mm512_setzero_si512() : _mm512_loadu_si512(out + (j * MR + m) * 16);
  const uint32_t* p = panel;
  for (int64_t q = 0; q < Q; ++q, p += 64) {
    __m512i b[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) b[j] = _mm512_loadu_si512(p + 16 * j);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      int32_t word;
      std::memcpy(&word, xr[m] + 4 * q, sizeof word);
      const __m512i xv = _mm512_set1_epi32(word);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) a[m][j] = _mm512_dpbusd_epi32(a[m][j], b[j], xv);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    const __m512i shift = _mm512_set1_epi32(last ? static_cast<int>(x_shift[m]) : 0);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) _mm512_storeu_si512(out + (j * MR + m) * 16, _mm512_sub_epi32(a[m][j], shift));
  }
}

// 128 sum_k x[k] (mod 2^32) of an s8 row: vpdpbusd with bytes of 1 as the unsigned operand.
ATTN_AVX512_VNNI uint32_t s8_shift_vnni(const int8_t* x, int64_t K) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i acc = _mm512_setzero_si512();
  int64_t k = 0;
  for (; k + 64 <= K; k += 64) acc = _mm512_dpbusd_epi32(acc, ones, _mm512_loadu_si512(x + k));
  if (k < K) acc = _mm512_dpbusd_epi32(acc, ones, _mm512_maskz_loadu_epi8(tail_mask64(K - k), x + k));
  return 128u * static_cast<uint32_t>(_mm512_reduce_add_epi32(acc));
}

// The exact accumulators of M activation rows xq (s8, row stride K) against weight rows w [N, K]
// on packed panels, handed to out(m0, rows, n0, n1, acc) 16 weight rows at a time
// (acc[(m - m0) kNBlock + (n - n0)]), as s8_driver does.
template <class Out>
void s8_panels(const int8_t* xq, int64_t M, const int8_t* w, int64_t N, int64_t K, const uint32_t* x_shift,
               const Out& out) {
  const int64_t Q = K / 4;
  const PanelSplit split = panel_split(M, N, K, kS8PanelMR);
  const auto pack = [&](uint32_t* panel, int64_t p) { pack_s8_panel(panel, w, p * kPanelRows, N, K); };
  for_panel_items(M, N, split, Q * 64, pack, [&](int64_t p, int64_t m0, int64_t m1, const uint32_t* panel) {
    static_assert(kNBlock == 16, "a tile of s8_panel_rows is 16 weight rows wide");
    constexpr int64_t kTile = 4 * kS8PanelMR * kNBlock;  // one tile's accumulators
    int32_t acc[kS8RowChunk / kS8PanelMR * kTile];
    // Rows in chunks, K in blocks inside a chunk: the panel's block stays in L1 while the
    // chunk's tiles run over it.
    for (int64_t mc = m0; mc < m1; mc += kS8RowChunk) {
      const int64_t mce = std::min(m1, mc + kS8RowChunk);
      for (int64_t q0 = 0; q0 < Q; q0 += kS8PanelQBlock) {
        const int64_t qb = std::min(kS8PanelQBlock, Q - q0);
        for (int64_t m = mc; m < mce; m += kS8PanelMR) {
          const int8_t* xr[kS8PanelMR];
          uint32_t shift[kS8PanelMR];
          for (int r = 0; r < kS8PanelMR; ++r) {
            const int64_t row = std::min(m + r, mce - 1);
            xr[r] = xq + row * K + 4 * q0;
            shift[r] = x_shift[row];
          }
          s8_panel_rows<kS8PanelMR>(acc + (m - mc) / kS8PanelMR * kTile, q0 == 0, q0 + qb == Q, xr, shift,
                                    panel + q0 * 64, qb);
        }
      }
      for (int64_t m = mc; m < mce; m += kS8PanelMR) {
        const int rows = static_cast<int>(std::min<int64_t>(kS8PanelMR, mce - m));
        for (int j = 0; j < 4; ++j) {
          const int64_t nb = p * kPanelRows + 16 * j;
          if (nb >= N) break;
          out(m, rows, nb, std::min(N, nb + 16), acc + (m - mc) / kS8PanelMR * kTile + j * kS8PanelMR * kNBlock);
        }
      }
    }
  });
}

#endif  // __x86_64__

// Whether ATTN_AMX leaves the AMX tiles to the bf16 and int8 products (anything but
// "0"), read once.
bool amx_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("ATTN_AMX");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return allowed;
}

bool cpu_supports(QuantPath path) {
#if defined(__x86_64__)
  const bool avx512 = simd::isa_supported(simd::Isa::Avx512) && __builtin_cpu_supports("avx512bw");
  switch (path) {
    case QuantPath::Scalar: return true;
    case QuantPath::Avx2: return simd::isa_supported(simd::Isa::Avx2);
    case QuantPath::Avx512: return avx512;
    case QuantPath::Avx512Vnni: return avx512 && __builtin_cpu_supports("avx512vnni");
    case QuantPath::Avx512Bf16: return avx512 && __builtin_cpu_supports("avx512bf16");
    case QuantPath::Amx:
      return avx512 && __builtin_cpu_supports("avx512bf16") && cpu_has_amx_bf16() && amx_permitted();
    case QuantPath::AmxInt8:
      return avx512 && __builtin_cpu_supports("avx512vnni") && cpu_has_amx_int8() && amx_permitted();
  }
  return false;
#else
  return path == QuantPath::Scalar;
#endif
}

void check_path(QuantPath path, bool int8) {
  ATTN_CHECK(quant_path_supported(path), int8 ? "gemm_s8" : "gemm_bf16", "path ", quant_path_name(path),
             " is not supported by this CPU or build");
  if (int8) {
    ATTN_CHECK(path == QuantPath::Scalar || path == QuantPath::Avx2 || path == QuantPath::Avx512Vnni ||
                   path == QuantPath::AmxInt8,
               "gemm_s8", "no int8 kernel for path ", quant_path_name(path),
               " (scalar, avx2, avx512_vnni or amx_int8)");
  } else {
    ATTN_CHECK(path != QuantPath::Avx512Vnni && path != QuantPath::AmxInt8, "gemm_bf16", "no bf16 kernel for path ",
               quant_path_name(path), " (scalar, avx2, avx512, avx512_bf16 or amx_bf16)");
  }
}

// The exact int8 accumulators of weight rows [n0, n1) against activation rows xs (s8);
// x_shift (VNNI only) as s8_block_vnni takes it.
void s8_block(QuantPath path, int32_t* acc, int64_t ld, const int8_t* xs, int64_t M, const int8_t* w, int64_t n0,
              int64_t n1, int64_t K, const uint32_t* x_shift) {
  switch (path) {
#if defined(__x86_64__)
    case QuantPath::Avx2: s8_block_avx2(acc, ld, xs, M, w, n0, n1, K); return;
    case QuantPath::Avx512Vnni: s8_block_vnni(acc, ld, xs, M, w, n0, n1, K, x_shift); return;
#endif
    default: s8_block_scalar(acc, ld, xs, M, w, n0, n1, K); return;
  }
}

void bf16_block(QuantPath path, float* sums, int64_t ld, const uint16_t* x, int64_t ldx, int64_t M,
                const uint16_t* w, int64_t n0, int64_t n1, int64_t K) {
  switch (path) {
#if defined(__x86_64__)
    case QuantPath::Avx2: bf16_block_avx2(sums, ld, x, ldx, M, w, n0, n1, K); return;
    case QuantPath::Avx512: bf16_block_avx512<false>(sums, ld, x, ldx, M, w, n0, n1, K); return;
    case QuantPath::Avx512Bf16: bf16_block_avx512<true>(sums, ld, x, ldx, M, w, n0, n1, K); return;
#endif
    default: bf16_block_scalar(sums, ld, x, ldx, M, w, n0, n1, K); return;
  }
}

// Runs the int8 accumulators block by block and hands each tile to out(m0, rows, n0, n1, acc),
// acc[(m - m0) * kNBlock + (n - n0)].
template <class Out>
void s8_driver(const int8_t* xq, int64_t M, const int8_t* w, int64_t N, int64_t K, QuantPath path, const Out& out) {
#if defined(__x86_64__)
  if (path == QuantPath::AmxInt8) {
    if (M >= kAmxS8MinRows) {
      s8_amx(xq, M, w, N, K, out);
      return;
    }
    path = QuantPath::Avx512Vnni;  // the same accumulators; faster for a few rows
  }
#endif
  std::vector<uint32_t> x_shift;
  if (path == QuantPath::Avx512Vnni) {  // 128 sum_k xq[m][k], taken back from the shifted weights' sums
    x_shift.assign(static_cast<size_t>(M), 0u);
#if defined(__x86_64__)
    const bool parallel = M > 1 && M * K >= kRowsParallelMin && !omp_in_parallel() && omp_get_max_threads() > 1;
    parallel_for(M, parallel, [&](int64_t m) { x_shift[static_cast<size_t>(m)] = s8_shift_vnni(xq + m * K, K); });
#endif
  }
#if defined(__x86_64__)
  if (path == QuantPath::Avx512Vnni && M >= kS8PanelMinRows && K > 0 && K % 4 == 0) {
    s8_panels(xq, M, w, N, K, x_shift.data(), out);
    return;
  }
#endif
  for_row_blocks(N, K, [&](int64_t n0, int64_t n1) {
    int32_t acc[kMChunk * kNBlock];
    for (int64_t m0 = 0; m0 < M; m0 += kMChunk) {
      const int64_t rows = std::min(kMChunk, M - m0);
      s8_block(path, acc, kNBlock, xq + m0 * K, rows, w, n0, n1, K, x_shift.data() + (x_shift.empty() ? 0 : m0));
      out(m0, rows, n0, n1, acc);
    }
  });
}

}  // namespace

const char* quant_path_name(QuantPath path) {
  switch (path) {
    case QuantPath::Scalar: return "scalar";
    case QuantPath::Avx2: return "avx2";
    case QuantPath::Avx512: return "avx512";
    case QuantPath::Avx512Vnni: return "avx512_vnni";
    case QuantPath::Avx512Bf16: return "avx512_bf16";
    case QuantPath::Amx:
      return "amx_bf16";
    case QuantPath::AmxInt8:
      return "amx_int8";
  }
  return "?";
}

bool quant_path_supported(QuantPath path) { return cpu_supports(path); }

QuantPath int8_path() {
  switch (simd::active_isa()) {
    case simd::Isa::Avx512:
      if (amx_allowed() && cpu_supports(QuantPath::AmxInt8)) return QuantPath::AmxInt8;
      if (cpu_supports(QuantPath::Avx512Vnni)) return QuantPath::Avx512Vnni;
      return QuantPath::Avx2;
    case simd::Isa::Avx2: return QuantPath::Avx2;
    case simd::Isa::Scalar: break;
  }
  return QuantPath::Scalar;
}

namespace {

// Whether vdpbf16ps outruns its emulation by float32 FMAs on this CPU (the two give the same
// bits): both row kernels time the same small product, in cache, best of 5; measured once per
// process. Where the instruction's latency is long and its operands come from memory (Intel's
// Sapphire/Emerald Rapids here), the FMAs win by 1.2-1.5x (docs/quantization.md).
bool bf16_native_is_faster() {
#if defined(__x86_64__)
  static const bool faster = [] {
    constexpr int64_t M = 4, N = 64, K = 512;
    const std::vector<uint16_t> x(static_cast<size_t>(M * K), 0x3F80), w(static_cast<size_t>(N * K), 0x3C00);
    std::vector<float> sums(static_cast<size_t>(M * kNBlock));
    const auto best = [&](bool native) {
      double fastest = 1e30;
      for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t n0 = 0; n0 < N; n0 += kNBlock) {
          if (native)
            bf16_block_avx512<true>(sums.data(), kNBlock, x.data(), K, M, w.data(), n0, n0 + kNBlock, K);
          else
            bf16_block_avx512<false>(sums.data(), kNBlock, x.data(), K, M, w.data(), n0, n0 + kNBlock, K);
        }
        fastest = std::min(fastest, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      return fastest;
    };
    return best(true) < best(false);
  }();
  return faster;
#else
  return false;
#endif
}

}  // namespace

namespace {

// The bf16 path of the active ISA, with or without the AMX tiles.
QuantPath bf16_path(bool tiles) {
  switch (simd::active_isa()) {
    case simd::Isa::Avx512:
      if (tiles && amx_allowed() && cpu_supports(QuantPath::Amx)) return QuantPath::Amx;
      if (cpu_supports(QuantPath::Avx512Bf16) && (!cpu_supports(QuantPath::Avx512) || bf16_native_is_faster()))
        return QuantPath::Avx512Bf16;
      if (cpu_supports(QuantPath::Avx512)) return QuantPath::Avx512;
      return QuantPath::Avx2;
    case simd::Isa::Avx2: return QuantPath::Avx2;
    case simd::Isa::Scalar: break;
  }
  return QuantPath::Scalar;
}

// The path of an inference product of M activation rows: below kAmxMinRows rows the tiles are
// slower than the vector kernels (a 1 KiB tile load per 16 x 32 weights feeds a single row:
// 1.3-1.8x the AVX-512 path's time at one row, measured), so those take the vector path, except
// in the batch-invariant mode, where a row's bits must not depend on how many rows the call has
// and the tiles run for every M.
constexpr int64_t kAmxMinRows = 8;

QuantPath bf16_path_for_rows(int64_t M) {
  const QuantPath path = bf16_path(true);
  if (path == QuantPath::Amx && M < kAmxMinRows && !batch_invariant()) return bf16_path(false);
  return path;
}

}  // namespace

QuantPath bf16_path() { return bf16_path(true); }

void f32_to_bf16(uint16_t* out, const float* x, int64_t n, QuantPath path) {
  ATTN_CHECK(quant_path_supported(path), "f32_to_bf16", "path ", quant_path_name(path),
             " is not supported by this CPU or build");
  switch (path) {
#if defined(__x86_64__)
    case QuantPath::Avx2: f32_to_bf16_avx2(out, x, n); return;
    case QuantPath::Avx512:
    case QuantPath::Avx512Vnni:
    case QuantPath::AmxInt8:
      f32_to_bf16_avx512(out, x, n);
      return;
    case QuantPath::Avx512Bf16:
    case QuantPath::Amx:
      f32_to_bf16_avx512_bf16(out, x, n);
      return;
#endif
    default: f32_to_bf16_scalar(out, x, n); return;
  }
}

void f32_to_bf16(uint16_t* out, const float* x, int64_t n) { f32_to_bf16(out, x, n, bf16_path()); }

void bf16_to_f32(float* out, const uint16_t* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_from_bf16(x[i]);
}

int64_t bf16_flush_subnormals(uint16_t* x, int64_t n) {
  int64_t flushed = 0;
  for (int64_t i = 0; i < n; ++i) {
    if ((x[i] & 0x7F80u) == 0 && (x[i] & 0x7FFFu) != 0) {
      x[i] = static_cast<uint16_t>(x[i] & 0x8000u);
      ++flushed;
    }
  }
  return flushed;
}

void quantize_rows_s8(int8_t* q, float* scale, const float* x, int64_t rows, int64_t K, int64_t ldx,
                      QuantPath path) {
  ATTN_CHECK(quant_path_supported(path), "quantize_rows_s8", "path ", quant_path_name(path),
             " is not supported by this CPU or build");
  // Rows are independent: many are quantized over the threads.
  const bool parallel = rows > 1 && rows * K >= kRowsParallelMin && !omp_in_parallel() && omp_get_max_threads() > 1;
#if defined(__x86_64__)
  if (path == QuantPath::Avx512 || path == QuantPath::Avx512Vnni || path == QuantPath::Avx512Bf16 ||
      path == QuantPath::Amx || path == QuantPath::AmxInt8) {
    parallel_for(rows, parallel, [&](int64_t r) { quantize_row_s8_avx512(q + r * K, scale + r, x + r * ldx, K); });
    return;
  }
#endif
  parallel_for(rows, parallel, [&](int64_t r) { quantize_row_s8_scalar(q + r * K, scale + r, x + r * ldx, K); });
}

void quantize_rows_s8(int8_t* q, float* scale, const float* x, int64_t rows, int64_t K, int64_t ldx) {
  quantize_rows_s8(q, scale, x, rows, K, ldx, int8_path());
}

bool int8_weights_in_range(const int8_t* w, int64_t n) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok = ok && w[i] != -128;
  return ok;
}

void gemm_s8_accumulate(int32_t* acc, const int8_t* xq, int64_t M, const int8_t* w, int64_t N, int64_t K,
                        QuantPath path) {
  check_path(path, true);
  if (M <= 0 || N <= 0) return;
  s8_driver(xq, M, w, N, K, path, [&](int64_t m0, int64_t rows, int64_t n0, int64_t n1, const int32_t* tile) {
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t n = n0; n < n1; ++n) acc[(m0 + m) * N + n] = tile[m * kNBlock + (n - n0)];
  });
}

void gemm_s8(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const int8_t* w, const float* w_scale,
             const float* bias, float* y, int64_t ldy, QuantPath path, Epilogue epilogue) {
  const bool relu = epilogue == Epilogue::ReLU;
  check_path(path, true);
  if (M <= 0 || N <= 0) return;
  int8_t* const xq = thread_scratch<int8_t, 0>(M * K);
  float* const xs = thread_scratch<float, 0>(M);
  quantize_rows_s8(xq, xs, x, M, K, ldx, path);
  [[maybe_unused]] const bool wide =
      path == QuantPath::Avx512Vnni || path == QuantPath::AmxInt8;  // kNBlock = 16 rows: one vector
  s8_driver(xq, M, w, N, K, path, [&](int64_t m0, int64_t rows, int64_t n0, int64_t n1, const int32_t* tile) {
#if defined(__x86_64__)
    if (wide) {
      dequantize_tile_avx512(y + m0 * ldy, ldy, tile, xs + m0, rows, w_scale, bias, n0, n1, relu);
      return;
    }
#endif
    for (int64_t m = 0; m < rows; ++m)
      dequantize_row(y + (m0 + m) * ldy, tile + m * kNBlock, xs[m0 + m], w_scale, bias, n0, n1, relu);
  });
}

void gemm_s8(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const int8_t* w, const float* w_scale,
             const float* bias, float* y, int64_t ldy, Epilogue epilogue) {
  gemm_s8(M, N, K, x, ldx, w, w_scale, bias, y, ldy, int8_path(), epilogue);
}

namespace {

// Rows of K floats (row r of the operand at x + r * row_stride, element k at + k * k_stride) as
// bf16 rows of ld_out >= K, zeros from K on, on the path's conversion. A strided
// operand (k_stride != 1, a transposed matrix) goes through a small float tile so that the
// conversion reads contiguous memory.
void pack_bf16_rows(uint16_t* out, int64_t ld_out, const float* x, int64_t rows, int64_t K, int64_t row_stride,
                    int64_t k_stride, QuantPath path) {
  // Rows are independent: large operands are converted over the threads.
  const bool parallel = rows * K >= kPackParallelMin && !omp_in_parallel() && omp_get_max_threads() > 1;
#if defined(__x86_64__)
  // AVX-512: rows in one pass, or a transposed operand in 16 x 16 blocks; vcvtneps2bf16 where the
  // path has it (every path gives the same bits).
  const bool avx512 = path == QuantPath::Avx512 || path == QuantPath::Avx512Bf16 || path == QuantPath::Amx;
  const bool native = path != QuantPath::Avx512;
  if (avx512 && k_stride == 1) {
    parallel_ranges(rows, parallel, [&](int64_t r0, int64_t r1) {
      if (native)
        pack_bf16_rows_avx512<true>(out, ld_out, x, r0, r1, K, row_stride);
      else
        pack_bf16_rows_avx512<false>(out, ld_out, x, r0, r1, K, row_stride);
    });
    return;
  }
  if (avx512 && row_stride == 1) {
    if (ld_out > K)
      for (int64_t r = 0; r < rows; ++r) std::fill(out + r * ld_out + K, out + (r + 1) * ld_out, uint16_t{0});
    parallel_for((rows + 15) / 16, parallel, [&](int64_t blk) {
      if (native)
        pack_bf16_columns_avx512<true>(out, ld_out, x, rows, blk * 16, K, k_stride);
      else
        pack_bf16_columns_avx512<false>(out, ld_out, x, rows, blk * 16, K, k_stride);
    });
    return;
  }
#endif
  if (ld_out > K)
    for (int64_t r = 0; r < rows; ++r) std::fill(out + r * ld_out + K, out + (r + 1) * ld_out, uint16_t{0});
  if (k_stride == 1) {
    parallel_for(rows, parallel, [&](int64_t r) { f32_to_bf16(out + r * ld_out, x + r * row_stride, K, path); });
    return;
  }
  constexpr int64_t kTile = 32;
  parallel_for((rows + kTile - 1) / kTile, parallel, [&](int64_t blk) {
    const int64_t r0 = blk * kTile;
    float tile[kTile * kTile];
    const int64_t nr = std::min(kTile, rows - r0);
    for (int64_t k0 = 0; k0 < K; k0 += kTile) {
      const int64_t nk = std::min(kTile, K - k0);
      for (int64_t k = 0; k < nk; ++k)
        for (int64_t r = 0; r < nr; ++r) tile[r * kTile + k] = x[(r0 + r) * row_stride + (k0 + k) * k_stride];
      for (int64_t r = 0; r < nr; ++r) f32_to_bf16(out + (r0 + r) * ld_out + k0, tile + r * kTile, nk, path);
    }
  });
}

constexpr int64_t kF32ParallelMin = int64_t{1} << 18;  // multiply-adds below which one thread works

}  // namespace

int64_t bf16_row_stride(int64_t K) { return std::max<int64_t>(32, (K + 31) / 32 * 32); }

int64_t bf16_row_pitch(int64_t K) {
  const int64_t chunks = bf16_row_stride(K) / 32;
  return 32 * (chunks % 2 == 1 ? chunks : chunks + 1);
}

namespace {

// gemm_bf16 on activation rows already in bf16 (xb, row stride ldb >= bf16_row_stride(K), zeros
// from K on): y[m * ldy + n], or yb[m * ldyb + n] rounded to bf16 when yb is not null.
void bf16_product(int64_t M, int64_t N, int64_t K, const uint16_t* xb, int64_t ldb, const uint16_t* w,
                  const float* bias, float* y, int64_t ldy, uint16_t* yb, int64_t ldyb, QuantPath path, bool relu) {
#if defined(__x86_64__)
  if (path == QuantPath::Amx) {  // every M: a row's bits must not depend on the batch
    if (K % 2 == 0 && M >= kAmxPanelMinRows) {
      bf16_amx(M, N, K, xb, ldb, w, K, bias, false, y, ldy, relu, yb, ldyb);
    } else if (K % 2 == 0) {
      bf16_amx_rows(M, N, K, xb, ldb, w, K, bias, false, y, ldy, relu, yb, ldyb);
    } else {  // whole pairs: the rows copied with a zero at K
      uint16_t* const wp = thread_scratch<uint16_t, 1>(N * (K + 1));
      for (int64_t n = 0; n < N; ++n) {
        std::copy(w + n * K, w + (n + 1) * K, wp + n * (K + 1));
        wp[n * (K + 1) + K] = 0;
      }
      bf16_amx_rows(M, N, K + 1, xb, ldb, wp, K + 1, bias, false, y, ldy, relu, yb, ldyb);
    }
    return;
  }
  if ((path == QuantPath::Avx512Bf16 || path == QuantPath::Avx512) && M >= kPanelMinRows && K % 2 == 0) {
    if (path == QuantPath::Avx512Bf16)
      bf16_panels<true>(M, N, K, xb, ldb, w, K, bias, false, y, ldy, relu, yb, ldyb);
    else
      bf16_panels<false>(M, N, K, xb, ldb, w, K, bias, false, y, ldy, relu, yb, ldyb);
    return;
  }
#endif
  for_row_blocks(N, K, [&](int64_t n0, int64_t n1) {
    float sums[kMChunk * kNBlock];
    for (int64_t m0 = 0; m0 < M; m0 += kMChunk) {
      const int64_t rows = std::min(kMChunk, M - m0);
      bf16_block(path, sums, kNBlock, xb + m0 * ldb, ldb, rows, w, n0, n1, K);
      for (int64_t m = 0; m < rows; ++m) {
        for (int64_t n = n0; n < n1; ++n) {
          const float s = sums[m * kNBlock + (n - n0)];
          const float v = bias != nullptr ? s + bias[n] : s;
          const float r = relu && v < 0.0f ? 0.0f : v;
          if (yb != nullptr)
            yb[(m0 + m) * ldyb + n] = bf16_from_float(r);
          else
            y[(m0 + m) * ldy + n] = r;
        }
      }
    }
  });
}

}  // namespace

void gemm_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, const float* bias,
               float* y, int64_t ldy, QuantPath path, Epilogue epilogue) {
  check_path(path, false);
  if (M <= 0 || N <= 0) return;
  // x as bf16, each row padded with zeros to a multiple of 32 (the AVX2 kernel reads whole chunks).
  const int64_t ldb = bf16_row_pitch(K);
  uint16_t* const xb = thread_scratch<uint16_t, 0>(M * ldb);
  pack_bf16_rows(xb, ldb, x, M, K, ldx, 1, path);
  bf16_product(M, N, K, xb, ldb, w, bias, y, ldy, nullptr, 0, path, epilogue == Epilogue::ReLU);
}

void gemm_bf16_input(int64_t M, int64_t N, int64_t K, const uint16_t* xb, int64_t ldb, const uint16_t* w,
                     const float* bias, float* y, int64_t ldy, QuantPath path, Epilogue epilogue) {
  check_path(path, false);
  ATTN_CHECK(ldb >= bf16_row_stride(K), "gemm_bf16_input", "row stride ", ldb, " is below ", bf16_row_stride(K),
             " for K = ", K);
  if (M <= 0 || N <= 0) return;
  bf16_product(M, N, K, xb, ldb, w, bias, y, ldy, nullptr, 0, path, epilogue == Epilogue::ReLU);
}

void gemm_bf16_output(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w,
                      const float* bias, uint16_t* yb, int64_t ldyb, QuantPath path, Epilogue epilogue) {
  check_path(path, false);
  ATTN_CHECK(ldyb >= bf16_row_stride(N), "gemm_bf16_output", "row stride ", ldyb, " is below ",
             bf16_row_stride(N), " for N = ", N);
  if (M <= 0 || N <= 0) return;
  const int64_t ldb = bf16_row_pitch(K);
  uint16_t* const xb = thread_scratch<uint16_t, 0>(M * ldb);
  pack_bf16_rows(xb, ldb, x, M, K, ldx, 1, path);
  for (int64_t m = 0; m < M; ++m) std::fill(yb + m * ldyb + N, yb + (m + 1) * ldyb, uint16_t{0});
  bf16_product(M, N, K, xb, ldb, w, bias, nullptr, 0, yb, ldyb, path, epilogue == Epilogue::ReLU);
}

void gemm_bf16_input(int64_t M, int64_t N, int64_t K, const uint16_t* xb, int64_t ldb, const uint16_t* w,
                     const float* bias, float* y, int64_t ldy, Epilogue epilogue) {
  gemm_bf16_input(M, N, K, xb, ldb, w, bias, y, ldy, bf16_path_for_rows(M), epilogue);
}

void gemm_bf16_output(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w,
                      const float* bias, uint16_t* yb, int64_t ldyb, Epilogue epilogue) {
  gemm_bf16_output(M, N, K, x, ldx, w, bias, yb, ldyb, bf16_path_for_rows(M), epilogue);
}

void gemm_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, const float* bias,
               float* y, int64_t ldy, Epilogue epilogue) {
  gemm_bf16(M, N, K, x, ldx, w, bias, y, ldy, bf16_path_for_rows(M), epilogue);
}

void gemm_bf16_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                   const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc, QuantPath path,
                   const float* bias) {
  check_path(path, false);
  ATTN_CHECK(!(accumulate && bias != nullptr), "gemm_bf16_f32", "a bias is added to fresh outputs only");
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // an empty sum is +0
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n)
        C[m * ldc + n] = accumulate ? C[m * ldc + n] + 0.0f : bias != nullptr ? 0.0f + bias[n] : 0.0f;
    return;
  }
  // op(A) as M rows of K (padded with zeros to a multiple of 32: the AVX2 kernel reads whole
  // chunks of the activation rows); op(B) transposed, N rows of K (the weight rows).
  const int64_t lda_b = path == QuantPath::Amx ? bf16_row_pitch(K) : (K + 31) / 32 * 32;
  uint16_t* const ab = thread_scratch<uint16_t, 0>(M * lda_b);
  // op(A)[m, k] = A[m * lda + k], or A[k * lda + m] when transposed.
  pack_bf16_rows(ab, lda_b, A, M, K, trans_a ? 1 : lda, trans_a ? lda : 1, path);
#if defined(__x86_64__)
  if (path == QuantPath::Amx) {  // every M and K (odd K: op(B)'s rows padded with a zero)
    const int64_t Ke = (K + 1) / 2 * 2;
    uint16_t* const bb = trans_b ? thread_scratch<uint16_t, 1>(N * Ke) : nullptr;
    if (trans_b) {
      pack_bf16_rows(bb, Ke, B, N, K, ldb, 1, path);
      if (M >= kAmxPanelMinRows)
        bf16_amx(M, N, Ke, ab, lda_b, bb, Ke, bias, accumulate, C, ldc);
      else
        bf16_amx_rows(M, N, Ke, ab, lda_b, bb, Ke, bias, accumulate, C, ldc, false, nullptr, 0);
    } else {  // op(B)'s rows are B's columns: panels packed from them
      bf16_amx(M, N, K, ab, lda_b, nullptr, 0, bias, accumulate, C, ldc, false, nullptr, 0, B, ldb);
    }
    return;
  }
  if ((path == QuantPath::Avx512Bf16 || path == QuantPath::Avx512) && M >= kPanelMinRows && K % 2 == 0) {
    // The panels are packed from op(B) itself: B's rows when transposed (via bf16 rows), else
    // its columns directly (pack_bf16_panel_from_columns: no transposed copy).
    uint16_t* const bb = trans_b ? thread_scratch<uint16_t, 1>(N * K) : nullptr;
    if (trans_b) pack_bf16_rows(bb, K, B, N, K, ldb, 1, path);
    const float* const bcols = trans_b ? nullptr : B;
    if (path == QuantPath::Avx512Bf16)
      bf16_panels<true>(M, N, K, ab, lda_b, bb, K, bias, accumulate, C, ldc, false, nullptr, 0, bcols, ldb);
    else
      bf16_panels<false>(M, N, K, ab, lda_b, bb, K, bias, accumulate, C, ldc, false, nullptr, 0, bcols, ldb);
    return;
  }
#endif
  uint16_t* const bb = thread_scratch<uint16_t, 1>(N * K);
  // op(B)[k, n] = B[k * ldb + n], or B[n * ldb + k] when transposed: row n of the packed B.
  pack_bf16_rows(bb, K, B, N, K, trans_b ? ldb : 1, trans_b ? 1 : ldb, path);
  const int64_t n_blocks = (N + kNBlock - 1) / kNBlock, m_chunks = (M + kMChunk - 1) / kMChunk;
  const int64_t items = n_blocks * m_chunks;
  const bool parallel =
      items > 1 && M * N * K >= kF32ParallelMin && !omp_in_parallel() && omp_get_max_threads() > 1;
  parallel_for(items, parallel, [&](int64_t item) {
    const int64_t b = item % n_blocks, c = item / n_blocks;
    const int64_t n0 = b * kNBlock, n1 = std::min(N, n0 + kNBlock);
    const int64_t m0 = c * kMChunk, rows = std::min(kMChunk, M - m0);
    float sums[kMChunk * kNBlock];
    bf16_block(path, sums, kNBlock, ab + m0 * lda_b, lda_b, rows, bb, n0, n1, K);
    for (int64_t m = 0; m < rows; ++m) {
      float* cr = C + (m0 + m) * ldc;
      for (int64_t n = n0; n < n1; ++n) {
        const float s = sums[m * kNBlock + (n - n0)];
        cr[n] = accumulate ? cr[n] + s : bias != nullptr ? s + bias[n] : s;
      }
    }
  });
}

void gemm_bf16_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                   const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc, const float* bias) {
  gemm_bf16_f32(trans_a, trans_b, M, N, K, A, lda, B, ldb, accumulate, C, ldc, bf16_path(), bias);
}

}  // namespace attn::kernels
