// kernels::adam_update (src/kernels/adam.cpp): the step scalars against their definition,
// float32 on every ISA equal bit for bit to a plain loop of the same operations (Adam, L2 and
// AdamW decay), float64 against a textbook Adam, the threaded path (large tensors) equal to
// the single-threaded one, and odd lengths.
#include "kernels/adam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "attn/core/rng.h"
#include "kernels/simd/isa.h"

namespace attn::kernels {
namespace {

using simd::Isa;

// The update of src/train/adam.cpp before it moved here, one element at a time.
void plain_adam(float* p, float* m, float* v, const float* g, int64_t n, const AdamStep<float>& s) {
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i];
    if (s.l2) gi = gi + s.weight_decay * p[i];
    if (s.decoupled) p[i] = p[i] * s.decay;
    m[i] = m[i] + s.one_minus_beta1 * (gi - m[i]);
    v[i] = v[i] * s.beta2 + s.one_minus_beta2 * (gi * gi);
    const float denom = std::sqrt(v[i]) / s.bc2_sqrt + s.eps;
    p[i] = p[i] + s.neg_step_size * (m[i] / denom);
  }
}

struct State {
  std::vector<float> p, m, v, g;
};

State random_state(int64_t n, uint64_t seed) {
  Rng rng(seed);
  State s;
  for (int64_t i = 0; i < n; ++i) {
    s.p.push_back(static_cast<float>(rng.normal()));
    s.m.push_back(static_cast<float>(0.1 * rng.normal()));
    s.v.push_back(static_cast<float>(0.01 * rng.uniform()));
    s.g.push_back(static_cast<float>(rng.normal()));
  }
  return s;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(AdamKernel, StepScalarsFollowTheDefinition) {
  const auto s = adam_step_scalars<double>(0.5, 3, 0.9, 0.98, 1e-9, 0.01, true);
  EXPECT_TRUE(s.decoupled);
  EXPECT_FALSE(s.l2);
  EXPECT_DOUBLE_EQ(s.decay, 1.0 - 0.5 * 0.01);
  EXPECT_DOUBLE_EQ(s.one_minus_beta1, 1.0 - 0.9);
  EXPECT_DOUBLE_EQ(s.one_minus_beta2, 1.0 - 0.98);
  EXPECT_DOUBLE_EQ(s.neg_step_size, -0.5 / (1.0 - std::pow(0.9, 3)));
  EXPECT_DOUBLE_EQ(s.bc2_sqrt, std::sqrt(1.0 - std::pow(0.98, 3)));
  const auto l2 = adam_step_scalars<float>(0.5, 3, 0.9, 0.98, 1e-9, 0.01, false);
  EXPECT_TRUE(l2.l2);
  EXPECT_FALSE(l2.decoupled);
  const auto none = adam_step_scalars<float>(0.5, 3, 0.9, 0.98, 1e-9, 0.0, true);
  EXPECT_FALSE(none.l2 || none.decoupled);
}

TEST(AdamKernel, Float32EqualsThePlainLoopBitForBitOnEveryIsa) {
  for (auto [wd, decoupled] : {std::pair{0.0, true}, std::pair{0.1, true}, std::pair{0.1, false}}) {
    for (int64_t n : {1, 7, 16, 17, 100, 1000}) {
      const State start = random_state(n, static_cast<uint64_t>(n));
      State want = start;
      for (int64_t k = 1; k <= 3; ++k)
        plain_adam(want.p.data(), want.m.data(), want.v.data(), want.g.data(), n,
                   adam_step_scalars<float>(1e-3, k, 0.9, 0.98, 1e-9, wd, decoupled));
      for (Isa isa : simd::supported_isas()) {
        simd::IsaGuard guard(isa);
        State got = start;
        for (int64_t k = 1; k <= 3; ++k)
          adam_update<float>(got.p.data(), got.m.data(), got.v.data(), got.g.data(), n,
                             adam_step_scalars<float>(1e-3, k, 0.9, 0.98, 1e-9, wd, decoupled));
        EXPECT_TRUE(same_bits(got.p, want.p) && same_bits(got.m, want.m) && same_bits(got.v, want.v))
            << simd::isa_name(isa) << ", n = " << n << ", wd = " << wd << ", decoupled " << decoupled;
      }
    }
  }
}

// Large tensors are cut into chunks across threads; each element's result is unchanged.
TEST(AdamKernel, ThreadedChunksEqualOneSpan) {
  const int64_t n = (1 << 17) + 13;
  const State start = random_state(n, 5);
  const auto s = adam_step_scalars<float>(1e-3, 1, 0.9, 0.98, 1e-9, 0.0, true);
  State want = start;
  plain_adam(want.p.data(), want.m.data(), want.v.data(), want.g.data(), n, s);
  State got = start;
  adam_update<float>(got.p.data(), got.m.data(), got.v.data(), got.g.data(), n, s);
  EXPECT_TRUE(same_bits(got.p, want.p) && same_bits(got.m, want.m) && same_bits(got.v, want.v));
}

TEST(AdamKernel, Float64MatchesTextbookAdam) {
  const int64_t n = 9;
  Rng rng(3);
  std::vector<double> p(n), m(n, 0.0), v(n, 0.0), g(n);
  for (auto& x : p) x = rng.normal();
  std::vector<double> rp = p, rm = m, rv = v;
  const double lr = 1e-2, b1 = 0.9, b2 = 0.98, eps = 1e-9, wd = 0.05;
  for (int64_t k = 1; k <= 4; ++k) {
    for (auto& x : g) x = rng.normal();
    adam_update<double>(p.data(), m.data(), v.data(), g.data(), n,
                        adam_step_scalars<double>(lr, k, b1, b2, eps, wd, true));
    for (int64_t i = 0; i < n; ++i) {
      rp[i] -= lr * wd * rp[i];
      rm[i] = b1 * rm[i] + (1 - b1) * g[i];
      rv[i] = b2 * rv[i] + (1 - b2) * g[i] * g[i];
      const double mh = rm[i] / (1 - std::pow(b1, k)), vh = rv[i] / (1 - std::pow(b2, k));
      rp[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(p[i], rp[i], 1e-12);
    EXPECT_NEAR(m[i], rm[i], 1e-12);
    EXPECT_NEAR(v[i], rv[i], 1e-12);
  }
}

}  // namespace
}  // namespace attn::kernels
