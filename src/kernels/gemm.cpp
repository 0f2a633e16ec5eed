// kernels/gemm.cpp — row-major GEMM through OpenBLAS's cblas interface.
// Batched products run one BLAS call per matrix; when called inside an OpenMP region the
// OpenMP build of OpenBLAS runs each call single-threaded (no oversubscription).
#include "kernels/gemm.h"

#include <cblas.h>

namespace attn::kernels {

template <>
void gemm<float>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

template <>
void gemm<double>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                  int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

template <class T>
void gemm_batched(int64_t batch, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha,
                  const T* A, int64_t lda, int64_t sa, const T* B, int64_t ldb, int64_t sb, T beta,
                  T* C, int64_t ldc, int64_t sc) {
#pragma omp parallel for schedule(static) if (batch > 1 && M * N * K * batch > 32768)
  for (int64_t i = 0; i < batch; ++i)
    gemm<T>(ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
}

template void gemm_batched<float>(int64_t, bool, bool, int64_t, int64_t, int64_t, float,
                                  const float*, int64_t, int64_t, const float*, int64_t, int64_t,
                                  float, float*, int64_t, int64_t);
template void gemm_batched<double>(int64_t, bool, bool, int64_t, int64_t, int64_t, double,
                                   const double*, int64_t, int64_t, const double*, int64_t,
                                   int64_t, double, double*, int64_t, int64_t);

}  // namespace attn::kernels
