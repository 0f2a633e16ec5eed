// kernels::gemm_direct (kernels/gemm_direct.h), the float GEMM of products that run on one
// thread: the exact bits of its contract (one float sum per output over k in order, a fused
// multiply-add per term, then alpha, then beta * C as one fused multiply-add) against a scalar
// loop, for A, A^T, B and B^T, row counts around every tile height, column counts around the
// vectors and panels (masked tails, 16 x 16 transposed blocks and their remainders), padded
// strides, beta = 0 ignoring NaN in C, and the columns past N left alone; the values against a
// double product on a training-sized case; and gemm<float> handing it exactly the products of
// use_direct, inside a parallel region and on one thread.
#include "kernels/gemm_direct.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attn/core/rng.h"
#include "attn/ops/threads.h"
#include "kernels/gemm.h"
#include "kernels/simd/isa.h"

namespace attn::kernels {
namespace {

// Whether this machine runs gemm_direct's AVX-512 code. Where it cannot, what these tests check
// instead is that nothing offers it: gemm_direct_supported() and use_direct() are false, so
// gemm takes BLAS (whose values GemmBiasHasTheBitsOfGemmOverBiasRows checks on every machine).
bool runs_here() {
  if (simd::isa_supported(simd::Isa::Avx512)) return true;
  EXPECT_FALSE(gemm_direct_supported());
  EXPECT_FALSE(use_direct(false, true, 256, 256, 64));
  EXPECT_FALSE(use_direct(true, false, 256, 256, 64));
  return false;
}

std::vector<float> random_values(int64_t n, Rng& rng) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.uniform() * 2.0 - 1.0);
  return v;
}

// One product's operands, stored as gemm takes them, with row strides wider than the rows.
struct Case {
  bool ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  std::vector<float> A, B, C;
  Case(bool ta_, bool tb_, int64_t M_, int64_t N_, int64_t K_, Rng& rng)
      : ta(ta_), tb(tb_), M(M_), N(N_), K(K_), lda((ta ? M : K) + 3), ldb((tb ? K : N) + 5), ldc(N + 2) {
    A = random_values((ta ? K : M) * lda, rng);
    B = random_values((tb ? N : K) * ldb, rng);
    C = random_values(M * ldc, rng);
  }
  float a(int64_t m, int64_t k) const { return ta ? A[k * lda + m] : A[m * lda + k]; }
  float b(int64_t k, int64_t n) const { return tb ? B[n * ldb + k] : B[k * ldb + n]; }
};

// gemm_direct.h's contract written out as scalar code (bias null: none).
std::vector<float> contract(const Case& c, float alpha, float beta, const float* bias = nullptr) {
  std::vector<float> out(c.C);
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      float s = 0.0f;
      for (int64_t k = 0; k < c.K; ++k) s = std::fma(c.a(m, k), c.b(k, n), s);
      // Rounded before the bias is added (volatile: the compiler may not fuse the two).
      const volatile float scaled = alpha * s;
      float r = scaled;
      if (bias != nullptr) r += bias[n];
      float& y = out[m * c.ldc + n];
      y = beta == 0.0f ? r : std::fma(beta, y, r);
    }
  return out;
}

// Whether two float vectors hold the same bits.
bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// The first output (m, n) whose bits differ, as text, or "" when all agree.
std::string first_difference(const Case& c, const std::vector<float>& got, const std::vector<float>& want) {
  for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
      return "C[" + std::to_string(i / c.ldc) + ", " + std::to_string(i % c.ldc) + "] = " + std::to_string(got[i]) +
             ", want " + std::to_string(want[i]);
  return "";
}

std::vector<float> run_direct(const Case& c, float alpha, float beta, std::vector<float> C,
                              const float* bias = nullptr) {
  gemm_direct(c.ta, c.tb, c.M, c.N, c.K, alpha, c.A.data(), c.lda, c.B.data(), c.ldb, beta, C.data(), c.ldc, bias);
  return C;
}

TEST(GemmDirect, EveryLayoutHasTheContractsBits) {
  if (!runs_here()) return;
  simd::IsaGuard isa(simd::Isa::Avx512);
  Rng rng(11);
  const bool layouts[3][2] = {{false, false}, {false, true}, {true, false}};
  // Rows around the tile heights (6, 8, 12, 14) and their multiples; columns around the vectors
  // (16) and the panels (64); K with and without 16 x 16 blocks and their tails.
  const int64_t rows[] = {1, 2, 5, 6, 7, 13, 14, 15, 29, 64};
  const int64_t cols[] = {1, 3, 14, 16, 17, 31, 48, 63, 64, 65, 130, 192, 200};
  const int64_t depths[] = {1, 16, 17, 64};
  int cases = 0;
  for (const auto& layout : layouts)
    for (int64_t M : rows)
      for (int64_t N : cols)
        for (int64_t K : depths) {
          const Case c(layout[0], layout[1], M, N, K, rng);
          const float alpha = (cases % 3 == 0) ? 1.0f : 0.75f, beta = (cases % 2 == 0) ? 1.0f : 0.0f;
          const std::vector<float> bias = random_values(N, rng);
          const float* b = cases % 5 < 2 ? bias.data() : nullptr;  // a bias in two cases of five
          const auto got = run_direct(c, alpha, beta, c.C, b);
          const auto want = contract(c, alpha, beta, b);
          ASSERT_TRUE(same_bits(got, want)) << "ta " << c.ta << " tb " << c.tb << " M " << M << " N " << N << " K " << K
                                            << " bias " << (b != nullptr) << ": " << first_difference(c, got, want);
          ++cases;
        }
  EXPECT_EQ(cases, 3 * 10 * 13 * 4);
}

TEST(GemmDirect, BetaScalesCAndZeroIgnoresIt) {
  if (!runs_here()) return;
  simd::IsaGuard isa(simd::Isa::Avx512);
  Rng rng(12);
  for (bool tb : {false, true}) {
    Case c(false, tb, 9, 70, 33, rng);
    auto got = run_direct(c, 2.0f, -0.5f, c.C);
    EXPECT_TRUE(same_bits(got, contract(c, 2.0f, -0.5f))) << first_difference(c, got, contract(c, 2.0f, -0.5f));
    // beta = 0: NaN in C must not reach the result; the padding columns past N are not written.
    std::vector<float> nan_c(c.C.size(), std::numeric_limits<float>::quiet_NaN());
    got = run_direct(c, 1.0f, 0.0f, nan_c);
    for (int64_t m = 0; m < c.M; ++m) {
      for (int64_t n = 0; n < c.N; ++n) ASSERT_FALSE(std::isnan(got[m * c.ldc + n])) << m << ", " << n;
      for (int64_t n = c.N; n < c.ldc; ++n) ASSERT_TRUE(std::isnan(got[m * c.ldc + n])) << "padding written";
    }
  }
  // K = 0: every sum is 0, so C = beta * C.
  Case c(true, false, 7, 20, 0, rng);
  const auto got = run_direct(c, 1.0f, 0.5f, c.C);
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) EXPECT_EQ(got[m * c.ldc + n], 0.5f * c.C[m * c.ldc + n]);
}

// The values against a double product, on the shapes of a training step of the demo's model
// (a forward x W^T, its input gradient dY W and its weight gradient dY^T X).
TEST(GemmDirect, TrainingShapesAgainstDouble) {
  if (!runs_here()) return;
  simd::IsaGuard isa(simd::Isa::Avx512);
  Rng rng(13);
  struct Shape {
    bool ta, tb;
    int64_t M, N, K;
  };
  for (const Shape& s : {Shape{false, true, 288, 256, 64}, Shape{false, false, 288, 64, 256},
                         Shape{true, false, 64, 256, 288}, Shape{false, true, 288, 14, 64}}) {
    const Case c(s.ta, s.tb, s.M, s.N, s.K, rng);
    const auto got = run_direct(c, 1.0f, 1.0f, c.C);
    double worst = 0.0;
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t n = 0; n < c.N; ++n) {
        double want = c.C[m * c.ldc + n];
        for (int64_t k = 0; k < c.K; ++k) want += static_cast<double>(c.a(m, k)) * c.b(k, n);
        worst = std::max(worst, std::abs(got[m * c.ldc + n] - want) / (1.0 + std::abs(want)));
      }
    EXPECT_LT(worst, 1e-5) << "ta " << s.ta << " tb " << s.tb << " M " << s.M << " N " << s.N << " K " << s.K;
  }
}

// Restores the calling thread's OpenMP thread count at the end of a test.
struct ThreadCount {
  int64_t saved = num_threads();
  ~ThreadCount() { set_num_threads(saved); }
};

TEST(GemmDirect, GemmTakesItWhenNoThreadsAreAvailable) {
  if (!runs_here()) return;
  ThreadCount restore;
  simd::IsaGuard isa(simd::Isa::Avx512);
  Rng rng(14);
  const Case c(false, true, 96, 80, 48, rng);  // M above the small-M path's rows
  // With alpha and beta not 1 OpenBLAS rounds beta * C apart (it scales C first), so its bits
  // differ from the contract's: they tell which of the two ran.
  const float alpha = 0.7f, beta = 0.3f;
  const auto want = contract(c, alpha, beta);
  // Inside a parallel region of two threads each product runs on its thread: gemm_direct's bits.
  set_num_threads(2);
  std::vector<float> got[2] = {c.C, c.C};
  bool used[2] = {false, false};
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    used[t] = use_direct(c.ta, c.tb, c.M, c.N, c.K);
    gemm<float>(c.ta, c.tb, c.M, c.N, c.K, alpha, c.A.data(), c.lda, c.B.data(), c.ldb, beta, got[t].data(), c.ldc);
  }
  for (int t = 0; t < 2; ++t) {
    EXPECT_TRUE(used[t]) << "thread " << t;
    EXPECT_TRUE(same_bits(got[t], want)) << "thread " << t << ": " << first_difference(c, got[t], want);
  }
  // One thread set: gemm_direct too.
  set_num_threads(1);
  EXPECT_TRUE(use_direct(false, false, c.M, c.N, c.K));
  std::vector<float> one(c.C);
  gemm<float>(c.ta, c.tb, c.M, c.N, c.K, alpha, c.A.data(), c.lda, c.B.data(), c.ldb, beta, one.data(), c.ldc);
  EXPECT_TRUE(same_bits(one, want)) << first_difference(c, one, want);
  // Not for A^T B^T, too few rows or multiply-adds, a K over the limit, or an ISA other than
  // AVX-512 (BLAS takes those), also on one thread.
  EXPECT_FALSE(use_direct(true, true, c.M, c.N, c.K));
  EXPECT_FALSE(use_direct(false, true, kDirectMinRows - 1, 4096, 64));
  EXPECT_TRUE(use_direct(false, true, kDirectMinRows, 4096, 64));
  EXPECT_FALSE(use_direct(false, true, 128, 16, 32));  // 2^16 multiply-adds
  EXPECT_FALSE(use_direct(false, true, c.M, c.N, kDirectMaxK + 1));
  for (simd::Isa other : simd::supported_isas())
    if (other != simd::Isa::Avx512) {
      simd::IsaGuard narrower(other);
      EXPECT_FALSE(use_direct(false, true, c.M, c.N, c.K)) << simd::isa_name(other);
    }
  // Control: BLAS's product (two threads, outside a region) differs in some bits.
  set_num_threads(2);
  std::vector<float> blas(c.C);
  gemm<float>(c.ta, c.tb, c.M, c.N, c.K, alpha, c.A.data(), c.lda, c.B.data(), c.ldb, beta, blas.data(), c.ldc);
  EXPECT_FALSE(same_bits(blas, want))
      << "control: OpenBLAS gave the contract's bits, so they do not tell the paths apart";
  // Two threads available outside a region: BLAS, which threads the product (as just run).
  EXPECT_FALSE(use_direct(false, true, c.M, c.N, c.K));
}

// gemm_bias: the bits of gemm over rows that hold the bias with beta = 1, on gemm_direct's path
// (one thread, 97 rows) and on BLAS's (fewer rows, or two threads), float and double; no bias is
// gemm with beta = 0 (C's contents ignored).
TEST(GemmDirect, GemmBiasHasTheBitsOfGemmOverBiasRows) {
  ThreadCount restore;
  Rng rng(15);
  for (int threads : {1, 2})
    for (int64_t M : {5, 40, 97}) {
      set_num_threads(threads);
      const Case c(false, true, M, 70, 48, rng);
      const std::vector<float> bias = random_values(c.N, rng);
      std::vector<float> want(c.C);
      for (int64_t m = 0; m < M; ++m) std::copy(bias.begin(), bias.end(), want.begin() + m * c.ldc);
      gemm<float>(false, true, M, c.N, c.K, 1.0f, c.A.data(), c.lda, c.B.data(), c.ldb, 1.0f, want.data(), c.ldc);
      std::vector<float> got(c.C);
      gemm_bias<float>(M, c.N, c.K, c.A.data(), c.lda, c.B.data(), c.ldb, bias.data(), got.data(), c.ldc);
      EXPECT_TRUE(same_bits(got, want)) << threads << " threads, M " << M << ": " << first_difference(c, got, want);
      // No bias: C's contents (NaN here) are ignored.
      std::vector<float> nan_c(c.C.size(), std::numeric_limits<float>::quiet_NaN());
      std::vector<float> plain(nan_c);
      gemm<float>(false, true, M, c.N, c.K, 1.0f, c.A.data(), c.lda, c.B.data(), c.ldb, 0.0f, plain.data(), c.ldc);
      gemm_bias<float>(M, c.N, c.K, c.A.data(), c.lda, c.B.data(), c.ldb, nullptr, nan_c.data(), c.ldc);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < c.N; ++n) ASSERT_EQ(nan_c[m * c.ldc + n], plain[m * c.ldc + n]) << m << ", " << n;
      // double: the same composition.
      std::vector<double> A(c.A.begin(), c.A.end()), B(c.B.begin(), c.B.end()), bd(bias.begin(), bias.end());
      std::vector<double> wd(c.C.size(), 0.0), gd(c.C.size(), 0.0);
      for (int64_t m = 0; m < M; ++m) std::copy(bd.begin(), bd.end(), wd.begin() + m * c.ldc);
      gemm<double>(false, true, M, c.N, c.K, 1.0, A.data(), c.lda, B.data(), c.ldb, 1.0, wd.data(), c.ldc);
      gemm_bias<double>(M, c.N, c.K, A.data(), c.lda, B.data(), c.ldb, bd.data(), gd.data(), c.ldc);
      EXPECT_EQ(std::memcmp(wd.data(), gd.data(), wd.size() * sizeof(double)), 0) << threads << " threads, M " << M;
    }
}

}  // namespace
}  // namespace attn::kernels
