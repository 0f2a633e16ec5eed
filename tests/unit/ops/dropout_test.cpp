// dropout: the mask comes from eight Rng lanes seeded from the caller's generator, four
// elements per 64-bit draw, group g of four from lane g % 8 (reproducible, seed-dependent),
// survivors are scaled by 1/(1-p), the dropped fraction is close to p, evaluation is the
// identity, the gradient reuses the mask (written, not added to stale memory), and p outside
// [0, 1) is an error.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "attn/core/storage.h"
#include "attn/ops/ops.h"
#include "support/dropout_reference.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"
#include "support/poisoned_storage.h"

namespace attn {
namespace {

// The mask's definition (docs/conventions.md), written without the kernel
// (support/dropout_reference.h): true where element i is dropped.
std::vector<bool> replay_dropped(Rng& parent, size_t n, uint64_t t) {
  const std::vector<uint8_t> keep = test::reference_keep(static_cast<int64_t>(n), static_cast<uint32_t>(t), parent);
  std::vector<bool> dropped(n);
  for (size_t i = 0; i < n; ++i) dropped[i] = keep[i] == 0;
  return dropped;
}

class DropoutByDtype : public ::testing::TestWithParam<DType> {};

TEST_P(DropoutByDtype, MaskFollowsTheEightLaneDefinitionAndSurvivorsAreScaled) {
  const DType dt = GetParam();
  Rng data_rng(1);
  Tensor x = Tensor::randn({4, 5, 6}, data_rng, dt);
  const double p = 0.3;
  const uint64_t t = 19661;  // round(0.3 * 65536) = round(19660.8)
  Rng rng(42), replay(42);
  Tensor y = dropout(x, p, true, rng);
  const auto vx = x.to_vector<double>(), vy = y.to_vector<double>();
  const std::vector<bool> dropped = replay_dropped(replay, vx.size(), t);
  const double tol = dt == DType::F32 ? 1e-6 : 1e-14;
  for (size_t i = 0; i < vx.size(); ++i) {
    const double expected = dropped[i] ? 0.0 : vx[i] / (1 - p);
    EXPECT_NEAR(vy[i], expected, tol) << "element " << i;
  }
  EXPECT_EQ(rng.next_u64(), replay.next_u64()) << "dropout must draw eight seeds per mask";
}

INSTANTIATE_TEST_SUITE_P(Dropout, DropoutByDtype, ::testing::Values(DType::F32, DType::F64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Dropout, SameSeedGivesTheSameMaskAndDifferentSeedsDiffer) {
  Tensor x = Tensor::ones({1000});
  Rng r1(7), r2(7), r3(8);
  const auto a = dropout(x, 0.5, true, r1).to_vector<float>();
  const auto b = dropout(x, 0.5, true, r2).to_vector<float>();
  const auto c = dropout(x, 0.5, true, r3).to_vector<float>();
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Consecutive calls on one generator draw fresh masks.
  EXPECT_NE(dropout(x, 0.5, true, r1).to_vector<float>(), a);
}

TEST(Dropout, DroppedFractionIsCloseToPOnALargeTensor) {
  const int64_t n = 200000;  // also exercises the threaded path
  Tensor x = Tensor::ones({n});
  for (double p : {0.1, 0.5, 0.9}) {
    Rng rng(123);
    const auto y = dropout(x, p, true, rng).to_vector<float>();
    int64_t zeros = 0;
    for (float v : y) {
      if (v == 0.0f)
        ++zeros;
      else
        EXPECT_FLOAT_EQ(v, static_cast<float>(1 / (1 - p)));
    }
    // 5 standard deviations of a binomial proportion.
    EXPECT_NEAR(static_cast<double>(zeros) / n, p, 5 * std::sqrt(p * (1 - p) / n)) << "p " << p;
  }
}

TEST(Dropout, EvaluationAndZeroPReturnTheInputItself) {
  Tensor x = Tensor::ones({3, 3}, DType::F64).set_requires_grad(true);
  Rng rng(5);
  const Rng::State before = rng.state();
  EXPECT_TRUE(dropout(x, 0.5, false, rng).same(x));
  EXPECT_TRUE(dropout(x, 0.0, true, rng).same(x));
  const Rng::State after = rng.state();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(before.s[i], after.s[i]) << "identity must not draw";
}

TEST(Dropout, GradientUsesTheSavedMask) {
  Rng data(2);
  Tensor x = Tensor::randn({6, 7}, data, DType::F64).set_requires_grad(true);
  // Re-seeding inside f makes every evaluation draw the same mask, so dropout is a fixed
  // linear map that central differences can check.
  EXPECT_TRUE(test::gradcheck(
      [](const std::vector<Tensor>& in) {
        Rng rng(99);
        return dropout(in[0], 0.4, true, rng);
      },
      {x}));
  x.zero_grad();
  Rng rng(99);
  Tensor y = dropout(x, 0.4, true, rng);
  sum(y).backward();
  const auto vy = y.to_vector<double>(), vg = x.grad().to_vector<double>();
  for (size_t i = 0; i < vy.size(); ++i) EXPECT_DOUBLE_EQ(vg[i], vy[i] == 0.0 ? 0.0 : 1 / 0.6);
}

TEST(Dropout, GradientIsWrittenOverUninitialisedMemory) {
  // The backward allocates its gradient uninitialised: every element must be written, the
  // dropped ones as 0. The poison mode fills every block handed out with NaN bytes, so an
  // element left unwritten, or added to instead of written, shows up as NaN.
  const test::PoisonedStorage poison;  // support/poisoned_storage.h
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor x = Tensor::ones({257}, dt).set_requires_grad(true);
    Rng rng(3);
    Tensor y = dropout(x, 0.5, true, rng);
    sum(y).backward();
    const auto vy = y.to_vector<double>(), vg = x.grad().to_vector<double>();
    int64_t dropped = 0;
    for (size_t i = 0; i < vy.size(); ++i) {
      EXPECT_EQ(vg[i], vy[i] == 0.0 ? 0.0 : 2.0) << dtype_name(dt) << " element " << i;
      dropped += vy[i] == 0.0;
    }
    EXPECT_GT(dropped, 0);
  }
}

TEST(Dropout, BadInputIsAnError) {
  Tensor x = Tensor::ones({4});
  Rng rng(1);
  EXPECT_THROW((void)dropout(x, 1.0, true, rng), Error);
  EXPECT_THROW((void)dropout(x, -0.1, true, rng), Error);
  EXPECT_THROW((void)dropout(x, 1.5, false, rng), Error);
  EXPECT_THROW((void)dropout(x, std::nan(""), true, rng), Error);
  EXPECT_THROW((void)dropout(Tensor::zeros({4}, DType::I64), 0.1, true, rng), Error);
}

}  // namespace
}  // namespace attn
