// Tests of how the reverse sweep sums gradients: contributions that meet at a node or a leaf
// are added in place only into buffers nobody else holds, so a gradient the caller kept from
// an earlier sweep, a seed passed to backward(), and views of one buffer never change.
#include <gtest/gtest.h>

#include <vector>

#include "attn/core/autograd.h"
#include "attn/ops/ops.h"

namespace attn {
namespace {

Tensor leaf(const std::vector<double>& v) {
  Tensor t = Tensor::from_vector<double>(v, {static_cast<int64_t>(v.size())});
  t.set_requires_grad(true);
  return t;
}

TEST(GradientAccumulation, ManyUsesOfOneTensorSumTheirGradients) {
  Tensor x = leaf({1, 2, 3});
  // y = sum(x*x + 3x + x): dy/dx = 2x + 4
  Tensor y = sum(add(add(mul(x, x), scale(x, 3)), x));
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{6, 8, 10}));
}

TEST(GradientAccumulation, AGradientKeptFromAnEarlierSweepIsNotOverwritten) {
  Tensor x = leaf({1, 2});
  sum(scale(x, 2)).backward();
  const Tensor first = x.grad();  // held by the caller
  sum(scale(x, 5)).backward();
  EXPECT_EQ(first.to_vector<double>(), (std::vector<double>{2, 2}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{7, 7}));
  EXPECT_FALSE(first.same(x.grad()));
}

TEST(GradientAccumulation, SweepsWithoutAHeldGradientStillAccumulate) {
  Tensor x = leaf({1, 2});
  for (int i = 0; i < 3; ++i) sum(scale(x, 2)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{6, 6}));
}

TEST(GradientAccumulation, TheSeedGradientIsNeverWritten) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = add(scale(x, 1), x);  // both branches receive the seed
  Tensor seed = Tensor::from_vector<double>({1, 10, 100}, {3});
  y.backward(seed);
  EXPECT_EQ(seed.to_vector<double>(), (std::vector<double>{1, 10, 100}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 20, 200}));
  // A leaf as the root: its .grad is a copy, not the seed itself.
  Tensor z = leaf({4});
  Tensor s = Tensor::from_vector<double>({3}, {1});
  z.backward(s);
  z.backward(s);
  EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{3}));
  EXPECT_EQ(z.grad().to_vector<double>(), (std::vector<double>{6}));
}

TEST(GradientAccumulation, GradientsOfTwoInputsThatShareABufferStayApart) {
  // add's backward may hand the same buffer to both inputs; each leaf must own its .grad.
  Tensor a = leaf({1, 1});
  Tensor b = leaf({2, 2});
  Tensor y = sum(add(a, b));
  y.backward();
  EXPECT_FALSE(a.grad().storage() == b.grad().storage());
  a.grad().fill(9.0);
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 1}));
}

TEST(GradientAccumulation, FloatGradientsAreTheSameWhicheverBufferIsReused) {
  Tensor x = Tensor::from_vector<float>({0.1f, 0.2f, 0.3f}, {3});
  x.set_requires_grad(true);
  Tensor y = sum(add(add(mul(x, x), mul(x, x)), scale(x, 0.7)));
  y.backward();
  const std::vector<float> g = x.grad().to_vector<float>();
  const std::vector<float> xs = {0.1f, 0.2f, 0.3f};
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(g[i], 4 * xs[i] + 0.7f, 1e-6) << i;
}

}  // namespace
}  // namespace attn
