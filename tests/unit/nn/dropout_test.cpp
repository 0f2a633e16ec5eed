// Dropout layer: identity in eval and at p = 0, zeros and 1/(1-p) scaling in training,
// reproducible from its seed, and p outside [0, 1) rejected.
#include <gtest/gtest.h>

#include <cmath>

#include "attn/nn/dropout.h"
#include "support/expect_close.h"

namespace attn::nn {
namespace {

TEST(DropoutLayer, TrainingZeroesAndScalesEvalIsIdentity) {
  Dropout drop(0.25, 11);
  Tensor x = Tensor::ones({2000});
  Tensor y = drop.forward(x);
  int zeros = 0;
  for (float v : y.to_vector<float>()) {
    if (v == 0.0f) ++zeros;
    else EXPECT_FLOAT_EQ(v, 1.0f / 0.75f);
  }
  EXPECT_NEAR(zeros / 2000.0, 0.25, 0.04);
  drop.eval();
  EXPECT_TRUE(drop.forward(x).same(x));
  drop.train();
  EXPECT_FALSE(test::all_close(drop.forward(x), x, 0.0));
}

TEST(DropoutLayer, SameSeedSameMaskAndZeroRateIsIdentity) {
  Dropout a(0.5, 3), b(0.5, 3);
  Tensor x = Tensor::ones({64});
  EXPECT_TRUE(test::all_close(a.forward(x), b.forward(x), 0.0));
  Dropout none(0.0, 3);
  EXPECT_TRUE(none.forward(x).same(x));
}

TEST(DropoutLayer, RejectsRatesOutsideZeroToOne) {
  EXPECT_THROW(Dropout(1.0), Error);
  EXPECT_THROW(Dropout(-0.1), Error);
}

}  // namespace
}  // namespace attn::nn
