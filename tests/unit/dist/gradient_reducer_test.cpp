// Bucket planning, the gradient reducer and the communicator in a world of one process
// (attn/dist/). The same code runs on N ranks in tests/mpi/; here every collective is the
// identity, so a reduced gradient must equal the plain backward's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "attn/dist/communicator.h"
#include "attn/dist/gradient_reducer.h"
#include "attn/ops/ops.h"
#include "support/expect_close.h"

namespace attn::dist {
namespace {

Tensor param(const Shape& shape, uint64_t seed, DType dtype = DType::F32) {
  Rng rng(seed);
  Tensor t = Tensor::randn(shape, rng, dtype);
  t.set_requires_grad(true);
  return t;
}

// A two-layer network: w1 [4, 8], b1 [8], w2 [8, 2] in registration order, plus `unused`
// [5], which never enters the loss.
struct Net {
  Tensor w1 = param({4, 8}, 1), b1 = param({8}, 2), w2 = param({8, 2}, 3), unused = param({5}, 4);
  std::vector<Tensor> params() const { return {w1, b1, w2, unused}; }
  Tensor loss(uint64_t seed) const {
    Rng rng(seed);
    const Tensor x = Tensor::randn({3, 4}, rng);
    return sum(matmul(relu(add(matmul(x, w1), b1)), w2));
  }
  void zero_grad() const {
    for (const Tensor& p : params()) p.zero_grad();
  }
};

std::vector<std::vector<float>> grads_of(const std::vector<Tensor>& params) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : params) out.push_back(p.grad().defined() ? p.grad().to_vector<float>() : std::vector<float>{});
  return out;
}

TEST(PlanBuckets, WalksTheParametersBackwardsAndCutsAtTheCapacity) {
  const std::vector<Tensor> ps = {param({10}, 1), param({10}, 2), param({30}, 3), param({5}, 4)};
  // 100 bytes = 25 floats: {3: 5 floats}, then 2 (30 floats) alone as it passes the cap,
  // then {1, 0} (20 floats).
  const std::vector<BucketPlan> plan = plan_buckets(ps, 100);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].params, (std::vector<size_t>{3}));
  EXPECT_EQ(plan[1].params, (std::vector<size_t>{2}));
  EXPECT_EQ(plan[1].numel, 30);
  EXPECT_EQ(plan[2].params, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(plan[2].numel, 20);
  // A large capacity: one bucket.
  EXPECT_EQ(plan_buckets(ps, 1 << 20).size(), 1u);
}

TEST(PlanBuckets, NeverMixesDtypes) {
  const std::vector<Tensor> ps = {param({2}, 1), param({2}, 2, DType::F64), param({2}, 3)};
  const std::vector<BucketPlan> plan = plan_buckets(ps, 1 << 20);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[1].dtype, DType::F64);
  EXPECT_EQ(plan[1].params, (std::vector<size_t>{1}));
}

TEST(PlanBuckets, RejectsBadInput) {
  EXPECT_THROW(plan_buckets({param({2}, 1)}, 0), Error);
  EXPECT_THROW(plan_buckets({Tensor::zeros({2}, DType::I64)}, 100), Error);
  EXPECT_THROW(plan_buckets({Tensor()}, 100), Error);
  EXPECT_THROW(plan_buckets({Tensor::zeros({2, 3}).transpose(0, 1)}, 100), Error);
}

TEST(GradientReducer, InAWorldOfOneGivesThePlainBackwardsGradients) {
  Net net;
  net.loss(7).backward();
  const auto expected = grads_of(net.params());
  net.zero_grad();
  for (const Reduction reduction : {Reduction::Sum, Reduction::Mean}) {
    GradientReducer reducer(net.params(), Communicator::world(), {1e-4, reduction});
    reducer.backward(net.loss(7));
    reducer.wait_all();
    EXPECT_EQ(grads_of(net.params()), expected);
    net.zero_grad();
  }
}

TEST(GradientReducer, StartsBucketsDuringTheBackwardSweep) {
  Net net;
  // Tiny buckets: one per parameter. All but the unused parameter's start from the hook.
  GradientReducer reducer(net.params(), Communicator::world(), {1e-6, Reduction::Sum});
  ASSERT_EQ(reducer.buckets().size(), 4u);
  EXPECT_EQ(reducer.buckets()[0].params, (std::vector<size_t>{3}));  // `unused` comes first
  reducer.backward(net.loss(1));
  // The unused parameter's bucket is first in order and never became final, so nothing
  // could start before wait_all().
  EXPECT_EQ(reducer.stats().buckets_started_in_backward, 0);
  reducer.wait_all();
  EXPECT_EQ(reducer.stats().buckets_started_in_wait, 4);

  // Without the unused parameter every bucket starts inside the sweep.
  net.zero_grad();
  GradientReducer used_only({net.w1, net.b1, net.w2}, Communicator::world(), {1e-6, Reduction::Sum});
  used_only.backward(net.loss(1));
  EXPECT_EQ(used_only.stats().buckets_started_in_backward, 3);
  used_only.wait_all();
  EXPECT_EQ(used_only.stats().buckets_started_in_wait, 0);
  EXPECT_EQ(used_only.stats().steps, 1);
  EXPECT_EQ(used_only.stats().bytes_reduced, (32 + 8 + 16 + 3) * 4);  // gradients + one flag each
}

TEST(GradientReducer, AParameterWithoutGradientKeepsNone) {
  Net net;
  GradientReducer reducer(net.params(), Communicator::world());
  reducer.backward(net.loss(3));
  reducer.wait_all();
  EXPECT_TRUE(net.w1.grad().defined());
  EXPECT_FALSE(net.unused.grad().defined());
}

TEST(GradientReducer, WaitAllWithoutABackwardLeavesNoGradients) {
  // A rank with an empty share of the batch runs no backward but must still join.
  Net net;
  GradientReducer reducer(net.params(), Communicator::world());
  reducer.wait_all();
  for (const Tensor& p : net.params()) EXPECT_FALSE(p.grad().defined());
  EXPECT_EQ(reducer.stats().buckets_started_in_wait, static_cast<int64_t>(reducer.buckets().size()));
}

TEST(GradientReducer, IncludesGradientsAccumulatedByEarlierPlainBackwards) {
  Net net;
  net.loss(1).backward();
  net.loss(2).backward();
  const auto expected = grads_of(net.params());
  net.zero_grad();
  GradientReducer reducer(net.params(), Communicator::world());
  net.loss(1).backward();          // a first micro-batch, not reduced
  reducer.backward(net.loss(2));   // the last one, reduced with the sum so far
  reducer.wait_all();
  EXPECT_EQ(grads_of(net.params()), expected);
}

TEST(GradientReducer, ASecondReducerBackwardBeforeWaitAllIsAnError) {
  Net net;
  GradientReducer reducer(net.params(), Communicator::world());
  reducer.backward(net.loss(1));
  EXPECT_THROW(reducer.backward(net.loss(2)), Error);
  reducer.wait_all();
  net.zero_grad();
  EXPECT_NO_THROW(reducer.backward(net.loss(2)));  // the next step is fine again
}

TEST(GradientReducer, RejectsBadParameterLists) {
  const Communicator& world = Communicator::world();
  Tensor p = param({3}, 1);
  EXPECT_THROW(GradientReducer({p, p}, world), Error);                              // twice
  EXPECT_THROW(GradientReducer({mul(p, p)}, world), Error);                         // not a leaf
  EXPECT_THROW(GradientReducer({Tensor::zeros({2}, DType::I64)}, world), Error);    // not floating
  EXPECT_THROW(GradientReducer({p}, world, {0.0, Reduction::Sum}), Error);          // no capacity
}

TEST(GradientReducer, AGradientOfAnotherDtypeIsAnError) {
  Tensor p = param({2}, 1);
  GradientReducer reducer({p}, Communicator::world());
  p.set_grad(Tensor::zeros({2}, DType::F64));
  EXPECT_THROW(reducer.wait_all(), Error);
}

TEST(BroadcastParameters, InAWorldOfOneKeepsTheValues) {
  Net net;
  const std::vector<float> before = net.w1.to_vector<float>();
  broadcast_parameters(net.params(), Communicator::world());
  EXPECT_EQ(net.w1.to_vector<float>(), before);
  EXPECT_THROW(broadcast_parameters(net.params(), Communicator::world(), 1), Error);  // no rank 1
}

TEST(Communicator, AWorldOfOneWithoutALauncher) {
  ASSERT_EQ(launcher_world_size(), 0) << "run the unit tests without mpirun";
  const Communicator& world = Communicator::world();
  EXPECT_EQ(world.rank(), 0);
  EXPECT_EQ(world.size(), 1);
  EXPECT_TRUE(world.is_root());
  EXPECT_EQ(world.describe(), "rank 0 of 1");
  std::vector<double> v = {1.5, -2};
  world.all_reduce(v.data(), 2);
  EXPECT_EQ(v, (std::vector<double>{1.5, -2}));
  EXPECT_EQ(world.all_reduce_value(int64_t{5}, ReduceOp::Max), 5);
  EXPECT_EQ(world.broadcast_string("config"), "config");
  Tensor t = Tensor::from_vector<float>({1, 2}, {2});
  world.all_reduce(t);
  world.broadcast(t);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2}));
  world.barrier();
  Request r = world.start_all_reduce_sum(v.data(), 2, DType::F64);
  EXPECT_TRUE(r.test());
  r.wait();
  EXPECT_TRUE(Request().done());
}

TEST(Communicator, SelfIsAWorldOfOne) {
  const Communicator self = Communicator::self();
  EXPECT_EQ(self.size(), 1);
  EXPECT_EQ(self.rank(), 0);
  int64_t v = 4;
  self.all_reduce(&v, 1);
  EXPECT_EQ(v, 4);
  EXPECT_EQ(self.duplicate().size(), 1);
  EXPECT_EQ(self.all_gather({3, -1, 7}), (std::vector<int64_t>{3, -1, 7}));
}

TEST(Communicator, RejectsBadArgumentsWithTheRankInTheMessage) {
  const Communicator& world = Communicator::world();
  float x = 0;
  EXPECT_THROW(world.all_reduce(&x, -1), Error);
  EXPECT_THROW(world.all_reduce(static_cast<float*>(nullptr), 3), Error);
  EXPECT_THROW(world.broadcast(nullptr, 3, 0), Error);
  EXPECT_THROW(world.start_all_reduce_sum(nullptr, 3, DType::F32), Error);
  EXPECT_THROW(world.broadcast(&x, 4, 1), Error);     // root 1 of a world of 1
  EXPECT_THROW(world.broadcast(&x, -4, 0), Error);
  EXPECT_THROW(world.start_all_reduce_sum(&x, 1, DType::I64), Error);
  EXPECT_THROW(world.all_reduce(Tensor::zeros({2, 3}).transpose(0, 1)), Error);
  EXPECT_THROW(world.all_reduce(Tensor::zeros({2}, DType::Bool)), Error);
  try {
    world.broadcast_string("x", 3);
    FAIL() << "no error for root 3";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 of 1"), std::string::npos) << e.what();
  }
}

TEST(Communicator, ReadsTheLaunchersWorldSizeFromTheEnvironment) {
  ::setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  EXPECT_EQ(launcher_world_size(), 3);
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::setenv("PMI_SIZE", "4", 1);
  EXPECT_EQ(launcher_world_size(), 4);
  ::unsetenv("PMI_SIZE");
  EXPECT_EQ(launcher_world_size(), 0);
  EXPECT_EQ(launcher_local_size(), 0);
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  EXPECT_EQ(launcher_local_size(), 2);
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
}

}  // namespace
}  // namespace attn::dist
