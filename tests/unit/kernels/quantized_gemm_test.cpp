// kernels/quantized_gemm.h: the float -> bf16 conversion on edge cases (ties, subnormals,
// overflow, Inf, NaN) and on every path; the per-row int8 quantization; the int8 accumulators
// of every path against the scalar loop (exact, also at the extremes where vpmaddubsw would
// saturate without the sign trick); the int8 and bf16 products of every path bit for bit
// against the scalar reference, and the scalar reference against a float64 product of the
// dequantized operands within the bound the header states, with controls showing that a wrong
// scale or a wrong weight row breaks that check; tails of K, N and M, strides, bias, and a row
// that gives the same bits alone as in a batch. Paths the CPU lacks are skipped.
#include "kernels/quantized_gemm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attn/core/dtype.h"
#include "attn/core/error.h"
#include "attn/core/rng.h"

namespace attn::kernels {
namespace {

const std::vector<QuantPath> kAllPaths = {QuantPath::Scalar,     QuantPath::Avx2,       QuantPath::Avx512,
                                          QuantPath::Avx512Vnni, QuantPath::Avx512Bf16, QuantPath::Amx,
                                          QuantPath::AmxInt8};
// amx_int8 runs the tiles from 16 activation rows and VNNI's kernels below: the same exact sums.
const std::vector<QuantPath> kInt8Paths = {QuantPath::Scalar, QuantPath::Avx2, QuantPath::Avx512Vnni,
                                           QuantPath::AmxInt8};
const std::vector<QuantPath> kBf16Paths = {QuantPath::Scalar, QuantPath::Avx2, QuantPath::Avx512,
                                           QuantPath::Avx512Bf16};

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

std::vector<float> random_floats(int64_t n, Rng& rng, double lo = -1.0, double hi = 1.0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(lo + (hi - lo) * rng.uniform());
  return v;
}

// ---- bf16 conversion -------------------------------------------------------------------------

TEST(Bf16Conversion, EdgeCasesFollowVcvtneps2bf16) {
  struct Case {
    uint32_t in;
    uint16_t out;
    const char* what;
  };
  const Case cases[] = {
      {0x3F800000u, 0x3F80, "1.0 exactly"},
      {0x3F808000u, 0x3F80, "tie, even below: stays"},
      {0x3F818000u, 0x3F82, "tie, odd below: rounds up to even"},
      {0x3F808001u, 0x3F81, "just above the tie: up"},
      {0x3F807FFFu, 0x3F80, "just below the tie: down"},
      {0xBF818000u, 0xBF82, "negative tie to even"},
      {0x00000000u, 0x0000, "+0"},
      {0x80000000u, 0x8000, "-0"},
      {0x00000001u, 0x0000, "smallest subnormal -> +0"},
      {0x807FFFFFu, 0x8000, "largest negative subnormal -> -0"},
      {0x00800000u, 0x0080, "FLT_MIN stays normal"},
      {0x7F7FFFFFu, 0x7F80, "FLT_MAX rounds past the largest bf16 to +Inf"},
      {0x7F7F7FFFu, 0x7F7F, "below the overflow tie: largest bf16"},
      {0x7F800000u, 0x7F80, "+Inf"},
      {0xFF800000u, 0xFF80, "-Inf"},
      {0x7FC00000u, 0x7FC0, "quiet NaN"},
      {0x7F800001u, 0x7FC0, "signalling NaN, low payload only: quiet, not Inf"},
      {0xFFA12345u, 0xFFE1, "negative NaN keeps sign and top payload, made quiet"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(bf16_from_float(from_bits(c.in)), c.out) << c.what << " (0x" << std::hex << c.in << ")";
    for (QuantPath p : kAllPaths) {
      if (!quant_path_supported(p)) continue;
      // Place the value inside a long span so that the vector body (not the scalar tail) sees it.
      std::vector<float> x(40, 1.0f);
      x[5] = from_bits(c.in);
      x[37] = from_bits(c.in);
      std::vector<uint16_t> out(40);
      f32_to_bf16(out.data(), x.data(), 40, p);
      EXPECT_EQ(out[5], c.out) << c.what << " on " << quant_path_name(p);
      EXPECT_EQ(out[37], c.out) << c.what << " (tail) on " << quant_path_name(p);
    }
  }
}

TEST(Bf16Conversion, EveryPathGivesTheScalarBitsOnRandomAndStridedBitPatterns) {
  Rng rng(7);
  std::vector<float> x;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 65521) x.push_back(from_bits(static_cast<uint32_t>(u)));
  for (int i = 0; i < 200000; ++i) x.push_back(from_bits(static_cast<uint32_t>(rng.next_u64())));
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint16_t> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = bf16_from_float(x[i]);
  for (QuantPath p : kAllPaths) {
    if (!quant_path_supported(p)) continue;
    std::vector<uint16_t> got(x.size());
    f32_to_bf16(got.data(), x.data(), n, p);
    int64_t wrong = 0;
    for (size_t i = 0; i < x.size(); ++i) wrong += got[i] != want[i];
    EXPECT_EQ(wrong, 0) << quant_path_name(p);
  }
}

TEST(Bf16Conversion, RoundTripOfEveryNormalBf16IsExactAndRoundingErrorIsBounded) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const bool subnormal = (h & 0x7F80) == 0 && (h & 0x7FFF) != 0;
    const bool nan = (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0;
    if (subnormal || nan) continue;
    ASSERT_EQ(bf16_from_float(float_from_bf16(h)), h) << b;
  }
  std::vector<uint16_t> h = {0x0001, 0x8003, 0x3F80, 0x007F, 0x0080};
  EXPECT_EQ(bf16_flush_subnormals(h.data(), 5), 3);
  EXPECT_EQ(h, (std::vector<uint16_t>{0x0000, 0x8000, 0x3F80, 0x0000, 0x0080}));
  Rng rng(3);
  for (float v : random_floats(10000, rng, -1e6, 1e6)) {
    const float r = float_from_bf16(bf16_from_float(v));
    // 8 significant bits: half an ulp is at most 2^-8 of the value (unit roundoff 2^-8).
    ASSERT_LE(std::fabs(r - v), std::ldexp(std::fabs(v), -8)) << v;
  }
}

// ---- int8 quantization -------------------------------------------------------------------------

TEST(QuantizeRowsS8, PerRowSymmetricRoundingHalfToEven) {
  const std::vector<float> x = {0.5f, -1.0f, 0.25f, 0.0f,   // amax 1: 63.5 -> 64 (even), -127, 31.75 -> 32
                                0.0f, 0.0f, 0.0f, 0.0f,     // all zero: q 0, scale 1
                                2.0f, 1.0f, -2.0f, 0.0f,    // amax 2
                                1.0f, NAN, 0.0f, 0.0f};     // NaN: q 0, scale NaN
  std::vector<int8_t> q(16);
  std::vector<float> s(4);
  quantize_rows_s8(q.data(), s.data(), x.data(), 4, 4, 4);
  EXPECT_EQ(std::vector<int8_t>(q.begin(), q.begin() + 4), (std::vector<int8_t>{64, -127, 32, 0}));
  EXPECT_EQ(s[0], 1.0f / 127.0f);
  EXPECT_EQ(std::vector<int8_t>(q.begin() + 4, q.begin() + 8), (std::vector<int8_t>{0, 0, 0, 0}));
  EXPECT_EQ(s[1], 1.0f);
  EXPECT_EQ(std::vector<int8_t>(q.begin() + 8, q.begin() + 12), (std::vector<int8_t>{127, 64, -127, 0}));
  EXPECT_EQ(s[2], 2.0f / 127.0f);
  EXPECT_EQ(std::vector<int8_t>(q.begin() + 12, q.begin() + 16), (std::vector<int8_t>{0, 0, 0, 0}));
  EXPECT_TRUE(std::isnan(s[3]));
}

TEST(QuantizeRowsS8, ErrorIsAtMostHalfAStepAndMinus128NeverOccurs) {
  Rng rng(11);
  const int64_t rows = 20, K = 300;
  const auto x = random_floats(rows * K, rng, -3.0, 3.0);
  std::vector<int8_t> q(static_cast<size_t>(rows * K));
  std::vector<float> s(rows);
  quantize_rows_s8(q.data(), s.data(), x.data(), rows, K, K);
  EXPECT_TRUE(int8_weights_in_range(q.data(), rows * K));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; ++k) {
      const double err = std::fabs(static_cast<double>(x[r * K + k]) - static_cast<double>(q[r * K + k]) * s[r]);
      ASSERT_LE(err, 0.5 * s[r] * (1 + 1e-6)) << r << "," << k;
    }
  const int8_t bad[] = {1, -128, 3};
  EXPECT_FALSE(int8_weights_in_range(bad, 3));
}

TEST(QuantizeRowsS8, EveryPathGivesTheScalarBits) {
  // Rows with ties (k / 2 steps of amax / 127 land on .5), an Inf, a NaN, zeros, subnormals,
  // strided input and every tail length of a 16-float vector.
  Rng rng(23);
  for (int64_t K : {1, 7, 15, 16, 17, 31, 64, 100, 513}) {
    const int64_t rows = 6, ldx = K + 5;
    auto x = random_floats(rows * ldx, rng, -3.0, 3.0);
    for (int64_t k = 0; k < K; ++k) x[k] = static_cast<float>(k % 255 - 127) * 0.5f;  // ties to even
    x[ldx + K / 2] = INFINITY;
    x[2 * ldx + K - 1] = NAN;
    for (int64_t k = 0; k < K; ++k) x[3 * ldx + k] = 0.0f;
    for (int64_t k = 0; k < K; ++k) x[4 * ldx + k] = static_cast<float>(k + 1) * 1e-41f;  // subnormal
    std::vector<int8_t> want(static_cast<size_t>(rows * K)), got(want.size());
    std::vector<float> ws(rows), gs(rows);
    quantize_rows_s8(want.data(), ws.data(), x.data(), rows, K, ldx, QuantPath::Scalar);
    for (QuantPath path : {QuantPath::Avx2, QuantPath::Avx512, QuantPath::Avx512Vnni, QuantPath::Avx512Bf16}) {
      if (!quant_path_supported(path)) continue;
      std::fill(got.begin(), got.end(), int8_t{-128});
      quantize_rows_s8(got.data(), gs.data(), x.data(), rows, K, ldx, path);
      ASSERT_EQ(got, want) << quant_path_name(path) << " K " << K;
      ASSERT_EQ(std::memcmp(gs.data(), ws.data(), ws.size() * sizeof(float)), 0) << quant_path_name(path) << " K " << K;
    }
  }
}

TEST(QuantizeRowsS8, ManyRowsOverTheThreadsGiveEachRowsBitsAlone) {
  // 300 rows of 512: enough to be split over the threads; each row quantized alone is the reference.
  Rng rng(29);
  const int64_t rows = 300, K = 512, ldx = K + 3;
  const auto x = random_floats(rows * ldx, rng, -3.0, 3.0);
  for (QuantPath path : {QuantPath::Scalar, QuantPath::Avx512Vnni}) {
    if (!quant_path_supported(path)) continue;
    std::vector<int8_t> all(static_cast<size_t>(rows * K)), one(static_cast<size_t>(K));
    std::vector<float> as(rows);
    const int before = omp_get_max_threads();
    omp_set_num_threads(2);
    quantize_rows_s8(all.data(), as.data(), x.data(), rows, K, ldx, path);
    omp_set_num_threads(before);
    for (int64_t r = 0; r < rows; ++r) {
      float s = 0.0f;
      quantize_rows_s8(one.data(), &s, x.data() + r * ldx, 1, K, ldx, path);
      ASSERT_EQ(std::memcmp(one.data(), all.data() + r * K, static_cast<size_t>(K)), 0) << quant_path_name(path) << " " << r;
      ASSERT_EQ(std::memcmp(&s, &as[static_cast<size_t>(r)], sizeof s), 0) << quant_path_name(path) << " " << r;
    }
  }
}

// ---- int8 products -----------------------------------------------------------------------------

std::vector<int8_t> random_s8(int64_t n, Rng& rng) {
  std::vector<int8_t> v(static_cast<size_t>(n));
  for (int8_t& x : v) x = static_cast<int8_t>(static_cast<int64_t>(rng.next_u64() % 255) - 127);
  return v;
}

class Int8Path : public ::testing::TestWithParam<QuantPath> {
 protected:
  void SetUp() override {
    if (!quant_path_supported(GetParam()))
      GTEST_SKIP() << "this CPU or build lacks the " << quant_path_name(GetParam()) << " path";
  }
};

TEST_P(Int8Path, AccumulatorsEqualTheScalarLoopForEveryTail) {
  Rng rng(5);
  // M >= 16 with K % 4 == 0 takes the VNNI path's packed panels (64 weight rows, 6 activation
  // rows per tile): N and M cover partial panels and tiles.
  for (int64_t M : {1, 2, 3, 5, 16, 33})
    for (int64_t N : {1, 3, 4, 5, 17, 33, 70, 129})
      for (int64_t K : {1, 31, 32, 33, 63, 64, 65, 100, 257}) {
        const auto x = random_s8(M * K, rng), w = random_s8(N * K, rng);
        std::vector<int32_t> want(static_cast<size_t>(M * N)), got(want.size(), -7);
        gemm_s8_accumulate(want.data(), x.data(), M, w.data(), N, K, QuantPath::Scalar);
        gemm_s8_accumulate(got.data(), x.data(), M, w.data(), N, K, GetParam());
        ASSERT_EQ(got, want) << "M " << M << " N " << N << " K " << K;
      }
}

TEST_P(Int8Path, ManyRowsAndALongKEqualTheScalarLoop) {
  // On VNNI: several chunks of activation rows (96 each, the last partial) and blocks of K (512
  // bytes each, the last partial) on two panels of weight rows, the second partial.
  Rng rng(7);
  const int64_t M = 200, N = 130, K = 1028;
  const auto x = random_s8(M * K, rng), w = random_s8(N * K, rng);
  std::vector<int32_t> want(static_cast<size_t>(M * N)), got(want.size(), -7);
  gemm_s8_accumulate(want.data(), x.data(), M, w.data(), N, K, QuantPath::Scalar);
  gemm_s8_accumulate(got.data(), x.data(), M, w.data(), N, K, GetParam());
  EXPECT_EQ(got, want);
}

TEST_P(Int8Path, ExtremeValuesDoNotSaturate) {
  // 127 * 127 + 127 * 127 = 32,258 per pair fits s16; (-127) * 127 as well; the sums need int32.
  // 2 activation rows take the row kernels, 20 the packed panels (on VNNI).
  const int64_t N = 3, K = 2000;
  for (int64_t M : {2, 20}) {
    std::vector<int8_t> x(static_cast<size_t>(M * K)), w(static_cast<size_t>(N * K));
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t m = 0; m < M; ++m) x[m * K + k] = static_cast<int8_t>(m % 2 ? -127 : 127);
      w[k] = 127;
      w[K + k] = -127;
      w[2 * K + k] = static_cast<int8_t>(k % 2 ? 127 : -127);
    }
    std::vector<int32_t> got(static_cast<size_t>(M * N));
    gemm_s8_accumulate(got.data(), x.data(), M, w.data(), N, K, GetParam());
    const int32_t big = 127 * 127 * static_cast<int32_t>(K);
    for (int64_t m = 0; m < M; ++m) {
      const int32_t sign = m % 2 ? -1 : 1;
      const std::vector<int32_t> row(got.begin() + m * N, got.begin() + (m + 1) * N);
      EXPECT_EQ(row, (std::vector<int32_t>{sign * big, -sign * big, 0})) << "M " << M << " row " << m;
    }
  }
}

// y = x W^T + b with padded strides; the padding of y must stay untouched.
struct Int8Case {
  int64_t M, N, K, ldx, ldy;
  std::vector<float> x, w_scale, bias;
  std::vector<int8_t> w;
};

Int8Case make_int8_case(int64_t M, int64_t N, int64_t K, Rng& rng) {
  Int8Case c{M, N, K, K + 3, N + 2, random_floats(M * (K + 3), rng, -2.0, 2.0), {}, random_floats(N, rng), {}};
  const auto wf = random_floats(N * K, rng, -0.5, 0.5);
  c.w.resize(static_cast<size_t>(N * K));
  c.w_scale.resize(static_cast<size_t>(N));
  quantize_rows_s8(c.w.data(), c.w_scale.data(), wf.data(), N, K, K);
  return c;
}

std::vector<float> run_int8(const Int8Case& c, QuantPath path, bool with_bias = true) {
  std::vector<float> y(static_cast<size_t>(c.M * c.ldy), -99.0f);
  gemm_s8(c.M, c.N, c.K, c.x.data(), c.ldx, c.w.data(), c.w_scale.data(), with_bias ? c.bias.data() : nullptr,
          y.data(), c.ldy, path);
  return y;
}

// The worst |y - ref| / bound over the outputs, ref = sum_k (xq sx)(wq sw[n + scale_shift]) + b
// in float64 from the dequantized operands, bound = 3 * 2^-24 * (|ref without bias| + |b|): the
// kernel's float(acc) is exact here (|acc| < 2^24) and its epilogue rounds three times.
double int8_excess(const Int8Case& c, const std::vector<float>& y, int64_t scale_shift) {
  std::vector<int8_t> xq(static_cast<size_t>(c.M * c.K));
  std::vector<float> xs(static_cast<size_t>(c.M));
  quantize_rows_s8(xq.data(), xs.data(), c.x.data(), c.M, c.K, c.ldx);
  double worst = 0.0;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      const double ws = c.w_scale[static_cast<size_t>((n + scale_shift) % c.N)];
      double dot = 0.0;
      for (int64_t k = 0; k < c.K; ++k)
        dot += (static_cast<double>(xq[m * c.K + k]) * xs[m]) * (static_cast<double>(c.w[n * c.K + k]) * ws);
      const double ref = dot + c.bias[n];
      const double bound = 3.0 * std::ldexp(1.0, -24) * (std::fabs(dot) + std::fabs(c.bias[n])) + 1e-30;
      worst = std::max(worst, std::fabs(y[m * c.ldy + n] - ref) / bound);
    }
  return worst;
}

TEST_P(Int8Path, ProductEqualsScalarBitsAndTheDequantizedFloat64Product) {
  Rng rng(9);
  for (int64_t M : {1, 2, 4, 7, 16, 40, 70})
    for (int64_t N : {1, 5, 16, 37, 70})
      for (int64_t K : {1, 33, 64, 130, 132}) {
        const Int8Case c = make_int8_case(M, N, K, rng);
        const auto got = run_int8(c, GetParam());
        const auto want = run_int8(c, QuantPath::Scalar);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "M " << M << " N " << N << " K " << K;
        ASSERT_LE(int8_excess(c, got, 0), 1.0) << "M " << M << " N " << N << " K " << K;
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = N; n < c.ldy; ++n) ASSERT_EQ(got[m * c.ldy + n], -99.0f) << "padding written";
      }
}

// Applies relu_forward's select (v < 0 ? 0 : v) to the outputs of y, not to its padding.
std::vector<float> relu_outputs(std::vector<float> y, int64_t M, int64_t N, int64_t ldy) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float& v = y[static_cast<size_t>(m * ldy + n)];
      v = v < 0.0f ? 0.0f : v;
    }
  return y;
}

TEST_P(Int8Path, TheReluEpilogueGivesTheBitsOfReluAfterTheProduct) {
  Rng rng(41);
  for (int64_t M : {1, 7, 16, 40})  // row kernels and (VNNI) panels
    for (int64_t N : {5, 37, 70})
      for (int64_t K : {33, 132}) {
        const Int8Case c = make_int8_case(M, N, K, rng);
        const auto plain = run_int8(c, GetParam());
        std::vector<float> got(static_cast<size_t>(c.M * c.ldy), -99.0f);
        gemm_s8(c.M, c.N, c.K, c.x.data(), c.ldx, c.w.data(), c.w_scale.data(), c.bias.data(), got.data(), c.ldy,
                GetParam(), Epilogue::ReLU);
        const auto want = relu_outputs(plain, M, N, c.ldy);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "M " << M << " N " << N << " K " << K;
        // Control: the plain product has negative outputs, so the epilogue changed something.
        ASSERT_NE(std::memcmp(got.data(), plain.data(), got.size() * sizeof(float)), 0);
      }
}

TEST(Int8Product, ControlAWrongScaleIndexFailsTheCheck) {
  Rng rng(13);
  const Int8Case c = make_int8_case(3, 9, 70, rng);
  const auto y = run_int8(c, QuantPath::Scalar);
  EXPECT_LE(int8_excess(c, y, 0), 1.0);
  EXPECT_GT(int8_excess(c, y, 1), 1.0);  // the scale of the next row
}

TEST_P(Int8Path, ARowGivesTheSameBitsAloneAsInABatch) {
  Rng rng(17);
  for (int64_t K : {150, 152}) {  // 37 rows of 152 take the packed panels (VNNI), one row never does
    const Int8Case c = make_int8_case(37, 70, K, rng);
    const auto all = run_int8(c, GetParam());
    for (int64_t m : {0, 5, 36}) {
      std::vector<float> one(static_cast<size_t>(c.N));
      gemm_s8(1, c.N, c.K, c.x.data() + m * c.ldx, c.ldx, c.w.data(), c.w_scale.data(), c.bias.data(), one.data(),
              c.N, GetParam());
      ASSERT_EQ(std::memcmp(one.data(), all.data() + m * c.ldy, one.size() * sizeof(float)), 0) << K << " " << m;
    }
  }
}

TEST_P(Int8Path, LargeWeightSplitOverThreadsAndNoBias) {
  Rng rng(19);
  for (int64_t M : {3, 50}) {  // N * K above the threading threshold; 50 rows on panels (VNNI)
    const Int8Case c = make_int8_case(M, 600, 256, rng);
    const auto got = run_int8(c, GetParam(), false);
    const auto want = run_int8(c, QuantPath::Scalar, false);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << M;
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, Int8Path, ::testing::ValuesIn(kInt8Paths),
                         [](const auto& info) { return std::string(quant_path_name(info.param)); });

// ---- bf16 products -----------------------------------------------------------------------------

class Bf16Path : public ::testing::TestWithParam<QuantPath> {
 protected:
  void SetUp() override {
    if (!quant_path_supported(GetParam()))
      GTEST_SKIP() << "this CPU or build lacks the " << quant_path_name(GetParam()) << " path";
  }
};

struct Bf16Case {
  int64_t M, N, K, ldx, ldy;
  std::vector<float> x, bias;
  std::vector<uint16_t> w;
};

Bf16Case make_bf16_case(int64_t M, int64_t N, int64_t K, Rng& rng) {
  Bf16Case c{M, N, K, K + 1, N + 3, random_floats(M * (K + 1), rng, -2.0, 2.0), random_floats(N, rng), {}};
  const auto wf = random_floats(N * K, rng, -0.5, 0.5);
  c.w.resize(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) c.w[i] = bf16_from_float(wf[i]);
  return c;
}

std::vector<float> run_bf16(const Bf16Case& c, QuantPath path) {
  std::vector<float> y(static_cast<size_t>(c.M * c.ldy), -99.0f);
  gemm_bf16(c.M, c.N, c.K, c.x.data(), c.ldx, c.w.data(), c.bias.data(), y.data(), c.ldy, path);
  return y;
}

// The worst |y - ref| / bound, ref = sum_k bf16(x) w[n + row_shift] + b in float64, bound =
// (K/16 + 5) 2^-24 (sum_k |bf16(x) w| + |b|) (the header's).
double bf16_excess(const Bf16Case& c, const std::vector<float>& y, int64_t row_shift) {
  double worst = 0.0;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      const int64_t wn = (n + row_shift) % c.N;
      double dot = 0.0, mag = 0.0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double p = static_cast<double>(float_from_bf16(bf16_from_float(c.x[m * c.ldx + k]))) *
                         float_from_bf16(c.w[wn * c.K + k]);
        dot += p;
        mag += std::fabs(p);
      }
      const double bound =
          (static_cast<double>(c.K) / 16.0 + 5.0) * std::ldexp(1.0, -24) * (mag + std::fabs(c.bias[n])) + 1e-30;
      worst = std::max(worst, std::fabs(y[m * c.ldy + n] - (dot + c.bias[n])) / bound);
    }
  return worst;
}

TEST_P(Bf16Path, ProductEqualsTheScalarEmulationBitsAndTheFloat64Product) {
  Rng rng(23);
  // M >= 32 with an even K takes the AVX-512 paths' packed panels (64 weight rows, 4 activation
  // rows per tile, the lane classes added as the tree): N and M cover partial panels and tiles.
  for (int64_t M : {1, 2, 4, 7, 40, 70})
    for (int64_t N : {1, 5, 16, 37, 70, 129})
      for (int64_t K : {1, 2, 31, 32, 33, 64, 130}) {
        const Bf16Case c = make_bf16_case(M, N, K, rng);
        const auto got = run_bf16(c, GetParam());
        const auto want = run_bf16(c, QuantPath::Scalar);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "M " << M << " N " << N << " K " << K;
        ASSERT_LE(bf16_excess(c, got, 0), 1.0) << "M " << M << " N " << N << " K " << K;
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = N; n < c.ldy; ++n) ASSERT_EQ(got[m * c.ldy + n], -99.0f) << "padding written";
      }
}

TEST(Bf16Product, ControlAWrongWeightRowFailsTheCheck) {
  Rng rng(29);
  const Bf16Case c = make_bf16_case(3, 9, 70, rng);
  const auto y = run_bf16(c, QuantPath::Scalar);
  EXPECT_LE(bf16_excess(c, y, 0), 1.0);
  EXPECT_GT(bf16_excess(c, y, 1), 1.0);
}

TEST_P(Bf16Path, SubnormalSumsFlushToZeroAsVdpbf16psDoes) {
  // Products of 2^-70 * 2^-70 = 2^-140 are subnormal in float32: each step's result is flushed.
  const int64_t K = 40;
  std::vector<float> x(K, std::ldexp(1.0f, -70));
  std::vector<uint16_t> w(2 * K, bf16_from_float(std::ldexp(1.0f, -70)));
  for (int64_t k = 0; k < K; ++k) w[K + k] = bf16_from_float(std::ldexp(1.0f, -60));  // 2^-130: also subnormal
  std::vector<float> y(2, -1.0f);
  gemm_bf16(1, 2, K, x.data(), K, w.data(), nullptr, y.data(), 2, GetParam());
  EXPECT_EQ(bits(y[0]), 0u);
  EXPECT_EQ(bits(y[1]), 0u);
  // Near the flush boundary, normal sums are kept.
  std::vector<float> x2(K, std::ldexp(1.0f, -60));
  std::vector<uint16_t> w2(K, bf16_from_float(std::ldexp(1.0f, -60)));
  gemm_bf16(1, 1, K, x2.data(), K, w2.data(), nullptr, y.data(), 1, GetParam());
  std::vector<float> ref(1);
  gemm_bf16(1, 1, K, x2.data(), K, w2.data(), nullptr, ref.data(), 1, QuantPath::Scalar);
  EXPECT_EQ(bits(y[0]), bits(ref[0]));
}

TEST_P(Bf16Path, AStepThatIsTinyBeforeRoundingFlushesEvenWhenItRoundsToTheSmallestNormal) {
  // Lane 0 takes 2^-63 * 2^-63 = 2^-126, then adds -2^-75 * 2^-75: the exact 2^-126 - 2^-150 is
  // tiny (below 2^-126) but rounds (ties to even) to 2^-126. vdpbf16ps flushes it (tininess
  // before rounding, as x86's flush-to-zero does), so every path gives +0, with the row
  // kernels (1 row) and the panels (40 rows) alike; flushing after rounding would give 2^-126.
  const int64_t K = 2;
  const std::vector<uint16_t> w = {bf16_from_float(std::ldexp(1.0f, -75)), bf16_from_float(std::ldexp(1.0f, -63))};
  for (int64_t M : {1, 40}) {
    std::vector<float> x(static_cast<size_t>(M * K));
    for (int64_t m = 0; m < M; ++m) {
      x[m * K] = -std::ldexp(1.0f, -75);
      x[m * K + 1] = std::ldexp(1.0f, -63);
    }
    std::vector<float> y(static_cast<size_t>(M), -1.0f);
    gemm_bf16(M, 1, K, x.data(), K, w.data(), nullptr, y.data(), 1, GetParam());
    for (int64_t m = 0; m < M; ++m) ASSERT_EQ(bits(y[m]), 0u) << "M " << M << " row " << m << ": " << y[m];
  }
  // The same step where the exact value is the smallest normal itself is kept.
  std::vector<float> x2 = {0.0f, std::ldexp(1.0f, -63)};
  float y2 = -1.0f;
  gemm_bf16(1, 1, K, x2.data(), K, w.data(), nullptr, &y2, 1, GetParam());
  EXPECT_EQ(y2, std::ldexp(1.0f, -126));
}

TEST_P(Bf16Path, CancellationAndLargeRangesKeepTheScalarBits) {
  // Mixed magnitudes make the rounding of every step matter: any other order shows up.
  Rng rng(31);
  for (int64_t M : {3, 35})  // 35 rows of an even K take the packed panels
    for (int64_t K : {333, 334}) {
      Bf16Case c = make_bf16_case(M, 6, K, rng);
      for (size_t i = 0; i < c.x.size(); ++i) c.x[i] *= std::ldexp(1.0f, static_cast<int>(i % 23) - 11);
      const auto got = run_bf16(c, GetParam());
      const auto want = run_bf16(c, QuantPath::Scalar);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << M << " " << K;
      EXPECT_LE(bf16_excess(c, got, 0), 1.0) << M << " " << K;
    }
}

TEST_P(Bf16Path, ARowGivesTheSameBitsAloneAsInABatchAndThreadsChangeNothing) {
  Rng rng(37);
  const Bf16Case c = make_bf16_case(37, 600, 130, rng);
  const auto all = run_bf16(c, GetParam());
  for (int64_t m : {0, 5, 36}) {
    std::vector<float> one(static_cast<size_t>(c.N));
    gemm_bf16(1, c.N, c.K, c.x.data() + m * c.ldx, c.ldx, c.w.data(), c.bias.data(), one.data(), c.N, GetParam());
    ASSERT_EQ(std::memcmp(one.data(), all.data() + m * c.ldy, one.size() * sizeof(float)), 0) << m;
  }
}

TEST_P(Bf16Path, TheReluEpilogueGivesTheBitsOfReluAfterTheProduct) {
  Rng rng(43);
  for (int64_t M : {1, 7, 40, 70})  // row kernels and (AVX-512) panels
    for (int64_t N : {5, 37, 129})
      for (int64_t K : {31, 64, 130}) {
        const Bf16Case c = make_bf16_case(M, N, K, rng);
        const auto plain = run_bf16(c, GetParam());
        std::vector<float> got(static_cast<size_t>(c.M * c.ldy), -99.0f);
        gemm_bf16(c.M, c.N, c.K, c.x.data(), c.ldx, c.w.data(), c.bias.data(), got.data(), c.ldy, GetParam(),
                  Epilogue::ReLU);
        const auto want = relu_outputs(plain, M, N, c.ldy);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "M " << M << " N " << N << " K " << K;
        ASSERT_NE(std::memcmp(got.data(), plain.data(), got.size() * sizeof(float)), 0);  // control
      }
}

// gemm_bf16_output stores gemm_bf16's outputs rounded to bf16 with zeros to the row stride, and
// gemm_bf16_input on those rows gives gemm_bf16's bits on the float outputs: a feed-forward
// block's two products chained without a float copy (ops::quantized_feed_forward).
TEST_P(Bf16Path, ProductsChainedThroughBf16RowsGiveTheBitsOfTheFloatChain) {
  Rng rng(47);
  for (int64_t M : {1, 7, 40, 70})  // row kernels and (AVX-512) panels, for both products
    for (int64_t N : {5, 37, 64, 129})
      for (int64_t K : {31, 64, 130})
        for (Epilogue e : {Epilogue::None, Epilogue::ReLU}) {
          SCOPED_TRACE(testing::Message() << "M " << M << " N " << N << " K " << K << " relu " << (e == Epilogue::ReLU));
          const Bf16Case c = make_bf16_case(M, N, K, rng);
          std::vector<float> y(static_cast<size_t>(M * c.ldy), -99.0f);
          gemm_bf16(M, N, K, c.x.data(), c.ldx, c.w.data(), c.bias.data(), y.data(), c.ldy, GetParam(), e);
          const int64_t ldyb = bf16_row_stride(N) + 16;
          std::vector<uint16_t> yb(static_cast<size_t>(M * ldyb), 0xBEEF);
          gemm_bf16_output(M, N, K, c.x.data(), c.ldx, c.w.data(), c.bias.data(), yb.data(), ldyb, GetParam(), e);
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < ldyb; ++n)
              ASSERT_EQ(yb[m * ldyb + n], n < N ? bf16_from_float(y[m * c.ldy + n]) : uint16_t{0}) << m << " " << n;
          // The next product (9 outputs of N inputs) on the bf16 rows and on the floats.
          const Bf16Case next = make_bf16_case(1, 9, N, rng);
          std::vector<float> want(static_cast<size_t>(M * 9)), got(want.size(), -99.0f);
          gemm_bf16(M, 9, N, y.data(), c.ldy, next.w.data(), next.bias.data(), want.data(), 9, GetParam());
          gemm_bf16_input(M, 9, N, yb.data(), ldyb, next.w.data(), next.bias.data(), got.data(), 9, GetParam());
          ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
        }
}

TEST(Bf16Product, ChainedRowsNeedTheirRowStride) {
  const std::vector<float> x(64, 1.0f);
  const std::vector<uint16_t> w(64 * 40, bf16_from_float(0.5f));
  std::vector<uint16_t> yb(64);
  std::vector<float> y(64);
  EXPECT_EQ(bf16_row_stride(1), 32);
  EXPECT_EQ(bf16_row_stride(33), 64);
  EXPECT_THROW(gemm_bf16_output(1, 40, 64, x.data(), 64, w.data(), nullptr, yb.data(), 40, QuantPath::Scalar), Error);
  EXPECT_THROW(gemm_bf16_input(1, 40, 40, yb.data(), 40, w.data(), nullptr, y.data(), 40, QuantPath::Scalar), Error);
  EXPECT_NO_THROW(gemm_bf16_output(1, 40, 64, x.data(), 64, w.data(), nullptr, yb.data(), 64, QuantPath::Scalar));
}

INSTANTIATE_TEST_SUITE_P(Paths, Bf16Path, ::testing::ValuesIn(kBf16Paths),
                         [](const auto& info) { return std::string(quant_path_name(info.param)); });

TEST(QuantPaths, ActiveIsaChoosesThePath) {
  EXPECT_TRUE(quant_path_supported(int8_path()));
  EXPECT_TRUE(quant_path_supported(bf16_path()));
  EXPECT_THROW(gemm_s8(1, 1, 1, nullptr, 1, nullptr, nullptr, nullptr, nullptr, 1, QuantPath::Avx512), Error);
}

}  // namespace
}  // namespace attn::kernels
