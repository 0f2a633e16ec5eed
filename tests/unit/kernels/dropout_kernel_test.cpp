// kernels::dropout_mask / DropoutMaskStream / dropout_forward / dropout_backward{,_write}
// (src/kernels/dropout.cpp) and the xoshiro_lanes vector kernel: the mask equals a plain loop
// over eight Rng lanes seeded from the caller's generator (four 16-bit fields per draw, group g
// from lane g % 8, dropped when field < t) on every ISA, for lengths around multiples of 4, 32
// and the block; the caller's generator moves exactly 8 draws; chunked streams join up; the
// threshold's rounding and its edge cases; the keep fraction; forward and backward give the
// scalar expression's bits on every ISA, and so do the fused forms (dropout + residual add,
// relu + dropout) with the same mask.
#include "kernels/dropout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "attn/core/error.h"
#include "attn/core/rng.h"
#include "kernels/simd/isa.h"
#include "kernels/simd/vector_kernels.h"
#include "support/dropout_reference.h"

namespace attn::kernels {
namespace {

using simd::Isa;

std::vector<float> random_floats(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// The definition, one element at a time (support/dropout_reference.h).
std::vector<uint8_t> reference_mask(int64_t n, uint32_t t, Rng& parent,
                                    const std::vector<int>& lane_order = {0, 1, 2, 3, 4, 5, 6, 7}) {
  return test::reference_keep(n, t, parent, lane_order);
}

// `parent` advanced by k draws.
Rng advanced(Rng parent, int k) {
  for (int i = 0; i < k; ++i) parent.next_u64();
  return parent;
}

bool same_state(const Rng& a, const Rng& b) {
  const Rng::State x = a.state(), y = b.state();
  for (int i = 0; i < 4; ++i)
    if (x.s[i] != y.s[i]) return false;
  return true;
}

int64_t count_kept(const std::vector<uint8_t>& keep) {
  int64_t k = 0;
  for (uint8_t b : keep) k += b;
  return k;
}

TEST(DropoutKernel, ThresholdIsPTimes65536RoundedWithHalvesUpAndClamped) {
  EXPECT_EQ(dropout_threshold(0.0), 0u);
  EXPECT_EQ(dropout_threshold(-0.0), 0u);
  EXPECT_EQ(dropout_threshold(1e-300), 1u) << "any p > 0 must still drop";
  EXPECT_EQ(dropout_threshold(0x1.0p-17), 1u) << "0.5 rounds up";
  EXPECT_EQ(dropout_threshold(0x1.0p-18), 1u) << "0.25 rounds to 0, clamped to 1";
  EXPECT_EQ(dropout_threshold(3 * 0x1.0p-17), 2u) << "1.5 rounds up";
  EXPECT_EQ(dropout_threshold(0.1), 6554u);  // 6553.6
  EXPECT_EQ(dropout_threshold(0.3), 19661u);  // 19660.8
  EXPECT_EQ(dropout_threshold(0.5), 32768u);
  EXPECT_EQ(dropout_threshold(0.999), 65470u);  // 65470.464
  EXPECT_EQ(dropout_threshold(1.0 - 0x1.0p-16), 65535u);
  EXPECT_EQ(dropout_threshold(0.999999), 65535u) << "65535.93 rounds to 65536, clamped to 65535";
  EXPECT_EQ(dropout_threshold(std::nextafter(1.0, 0.0)), 65535u);
}

TEST(DropoutKernel, MaskMatchesTheEightLaneReferenceOnEveryIsa) {
  // Every length 0..100, lengths around multiples of 32 (one round of the lanes) and of the
  // 2048-element block, and 10^5.
  std::vector<int64_t> lengths;
  for (int64_t n = 0; n <= 100; ++n) lengths.push_back(n);
  for (int64_t n : {127, 128, 129, 255, 256, 257, 2047, 2048, 2049, 2080, 4095, 4096, 4097, 100000})
    lengths.push_back(n);
  for (double p : {0.0, 1e-300, 0.1, 0.5, 0.999, 0.999999}) {
    const uint32_t t = dropout_threshold(p);
    for (int64_t n : lengths) {
      Rng ref(42);
      const std::vector<uint8_t> want = reference_mask(n, t, ref);
      for (Isa isa : simd::supported_isas()) {
        simd::IsaGuard guard(isa);
        Rng rng(42);
        std::vector<uint8_t> keep(static_cast<size_t>(n) + 40, 0xAB);
        dropout_mask(keep.data(), n, p, rng);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(keep[static_cast<size_t>(i)], want[static_cast<size_t>(i)])
              << simd::isa_name(isa) << " p " << p << " n " << n << " i " << i;
        for (size_t j = static_cast<size_t>(n); j < keep.size(); ++j)
          ASSERT_EQ(keep[j], 0xAB) << "wrote past the end on " << simd::isa_name(isa) << " n " << n;
        ASSERT_TRUE(same_state(rng, ref))
            << "the generator must end the 8 seed draws on: " << simd::isa_name(isa) << " n " << n;
      }
    }
  }
}

TEST(DropoutKernel, TheCallersGeneratorMovesExactlyEightDrawsWhateverTheLength) {
  for (int64_t n : {0, 1, 32, 33, 5000, 1 << 20}) {
    Rng rng(17);
    std::vector<uint8_t> keep(static_cast<size_t>(n));
    dropout_mask(keep.data(), n, 0.1, rng);
    EXPECT_TRUE(same_state(rng, advanced(Rng(17), 8))) << "n " << n;
    EXPECT_FALSE(same_state(rng, advanced(Rng(17), 7))) << "control, n " << n;
  }
}

TEST(DropoutKernel, AWrongThresholdFieldOrderOrLaneOrderWouldBeCaught) {
  // Controls for the comparison above: at n = 2^20 about 16 fields equal t, so a reference
  // with t + 1 or t - 1 must differ, and so must one that reads the fields in reverse order,
  // one that swaps two lanes' seeds, and the old single-stream definition.
  const int64_t n = 1 << 20;
  const uint32_t t = dropout_threshold(0.1);
  Rng rng(7);
  std::vector<uint8_t> keep(static_cast<size_t>(n));
  dropout_mask(keep.data(), n, 0.1, rng);
  Rng a(7), b(7), c(7), d(7), e(7), f(7);
  EXPECT_EQ(keep, reference_mask(n, t, a));
  EXPECT_NE(keep, reference_mask(n, t + 1, b));
  EXPECT_NE(keep, reference_mask(n, t - 1, c));
  std::vector<uint8_t> reversed = reference_mask(n, t, d);
  for (size_t i = 0; i + 4 <= reversed.size(); i += 4) std::swap(reversed[i], reversed[i + 3]);
  EXPECT_NE(keep, reversed);
  EXPECT_NE(keep, reference_mask(n, t, e, {1, 0, 2, 3, 4, 5, 6, 7})) << "lanes 0 and 1 swapped";
  std::vector<uint8_t> serial(static_cast<size_t>(n));
  uint64_t r = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 4 == 0) r = f.next_u64();
    serial[static_cast<size_t>(i)] = ((r >> (16 * (i % 4))) & 0xFFFF) >= t ? 1 : 0;
  }
  EXPECT_NE(keep, serial) << "one serial stream is not the definition";
}

TEST(DropoutKernel, XoshiroLanesEqualEightScalarGeneratorsOnEveryIsa) {
  for (Isa isa : simd::supported_isas()) {
    const simd::VectorKernels& vk = simd::vector_kernels(isa);
    for (int64_t rounds : {0, 1, 3, 64, 100}) {
      std::vector<Rng> lanes;
      uint64_t state[32];
      for (int l = 0; l < 8; ++l) {
        lanes.emplace_back(1000 + static_cast<uint64_t>(l));
        const Rng::State st = lanes.back().state();
        for (int w = 0; w < 4; ++w) state[w * 8 + l] = st.s[w];
      }
      std::vector<uint64_t> out(static_cast<size_t>(8 * rounds) + 8, 0x5A5A5A5A5A5A5A5Aull);
      vk.xoshiro_lanes(out.data(), state, rounds);
      for (int64_t r = 0; r < rounds; ++r)
        for (int l = 0; l < 8; ++l)
          ASSERT_EQ(out[static_cast<size_t>(8 * r + l)], lanes[static_cast<size_t>(l)].next_u64())
              << simd::isa_name(isa) << " round " << r << " lane " << l;
      for (size_t j = static_cast<size_t>(8 * rounds); j < out.size(); ++j)
        ASSERT_EQ(out[j], 0x5A5A5A5A5A5A5A5Aull) << "wrote past the end on " << simd::isa_name(isa);
      for (int l = 0; l < 8; ++l) {
        const Rng::State st = lanes[static_cast<size_t>(l)].state();
        for (int w = 0; w < 4; ++w)
          ASSERT_EQ(state[w * 8 + l], st.s[w])
              << "state word " << w << " of lane " << l << " on " << simd::isa_name(isa) << " after " << rounds;
      }
    }
  }
}

TEST(DropoutKernel, AStreamDrawnInChunksOfWholeRoundsGivesTheOneCallMask) {
  // attention draws its mask in chunks: the chunks must join into the one-call mask.
  const int64_t n = 10003;
  for (Isa isa : simd::supported_isas()) {
    simd::IsaGuard guard(isa);
    Rng one(3), two(3);
    std::vector<uint8_t> whole(static_cast<size_t>(n)), parts(static_cast<size_t>(n));
    dropout_mask(whole.data(), n, 0.25, one);
    DropoutMaskStream stream(0.25, two);
    int64_t at = 0;
    for (int64_t len : {32, 0, 64, 2048, 2080, 4096, 96}) {  // multiples of 32, across blocks
      stream.next(parts.data() + at, len);
      at += len;
    }
    stream.next(parts.data() + at, n - at);  // the last chunk: any length
    EXPECT_EQ(whole, parts) << simd::isa_name(isa);
    EXPECT_TRUE(same_state(one, two)) << simd::isa_name(isa);
  }
}

TEST(DropoutKernel, TwoCallsDrawTwoDifferentMasks) {
  // Separate calls are separate masks (fresh seeds), not one mask continued.
  const int64_t n = 4096;
  Rng rng(3);
  std::vector<uint8_t> first(static_cast<size_t>(n)), second(static_cast<size_t>(n));
  dropout_mask(first.data(), n, 0.5, rng);
  dropout_mask(second.data(), n, 0.5, rng);
  EXPECT_NE(first, second);
  Rng ref(3);
  (void)reference_mask(n, dropout_threshold(0.5), ref);
  EXPECT_EQ(second, reference_mask(n, dropout_threshold(0.5), ref));
}

TEST(DropoutKernel, AChunkOfAnotherLengthThanWholeRoundsMustBeTheLast) {
  Rng rng(3);
  std::vector<uint8_t> keep(256);
  DropoutMaskStream stream(0.1, rng);
  stream.next(keep.data(), 64);
  stream.next(keep.data(), 33);  // allowed: it may be the last
  try {
    stream.next(keep.data(), 32);
    ADD_FAILURE() << "a chunk after one of 33 elements must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
  }
  DropoutMaskStream other(0.1, rng);
  EXPECT_THROW(other.next(keep.data(), -1), Error);
  other.next(keep.data(), 1);
  EXPECT_THROW(other.next(keep.data(), 1), Error);
  // p = 0 (everything kept) checks the chunks the same way.
  DropoutMaskStream keep_all(0.0, rng);
  keep_all.next(keep.data(), 31);
  EXPECT_EQ(count_kept(std::vector<uint8_t>(keep.begin(), keep.begin() + 31)), 31);
  EXPECT_THROW(keep_all.next(keep.data(), 32), Error);
}

TEST(DropoutKernel, KeepFractionIsCloseToOneMinusP) {
  const int64_t n = 1 << 20;
  for (double p : {0.1, 0.5, 0.9, 0.999}) {
    Rng rng(11);
    std::vector<uint8_t> keep(static_cast<size_t>(n));
    dropout_mask(keep.data(), n, p, rng);
    const double kept = static_cast<double>(count_kept(keep)) / n;
    // 5 standard deviations of a binomial proportion, plus the 2^-17 quantisation of p.
    EXPECT_NEAR(kept, 1 - p, 5 * std::sqrt(p * (1 - p) / n) + 0x1.0p-17) << "p " << p;
  }
}

TEST(DropoutKernel, EdgeProbabilitiesStillBehave) {
  const int64_t n = 1 << 20;
  std::vector<uint8_t> keep(static_cast<size_t>(n));
  Rng rng(5);
  dropout_mask(keep.data(), n, 0.0, rng);
  EXPECT_EQ(count_kept(keep), n) << "p = 0 keeps everything";
  // A tiny p drops with probability 2^-16: about 16 of 2^20, never none for this seed.
  dropout_mask(keep.data(), n, 1e-12, rng);
  EXPECT_GT(n - count_kept(keep), 0);
  EXPECT_LT(n - count_kept(keep), 64);
  // p within 2^-17 of 1 keeps one field value in 2^16: about 16 of 2^20 survive.
  dropout_mask(keep.data(), n, 0.999999, rng);
  EXPECT_GT(count_kept(keep), 0);
  EXPECT_LT(count_kept(keep), 64);
}

TEST(DropoutKernel, ForwardAndBackwardGiveTheScalarBitsOnEveryIsa) {
  const double p = 0.3;
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  for (int64_t n : {1, 5, 8, 9, 15, 16, 17, 33, 100, 40000}) {  // 40000: the threaded path
    const std::vector<float> x = random_floats(n, 3), dout = random_floats(n, 4), dx0 = random_floats(n, 5);
    for (Isa isa : simd::supported_isas()) {
      simd::IsaGuard guard(isa);
      Rng rng(9), ref(9);
      const std::vector<uint8_t> want_keep = reference_mask(n, dropout_threshold(p), ref);
      std::vector<float> out(x.size() + 16, -7.0f), dx(dx0), dxw(x.size() + 16, -7.0f);
      dx.resize(x.size() + 16, -7.0f);
      std::vector<uint8_t> keep(x.size());
      dropout_forward<float>(out.data(), keep.data(), x.data(), n, p, rng);
      ASSERT_EQ(keep, want_keep) << simd::isa_name(isa) << " n " << n;
      dropout_backward<float>(dx.data(), dout.data(), keep.data(), scale, n);
      dropout_backward_write<float>(dxw.data(), dout.data(), keep.data(), scale, n);
      for (int64_t i = 0; i < n; ++i) {
        const size_t j = static_cast<size_t>(i);
        const float want = keep[j] ? x[j] * scale : 0.0f;
        const float want_dxw = keep[j] ? dout[j] * scale : 0.0f;
        const float want_dx = dx0[j] + want_dxw;
        ASSERT_EQ(std::memcmp(&out[j], &want, sizeof(float)), 0) << simd::isa_name(isa) << " n " << n << " i " << i;
        ASSERT_EQ(std::memcmp(&dx[j], &want_dx, sizeof(float)), 0) << simd::isa_name(isa) << " n " << n << " i " << i;
        ASSERT_EQ(std::memcmp(&dxw[j], &want_dxw, sizeof(float)), 0) << simd::isa_name(isa) << " n " << n << " i " << i;
      }
      for (size_t j = x.size(); j < out.size(); ++j) {
        ASSERT_EQ(out[j], -7.0f) << "forward wrote past the end on " << simd::isa_name(isa);
        ASSERT_EQ(dx[j], -7.0f) << "backward wrote past the end on " << simd::isa_name(isa);
        ASSERT_EQ(dxw[j], -7.0f) << "writing backward wrote past the end on " << simd::isa_name(isa);
      }
    }
  }
}

TEST(DropoutKernel, Float64KeepsTheSameMaskAndScaleAndWritesItsGradient) {
  const int64_t n = 37;
  const double p = 0.25;
  Rng a(5), b(5);
  std::vector<double> x(static_cast<size_t>(n), 2.0), out(x.size());
  std::vector<float> xf(x.size(), 2.0f), outf(x.size());
  std::vector<uint8_t> keep(x.size()), keepf(x.size());
  dropout_forward<double>(out.data(), keep.data(), x.data(), n, p, a);
  dropout_forward<float>(outf.data(), keepf.data(), xf.data(), n, p, b);
  EXPECT_EQ(keep, keepf);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_DOUBLE_EQ(out[i], keep[i] ? 2.0 / 0.75 : 0.0);
  std::vector<double> dx(x.size(), 123.0), dacc(x.size(), 1.0), dout(x.size(), 3.0);
  dropout_backward_write<double>(dx.data(), dout.data(), keep.data(), 1.0 / 0.75, n);
  dropout_backward<double>(dacc.data(), dout.data(), keep.data(), 1.0 / 0.75, n);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_DOUBLE_EQ(dx[i], keep[i] ? 3.0 / 0.75 : 0.0) << "written, not added to 123";
    EXPECT_DOUBLE_EQ(dacc[i], 1.0 + (keep[i] ? 3.0 / 0.75 : 0.0));
  }
}

TEST(DropoutKernel, FusedFormsGiveTheScalarBitsAndTheSameMaskOnEveryIsa) {
  // dropout_add_forward = residual + (keep ? x * scale : 0), relu_dropout_forward = keep ?
  // relu(x) * scale : 0, relu_dropout_backward_write = 0 + (y > 0 ? dout * scale : 0), each
  // with dropout_forward's mask, written over -7 without touching the elements past n. The
  // inputs hold -0, +0, NaN and negatives among the normals.
  const double p = 0.3;
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  const float nan = std::nanf("");
  for (int64_t n : {1, 5, 8, 9, 15, 16, 17, 33, 100, 40000}) {  // 40000: the threaded path
    std::vector<float> x = random_floats(n, 6), res = random_floats(n, 7), dout = random_floats(n, 8);
    const float specials[] = {-0.0f, 0.0f, nan, -2.0f};
    for (int64_t i = 0; i < n; i += 3) x[static_cast<size_t>(i)] = specials[(i / 3) % 4];
    for (int64_t i = 1; i < n; i += 5) res[static_cast<size_t>(i)] = -0.0f;
    for (int64_t i = 2; i < n; i += 7) dout[static_cast<size_t>(i)] = -0.0f;
    for (Isa isa : simd::supported_isas()) {
      simd::IsaGuard guard(isa);
      Rng a(9), b(9), ref(9);
      const std::vector<uint8_t> want_keep = reference_mask(n, dropout_threshold(p), ref);
      std::vector<float> add_out(x.size() + 16, -7.0f), relu_out(x.size() + 16, -7.0f), dx(x.size() + 16, -7.0f);
      std::vector<uint8_t> keep_a(x.size()), keep_b(x.size());
      dropout_add_forward<float>(add_out.data(), keep_a.data(), res.data(), x.data(), n, p, a);
      relu_dropout_forward<float>(relu_out.data(), keep_b.data(), x.data(), n, p, b);
      ASSERT_EQ(keep_a, want_keep) << simd::isa_name(isa) << " n " << n;
      ASSERT_EQ(keep_b, want_keep) << simd::isa_name(isa) << " n " << n;
      ASSERT_TRUE(same_state(a, ref) && same_state(b, ref)) << simd::isa_name(isa) << " n " << n;
      relu_dropout_backward_write<float>(dx.data(), dout.data(), relu_out.data(), scale, n);
      for (int64_t i = 0; i < n; ++i) {
        const size_t j = static_cast<size_t>(i);
        const float relu = x[j] < 0.0f ? 0.0f : x[j];
        const float want_add = res[j] + (want_keep[j] ? x[j] * scale : 0.0f);
        const float want_relu = want_keep[j] ? relu * scale : 0.0f;
        const float want_dx = 0.0f + (want_relu > 0.0f ? dout[j] * scale : 0.0f);
        ASSERT_EQ(std::memcmp(&add_out[j], &want_add, sizeof(float)), 0) << simd::isa_name(isa) << " n " << n << " i " << i;
        ASSERT_EQ(std::memcmp(&relu_out[j], &want_relu, sizeof(float)), 0) << simd::isa_name(isa) << " n " << n << " i " << i;
        ASSERT_EQ(std::memcmp(&dx[j], &want_dx, sizeof(float)), 0) << simd::isa_name(isa) << " n " << n << " i " << i;
      }
      for (size_t j = x.size(); j < add_out.size(); ++j) {
        ASSERT_EQ(add_out[j], -7.0f) << "dropout_add_forward wrote past the end on " << simd::isa_name(isa);
        ASSERT_EQ(relu_out[j], -7.0f) << "relu_dropout_forward wrote past the end on " << simd::isa_name(isa);
        ASSERT_EQ(dx[j], -7.0f) << "relu_dropout_backward_write wrote past the end on " << simd::isa_name(isa);
      }
    }
  }
}

TEST(DropoutKernel, FusedFormsInFloat64KeepTheMaskAndTheSignedZeros) {
  const int64_t n = 37;
  const double p = 0.25, scale = 1.0 / 0.75;
  std::vector<double> x(static_cast<size_t>(n)), res(x.size(), -0.0), out(x.size()), y(x.size()), dx(x.size(), 123.0);
  for (size_t i = 0; i < x.size(); ++i) x[i] = i % 3 == 0 ? -0.0 : (i % 3 == 1 ? 1.5 : -1.5);
  const std::vector<double> dout(x.size(), -0.0);
  Rng a(5), b(5), ref(5);
  std::vector<uint8_t> keep_a(x.size()), keep_b(x.size());
  const std::vector<uint8_t> want_keep = reference_mask(n, dropout_threshold(p), ref);
  dropout_add_forward<double>(out.data(), keep_a.data(), res.data(), x.data(), n, p, a);
  relu_dropout_forward<double>(y.data(), keep_b.data(), x.data(), n, p, b);
  EXPECT_EQ(keep_a, want_keep);
  EXPECT_EQ(keep_b, want_keep);
  relu_dropout_backward_write<double>(dx.data(), dout.data(), y.data(), scale, n);
  for (size_t i = 0; i < x.size(); ++i) {
    const double want_add = -0.0 + (want_keep[i] ? x[i] * scale : 0.0);
    EXPECT_EQ(std::memcmp(&out[i], &want_add, sizeof(double)), 0) << "element " << i;
    const double want_y = want_keep[i] ? (x[i] < 0 ? 0.0 : x[i]) * scale : 0.0;
    EXPECT_EQ(std::memcmp(&y[i], &want_y, sizeof(double)), 0) << "element " << i;
    EXPECT_EQ(dx[i], 0.0) << "written, not added to 123";
    EXPECT_FALSE(std::signbit(dx[i])) << "a -0 upstream gradient gives +0, as the composition";
  }
}

}  // namespace
}  // namespace attn::kernels
