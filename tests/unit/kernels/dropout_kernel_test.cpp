// kernels::dropout_mask / dropout_forward / dropout_backward{,_write} (src/kernels/dropout.cpp):
// the mask equals a plain loop over Rng::next_u64 (four 16-bit fields per draw, dropped when
// field < t) on every ISA, for lengths that are not multiples of 4 or of the vector width, and
// leaves the generator where that loop does; the threshold's rounding and its edge cases; the
// keep fraction; forward and backward give the scalar expression's bits on every ISA.
#include "kernels/dropout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "attn/core/rng.h"
#include "kernels/simd/isa.h"

namespace attn::kernels {
namespace {

using simd::Isa;

std::vector<float> random_floats(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// The definition, one element at a time: draw j decides elements 4j..4j+3, element 4j + f
// from bits 16f..16f+15, kept when that field >= t; a partial last group uses a whole draw.
std::vector<uint8_t> reference_mask(int64_t n, uint32_t t, Rng& rng) {
  std::vector<uint8_t> keep(static_cast<size_t>(n));
  uint64_t r = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 4 == 0) r = rng.next_u64();
    const uint64_t field = (r >> (16 * (i % 4))) & 0xFFFF;
    keep[static_cast<size_t>(i)] = field >= t ? 1 : 0;
  }
  return keep;
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

TEST(DropoutKernel, MaskMatchesTheFieldReferenceOnEveryIsa) {
  // Lengths around multiples of 4, of the 32-byte vector step and of the 2048-element block.
  const int64_t lengths[] = {0, 1, 2, 3, 4, 5, 7, 31, 32, 33, 63, 65, 2047, 2048, 2049, 5001};
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
        EXPECT_TRUE(same_state(rng, ref))
            << "the generator must end ceil(n / 4) draws on: " << simd::isa_name(isa) << " n " << n;
      }
    }
  }
}

TEST(DropoutKernel, AWrongThresholdOrFieldOrderWouldBeCaught) {
  // Controls for the comparison above: at n = 2^20 about 16 fields equal t, so a reference
  // with t + 1 or t - 1 must differ, and so must one that reads the fields in reverse order.
  const int64_t n = 1 << 20;
  const uint32_t t = dropout_threshold(0.1);
  Rng rng(7);
  std::vector<uint8_t> keep(static_cast<size_t>(n));
  dropout_mask(keep.data(), n, 0.1, rng);
  Rng a(7), b(7), c(7), d(7);
  EXPECT_EQ(keep, reference_mask(n, t, a));
  EXPECT_NE(keep, reference_mask(n, t + 1, b));
  EXPECT_NE(keep, reference_mask(n, t - 1, c));
  std::vector<uint8_t> reversed = reference_mask(n, t, d);
  for (size_t i = 0; i + 4 <= reversed.size(); i += 4) std::swap(reversed[i], reversed[i + 3]);
  EXPECT_NE(keep, reversed);
}

TEST(DropoutKernel, SplittingAtAMultipleOfFourGivesTheSameMask) {
  // attention draws its mask in chunks: the chunks must join into the one-call mask.
  const int64_t n = 1003, head = 400;
  Rng one(3), two(3);
  std::vector<uint8_t> whole(static_cast<size_t>(n)), parts(static_cast<size_t>(n));
  dropout_mask(whole.data(), n, 0.25, one);
  dropout_mask(parts.data(), head, 0.25, two);
  dropout_mask(parts.data() + head, n - head, 0.25, two);
  EXPECT_EQ(whole, parts);
  EXPECT_TRUE(same_state(one, two));
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

}  // namespace
}  // namespace attn::kernels
