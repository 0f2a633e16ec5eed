// kernels::gemm_small_m, the few-rows path of gemm (kernels/gemm.h): values against a double
// loop for every ISA, row counts 1..9 (groups of four and their remainders), lengths with
// vector tails, strides wider than the rows, alpha/beta (beta = 0 ignoring NaN in C) and the
// threaded path; a row gives the same bits alone as among others; gemm<float> hands exactly
// the products of use_small_m to it and gives the same values either way; just above, the
// products of use_chunked_rows go to gemm_invariant's row chunks (its bits), BLAS beyond;
// gemm_bias on each of these paths has the bits of gemm over rows that hold the bias.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attn/core/rng.h"
#include "attn/ops/threads.h"
#include "kernels/batch_invariant.h"
#include "kernels/gemm.h"
#include "kernels/simd/isa.h"

namespace attn::kernels {
namespace {

template <class T>
std::vector<T> random_values(int64_t n, Rng& rng) {
  std::vector<T> v(static_cast<size_t>(n));
  for (T& x : v) x = static_cast<T>(rng.uniform() * 2.0 - 1.0);
  return v;
}

// C[m, n] = alpha * sum_k A[m, k] B[n, k] + beta * C[m, n] in double (beta = 0: C ignored).
std::vector<double> reference(int64_t M, int64_t N, int64_t K, double alpha, const std::vector<double>& A,
                              int64_t lda, const std::vector<double>& B, int64_t ldb, double beta,
                              const std::vector<double>& C, int64_t ldc) {
  std::vector<double> out(C);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k) s += A[m * lda + k] * B[n * ldb + k];
      out[m * ldc + n] = alpha * s + (beta == 0.0 ? 0.0 : beta * C[m * ldc + n]);
    }
  return out;
}

template <class T>
std::vector<double> widen(const std::vector<T>& v) {
  return {v.begin(), v.end()};
}

// One product with padded strides; returns the worst |got - want| / (1 + |want|) and checks
// that the padding columns of C were not written.
template <class T>
double run_case(int64_t M, int64_t N, int64_t K, T alpha, T beta, Rng& rng, bool nan_c = false) {
  const int64_t lda = K + 3, ldb = K + 5, ldc = N + 2;
  const auto A = random_values<T>(M * lda, rng), B = random_values<T>(N * ldb, rng);
  std::vector<T> C = random_values<T>(M * ldc, rng);
  if (nan_c)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = std::numeric_limits<T>::quiet_NaN();
  const auto want = reference(M, N, K, alpha, widen(A), lda, widen(B), ldb, beta, widen(C), ldc);
  std::vector<T> got(C);
  gemm_small_m<T>(M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, got.data(), ldc);
  double worst = 0.0;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      const double w = want[m * ldc + n], g = got[m * ldc + n];
      const double err = std::isnan(g) ? INFINITY : std::abs(g - w) / (1.0 + std::abs(w));
      worst = std::max(worst, err);
    }
    for (int64_t n = N; n < ldc; ++n) EXPECT_EQ(got[m * ldc + n], C[m * ldc + n]) << "padding written";
  }
  return worst;
}

TEST(GemmSmallM, FloatMatchesADoubleLoopOnEveryIsa) {
  Rng rng(3);
  for (simd::Isa isa : simd::supported_isas()) {
    simd::IsaGuard guard(isa);
    for (int64_t M = 1; M <= 9; ++M)
      for (int64_t K : {1, 7, 8, 15, 16, 17, 33, 100}) {
        const double err = run_case<float>(M, 11, K, 1.0f, 0.0f, rng);
        EXPECT_LE(err, 2e-6 * std::sqrt(static_cast<double>(K)) + 1e-6)
            << simd::isa_name(isa) << " M " << M << " K " << K;
      }
  }
}

TEST(GemmSmallM, AlphaBetaAndBetaZeroIgnoringNanInC) {
  Rng rng(4);
  for (simd::Isa isa : simd::supported_isas()) {
    simd::IsaGuard guard(isa);
    EXPECT_LE(run_case<float>(3, 13, 40, 0.5f, 1.0f, rng), 1e-5) << simd::isa_name(isa);
    EXPECT_LE(run_case<float>(5, 13, 40, -2.0f, 0.25f, rng), 1e-5) << simd::isa_name(isa);
    EXPECT_LE(run_case<float>(2, 13, 40, 1.0f, 0.0f, rng, /*nan_c=*/true), 1e-5) << simd::isa_name(isa);
  }
  EXPECT_LE(run_case<double>(3, 13, 41, 0.5, 1.0, rng), 1e-14);
  EXPECT_LE(run_case<double>(2, 13, 41, 1.0, 0.0, rng, /*nan_c=*/true), 1e-14);
}

TEST(GemmSmallM, ThreadedWeightsMatchADoubleLoop) {
  // N * K = 300 * 515 is over the size at which the weight rows are split between threads.
  Rng rng(5);
  for (simd::Isa isa : simd::supported_isas()) {
    simd::IsaGuard guard(isa);
    EXPECT_LE(run_case<float>(1, 300, 515, 1.0f, 0.0f, rng), 1e-4) << simd::isa_name(isa);
    EXPECT_LE(run_case<float>(6, 300, 515, 1.0f, 1.0f, rng), 1e-4) << simd::isa_name(isa);
  }
  EXPECT_LE(run_case<double>(4, 300, 515, 1.0, 1.0, rng), 1e-12);
}

TEST(GemmSmallM, ARowGivesTheSameBitsAloneAsAmongOtherRows) {
  Rng rng(6);
  const int64_t N = 37, K = 203;
  const auto A = random_values<float>(7 * K, rng), B = random_values<float>(N * K, rng);
  for (simd::Isa isa : simd::supported_isas()) {
    simd::IsaGuard guard(isa);
    std::vector<float> together(static_cast<size_t>(7 * N));
    gemm_small_m<float>(7, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, together.data(), N);
    for (int64_t m = 0; m < 7; ++m) {
      std::vector<float> alone(static_cast<size_t>(N));
      gemm_small_m<float>(1, N, K, 1.0f, A.data() + m * K, K, B.data(), K, 0.0f, alone.data(), N);
      for (int64_t n = 0; n < N; ++n)
        ASSERT_EQ(alone[n], together[m * N + n]) << simd::isa_name(isa) << " row " << m << " column " << n;
    }
  }
}

TEST(GemmSmallM, GemmTakesThePathOnlyForFewRowsAgainstALargeTransposedWeight) {
  EXPECT_TRUE(use_small_m(false, true, 1, 512, 512));
  EXPECT_TRUE(use_small_m(false, true, kSmallMMaxRows, 1000, 512));
  EXPECT_FALSE(use_small_m(false, true, kSmallMMaxRows + 1, 1000, 512));  // more rows: the chunks
  EXPECT_FALSE(use_small_m(false, true, 1, 64, 64));                      // an attention tile: BLAS
  EXPECT_FALSE(use_small_m(false, false, 1, 512, 512));                   // B not transposed
  EXPECT_FALSE(use_small_m(true, true, 1, 512, 512));                     // A transposed
  EXPECT_FALSE(use_small_m(false, true, 0, 512, 512));
}

TEST(GemmSmallM, GemmTakesTheRowChunksJustAboveTheSmallMPath) {
  EXPECT_FALSE(use_chunked_rows(false, true, kSmallMMaxRows, 1000, 512));  // the small-M path
  EXPECT_TRUE(use_chunked_rows(false, true, kSmallMMaxRows + 1, 1000, 512));
  EXPECT_TRUE(use_chunked_rows(false, true, kChunkedMaxRows, 1000, 512));
  EXPECT_FALSE(use_chunked_rows(false, true, kChunkedMaxRows + 1, 1000, 512));  // many rows: BLAS
  EXPECT_FALSE(use_chunked_rows(false, true, 40, 64, 64));                      // an attention tile
  EXPECT_FALSE(use_chunked_rows(false, false, 40, 512, 512));
  EXPECT_FALSE(use_chunked_rows(true, true, 40, 512, 512));
}

TEST(GemmSmallM, TheRowChunksGiveTheBatchInvariantBitsAndTheRightValues) {
  // Outside the batch-invariant mode, x W^T of 33-48 rows runs gemm_invariant's kernel: the same
  // bits as gemm_invariant, and within rounding of the double loop, with the bias added first
  // (beta = 1) as gemm_bias does. The control: 49 rows (BLAS) match the double loop too, but not
  // gemm_invariant's bits in every column.
  Rng rng(9);
  const int64_t N = 520, K = 301;
  for (simd::Isa isa : simd::supported_isas()) {
    simd::IsaGuard guard(isa);
    for (int64_t M : {kSmallMMaxRows + 1, int64_t{40}, kChunkedMaxRows, kChunkedMaxRows + 1}) {
      const auto A = random_values<float>(M * K, rng), B = random_values<float>(N * K, rng);
      const auto C0 = random_values<float>(M * N, rng);
      std::vector<float> got = C0, want_bits = C0;
      gemm<float>(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 1.0f, got.data(), N);
      gemm_invariant<float>(M, N, K, 1.0f, A.data(), K, B.data(), K, 1.0f, want_bits.data(), N);
      const auto want = reference(M, N, K, 1.0, widen(A), K, widen(B), K, 1.0, widen(C0), N);
      int64_t same = 0;
      for (int64_t i = 0; i < M * N; ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-4) << simd::isa_name(isa) << " M " << M << " element " << i;
        same += std::memcmp(&got[i], &want_bits[i], sizeof(float)) == 0;
      }
      if (M <= kChunkedMaxRows)
        EXPECT_EQ(same, M * N) << simd::isa_name(isa) << " M " << M;
      else
        EXPECT_LT(same, M * N) << simd::isa_name(isa) << " M " << M << ": BLAS gave the chunks' bits";
    }
  }
}

TEST(GemmSmallM, GemmGivesTheSameValuesThroughEitherPath) {
  // x W^T for one row and a [512, 256] weight goes to gemm_small_m; the same product with
  // kSmallMMaxRows + 1 rows (the row repeated) goes to the row chunks. Both must equal the double loop
  // within rounding.
  Rng rng(8);
  const int64_t N = 512, K = 256, rows = kSmallMMaxRows + 1;
  ASSERT_TRUE(use_small_m(false, true, 1, N, K));
  ASSERT_FALSE(use_small_m(false, true, rows, N, K));
  const auto x = random_values<float>(K, rng), W = random_values<float>(N * K, rng);
  std::vector<float> X;
  for (int64_t r = 0; r < rows; ++r) X.insert(X.end(), x.begin(), x.end());
  std::vector<float> one(static_cast<size_t>(N)), many(static_cast<size_t>(rows * N));
  gemm<float>(false, true, 1, N, K, 1.0f, x.data(), K, W.data(), K, 0.0f, one.data(), N);
  gemm<float>(false, true, rows, N, K, 1.0f, X.data(), K, W.data(), K, 0.0f, many.data(), N);
  const auto want = reference(1, N, K, 1.0, widen(x), K, widen(W), K, 0.0, std::vector<double>(N, 0.0), N);
  for (int64_t n = 0; n < N; ++n) {
    EXPECT_NEAR(one[n], want[n], 1e-4) << "column " << n;
    EXPECT_NEAR(many[(rows - 1) * N + n], want[n], 1e-4) << "column " << n;
  }
}

TEST(GemmSmallM, GemmBiasPresetsTheBiasInsideTheRowKernelsTasks) {
  // gemm_bias on the row kernels' paths (small M, the row chunks of 33-48 rows, and every M in
  // the batch-invariant mode, float and double) sets each task's outputs to the bias before its
  // product: the bits of gemm with beta = 1 over rows that hold the bias, for N with a tail of
  // tasks and blocks (520 = 32 tasks of 16 and 8), on one and two threads, C's contents ignored
  // (NaN). Control: the same product without the bias differs in every output.
  const int64_t saved_threads = num_threads();
  Rng rng(21);
  const int64_t N = 520, K = 136;  // N * K above kSmallMMinWeight: the row kernels' paths
  ASSERT_TRUE(use_small_m(false, true, 1, N, K));
  const auto B = random_values<float>(N * K, rng), bias = random_values<float>(N, rng);
  for (bool invariant : {false, true})
    for (int threads : {1, 2})
      for (int64_t M : {int64_t{1}, int64_t{5}, kSmallM + 1, kSmallMMaxRows, int64_t{40}, int64_t{100}}) {
        if (!invariant && M > kChunkedMaxRows) continue;  // BLAS: GemmDirect's test
        set_num_threads(threads);
        set_batch_invariant(invariant);
        const auto A = random_values<float>(M * K, rng);
        std::vector<float> want(static_cast<size_t>(M * N)), got(want.size(), std::nanf("")), plain(want.size());
        for (int64_t m = 0; m < M; ++m) std::copy(bias.begin(), bias.end(), want.begin() + m * N);
        gemm<float>(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 1.0f, want.data(), N);
        gemm_bias<float>(M, N, K, A.data(), K, B.data(), K, bias.data(), got.data(), N);
        gemm<float>(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, plain.data(), N);
        int64_t same = 0, same_plain = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          same += std::memcmp(&got[i], &want[i], sizeof(float)) == 0;
          same_plain += std::memcmp(&got[i], &plain[i], sizeof(float)) == 0;
        }
        EXPECT_EQ(same, M * N) << "invariant " << invariant << ", " << threads << " threads, M " << M;
        EXPECT_EQ(same_plain, 0) << "control: the bias left no trace, M " << M;
        if (invariant) {  // double: only the batch-invariant mode runs the row kernel
          std::vector<double> Ad(A.begin(), A.end()), Bd(B.begin(), B.end()), bd(bias.begin(), bias.end());
          std::vector<double> wd(want.size()), gd(want.size(), std::nan(""));
          for (int64_t m = 0; m < M; ++m) std::copy(bd.begin(), bd.end(), wd.begin() + m * N);
          gemm<double>(false, true, M, N, K, 1.0, Ad.data(), K, Bd.data(), K, 1.0, wd.data(), N);
          gemm_bias<double>(M, N, K, Ad.data(), K, Bd.data(), K, bd.data(), gd.data(), N);
          EXPECT_EQ(std::memcmp(wd.data(), gd.data(), wd.size() * sizeof(double)), 0) << threads << " threads, M " << M;
        }
      }
  set_batch_invariant(false);
  set_num_threads(saved_threads);
}

}  // namespace
}  // namespace attn::kernels
