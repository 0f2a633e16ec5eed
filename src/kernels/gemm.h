// kernels/gemm.h — the only caller of BLAS. Row-major C = alpha * op(A) op(B) + beta * C,
// with op(X) = X or X^T. Raw pointers and sizes, no allocation, float and double.
// float products of a few rows against a large transposed weight take gemm_small_m instead,
// float products on one thread take gemm_direct (gemm_direct.h, use_direct), and in the
// batch-invariant mode (batch_invariant.h) every x W^T (float and double) takes gemm_invariant,
// whatever M.
// The thread count of BLAS and OpenMP is set here too (upper layers: attn/ops/threads.h).
#pragma once

#include <cstdint>
#include <string>

namespace attn::kernels {

// Sets OpenMP's thread count and OpenBLAS's to n >= 1. With Debian's OpenMP build of OpenBLAS,
// BLAS follows omp_set_num_threads and runs single-threaded inside parallel regions, so one
// setting drives both.
void set_num_threads(int n);
int num_threads();  // omp_get_max_threads() of the calling thread

// attn::blas_core_type_fix (attn/ops/threads.h): the OPENBLAS_CORETYPE this CPU should have
// when OpenBLAS fell back to its generic kernels on an AVX-512 CPU, else empty.
std::string blas_core_type_fix();

// C[M, N] = alpha * op(A)[M, K] * op(B)[K, N] + beta * C. lda/ldb/ldc are row strides of
// the stored (untransposed) matrices, as in cblas with CblasRowMajor. In the calling thread's
// batch-invariant mode, a product with op(A) = A and op(B) = B^T takes gemm_invariant.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// A linear layer's forward: C[M, N] = A[M, K] B[N, K]^T + bias, the vector bias[N] added to
// every row (null: no bias, C's contents ignored). The bits are gemm's with every row of C first
// holding the bias and beta = 1, which is what runs, except on gemm_direct's path, whose epilogue
// adds the bias to the same bits without the rows of copies.
template <class T>
void gemm_bias(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb, const T* bias, T* C,
               int64_t ldc);

// `batch` independent products with constant strides between the matrices (the calling
// thread's batch-invariant mode holds for all of them, also those run by OpenMP workers).
template <class T>
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  T alpha, const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb,
                  int64_t stride_b, T beta, T* C, int64_t ldc, int64_t stride_c);

// The small-M path of gemm: C[M, N] = alpha * A[M, K] B[N, K]^T + beta * C, one dot product
// per output, each weight row B[n] read once for all M rows, parallel over n (OpenMP) when the
// weight is large and the caller is not already inside a parallel region. Every output's sum
// runs in one fixed order whatever M is, so a row gives the same bits alone or among others.
// beta = 0 ignores C's contents, as BLAS does.
template <class T>
void gemm_small_m(int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
                  int64_t ldb, T beta, T* C, int64_t ldc);

// C[M, N] = alpha * A[M, K] B[N, K]^T + beta * C for any M: the rows in chunks (24 to 64 rows),
// each chunk against each weight row as gemm_small_m computes it (the same row kernel, so the
// same bits as gemm_small_m for M <= kSmallM), with the weight rows in blocks that stay in
// cache across the chunks and the blocks split over OpenMP threads. Each output's sum has one
// order, independent of M, of the row's chunk and place in it, and of the thread count: a row
// gives the same bits alone as among any others. What the batch-invariant mode runs.
template <class T>
void gemm_invariant(int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
                    int64_t ldb, T beta, T* C, int64_t ldc);

// Rows up to which gemm_invariant runs one gemm_small_m call (its smallest chunk of rows).
inline constexpr int64_t kSmallM = 8;
// Rows up to which float gemm takes the small-M path, and the smallest weight (N * K) it does
// so for: x W^T for the rows of a decoding step (a batch, its beams, a speculative pass, a short
// source), not attention tiles or training batches. OpenBLAS packs the whole weight on every
// call; the small-M path reads it once. gemm_bench's linear_rows (float32, weights out of cache,
// 2 threads, Zen 5; five shapes of the base and a small model), OpenBLAS -> small-M, us: 16
// rows 101-358 -> 62-187 (1.5-2.2x), 32 rows 130-485 -> 110-328 (1.15-1.6x); from 48 rows on
// the two trade places by shape (64 rows, N x K = 1024 x 256: 164 -> 199).
inline constexpr int64_t kSmallMMaxRows = 32;
inline constexpr int64_t kSmallMMinWeight = 1 << 16;

// Whether gemm<float> hands this product to gemm_small_m: op(A) = A, op(B) = B^T, up to
// kSmallMMaxRows rows, a weight-sized B. (float64 goes to BLAS outside the batch-invariant
// mode: the reference dtype.)
inline bool use_small_m(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K) {
  return !trans_a && trans_b && M >= 1 && M <= kSmallMMaxRows && N * K >= kSmallMMinWeight;
}

// Rows up to which gemm<float> hands x W^T above kSmallMMaxRows rows to the batch-invariant
// mode's row chunks (gemm_invariant: each block of weight rows stays in cache while the chunks
// of A pass over it) instead of BLAS, which packs A and the whole weight on every call: an
// encoder pass of a source of 33-48 tokens, a step of a large batch. gemm_bench's linear_rows
// (2 threads, the base model's three shapes, medians of 3 in each of two rounds), BLAS -> chunks,
// us: 48 rows 474-784 -> 335-644, on an Intel Xeon (OpenBLAS's Cooperlake kernels) and 10-20%
// faster on four of five shapes on a Zen 5; at 64 rows the two traded places by shape on both.
inline constexpr int64_t kChunkedMaxRows = 48;

// Whether gemm<float> hands this product to the row chunks: as use_small_m, from
// kSmallMMaxRows + 1 to kChunkedMaxRows rows.
inline bool use_chunked_rows(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K) {
  return !trans_a && trans_b && M > kSmallMMaxRows && M <= kChunkedMaxRows && N * K >= kSmallMMinWeight;
}

}  // namespace attn::kernels
