// The autograd leaf hook (core/autograd.h) that data-parallel training starts its bucket
// all-reduces from: called once per leaf, only when the leaf's gradient is final.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/ops/ops.h"
#include "support/expect_close.h"

namespace attn {
namespace {

Tensor leaf(std::vector<double> values, const Shape& shape) {
  Tensor t = Tensor::from_vector<double>(values, shape);
  t.set_requires_grad(true);
  return t;
}

// Records each hooked leaf (by identity) with a copy of its gradient at that moment.
struct Recorder {
  std::vector<const TensorImpl*> order;
  std::map<const TensorImpl*, std::vector<double>> grad_when_called;
  LeafGradHook hook() {
    return [this](const Tensor& t) {
      order.push_back(&t.impl());
      grad_when_called[&t.impl()] = t.grad().defined() ? t.grad().to_vector<double>() : std::vector<double>{};
    };
  }
};

TEST(LeafGradHook, CalledOnceForEveryLeafWithItsFinalGradient) {
  // a is used at the start and again at the end of the chain, so its gradient is complete
  // only after the last node that reads it has run.
  Tensor a = leaf({1, 2}, {2}), b = leaf({3, 4}, {2}), c = leaf({5, 6}, {2});
  Recorder rec;
  {
    LeafGradHookGuard guard(rec.hook());
    Tensor y = mul(add(mul(a, b), c), a);  // (a*b + c) * a
    sum(y).backward();
  }
  ASSERT_EQ(rec.order.size(), 3u);
  for (const Tensor* t : {&a, &b, &c}) {
    ASSERT_TRUE(rec.grad_when_called.count(&t->impl()));
    EXPECT_EQ(rec.grad_when_called[&t->impl()], t->grad().to_vector<double>());
  }
  // d/da = 2ab + c = {11, 22}: the hook saw the sum of both paths.
  EXPECT_EQ(rec.grad_when_called[&a.impl()], (std::vector<double>{11, 22}));
}

TEST(LeafGradHook, LeavesNearTheOutputAreReportedBeforeLeavesNearTheInput) {
  Tensor w1 = leaf({1, 2, 3, 4}, {2, 2}), w2 = leaf({1, 0, 0, 1}, {2, 2}), x = Tensor::ones({1, 2}, DType::F64);
  Recorder rec;
  {
    LeafGradHookGuard guard(rec.hook());
    sum(matmul(matmul(x, w1), w2)).backward();
  }
  ASSERT_EQ(rec.order.size(), 2u);
  EXPECT_EQ(rec.order[0], &w2.impl());
  EXPECT_EQ(rec.order[1], &w1.impl());

  // w2 is reported while the sweep is still running: w1 has no gradient yet at that moment.
  w1.zero_grad();
  w2.zero_grad();
  bool w1_pending_when_w2_reported = false;
  {
    LeafGradHookGuard guard([&](const Tensor& t) {
      if (t.same(w2)) w1_pending_when_w2_reported = !w1.grad().defined();
    });
    sum(matmul(matmul(x, w1), w2)).backward();
  }
  EXPECT_TRUE(w1_pending_when_w2_reported);
}

TEST(LeafGradHook, ReportsARootThatIsItselfALeaf) {
  Tensor a = leaf({2}, {});
  Recorder rec;
  {
    LeafGradHookGuard guard(rec.hook());
    a.backward();
  }
  ASSERT_EQ(rec.order.size(), 1u);
  EXPECT_EQ(rec.grad_when_called[&a.impl()], (std::vector<double>{1}));
}

TEST(LeafGradHook, NotCalledOutsideTheGuardAndPreviousHookRestored) {
  Tensor a = leaf({1}, {1});
  int outer = 0, inner = 0;
  {
    LeafGradHookGuard g1([&](const Tensor&) { ++outer; });
    {
      LeafGradHookGuard g2([&](const Tensor&) { ++inner; });
      sum(mul(a, a)).backward();
    }
    sum(mul(a, a)).backward();
  }
  sum(mul(a, a)).backward();
  EXPECT_EQ(inner, 1);
  EXPECT_EQ(outer, 1);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{6}));  // three sweeps of 2a
}

// A node that passes no gradient to its input (as an op would for an input it ignores).
struct DropGradient : Node {
  const char* name() const override { return "DropGradient"; }
  std::vector<Tensor> backward(const Tensor&) override { return {Tensor()}; }
};

TEST(LeafGradHook, ReportsALeafThatNoGradientReachedWithAnUndefinedGradient) {
  Tensor a = leaf({1, 2}, {2}), b = leaf({3, 4}, {2});
  Tensor dropped = Tensor::zeros({2}, DType::F64);
  attach_node(dropped, std::make_shared<DropGradient>(), {a});
  Recorder rec;
  {
    LeafGradHookGuard guard(rec.hook());
    sum(add(dropped, b)).backward();
  }
  ASSERT_EQ(rec.order.size(), 2u);
  EXPECT_TRUE(rec.grad_when_called.count(&a.impl()));
  EXPECT_TRUE(rec.grad_when_called[&a.impl()].empty());
  EXPECT_FALSE(a.grad().defined());
  EXPECT_EQ(rec.grad_when_called[&b.impl()], (std::vector<double>{1, 1}));
}

TEST(LeafGradHook, LeavesThatNeedNoGradientAreNotReported) {
  Tensor a = leaf({1, 2}, {2});
  Tensor constant = Tensor::from_vector<double>({3, 4}, {2});
  Recorder rec;
  {
    LeafGradHookGuard guard(rec.hook());
    sum(mul(a, constant)).backward();
  }
  ASSERT_EQ(rec.order.size(), 1u);
  EXPECT_EQ(rec.order[0], &a.impl());
}

TEST(LeafGradHook, AnExceptionFromTheHookEndsTheSweep) {
  Tensor a = leaf({1, 2}, {2});
  LeafGradHookGuard guard([](const Tensor&) { throw Error("[test] hook failed"); });
  EXPECT_THROW(sum(mul(a, a)).backward(), Error);
}

}  // namespace
}  // namespace attn
