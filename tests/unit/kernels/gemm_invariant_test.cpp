// kernels::gemm in the batch-invariant mode (kernels/gemm.h, attn/ops/batch_invariant.h): every
// x W^T sums each output in one order whatever M is, so row i of an M-row product has the bits
// of the same row alone, for M = 1..40, weights below and above the small-M size, odd lengths
// and vector tails, with a bias (beta = 1), on every ISA, through gemm_batched's workers too,
// and with 1 or 2 threads; the values match a double loop. Controls: outside the mode some M
// gives other bits (BLAS); the guard nests, restores and is the calling thread's alone.
#include "kernels/gemm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "attn/core/rng.h"
#include "attn/ops/batch_invariant.h"
#include "attn/ops/threads.h"
#include "kernels/batch_invariant.h"
#include "kernels/simd/isa.h"

namespace attn::kernels {
namespace {

constexpr int64_t kMaxRows = 40;

std::vector<float> random_values(int64_t n, Rng& rng) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.uniform() * 2.0 - 1.0);
  return v;
}

bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

// The weights tried: [N, K] with N * K below kSmallMMinWeight (37 x 203, 129 x 33, 5 x 7), at
// or above it with odd tails (300 x 515: also threaded), and a wide one (1000 x 96).
struct Shape2 {
  int64_t N, K;
};
const Shape2 kShapes[] = {{37, 203}, {129, 33}, {5, 7}, {300, 515}, {1000, 96}};

// C = A[:M] W^T (+ bias when beta = 1: C preset to the bias rows), A rows lda apart.
std::vector<float> product(int64_t M, const Shape2& s, const std::vector<float>& A, int64_t lda,
                           const std::vector<float>& W, const std::vector<float>& bias, float beta) {
  std::vector<float> C(static_cast<size_t>(M * s.N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < s.N; ++n) C[static_cast<size_t>(m * s.N + n)] = bias[static_cast<size_t>(n)];
  gemm<float>(false, true, M, s.N, s.K, 1.0f, A.data(), lda, W.data(), s.K, beta, C.data(), s.N);
  return C;
}

TEST(GemmInvariant, EveryRowOfEveryMHasTheBitsOfTheRowAlone) {
  Rng rng(11);
  for (const Shape2& s : kShapes) {
    const int64_t lda = s.K + 3;
    const auto A = random_values(kMaxRows * lda, rng), W = random_values(s.N * s.K, rng);
    const auto bias = random_values(s.N, rng);
    for (simd::Isa isa : simd::supported_isas()) {
      simd::IsaGuard isa_guard(isa);
      BatchInvariantGuard mode;
      for (float beta : {0.0f, 1.0f}) {
        // Each row alone (M = 1), then every M: row i must keep its bits.
        std::vector<std::vector<float>> alone;
        for (int64_t i = 0; i < kMaxRows; ++i) {
          std::vector<float> row(A.begin() + i * lda, A.begin() + (i + 1) * lda);
          alone.push_back(product(1, s, row, lda, W, bias, beta));
        }
        for (int64_t M = 1; M <= kMaxRows; ++M) {
          const auto C = product(M, s, A, lda, W, bias, beta);
          for (int64_t i = 0; i < M; ++i)
            ASSERT_TRUE(same_bits(C.data() + i * s.N, alone[static_cast<size_t>(i)].data(), s.N))
                << simd::isa_name(isa) << " N " << s.N << " K " << s.K << " beta " << beta << " M " << M << " row " << i;
        }
        // Values: the double loop.
        const auto C = product(kMaxRows, s, A, lda, W, bias, beta);
        for (int64_t m = 0; m < kMaxRows; ++m)
          for (int64_t n = 0; n < s.N; ++n) {
            double want = beta == 0.0f ? 0.0 : bias[static_cast<size_t>(n)];
            for (int64_t k = 0; k < s.K; ++k)
              want += static_cast<double>(A[static_cast<size_t>(m * lda + k)]) * W[static_cast<size_t>(n * s.K + k)];
            ASSERT_NEAR(C[static_cast<size_t>(m * s.N + n)], want, 1e-5 * (1.0 + std::sqrt(double(s.K))))
                << simd::isa_name(isa) << " N " << s.N << " K " << s.K << " m " << m << " n " << n;
          }
      }
    }
  }
}

TEST(GemmInvariant, OneOrTwoThreadsAndBatchedWorkersGiveTheSameBits) {
  Rng rng(12);
  const Shape2 s{300, 515};  // threaded above kSmallMParallelMin
  const int64_t M = 23, batch = 3;
  const auto A = random_values(batch * M * s.K, rng), W = random_values(batch * s.N * s.K, rng);
  const int before = omp_get_max_threads();
  BatchInvariantGuard mode;
  std::vector<float> one(static_cast<size_t>(batch * M * s.N)), two(one.size()), batched(one.size());
  set_num_threads(1);
  for (int64_t b = 0; b < batch; ++b)
    gemm<float>(false, true, M, s.N, s.K, 1.0f, A.data() + b * M * s.K, s.K, W.data() + b * s.N * s.K, s.K, 0.0f,
                one.data() + b * M * s.N, s.N);
  set_num_threads(2);
  for (int64_t b = 0; b < batch; ++b)
    gemm<float>(false, true, M, s.N, s.K, 1.0f, A.data() + b * M * s.K, s.K, W.data() + b * s.N * s.K, s.K, 0.0f,
                two.data() + b * M * s.N, s.N);
  // gemm_batched runs the three products on OpenMP workers, whose own flag is off: they must
  // follow the calling thread's mode.
  gemm_batched<float>(batch, false, true, M, s.N, s.K, 1.0f, A.data(), s.K, M * s.K, W.data(), s.K, s.N * s.K,
                      0.0f, batched.data(), s.N, M * s.N);
  set_num_threads(before);
  EXPECT_TRUE(same_bits(one.data(), two.data(), static_cast<int64_t>(one.size())));
  EXPECT_TRUE(same_bits(one.data(), batched.data(), static_cast<int64_t>(one.size())));
}

TEST(GemmInvariant, DoubleProductsFollowTheModeToo) {
  Rng rng(13);
  const int64_t N = 70, K = 45, M = 19;
  std::vector<double> A(static_cast<size_t>(M * K)), W(static_cast<size_t>(N * K));
  for (double& x : A) x = rng.uniform() - 0.5;
  for (double& x : W) x = rng.uniform() - 0.5;
  BatchInvariantGuard mode;
  std::vector<double> all(static_cast<size_t>(M * N)), row(static_cast<size_t>(N));
  gemm<double>(false, true, M, N, K, 1.0, A.data(), K, W.data(), K, 0.0, all.data(), N);
  for (int64_t i = 0; i < M; ++i) {
    gemm<double>(false, true, 1, N, K, 1.0, A.data() + i * K, K, W.data(), K, 0.0, row.data(), N);
    ASSERT_EQ(std::memcmp(row.data(), all.data() + i * N, static_cast<size_t>(N) * sizeof(double)), 0) << "row " << i;
  }
}

// Control: outside the mode the same products go to BLAS (M > kSmallM, or small weights), whose
// blocking may change a row's sum with M. At least one (shape, M, row) must differ, or the test
// above could not tell the mode from the default.
TEST(GemmInvariant, ControlOutsideTheModeSomeMChangesARowsBits) {
  Rng rng(11);
  int64_t differing = 0, compared = 0;
  for (const Shape2& s : kShapes) {
    const int64_t lda = s.K + 3;
    const auto A = random_values(kMaxRows * lda, rng), W = random_values(s.N * s.K, rng);
    const std::vector<float> bias(static_cast<size_t>(s.N), 0.0f);
    std::vector<std::vector<float>> alone;
    for (int64_t i = 0; i < kMaxRows; ++i) {
      std::vector<float> row(A.begin() + i * lda, A.begin() + (i + 1) * lda);
      alone.push_back(product(1, s, row, lda, W, bias, 0.0f));
    }
    for (int64_t M = 1; M <= kMaxRows; ++M) {
      const auto C = product(M, s, A, lda, W, bias, 0.0f);
      for (int64_t i = 0; i < M; ++i, ++compared)
        if (!same_bits(C.data() + i * s.N, alone[static_cast<size_t>(i)].data(), s.N)) ++differing;
    }
  }
  EXPECT_GT(differing, 0) << "outside the mode all " << compared << " rows kept their bits";
  RecordProperty("rows_differing_outside_the_mode", static_cast<int>(differing));
}

TEST(GemmInvariant, TheGuardNestsRestoresAndIsPerThread) {
  EXPECT_FALSE(batch_invariant());
  {
    BatchInvariantGuard on;
    EXPECT_TRUE(batch_invariant());
    EXPECT_TRUE(kernels::batch_invariant());
    {
      BatchInvariantGuard off(false);
      EXPECT_FALSE(batch_invariant());
    }
    EXPECT_TRUE(batch_invariant());
    bool other = true;
    std::thread t([&] { other = batch_invariant(); });
    t.join();
    EXPECT_FALSE(other) << "another thread must not see this thread's mode";
  }
  EXPECT_FALSE(batch_invariant());
}

}  // namespace
}  // namespace attn::kernels
