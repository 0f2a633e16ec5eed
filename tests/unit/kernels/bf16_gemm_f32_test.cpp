// kernels/quantized_gemm.h, gemm_bf16_f32: the products of mixed-precision training (two float32
// operands rounded to bf16, float32 sums in the header's lane order). For every path and all four
// combinations of transposed operands, with tails of M, N and K, row strides wider than the rows
// and accumulation into C: the bits equal an emulation of the header's order written here from
// its text (16 lanes of (k0 + 1, k0) pairs, FMA with the subnormal flush, the lane tree), the
// result lies within the header's bound of a float64 product of the same bf16 operands, and it
// equals gemm_bf16 (the inference product) on the same operands. Controls: a reference that reads
// op(B) untransposed, and one that sums in plain k order, are told apart by these checks. The
// bits do not depend on the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "attn/core/dtype.h"
#include "attn/core/rng.h"
#include "kernels/quantized_gemm.h"

namespace attn::kernels {
namespace {

const std::vector<QuantPath> kBf16Paths = {QuantPath::Scalar, QuantPath::Avx2, QuantPath::Avx512,
                                           QuantPath::Avx512Bf16};

float bf(float v) { return float_from_bf16(bf16_from_float(v)); }

float flush(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  if ((u & 0x7F800000u) == 0) u &= 0x80000000u;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

// One stored product: C[M, N] (row stride ldc) = op(A) op(B) (+ C), A and B with row strides.
struct Case {
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0, lda = 0, ldb = 0, ldc = 0;
  std::vector<float> a, b, c0;
  float opa(int64_t m, int64_t k) const { return ta ? a[k * lda + m] : a[m * lda + k]; }
  float opb(int64_t k, int64_t n) const { return tb ? b[n * ldb + k] : b[k * ldb + n]; }
};

Case make_case(bool ta, bool tb, int64_t M, int64_t N, int64_t K, Rng& rng) {
  Case c;
  c.ta = ta;
  c.tb = tb;
  c.M = M;
  c.N = N;
  c.K = K;
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
  c.lda = a_cols + 3;
  c.ldb = b_cols + 1;
  c.ldc = N + 2;
  auto fill = [&](std::vector<float>& v, int64_t n, double lo, double hi) {
    v.resize(static_cast<size_t>(n));
    for (float& x : v) x = static_cast<float>(lo + (hi - lo) * rng.uniform());
  };
  fill(c.a, a_rows * c.lda, -2.0, 2.0);
  fill(c.b, b_rows * c.ldb, -0.7, 0.7);
  fill(c.c0, M * c.ldc, -1.0, 1.0);
  return c;
}

std::vector<float> run(const Case& c, QuantPath path, bool accumulate) {
  std::vector<float> y = c.c0;
  gemm_bf16_f32(c.ta, c.tb, c.M, c.N, c.K, c.a.data(), c.lda, c.b.data(), c.ldb, accumulate, y.data(), c.ldc, path);
  return y;
}

// The header's order, from its text. transpose_b_wrongly reads op(B) as if tb were flipped (a
// control); sequential sums every k in order into one float (another control).
std::vector<float> reference(const Case& c, bool accumulate, bool transpose_b_wrongly = false,
                             bool sequential = false) {
  std::vector<float> y = c.c0;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      auto xk = [&](int64_t k) { return bf(c.opa(m, k)); };
      auto wk = [&](int64_t k) {
        if (!transpose_b_wrongly) return bf(c.opb(k, n));
        const int64_t kk = k % c.N, nn = n % c.K;  // the other orientation, wrapped into range
        return bf(c.tb ? c.b[kk * c.ldb + nn] : c.b[nn * c.ldb + kk]);
      };
      float sum = 0.0f;
      if (sequential) {
        for (int64_t k = 0; k < c.K; ++k) sum = std::fma(xk(k), wk(k), sum);
      } else {
        float lanes[16] = {};
        for (int64_t base = 0; base < c.K; base += 32)
          for (int i = 0; i < 16; ++i) {
            const int64_t k0 = base + 2 * i;
            if (k0 + 1 < c.K) lanes[i] = flush(std::fma(xk(k0 + 1), wk(k0 + 1), lanes[i]));
            else lanes[i] = flush(std::fma(0.0f, 0.0f, lanes[i]));
            if (k0 < c.K) lanes[i] = flush(std::fma(xk(k0), wk(k0), lanes[i]));
            else lanes[i] = flush(std::fma(0.0f, 0.0f, lanes[i]));
          }
        float t8[8], t4[4];
        for (int i = 0; i < 8; ++i) t8[i] = lanes[i] + lanes[i + 8];
        for (int i = 0; i < 4; ++i) t4[i] = t8[i] + t8[i + 4];
        sum = (t4[0] + t4[2]) + (t4[1] + t4[3]);
      }
      float& out = y[m * c.ldc + n];
      out = accumulate ? out + sum : sum;
    }
  return y;
}

// The worst |y - ref| / bound over the outputs, ref the float64 product of the bf16 operands
// (+ C), bound (K/16 + 5) 2^-24 (sum_k |x w| + |C|) (the header's).
double excess(const Case& c, const std::vector<float>& y, bool accumulate) {
  double worst = 0.0;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      double dot = 0.0, mag = 0.0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double p = static_cast<double>(bf(c.opa(m, k))) * bf(c.opb(k, n));
        dot += p;
        mag += std::fabs(p);
      }
      const double base = accumulate ? c.c0[m * c.ldc + n] : 0.0;
      const double bound = (static_cast<double>(c.K) / 16.0 + 5.0) * std::ldexp(1.0, -24) * (mag + std::fabs(base)) +
                           1e-30;
      worst = std::max(worst, std::fabs(y[m * c.ldc + n] - (dot + base)) / bound);
    }
  return worst;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class Bf16F32Path : public ::testing::TestWithParam<QuantPath> {
 protected:
  void SetUp() override {
    if (!quant_path_supported(GetParam()))
      GTEST_SKIP() << "this CPU or build lacks the " << quant_path_name(GetParam()) << " path";
  }
};

TEST_P(Bf16F32Path, EveryTranspositionGivesTheHeadersBitsWithinItsBound) {
  Rng rng(41);
  int checked = 0;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t M : {1, 3, 4, 33, 70})  // 33 and 70 rows with an even K: packed panels (AVX-512)
        for (int64_t N : {1, 7, 16, 17, 70})
          for (int64_t K : {1, 2, 31, 32, 33, 70})
            for (bool acc : {false, true}) {
              const Case c = make_case(ta, tb, M, N, K, rng);
              const auto got = run(c, GetParam(), acc);
              const auto want = reference(c, acc);
              ASSERT_TRUE(same_bits(got, want)) << "ta " << ta << " tb " << tb << " M " << M << " N " << N << " K "
                                                << K << " acc " << acc;
              ASSERT_LE(excess(c, got, acc), 1.0) << "ta " << ta << " tb " << tb << " M " << M << " N " << N;
              // Outside the N columns of each row C is untouched.
              for (int64_t m = 0; m < M; ++m)
                for (int64_t n = N; n < c.ldc; ++n) ASSERT_EQ(got[m * c.ldc + n], c.c0[m * c.ldc + n]);
              ++checked;
            }
  EXPECT_EQ(checked, 2 * 2 * 5 * 5 * 6 * 2);
}

TEST_P(Bf16F32Path, EqualsTheInferenceProductOnTheSameOperands) {
  // gemm_bf16 with x = op(A) and the weight bf16(op(B)^T): the same kernels, the same bits.
  Rng rng(43);
  for (int64_t M : {21, 40}) {  // 40 rows: packed panels on the AVX-512 paths
    const Case c = make_case(true, false, M, 45, 78, rng);
    const auto got = run(c, GetParam(), false);
    std::vector<float> x(static_cast<size_t>(c.M * c.K));
    std::vector<uint16_t> w(static_cast<size_t>(c.N * c.K));
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t k = 0; k < c.K; ++k) x[m * c.K + k] = c.opa(m, k);
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t k = 0; k < c.K; ++k) w[n * c.K + k] = bf16_from_float(c.opb(k, n));
    std::vector<float> y = c.c0;
    gemm_bf16(c.M, c.N, c.K, x.data(), c.K, w.data(), nullptr, y.data(), c.ldc, GetParam());
    EXPECT_TRUE(same_bits(got, y)) << M;
  }
}

TEST_P(Bf16F32Path, ThreadsChangeNoBits) {
  Rng rng(47);
  // Large enough to use the threads; op(B) = B packs the panels from B's columns, op(B) = B^T
  // from its rows.
  for (bool tb : {true, false}) {
    const Case c = make_case(false, tb, 150, 90, 200, rng);
    const int before = omp_get_max_threads();
    omp_set_num_threads(1);
    const auto one = run(c, GetParam(), true);
    omp_set_num_threads(3);
    const auto three = run(c, GetParam(), true);
    omp_set_num_threads(before);
    EXPECT_TRUE(same_bits(one, three)) << tb;
    EXPECT_TRUE(same_bits(one, reference(c, true))) << tb;
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, Bf16F32Path, ::testing::ValuesIn(kBf16Paths),
                         [](const auto& info) { return std::string(quant_path_name(info.param)); });

TEST(Bf16F32Product, ControlsAWrongOrientationOrSummationOrderIsCaught) {
  Rng rng(53);
  const Case c = make_case(false, false, 5, 9, 70, rng);
  const auto y = run(c, QuantPath::Scalar, false);
  ASSERT_TRUE(same_bits(y, reference(c, false)));
  // op(B) read the other way round: neither the bits nor the bound hold.
  EXPECT_FALSE(same_bits(y, reference(c, false, /*transpose_b_wrongly=*/true)));
  // Plain k-order sums are close (within the bound) but not the same bits: the bit check is sharp.
  const auto seq = reference(c, false, false, /*sequential=*/true);
  EXPECT_FALSE(same_bits(y, seq));
  EXPECT_LE(excess(c, seq, false), 1.0);
  // A float32 product of the unrounded operands lies far outside the bf16 product's bound.
  std::vector<float> f32 = c.c0;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < c.K; ++k) s += static_cast<double>(c.opa(m, k)) * c.opb(k, n);
      f32[m * c.ldc + n] = static_cast<float>(s);
    }
  EXPECT_GT(excess(c, f32, false), 10.0);
}

// A bias (the forward product of a linear layer in training) gives the bits of C = bias, then
// accumulating: sum + bias and bias + sum are the same rounded add. Every path, AMX's where the
// CPU has it (from 256 rows its panels), all four orientations. Control: the result differs
// from the product without the bias.
TEST(Bf16F32Product, ABiasGivesTheBitsOfTheBiasThenAccumulating) {
  Rng rng(59);
  std::vector<QuantPath> paths = kBf16Paths;
  if (quant_path_supported(QuantPath::Amx)) paths.push_back(QuantPath::Amx);
  for (QuantPath path : paths)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int64_t M : {3, 40, 300}) {
          Case c = make_case(ta, tb, M, 70, 45, rng);
          std::vector<float> bias(static_cast<size_t>(c.N));
          for (float& v : bias) v = static_cast<float>(rng.uniform() - 0.5);
          for (int64_t m = 0; m < c.M; ++m)
            for (int64_t n = 0; n < c.N; ++n) c.c0[m * c.ldc + n] = bias[n];
          const auto want = run(c, path, true);
          std::vector<float> got(c.c0.size(), -7.0f);
          gemm_bf16_f32(ta, tb, M, c.N, c.K, c.a.data(), c.lda, c.b.data(), c.ldb, false, got.data(), c.ldc, path,
                        bias.data());
          for (int64_t m = 0; m < c.M; ++m) {
            ASSERT_EQ(std::memcmp(got.data() + m * c.ldc, want.data() + m * c.ldc, c.N * sizeof(float)), 0)
                << quant_path_name(path) << " ta " << ta << " tb " << tb << " M " << M << " row " << m;
            for (int64_t n = c.N; n < c.ldc; ++n) ASSERT_EQ(got[m * c.ldc + n], -7.0f) << "padding written";
          }
          ASSERT_FALSE(same_bits(got, run(c, path, false)));
        }
}

TEST(Bf16F32Product, AnEmptyInnerDimensionGivesZerosOrLeavesC) {
  std::vector<float> a(4, 1.0f), b(4, 1.0f), y = {1.5f, -2.0f, 3.0f, 4.0f};
  gemm_bf16_f32(false, false, 2, 2, 0, a.data(), 1, b.data(), 2, true, y.data(), 2, QuantPath::Scalar);
  EXPECT_EQ(y, (std::vector<float>{1.5f, -2.0f, 3.0f, 4.0f}));
  gemm_bf16_f32(false, false, 2, 2, 0, a.data(), 1, b.data(), 2, false, y.data(), 2, QuantPath::Scalar);
  EXPECT_EQ(y, (std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f}));
  const std::vector<float> bias = {0.25f, -3.0f};
  gemm_bf16_f32(false, false, 2, 2, 0, a.data(), 1, b.data(), 2, false, y.data(), 2, QuantPath::Scalar, bias.data());
  EXPECT_EQ(y, (std::vector<float>{0.25f, -3.0f, 0.25f, -3.0f}));
}

}  // namespace
}  // namespace attn::kernels
