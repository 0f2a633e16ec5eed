// kernels/gemm.cpp — row-major GEMM through OpenBLAS's cblas interface, plus a small-M path.
// Batched products run one BLAS call per matrix; when called inside an OpenMP region the
// OpenMP build of OpenBLAS runs each call single-threaded (no oversubscription).
// The small-M path (gemm_small_m) serves x W^T for a few rows of x against a large weight,
// the shape of every projection in one decoding step: OpenBLAS's sgemm packs the whole weight
// for M = 1 and runs at a fraction of the memory bandwidth there, while a dot product per
// output reads each weight row once, for all M rows, split over the OpenMP threads. Its kernel
// (gemm_tiles.inc) is compiled here for AVX2 and for AVX-512F (512-bit vectors, more registers,
// larger register tiles of weight rows x rows of A; the same summation order, so the same bits)
// and picked by the ISA switch (simd/isa.h).
// In the batch-invariant mode (batch_invariant.h) every x W^T runs the small-M row kernels,
// chunk by chunk of rows (gemm_invariant), whatever M and the weight's size.
// Float products that run on one thread (no threads available to the call: each training
// shard's, one-thread runs) take gemm_direct (gemm_direct.h) from 64 rows on: OpenBLAS packs
// both operands on every call, gemm_direct only B's panels.
// set_num_threads sets OpenBLAS's thread count with OpenMP's, so that no other file names BLAS.
#include "kernels/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/batch_invariant.h"
#include "kernels/gemm_direct.h"
#include "kernels/parallel_for.h"
#include "kernels/simd/isa.h"

// OpenBLAS's own thread setting and the name of the core it chose (its cblas.h declares them
// too; other BLAS builds do not).
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_corename(void);

namespace attn::kernels {

void set_num_threads(int n) {
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

std::string blas_core_type_fix() {
#if defined(__x86_64__)
  const char* chosen = std::getenv("OPENBLAS_CORETYPE");
  if (chosen != nullptr && *chosen != '\0') return "";  // the user's (or an earlier fix's) choice
  const char* core = openblas_get_corename();
  if (core == nullptr || std::strcmp(core, "Prescott") != 0) return "";
  // OpenBLAS's SkylakeX kernels need AVX-512 F, CD, BW, DQ and VL; Cooperlake's add AVX512-BF16.
  // __builtin_cpu_supports also checks that the OS saves the AVX-512 registers.
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl")))
    return "";
  return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
#else
  return "";
#endif
}

namespace {

// Below this many weight elements (N * K) a small-M product stays on the calling thread.
constexpr int64_t kSmallMParallelMin = 1 << 16;

// c[m * ldc + n] = alpha * dot(a[m * lda, :K], b[n * ldb, :K]) + beta * c[m * ldc + n] for
// m < M, n < NB: NB weight rows against the M rows of a. Each ISA sums an output in its own
// fixed order, the same for every M, NB and place of the output in them.
using RowsKernel = void (*)(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb,
                            int64_t M, int64_t NB, int64_t K, float alpha, float beta);

template <class T>
inline T finish(T s, T alpha, T beta, T c) {
  const T v = alpha * s;
  return beta == T(0) ? v : v + beta * c;  // beta = 0 ignores C, as BLAS does
}

// The portable rows kernel, float and double: four interleaved partial sums per output, the
// same order for every M, NB and place of the output.
template <class T>
void rows_portable(T* c, int64_t ldc, const T* a, int64_t lda, const T* b, int64_t ldb, int64_t M, int64_t NB,
                   int64_t K, T alpha, T beta) {
  for (int64_t n = 0; n < NB; ++n) {
    const T* w = b + n * ldb;
    for (int64_t m = 0; m < M; ++m) {
      const T* x = a + m * lda;
      T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t k = 0;
      for (; k + 4 <= K; k += 4) {
        s0 += x[k] * w[k];
        s1 += x[k + 1] * w[k + 1];
        s2 += x[k + 2] * w[k + 2];
        s3 += x[k + 3] * w[k + 3];
      }
      for (; k < K; ++k) s0 += x[k] * w[k];
      c[m * ldc + n] = finish<T>((s0 + s1) + (s2 + s3), alpha, beta, c[m * ldc + n]);
    }
  }
}

constexpr RowsKernel rows_scalar = rows_portable<float>;

#if defined(__x86_64__)
// The tiled kernel twice (gemm_tiles.inc): for AVX2+FMA, 256-bit vectors and 16 registers,
// tiles of 2 weight rows x 3 rows of A (12 accumulators); for AVX-512F, 512-bit vectors (one
// register holds the even and the odd 8-float accumulators) and 32 registers, tiles of 4 x 6.
// One weight row at a time up to 7 rows of A. The same order per output, so the same bits on
// both. GCC takes the target of a region from `#pragma GCC target`; clang ignores that pragma
// and takes the target attribute applied to every function of the region instead.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace avx2 {
using Vec = __m256;
constexpr int kLanes = 8;
inline Vec vload(const float* p) { return _mm256_loadu_ps(p); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline __m256 even8(Vec v) { return v; }  // acc[0] is the even accumulator
inline __m256 odd8(Vec v) { return v; }   // acc[1] the odd one
// No vector epilogue at 256 bits (kVectorSums): each output is summed alone (hsum256).
constexpr bool kVectorSums = false;
[[maybe_unused]] inline void sums8(Vec, Vec, Vec, Vec, Vec, Vec, Vec, Vec, float*) {}
constexpr int kTileW = 2, kTileR = 3, kNarrowRows = 7;
#include "kernels/gemm_tiles.inc"
}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#else
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
// GCC 12's AVX-512 headers self-initialise undefined registers, which -Wuninitialized flags at
// every use (as in quantized_gemm.cpp); clang has no such problem and keeps the warning.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace avx512 {
using Vec = __m512;
constexpr int kLanes = 16;
inline Vec vload(const float* p) { return _mm512_loadu_ps(p); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline __m256 even8(Vec v) { return _mm512_castps512_ps256(v); }
inline __m256 odd8(Vec v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
// out[j] = hsum256(even8(g_j) + odd8(g_j)) for the 8 accumulators g_0..g_7, with the same
// additions of the same pairs (so the same bits), 8 outputs at a time: even + odd, the halves,
// the pairs, the last two, each step adding lanes of two accumulators' partial sums in one
// instruction (16 shuffles and 8 adds for 8 outputs instead of 32 and 32). gemm_bench's
// linear_rows (batch-invariant, 2 threads, Intel Xeon, best of 3 alternating rounds of 3): 8-48
// rows against the base model's three shapes 1-19% faster (median 10%).
constexpr bool kVectorSums = true;
// [a even+odd | b even+odd]: 128-bit quarters a0 a1 b0 b1 + a2 a3 b2 b3.
inline __m512 pair_sums(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}
// Quarters [a lo+hi, b lo+hi, c lo+hi, d lo+hi] from x = [a | b], y = [c | d] (pair_sums').
inline __m512 half_sums(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
}
inline void sums8(Vec g0, Vec g1, Vec g2, Vec g3, Vec g4, Vec g5, Vec g6, Vec g7, float* out) {
  const __m512 u0 = half_sums(pair_sums(g0, g1), pair_sums(g2, g3));  // quarter k: g_k's 4 sums
  const __m512 u1 = half_sums(pair_sums(g4, g5), pair_sums(g6, g7));  // quarter k: g_{4+k}'s
  // Quarter k: g_k's s0 + s2, s1 + s3, then g_{4+k}'s (movehl's pairs).
  const __m512 p = _mm512_add_ps(_mm512_shuffle_ps(u0, u1, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(u0, u1, _MM_SHUFFLE(3, 2, 3, 2)));
  // Quarter k: g_k's (s0 + s2) + (s1 + s3), g_{4+k}'s, then the same again.
  const __m512 r =
      _mm512_add_ps(_mm512_shuffle_ps(p, p, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(p, p, _MM_SHUFFLE(3, 1, 3, 1)));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, r);
  for (int k = 0; k < 4; ++k) {
    out[k] = lanes[4 * k];
    out[4 + k] = lanes[4 * k + 1];
  }
}
constexpr int kTileW = 4, kTileR = 6, kNarrowRows = 7;
#include "kernels/gemm_tiles.inc"
}  // namespace avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif
#endif

// The rows kernel of the ISA the vector kernels use (ATTN_ISA, simd/isa.h).
RowsKernel rows_kernel() {
#if defined(__x86_64__)
  switch (simd::active_isa()) {
    // 512-bit vectors, the AVX2 kernel's order (the same bits on both ISAs).
    case simd::Isa::Avx512: return avx512::rows;
    case simd::Isa::Avx2: return avx2::rows;
    case simd::Isa::Scalar: break;
  }
#endif
  return rows_scalar;
}

// rows_kernel()'s contract in double.
constexpr auto rows_double = rows_portable<double>;

// Weight rows per task of gemm_small_m's threads: a multiple of every tile's width.
constexpr int64_t kSmallMTaskRows = 16;

// Weight rows per block of gemm_invariant: a block of about 128 KiB stays in cache while every
// chunk of rows of A runs against it (at least 16 rows, for the threads' balance).
int64_t invariant_block_rows(int64_t K, int64_t elem_bytes) {
  const int64_t rows = (int64_t{128} << 10) / std::max<int64_t>(1, K * elem_bytes);
  return std::max<int64_t>(16, rows);
}

// Rows of A per chunk of gemm_invariant: as many as keep about 32 KiB of A in L1 while a tile's
// weight rows pass over them (each weight row is then read once per block from further out),
// a multiple of 4 rows up to 64, and at least kMinChunkRows.
// The floor: where 32 KiB holds fewer than 24 rows (K >= 512 floats), K >= 1024 gave chunks of
// 8, which split 9-16 rows into two, with tiles of 1-2 rows (4-8 accumulators, too few to hide
// the FMA's latency); A's 24 rows still sit in L2 beside the weight block. gemm_bench's
// linear_rows (invariant, 2 threads, Zen 5, best of 3-4 alternating rounds), chunks of 8 -> 24 at
// K = 2048: 9-48 rows 4-21% faster, 64-256 rows 12-16%; at K = 1024 (N = 256) 2-12%; at K = 512
// (16 -> 24) within the noise (-8% to +6% by rows).
constexpr int64_t kMinChunkRows = 24;
int64_t invariant_chunk_rows(int64_t K, int64_t elem_bytes) {
  const int64_t rows = (int64_t{32} << 10) / std::max<int64_t>(1, K * elem_bytes);
  return std::clamp<int64_t>(rows / 4 * 4, kMinChunkRows, 64);
}

// Rows [0, M) of c (ldc) over columns [0, NB) set to bias[0, NB): a product with a bias starts
// from it (beta = 1), each task presetting only the outputs it then computes.
template <class T>
inline void preset_bias(T* c, int64_t ldc, const T* bias, int64_t M, int64_t NB) {
  if (bias != nullptr)
    for (int64_t m = 0; m < M; ++m) std::copy(bias, bias + NB, c + m * ldc);
}

// gemm_invariant with the rows kernel `rows` (RowsKernel for float, rows_double for double);
// with `bias`, C's rows are set to it first (call with beta = 1).
template <class T, class Rows>
void invariant_product(Rows rows, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
                       int64_t ldb, T beta, T* C, int64_t ldc, const T* bias = nullptr) {
  const int64_t block = invariant_block_rows(K, static_cast<int64_t>(sizeof(T)));
  const int64_t blocks = (N + block - 1) / block;
  const int64_t chunk = invariant_chunk_rows(K, static_cast<int64_t>(sizeof(T)));
  // Threads split the weight blocks; which thread computes an output never changes its sum.
  const bool parallel = blocks > 1 && M * N * K >= kSmallMParallelMin && !omp_in_parallel();
  parallel_for(blocks, parallel, [&](int64_t blk) {
    const int64_t n0 = blk * block, n1 = std::min(N, n0 + block);
    for (int64_t m0 = 0; m0 < M; m0 += chunk) {
      const int64_t rows_here = std::min(chunk, M - m0);
      preset_bias(C + m0 * ldc + n0, ldc, bias != nullptr ? bias + n0 : nullptr, rows_here, n1 - n0);
      rows(C + m0 * ldc + n0, ldc, A + m0 * lda, lda, B + n0 * ldb, ldb, rows_here, n1 - n0, K, alpha, beta);
    }
  });
}

// gemm_small_m with the rows kernel `rows`, threads splitting the weight rows in tasks of
// `task_rows`; with `bias` as in invariant_product.
template <class T, class Rows>
void small_m_product(Rows rows, int64_t task_rows, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                     const T* B, int64_t ldb, T beta, T* C, int64_t ldc, const T* bias = nullptr) {
  if (M == 0 || N == 0) return;
  const bool parallel = N * K >= kSmallMParallelMin && N >= 64 && !omp_in_parallel();
  // C[m, n] = alpha * sum_k A[m, k] B[n, k] + beta * C[m, n].
  const int64_t tasks = (N + task_rows - 1) / task_rows;
  parallel_for(tasks, parallel, [&](int64_t t) {
    const int64_t n0 = t * task_rows, nb = std::min(task_rows, N - n0);
    preset_bias(C + n0, ldc, bias != nullptr ? bias + n0 : nullptr, M, nb);
    rows(C + n0, ldc, A, lda, B + n0 * ldb, ldb, M, nb, K, alpha, beta);
  });
}

// gemm_small_m (M <= kSmallM) or gemm_invariant's chunks: a batch-invariant product, with `bias`
// as in invariant_product.
template <class T, class Rows>
void invariant_rows(Rows rows, int64_t task_rows, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                    const T* B, int64_t ldb, T beta, T* C, int64_t ldc, const T* bias = nullptr) {
  if (M == 0 || N == 0) return;
  if (M <= kSmallM) return small_m_product<T>(rows, task_rows, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
  invariant_product<T>(rows, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

// Weight rows per task of the double rows kernel, which has no tiles: one.
constexpr int64_t kSmallMTaskRowsDouble = 1;

}  // namespace

template <>
void gemm_small_m<float>(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                         const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  // The rows kernel resolved outside the parallel region.
  small_m_product<float>(rows_kernel(), kSmallMTaskRows, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm_small_m<double>(int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
                          const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  small_m_product<double>(rows_double, kSmallMTaskRowsDouble, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm_invariant<float>(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  invariant_rows<float>(rows_kernel(), kSmallMTaskRows, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm_invariant<double>(int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
                            const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  invariant_rows<double>(rows_double, kSmallMTaskRowsDouble, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

namespace {

// gemm with the batch-invariant mode given (`invariant`), so that gemm_batched's workers follow
// the calling thread's mode.
void gemm_mode(bool invariant, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (invariant && !ta && tb) {
    gemm_invariant<float>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (use_small_m(ta, tb, M, N, K)) {
    gemm_small_m<float>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (use_chunked_rows(ta, tb, M, N, K)) {
    invariant_product<float>(rows_kernel(), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (use_direct(ta, tb, M, N, K)) {
    gemm_direct(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

void gemm_mode(bool invariant, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
               int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (invariant && !ta && tb) {
    gemm_invariant<double>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

}  // namespace

template <>
void gemm<float>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_mode(batch_invariant(), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm<double>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                  int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  gemm_mode(batch_invariant(), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

namespace {

// Below this many elements of C the bias rows are written on the calling thread.
constexpr int64_t kBiasRowsParallelMin = 32768;

}  // namespace

template <class T>
void gemm_bias(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C,
               int64_t ldc) {
  if (M == 0 || N == 0) return;
  const bool invariant = batch_invariant();
  if constexpr (std::is_same_v<T, float>) {
    if (bias != nullptr && !invariant && !use_small_m(false, true, M, N, K) && use_direct(false, true, M, N, K)) {
      gemm_direct(false, true, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, bias);
      return;
    }
  }
  if (bias != nullptr) {
    // The row kernels' paths (gemm_mode's) preset the bias inside their tasks, each thread the
    // outputs it computes, instead of a pass over C before the product: the same sums and the
    // same final addition (the bias plus the product, beta = 1).
    if constexpr (std::is_same_v<T, float>) {
      if (invariant) {
        invariant_rows<float>(rows_kernel(), kSmallMTaskRows, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc, bias);
        return;
      }
      if (use_small_m(false, true, M, N, K)) {
        small_m_product<float>(rows_kernel(), kSmallMTaskRows, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc, bias);
        return;
      }
      if (use_chunked_rows(false, true, M, N, K)) {
        invariant_product<float>(rows_kernel(), M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc, bias);
        return;
      }
    } else if (invariant) {
      invariant_rows<double>(rows_double, kSmallMTaskRowsDouble, M, N, K, 1.0, A, lda, B, ldb, 1.0, C, ldc, bias);
      return;
    }
  }
  if (bias != nullptr)
    parallel_for(M, M > 1 && M * N >= kBiasRowsParallelMin, [&](int64_t r) { std::copy(bias, bias + N, C + r * ldc); });
  gemm_mode(invariant, false, true, M, N, K, T(1), A, lda, B, ldb, bias != nullptr ? T(1) : T(0), C, ldc);
}
template void gemm_bias<float>(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, const float*,
                               float*, int64_t);
template void gemm_bias<double>(int64_t, int64_t, int64_t, const double*, int64_t, const double*, int64_t,
                                const double*, double*, int64_t);

template <class T>
void gemm_batched(int64_t batch, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha,
                  const T* A, int64_t lda, int64_t sa, const T* B, int64_t ldb, int64_t sb, T beta,
                  T* C, int64_t ldc, int64_t sc) {
  const bool invariant = batch_invariant();  // the calling thread's mode, for every worker
  parallel_for(batch, batch > 1 && M * N * K * batch > 32768, [&](int64_t i) {
    gemm_mode(invariant, ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
  });
}
template void gemm_batched<float>(int64_t, bool, bool, int64_t, int64_t, int64_t, float,
                                  const float*, int64_t, int64_t, const float*, int64_t, int64_t,
                                  float, float*, int64_t, int64_t);
template void gemm_batched<double>(int64_t, bool, bool, int64_t, int64_t, int64_t, double,
                                   const double*, int64_t, int64_t, const double*, int64_t,
                                   int64_t, double, double*, int64_t, int64_t);

}  // namespace attn::kernels
