// kernels/gemm.h — the only caller of BLAS. Row-major C = alpha * op(A) op(B) + beta * C,
// with op(X) = X or X^T. Raw pointers and sizes, no allocation, float and double.
#pragma once

#include <cstdint>

namespace attn::kernels {

// C[M, N] = alpha * op(A)[M, K] * op(B)[K, N] + beta * C. lda/ldb/ldc are row strides of
// the stored (untransposed) matrices, as in cblas with CblasRowMajor.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// `batch` independent products with constant strides between the matrices.
template <class T>
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  T alpha, const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb,
                  int64_t stride_b, T beta, T* C, int64_t ldc, int64_t stride_c);

}  // namespace attn::kernels
