// kernels/quantized_gemm.h, the amx_bf16 path: the bf16 products on AMX tiles (tdpbf16ps), whose
// sums follow the hardware's order rather than the lane tree of the other paths, so they are
// checked by what that order must give instead of bit for bit against the scalar emulation:
// every output within (K + 5) 2^-24 (sum_k |x w| + |bias|) of a float64 product of the same
// bf16 operands (the bound of float32 sums in any order), tails of M (tiles configured with
// fewer rows), N and K (odd K included); a row's bits alone, in any batch and under any thread
// count, are the same; the ReLU epilogue and the chained bf16 rows give the bits of the separate
// steps; the training product (gemm_bf16_f32) in all four orientations, equal to the inference
// product on the same operands. Controls: a wrong weight row, or the halves of each k pair
// swapped between the operands, break the bound. The kernel tests skip where the CPU or the OS
// has no AMX (its instructions cannot run there); the policy tests (Bf16AmxPolicy) assert on
// every machine: the default product's choice of the vector kernels for a few rows, which the
// batch-invariant mode overrides, and the path each ISA and ATTN_AMX select.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attn/core/dtype.h"
#include "attn/core/rng.h"
#include "kernels/batch_invariant.h"
#include "kernels/quantized_gemm.h"
#include "kernels/simd/isa.h"

namespace attn::kernels {
namespace {

constexpr QuantPath kAmx = QuantPath::Amx;

class Bf16Amx : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!quant_path_supported(kAmx)) GTEST_SKIP() << "this CPU, OS or build has no AMX-BF16 tiles";
  }
};

std::vector<float> random_floats(int64_t n, Rng& rng, double lo, double hi) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(lo + (hi - lo) * rng.uniform());
  return v;
}

float bf(float v) { return float_from_bf16(bf16_from_float(v)); }

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// f()'s outputs under 1 and under 3 threads.
template <class F>
std::pair<std::vector<float>, std::vector<float>> under_one_and_three_threads(const F& f) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  auto one = f();
  omp_set_num_threads(3);
  auto three = f();
  omp_set_num_threads(before);
  return {std::move(one), std::move(three)};
}

// An inference product: x [M, ldx], w [N, K] bf16, bias [N], y [M, ldy].
struct Product {
  int64_t M, N, K, ldx, ldy;
  std::vector<float> x, bias;
  std::vector<uint16_t> w;
};

Product make_product(int64_t M, int64_t N, int64_t K, Rng& rng) {
  Product c{M, N, K, K + 1, N + 3, random_floats(M * (K + 1), rng, -2.0, 2.0), random_floats(N, rng, -1.0, 1.0), {}};
  const auto wf = random_floats(N * K, rng, -0.5, 0.5);
  c.w.resize(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) c.w[i] = bf16_from_float(wf[i]);
  return c;
}

std::vector<float> run(const Product& c, Epilogue e = Epilogue::None) {
  std::vector<float> y(static_cast<size_t>(c.M * c.ldy), -99.0f);
  gemm_bf16(c.M, c.N, c.K, c.x.data(), c.ldx, c.w.data(), c.bias.data(), y.data(), c.ldy, kAmx, e);
  return y;
}

// The worst |y - ref| / bound over the outputs, ref = sum_k bf16(x) w (+ b) in float64 with the
// weight row n + row_shift (mod N), and with each k pair's halves swapped in x when swap_pairs
// (controls), bound = (K + 5) 2^-24 (sum_k |bf16(x) w| + |b|).
double excess(const Product& c, const std::vector<float>& y, int64_t row_shift = 0, bool swap_pairs = false) {
  double worst = 0.0;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      const int64_t wn = (n + row_shift) % c.N;
      double dot = 0.0, mag = 0.0;
      for (int64_t k = 0; k < c.K; ++k) {
        const int64_t kx = swap_pairs ? (k ^ 1) : k;
        const double xv = kx < c.K ? bf(c.x[m * c.ldx + kx]) : 0.0;
        const double p = xv * float_from_bf16(c.w[wn * c.K + k]);
        dot += p;
        mag += std::fabs(p);
      }
      const double bound =
          (static_cast<double>(c.K) + 5.0) * std::ldexp(1.0, -24) * (mag + std::fabs(c.bias[n])) + 1e-30;
      worst = std::max(worst, std::fabs(y[m * c.ldy + n] - (dot + c.bias[n])) / bound);
    }
  return worst;
}

TEST_F(Bf16Amx, EveryOutputLiesWithinTheBoundOfAFloat64Product) {
  Rng rng(59);
  // 1-16 rows: one row tile, configured with the rows it has; 17-32: two; more: blocks of 32.
  for (int64_t M : {1, 2, 7, 16, 17, 31, 32, 33, 70})
    for (int64_t N : {1, 5, 16, 37, 70, 129})
      for (int64_t K : {1, 2, 31, 32, 33, 64, 130}) {
        const Product c = make_product(M, N, K, rng);
        const auto y = run(c);
        ASSERT_LE(excess(c, y), 1.0) << "M " << M << " N " << N << " K " << K;
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = N; n < c.ldy; ++n) ASSERT_EQ(y[m * c.ldy + n], -99.0f) << "padding written";
      }
}

TEST_F(Bf16Amx, ControlsAWrongWeightRowOrSwappedPairHalvesBreakTheBound) {
  Rng rng(61);
  const Product c = make_product(40, 37, 64, rng);
  const auto y = run(c);
  ASSERT_LE(excess(c, y), 1.0);
  EXPECT_GT(excess(c, y, /*row_shift=*/1), 10.0);
  EXPECT_GT(excess(c, y, 0, /*swap_pairs=*/true), 10.0);
}

TEST_F(Bf16Amx, ARowGivesTheSameBitsAloneInAnyBatchAndUnderAnyThreadCount) {
  Rng rng(67);
  const Product c = make_product(70, 600, 130, rng);
  const auto all = run(c);
  // Alone, and inside batches whose tiles hold it at other positions and with other row counts.
  for (int64_t first : {0, 3, 16, 33})
    for (int64_t rows : {1, 5, 17, 32}) {
      if (first + rows > c.M) continue;
      std::vector<float> part(static_cast<size_t>(rows * c.N));
      gemm_bf16(rows, c.N, c.K, c.x.data() + first * c.ldx, c.ldx, c.w.data(), c.bias.data(), part.data(), c.N, kAmx);
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(std::memcmp(part.data() + r * c.N, all.data() + (first + r) * c.ldy, c.N * sizeof(float)), 0)
            << "rows " << first << " + " << rows << ", row " << r;
    }
  const auto [one, three] = under_one_and_three_threads([&] { return run(c); });
  EXPECT_TRUE(same_bits(one, all));
  EXPECT_TRUE(same_bits(three, all));
}

// From 256 rows the product packs the weight into panels (bf16_amx: ranges of rows times
// panels, the ranges sized by the row stride); fewer rows read the weight rows as tiles
// (bf16_amx_rows). Every row must get the same bits either way, or a row's bits would depend on
// its batch: each row of a large product is compared with the same row in chunks of 37 rows,
// with K long enough for several ranges (K = 1030) and with tails of M, N and K.
TEST_F(Bf16Amx, ManyRowsGiveEachRowTheBitsOfAFewRows) {
  Rng rng(83);
  for (const auto& [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{300, 70, 130}, {520, 37, 1030}, {256, 129, 31}}) {
    const Product c = make_product(M, N, K, rng);
    const auto all = run(c);
    ASSERT_LE(excess(c, all), 1.0) << "M " << M << " N " << N << " K " << K;
    for (int64_t first = 0; first < M; first += 37) {
      const int64_t rows = std::min<int64_t>(37, M - first);
      std::vector<float> part(static_cast<size_t>(rows * c.ldy), -99.0f);
      gemm_bf16(rows, c.N, c.K, c.x.data() + first * c.ldx, c.ldx, c.w.data(), c.bias.data(), part.data(), c.ldy, kAmx);
      ASSERT_EQ(std::memcmp(part.data(), all.data() + first * c.ldy, rows * c.ldy * sizeof(float)), 0)
          << "M " << M << " N " << N << " K " << K << ", rows from " << first;
    }
    const auto [one, three] = under_one_and_three_threads([&] { return run(c); });
    EXPECT_TRUE(same_bits(one, all)) << M;
    EXPECT_TRUE(same_bits(three, all)) << M;
  }
}

// Both formulations: the weight rows as tiles below kAmxPanelMinRows (256) rows, the panels from
// there on (M = 300: whole 32 x 32 blocks and their tails, each epilogue's own loop).
TEST_F(Bf16Amx, TheEpiloguesGiveTheBitsOfTheSeparateSteps) {
  Rng rng(71);
  for (int64_t M : {1, 7, 40, 300})
    for (int64_t N : {5, 37, 129})
      for (int64_t K : {31, 64, 130}) {
        SCOPED_TRACE(testing::Message() << "M " << M << " N " << N << " K " << K);
        const Product c = make_product(M, N, K, rng);
        const auto plain = run(c);
        // ReLU after the product.
        auto want = plain;
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            float& v = want[m * c.ldy + n];
            v = v < 0.0f ? 0.0f : v;
          }
        const auto relu = run(c, Epilogue::ReLU);
        ASSERT_TRUE(same_bits(relu, want));
        ASSERT_FALSE(same_bits(relu, plain));  // control: some outputs were negative
        // The outputs rounded to bf16 rows, and the next product on those rows.
        const int64_t ldyb = bf16_row_stride(N) + 16;
        std::vector<uint16_t> yb(static_cast<size_t>(M * ldyb), 0xBEEF);
        gemm_bf16_output(M, N, K, c.x.data(), c.ldx, c.w.data(), c.bias.data(), yb.data(), ldyb, kAmx);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < ldyb; ++n)
            ASSERT_EQ(yb[m * ldyb + n], n < N ? bf16_from_float(plain[m * c.ldy + n]) : uint16_t{0}) << m << " " << n;
        const Product next = make_product(1, 9, N, rng);
        std::vector<float> from_floats(static_cast<size_t>(M * 9)), from_rows(from_floats.size(), -99.0f);
        gemm_bf16(M, 9, N, plain.data(), c.ldy, next.w.data(), next.bias.data(), from_floats.data(), 9, kAmx);
        gemm_bf16_input(M, 9, N, yb.data(), ldyb, next.w.data(), next.bias.data(), from_rows.data(), 9, kAmx);
        ASSERT_TRUE(same_bits(from_rows, from_floats));
      }
}

// ---- the training product -------------------------------------------------------------------

struct Training {
  bool ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  std::vector<float> a, b, c0;
  float opa(int64_t m, int64_t k) const { return ta ? a[k * lda + m] : a[m * lda + k]; }
  float opb(int64_t k, int64_t n) const { return tb ? b[n * ldb + k] : b[k * ldb + n]; }
};

Training make_training(bool ta, bool tb, int64_t M, int64_t N, int64_t K, Rng& rng) {
  Training c{ta, tb, M, N, K, (ta ? M : K) + 3, (tb ? K : N) + 1, N + 2, {}, {}, {}};
  c.a = random_floats((ta ? K : M) * c.lda, rng, -2.0, 2.0);
  c.b = random_floats((tb ? N : K) * c.ldb, rng, -0.7, 0.7);
  c.c0 = random_floats(M * c.ldc, rng, -1.0, 1.0);
  return c;
}

// The training product's operands as the inference product takes them: x = op(A) [M, K] and the
// weight rows bf16(op(B)^T) [N, K].
void inference_operands(const Training& c, std::vector<float>& x, std::vector<uint16_t>& w) {
  x.resize(static_cast<size_t>(c.M * c.K));
  w.resize(static_cast<size_t>(c.N * c.K));
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t k = 0; k < c.K; ++k) x[m * c.K + k] = c.opa(m, k);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t k = 0; k < c.K; ++k) w[n * c.K + k] = bf16_from_float(c.opb(k, n));
}

std::vector<float> run(const Training& c, bool accumulate) {
  std::vector<float> y = c.c0;
  gemm_bf16_f32(c.ta, c.tb, c.M, c.N, c.K, c.a.data(), c.lda, c.b.data(), c.ldb, accumulate, y.data(), c.ldc, kAmx);
  return y;
}

double excess(const Training& c, const std::vector<float>& y, bool accumulate) {
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
      // One more rounding than the inference product: the add into C.
      const double bound = (static_cast<double>(c.K) + 6.0) * std::ldexp(1.0, -24) * (mag + std::fabs(base)) + 1e-30;
      worst = std::max(worst, std::fabs(y[m * c.ldc + n] - (dot + base)) / bound);
    }
  return worst;
}

TEST_F(Bf16Amx, TheTrainingProductInEveryOrientationLiesWithinTheBound) {
  Rng rng(73);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t M : {1, 3, 17, 33, 70})
        for (int64_t N : {1, 7, 17, 70})
          for (int64_t K : {1, 2, 31, 33, 70})
            for (bool acc : {false, true}) {
              const Training c = make_training(ta, tb, M, N, K, rng);
              const auto y = run(c, acc);
              ASSERT_LE(excess(c, y, acc), 1.0)
                  << "ta " << ta << " tb " << tb << " M " << M << " N " << N << " K " << K << " acc " << acc;
              for (int64_t m = 0; m < M; ++m)
                for (int64_t n = N; n < c.ldc; ++n) ASSERT_EQ(y[m * c.ldc + n], c.c0[m * c.ldc + n]);
            }
}

TEST_F(Bf16Amx, TheTrainingProductEqualsTheInferenceProductAndIgnoresTheThreads) {
  Rng rng(79);
  for (bool tb : {false, true})
    for (int64_t K : {78, 77}) {  // an odd K pads op(B)'s pairs with a zero
      const Training c = make_training(true, tb, 40, 45, K, rng);
      const auto got = run(c, false);
      std::vector<float> x;
      std::vector<uint16_t> w;
      inference_operands(c, x, w);
      std::vector<float> y = c.c0;
      gemm_bf16(c.M, c.N, c.K, x.data(), c.K, w.data(), nullptr, y.data(), c.ldc, kAmx);
      EXPECT_TRUE(same_bits(got, y)) << tb << " " << K;
    }
  // The forward product (tb) of many rows takes the panels, packed from op(B)'s bf16 rows; its
  // rows equal the inference product's in chunks of fewer rows (the weight rows as tiles).
  for (int64_t K : {78, 77}) {
    const Training c = make_training(false, true, 300, 45, K, rng);
    const auto got = run(c, true);
    ASSERT_LE(excess(c, got, true), 1.0) << K;
    std::vector<float> x;
    std::vector<uint16_t> w;
    inference_operands(c, x, w);
    for (int64_t first = 0; first < c.M; first += 100) {
      const int64_t rows = std::min<int64_t>(100, c.M - first);
      std::vector<float> y(static_cast<size_t>(rows * c.N));
      gemm_bf16(rows, c.N, c.K, x.data() + first * c.K, c.K, w.data(), nullptr, y.data(), c.N, kAmx);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t n = 0; n < c.N; ++n) {
          const int64_t i = (first + r) * c.ldc + n;
          ASSERT_EQ(bits(got[i]), bits(c.c0[i] + y[r * c.N + n])) << "K " << K << " row " << first + r << " n " << n;
        }
    }
  }
  for (bool tb : {true, false}) {
    const Training c = make_training(false, tb, 150, 90, 200, rng);
    const auto [one, three] = under_one_and_three_threads([&] { return run(c, true); });
    EXPECT_TRUE(same_bits(one, three)) << tb;
  }
}

// ---- which path runs (no skips: these hold on every machine) ----------------------------------

// Whether this process may run the tiles: the CPU and OS have them and ATTN_AMX is not "0".
bool tiles_expected() {
  const char* v = std::getenv("ATTN_AMX");
  return quant_path_supported(kAmx) && (v == nullptr || std::string(v) != "0");
}

// The default product (no path named) gives a few rows to the vector kernels where the tiles
// run, so a row's bits alone differ from its bits in a larger batch; the batch-invariant mode
// keeps the tiles for every M. Without the tiles the vector paths give the same bits either way.
TEST(Bf16AmxPolicy, TheBatchInvariantModeKeepsARowsBitsForAFewRows) {
  Rng rng(83);
  const Product c = make_product(40, 600, 130, rng);
  const auto alone_equals_batch = [&](bool invariant) {
    set_batch_invariant(invariant);
    std::vector<float> all(static_cast<size_t>(c.M * c.N)), one(static_cast<size_t>(c.N));
    gemm_bf16(c.M, c.N, c.K, c.x.data(), c.ldx, c.w.data(), c.bias.data(), all.data(), c.N);
    gemm_bf16(1, c.N, c.K, c.x.data() + 5 * c.ldx, c.ldx, c.w.data(), c.bias.data(), one.data(), c.N);
    set_batch_invariant(false);
    return std::memcmp(one.data(), all.data() + 5 * c.N, one.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(alone_equals_batch(true));
  // Control where the tiles run: outside the mode the single row takes another order.
  EXPECT_EQ(alone_equals_batch(false), bf16_path() != kAmx);
}

// ATTN_AMX=0 keeps the tiles out (ctest runs this suite a second time with it: bf16_amx_off).
TEST(Bf16AmxPolicy, TheAvx512IsaTakesTheTilesUnlessAttnAmxIsZero) {
  if (simd::isa_supported(simd::Isa::Avx512)) {
    simd::IsaGuard isa(simd::Isa::Avx512);
    EXPECT_EQ(bf16_path() == kAmx, tiles_expected());
    EXPECT_EQ(int8_path() == QuantPath::AmxInt8, tiles_expected() && quant_path_supported(QuantPath::AmxInt8));
  }
  if (simd::isa_supported(simd::Isa::Avx2)) {
    simd::IsaGuard isa(simd::Isa::Avx2);
    EXPECT_EQ(bf16_path(), QuantPath::Avx2);
    EXPECT_EQ(int8_path(), QuantPath::Avx2);
  }
  simd::IsaGuard isa(simd::Isa::Scalar);
  EXPECT_EQ(bf16_path(), QuantPath::Scalar);
}

}  // namespace
}  // namespace attn::kernels
