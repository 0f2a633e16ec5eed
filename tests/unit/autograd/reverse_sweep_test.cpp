// Tests of the reverse sweep's bookkeeping: each node runs once, after every contribution to
// its output gradient has arrived, however many paths reach it; long chains need no recursion;
// sweeps over graphs that share nodes' leaves stay apart; contributions that are strided or of
// another dtype are summed correctly; float sums of any length give the bits of a scalar loop.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/ops/ops.h"

namespace attn {
namespace {

// y = x (a copy), with a backward that counts its calls and returns make_grad(dy).
struct ProbeBackward : Node {
  int* calls = nullptr;
  std::function<Tensor(const Tensor&)> make_grad;
  const char* name() const override { return "ProbeBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    ++*calls;
    return {make_grad(g)};
  }
};

Tensor probe(const Tensor& x, int* calls,
             std::function<Tensor(const Tensor&)> make_grad = [](const Tensor& g) { return g; }) {
  Tensor out = x.clone();
  auto node = std::make_shared<ProbeBackward>();
  node->calls = calls;
  node->make_grad = std::move(make_grad);
  attach_node(out, node, {x});
  return out;
}

Tensor leaf(const std::vector<double>& v) {
  Tensor t = Tensor::from_vector<double>(v, {static_cast<int64_t>(v.size())});
  t.set_requires_grad(true);
  return t;
}

TEST(ReverseSweep, ANodeReachedAlongManyPathsRunsOnceWithTheSumOfTheirGradients) {
  Tensor x = leaf({1, 2, 3});
  int calls = 0;
  Tensor seen;  // the gradient the probe received
  Tensor y = probe(x, &calls, [&](const Tensor& g) {
    seen = g.clone();
    return g;
  });
  // z = sum(y + 2y + y*y + y): dz/dy = 4 + 2y
  Tensor z = sum(add(add(add(y, scale(y, 2)), mul(y, y)), y));
  z.backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen.to_vector<double>(), (std::vector<double>{6, 8, 10}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{6, 8, 10}));
}

TEST(ReverseSweep, ALongChainNeedsNoRecursionAndVisitsEveryNodeOnce) {
  Tensor x = leaf({1.5});
  int calls = 0;
  Tensor y = x;
  const int n = 20000;
  for (int i = 0; i < n; ++i) y = probe(y, &calls);
  sum(y).backward();
  EXPECT_EQ(calls, n);
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1}));
}

TEST(ReverseSweep, TwoGraphsOverOneLeafAreSweptApartInAnyOrder) {
  Tensor x = leaf({1, 2});
  int calls_a = 0, calls_b = 0;
  Tensor a = sum(scale(probe(x, &calls_a), 3));
  Tensor shared = probe(x, &calls_b);
  Tensor b = sum(add(shared, mul(shared, shared)));  // d/dx = 1 + 2x
  b.backward();
  a.backward();
  EXPECT_EQ(calls_a, 1);
  EXPECT_EQ(calls_b, 1);
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3 + 3, 3 + 5}));
}

TEST(ReverseSweep, ANodeWhoseGradientNeverArrivesIsSkipped) {
  // The probe returns no gradient, so the node below it receives none and must not run.
  Tensor x = leaf({1, 2});
  int below = 0, above = 0;
  Tensor y = probe(x, &below);
  Tensor z = probe(y, &above, [](const Tensor&) { return Tensor(); });
  Tensor w = sum(add(z, leaf({5, 5})));
  w.backward();
  EXPECT_EQ(above, 1);
  EXPECT_EQ(below, 0);
  EXPECT_FALSE(x.grad().defined());
}

TEST(ReverseSweep, StridedAndOtherDtypeContributionsAreSummed) {
  for (const DType dt : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}).to(dt);
    x.set_requires_grad(true);
    const DType other = dt == DType::F32 ? DType::F64 : DType::F32;
    int calls = 0;
    // One path hands back dy as a transposed (strided) view of a [3, 2] buffer, another as a
    // copy in the other floating dtype; together with the plain path x gets 3 dy.
    Tensor strided = probe(x, &calls, [](const Tensor& g) {
      NoGradGuard guard;
      return g.transpose(0, 1).contiguous().transpose(0, 1);
    });
    Tensor converted = probe(x, &calls, [other](const Tensor& g) { return g.to(other); });
    Tensor y = add(add(strided, converted), x);
    Tensor dy = Tensor::from_vector<double>({1, 10, 100, -1, -10, -100}, {2, 3}).to(dt);
    y.backward(dy);
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(x.grad().dtype(), dt);
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, 30, 300, -3, -30, -300}));
  }
}

TEST(ReverseSweep, FloatSumsOfAnyLengthHaveTheBitsOfAScalarLoop) {
  // Lengths around and between vector widths; x is reached along three paths.
  for (const int64_t n : {1, 3, 7, 8, 9, 16, 17, 31, 1003}) {
    SCOPED_TRACE(n);
    Rng rng(static_cast<uint64_t>(n));
    Tensor x = Tensor::randn({n}, rng);
    x.set_requires_grad(true);
    Tensor s1 = Tensor::randn({n}, rng), s2 = Tensor::randn({n}, rng), s3 = Tensor::randn({n}, rng);
    Tensor y = add(add(mul(x, s1), mul(x, s2)), mul(x, s3));
    y.backward(Tensor::ones({n}));
    const auto v1 = s1.to_vector<float>(), v2 = s2.to_vector<float>(), v3 = s3.to_vector<float>();
    const auto g = x.grad().to_vector<float>();
    // The nodes run in reverse topological order (the third product first), and each
    // contribution is added to the running sum as its node runs.
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) EXPECT_EQ(g[i], (v3[i] + v2[i]) + v1[i]) << i;
  }
}

}  // namespace
}  // namespace attn
