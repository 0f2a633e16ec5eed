// kernels::dropout_forward / dropout_backward (src/kernels/dropout.cpp): the mask equals one
// Rng::uniform() < p draw per element in row-major order and leaves the generator where that
// draw would, for several p and odd lengths; forward and backward give the same bits on every
// ISA (and on the threaded path) as the scalar expression keep ? x * scale : 0.
#include "kernels/dropout.h"

#include <gtest/gtest.h>

#include <cstring>
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

TEST(DropoutKernel, MaskEqualsOneUniformDrawPerElement) {
  for (double p : {0.0, 1e-300, 0.1, 0.5, 0.9, 0.999999}) {
    for (int64_t n : {1, 7, 16, 17, 1000}) {
      Rng rng(42), ref(42);
      std::vector<float> x = random_floats(n, 1), out(x.size());
      std::vector<uint8_t> keep(x.size());
      dropout_forward<float>(out.data(), keep.data(), x.data(), n, p, rng);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(keep[static_cast<size_t>(i)], ref.uniform() < p ? 0 : 1) << "p " << p << ", i " << i;
      EXPECT_EQ(rng.next_u64(), ref.next_u64()) << "the generator must continue where uniform() would";
    }
  }
}

TEST(DropoutKernel, MaskAloneMatchesUniformDraws) {
  Rng rng(8), ref(8);
  std::vector<uint8_t> keep(101);
  dropout_mask(keep.data(), 101, 0.2, rng);
  for (uint8_t k : keep) ASSERT_EQ(k, ref.uniform() < 0.2 ? 0 : 1);
  EXPECT_EQ(rng.next_u64(), ref.next_u64());
}

TEST(DropoutKernel, ForwardAndBackwardGiveTheScalarBitsOnEveryIsa) {
  const double p = 0.3;
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  for (int64_t n : {1, 5, 8, 9, 15, 16, 17, 33, 100, 40000}) {  // 40000: the threaded path
    const std::vector<float> x = random_floats(n, 3), dout = random_floats(n, 4), dx0 = random_floats(n, 5);
    for (Isa isa : simd::supported_isas()) {
      simd::IsaGuard guard(isa);
      Rng rng(9);
      std::vector<float> out(x.size() + 16, -7.0f), dx(dx0);
      dx.resize(x.size() + 16, -7.0f);
      std::vector<uint8_t> keep(x.size());
      dropout_forward<float>(out.data(), keep.data(), x.data(), n, p, rng);
      dropout_backward<float>(dx.data(), dout.data(), keep.data(), scale, n);
      for (int64_t i = 0; i < n; ++i) {
        const size_t j = static_cast<size_t>(i);
        const float want = keep[j] ? x[j] * scale : 0.0f;
        const float want_dx = dx0[j] + (keep[j] ? dout[j] * scale : 0.0f);
        ASSERT_EQ(std::memcmp(&out[j], &want, sizeof(float)), 0) << simd::isa_name(isa) << " n " << n << " i " << i;
        ASSERT_EQ(std::memcmp(&dx[j], &want_dx, sizeof(float)), 0) << simd::isa_name(isa) << " n " << n << " i " << i;
      }
      for (size_t j = x.size(); j < out.size(); ++j) {
        ASSERT_EQ(out[j], -7.0f) << "forward wrote past the end on " << simd::isa_name(isa);
        ASSERT_EQ(dx[j], -7.0f) << "backward wrote past the end on " << simd::isa_name(isa);
      }
    }
  }
}

TEST(DropoutKernel, Float64KeepsTheSameMaskAndScale) {
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
}

}  // namespace
}  // namespace attn::kernels
