// kernels/gemm.cpp — row-major GEMM through OpenBLAS's cblas interface, plus a small-M path.
// Batched products run one BLAS call per matrix; when called inside an OpenMP region the
// OpenMP build of OpenBLAS runs each call single-threaded (no oversubscription).
// The small-M path (gemm_small_m) serves x W^T for a few rows of x against a large weight,
// the shape of every projection in one decoding step: OpenBLAS's sgemm packs the whole weight
// for M = 1 and runs at a fraction of the memory bandwidth there, while a dot product per
// output reads each weight row once, for all M rows, split over the OpenMP threads. Its AVX2
// rows are compiled here under a target attribute and picked by the ISA switch (simd/isa.h);
// AVX-512 CPUs take them too, since the product is bound by memory bandwidth, not arithmetic.
// In the batch-invariant mode (batch_invariant.h) every x W^T runs the small-M row kernels,
// chunk by chunk of kSmallM rows (gemm_invariant), whatever M and the weight's size.
// set_num_threads sets OpenBLAS's thread count with OpenMP's, so that no other file names BLAS.
#include "kernels/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/batch_invariant.h"
#include "kernels/simd/isa.h"

// OpenBLAS's own thread setting (its cblas.h declares it too; other BLAS builds do not).
extern "C" void openblas_set_num_threads(int num_threads);

namespace attn::kernels {

void set_num_threads(int n) {
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

namespace {

// Below this many weight elements (N * K) a small-M product stays on the calling thread.
constexpr int64_t kSmallMParallelMin = 1 << 16;

// c[m * ldc] = alpha * dot(a[m * lda, :K], b[:K]) + beta * c[m * ldc] for m < M: one weight row
// b against the M rows of a. Each ISA sums in its own fixed order, the same for every M.
using RowKernel = void (*)(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t M,
                           int64_t K, float alpha, float beta);

inline float finish(float s, float alpha, float beta, float c) {
  const float v = alpha * s;
  return beta == 0.0f ? v : v + beta * c;  // beta = 0 ignores C, as BLAS does
}

void row_scalar(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t M, int64_t K,
                float alpha, float beta) {
  for (int64_t m = 0; m < M; ++m) {
    const float* x = a + m * lda;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) {
      s0 += x[k] * b[k];
      s1 += x[k + 1] * b[k + 1];
      s2 += x[k + 2] * b[k + 2];
      s3 += x[k + 3] * b[k + 3];
    }
    for (; k < K; ++k) s0 += x[k] * b[k];
    c[m * ldc] = finish((s0 + s1) + (s2 + s3), alpha, beta, c[m * ldc]);
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float hsum256(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Rows of a in groups of up to four, so that each 8-float block of the weight row is loaded
// once per group; each row keeps two 8-wide accumulators (even and odd blocks of 16 floats),
// then one 8-float block, then a scalar tail: the same order for a row whatever the group.
template <int R>
__attribute__((target("avx2,fma"))) inline void rows_avx2(float* c, int64_t ldc, const float* a, int64_t lda,
                                                          const float* b, int64_t K, float alpha, float beta) {
  __m256 even[R], odd[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) even[r] = odd[r] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m256 w0 = _mm256_loadu_ps(b + k), w1 = _mm256_loadu_ps(b + k + 8);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      even[r] = _mm256_fmadd_ps(_mm256_loadu_ps(a + r * lda + k), w0, even[r]);
      odd[r] = _mm256_fmadd_ps(_mm256_loadu_ps(a + r * lda + k + 8), w1, odd[r]);
    }
  }
  if (k + 8 <= K) {
    const __m256 w0 = _mm256_loadu_ps(b + k);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) even[r] = _mm256_fmadd_ps(_mm256_loadu_ps(a + r * lda + k), w0, even[r]);
    k += 8;
  }
  for (int r = 0; r < R; ++r) {
    float s = hsum256(_mm256_add_ps(even[r], odd[r]));
    for (int64_t j = k; j < K; ++j) s += a[r * lda + j] * b[j];
    c[r * ldc] = finish(s, alpha, beta, c[r * ldc]);
  }
}

__attribute__((target("avx2,fma"))) void row_avx2(float* c, int64_t ldc, const float* a, int64_t lda,
                                                  const float* b, int64_t M, int64_t K, float alpha,
                                                  float beta) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) rows_avx2<4>(c + m * ldc, ldc, a + m * lda, lda, b, K, alpha, beta);
  switch (M - m) {
    case 3: rows_avx2<3>(c + m * ldc, ldc, a + m * lda, lda, b, K, alpha, beta); break;
    case 2: rows_avx2<2>(c + m * ldc, ldc, a + m * lda, lda, b, K, alpha, beta); break;
    case 1: rows_avx2<1>(c + m * ldc, ldc, a + m * lda, lda, b, K, alpha, beta); break;
    default: break;
  }
}

#endif

// The row kernel of the ISA the vector kernels use (ATTN_ISA, simd/isa.h).
RowKernel row_kernel() {
#if defined(__x86_64__)
  switch (simd::active_isa()) {
    // 256-bit rows on AVX-512 CPUs too: the product is bound by memory bandwidth, and the
    // 512-bit version measured slower in whole decoding runs.
    case simd::Isa::Avx512:
    case simd::Isa::Avx2: return row_avx2;
    case simd::Isa::Scalar: break;
  }
#endif
  return row_scalar;
}

// c[m * ldc] for m < M against one weight row b, in double: four interleaved partial sums, the
// same order for every M.
void row_double(double* c, int64_t ldc, const double* A, int64_t lda, const double* b, int64_t M, int64_t K,
                double alpha, double beta) {
  for (int64_t m = 0; m < M; ++m) {
    const double* a = A + m * lda;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) {
      s0 += a[k] * b[k];
      s1 += a[k + 1] * b[k + 1];
      s2 += a[k + 2] * b[k + 2];
      s3 += a[k + 3] * b[k + 3];
    }
    for (; k < K; ++k) s0 += a[k] * b[k];
    const double s = alpha * ((s0 + s1) + (s2 + s3));
    double& out = c[m * ldc];
    out = beta == 0.0 ? s : s + beta * out;
  }
}

// Weight rows per block of gemm_invariant: a block of about 128 KiB stays in cache while every
// chunk of kSmallM rows of A runs against it (at least 16 rows, for the threads' balance).
int64_t invariant_block_rows(int64_t K, int64_t elem_bytes) {
  const int64_t rows = (int64_t{128} << 10) / std::max<int64_t>(1, K * elem_bytes);
  return std::max<int64_t>(16, rows);
}

// gemm_invariant with the row kernel `row` (RowKernel for float, row_double for double).
template <class T, class Row>
void invariant_product(Row row, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
                       int64_t ldb, T beta, T* C, int64_t ldc) {
  const int64_t block = invariant_block_rows(K, static_cast<int64_t>(sizeof(T)));
  const int64_t blocks = (N + block - 1) / block;
  // Threads split the weight blocks; which thread computes an output never changes its sum.
  const bool parallel = blocks > 1 && M * N * K >= kSmallMParallelMin && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t n0 = blk * block, n1 = std::min(N, n0 + block);
    for (int64_t m0 = 0; m0 < M; m0 += kSmallM) {
      const int64_t rows = std::min(kSmallM, M - m0);
      for (int64_t n = n0; n < n1; ++n)
        row(C + m0 * ldc + n, ldc, A + m0 * lda, lda, B + n * ldb, rows, K, alpha, beta);
    }
  }
}

}  // namespace

template <>
void gemm_small_m<float>(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                         const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const RowKernel row = row_kernel();  // resolved outside the parallel region
  const bool parallel = N * K >= kSmallMParallelMin && N >= 64 && !omp_in_parallel();
  // C[m, n] = alpha * sum_k A[m, k] B[n, k] + beta * C[m, n], threads splitting the weight rows.
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t n = 0; n < N; ++n) row(C + n, ldc, A, lda, B + n * ldb, M, K, alpha, beta);
}

template <>
void gemm_small_m<double>(int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
                          const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const bool parallel = N * K >= kSmallMParallelMin && N >= 64 && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t n = 0; n < N; ++n) row_double(C + n, ldc, A, lda, B + n * ldb, M, K, alpha, beta);
}

template <>
void gemm_invariant<float>(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (M <= kSmallM) return gemm_small_m<float>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  invariant_product<float>(row_kernel(), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm_invariant<double>(int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
                            const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (M <= kSmallM) return gemm_small_m<double>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  invariant_product<double>(row_double, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
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

template <class T>
void gemm_batched(int64_t batch, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha,
                  const T* A, int64_t lda, int64_t sa, const T* B, int64_t ldb, int64_t sb, T beta,
                  T* C, int64_t ldc, int64_t sc) {
  const bool invariant = batch_invariant();  // the calling thread's mode, for every worker
#pragma omp parallel for schedule(static) if (batch > 1 && M * N * K * batch > 32768)
  for (int64_t i = 0; i < batch; ++i)
    gemm_mode(invariant, ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
}
template void gemm_batched<float>(int64_t, bool, bool, int64_t, int64_t, int64_t, float,
                                  const float*, int64_t, int64_t, const float*, int64_t, int64_t,
                                  float, float*, int64_t, int64_t);
template void gemm_batched<double>(int64_t, bool, bool, int64_t, int64_t, int64_t, double,
                                   const double*, int64_t, int64_t, const double*, int64_t,
                                   int64_t, double, double*, int64_t, int64_t);

}  // namespace attn::kernels
