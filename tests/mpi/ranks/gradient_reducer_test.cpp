// The gradient reducer on a real MPI job: sums and means over ranks, buckets started inside
// the backward sweep, parameters that only some ranks touch, a rank with nothing to do, the
// broadcast of initial parameters, and parameter lists that disagree between ranks.
#include <gtest/gtest.h>

#include <vector>

#include "attn/dist/gradient_reducer.h"
#include "support/expect_close.h"
#include "mpi_util.h"

namespace attn::dist {
namespace {

using test::SmallNet;
using test::world;

// Each rank's loss reads its own data (seed 100 + rank). Returns, for every parameter, the
// sum over all ranks of that rank's gradient, computed here without communication.
std::vector<Tensor> expected_sum(const SmallNet& net, bool extra_on_root = false) {
  std::vector<Tensor> total(net.params().size());
  for (int r = 0; r < world().size(); ++r) {
    net.zero_grad();
    net.loss(100 + static_cast<uint64_t>(r), extra_on_root && r == 0).backward();
    for (size_t i = 0; i < total.size(); ++i) {
      const Tensor g = net.params()[i].grad();
      if (!g.defined()) continue;
      total[i] = total[i].defined() ? add(total[i], g) : g.clone();
    }
  }
  net.zero_grad();
  return total;
}

TEST(MpiGradientReducer, SumsEachRanksGradients) {
  ATTN_REQUIRE_RANKS(2);
  SmallNet net;
  const std::vector<Tensor> expected = expected_sum(net);
  GradientReducer reducer(net.params(), world(), {1e-6, Reduction::Sum});
  reducer.backward(net.loss(100 + static_cast<uint64_t>(world().rank())));
  reducer.wait_all();
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(net.params()[i].grad().defined());
    EXPECT_TRUE(attn::test::all_close(net.params()[i].grad(), expected[i], 1e-5, 1e-6, "param"));
    EXPECT_TRUE(test::same_on_all_ranks(net.params()[i].grad()));
  }
  EXPECT_FALSE(net.extra.grad().defined());  // used on no rank
}

TEST(MpiGradientReducer, MeanDividesTheSumByTheWorldSize) {
  ATTN_REQUIRE_RANKS(2);
  SmallNet net;
  const std::vector<Tensor> expected = expected_sum(net);
  GradientReducer reducer(net.params(), world(), {4.0, Reduction::Mean});
  reducer.backward(net.loss(100 + static_cast<uint64_t>(world().rank())));
  reducer.wait_all();
  for (size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(attn::test::all_close(net.params()[i].grad(), scale(expected[i], 1.0 / world().size()), 1e-5,
                                      1e-6, "param"));
}

TEST(MpiGradientReducer, BucketsStartDuringTheBackwardSweep) {
  ATTN_REQUIRE_RANKS(2);
  SmallNet net;
  GradientReducer reducer({net.w1, net.b1, net.w2}, world(), {1e-6, Reduction::Sum});
  ASSERT_EQ(reducer.buckets().size(), 3u);
  for (int step = 0; step < 3; ++step) {
    reducer.backward(net.loss(100 + static_cast<uint64_t>(world().rank())));
    // Every bucket was launched from the leaf hook, before backward() returned.
    EXPECT_EQ(reducer.stats().buckets_started_in_backward, 3 * (step + 1));
    reducer.wait_all();
    net.zero_grad();
  }
  EXPECT_EQ(reducer.stats().buckets_started_in_wait, 0);
  EXPECT_EQ(reducer.stats().steps, 3);
  EXPECT_GT(reducer.stats().comm_seconds, 0.0);
}

TEST(MpiGradientReducer, AParameterUsedOnOneRankGetsItsGradientEverywhere) {
  ATTN_REQUIRE_RANKS(2);
  SmallNet net;
  const std::vector<Tensor> expected = expected_sum(net, /*extra_on_root=*/true);
  GradientReducer reducer(net.params(), world());
  reducer.backward(net.loss(100 + static_cast<uint64_t>(world().rank()), world().is_root()));
  reducer.wait_all();
  ASSERT_TRUE(net.extra.grad().defined()) << world().describe();
  EXPECT_EQ(net.extra.grad().to_vector<float>(), std::vector<float>(5, 1.0f));  // d sum(extra), rank 0 only
  EXPECT_TRUE(attn::test::all_close(net.w1.grad(), expected[0], 1e-5, 1e-6, "w1"));
}

TEST(MpiGradientReducer, ARankWithNothingToDoStillJoins) {
  ATTN_REQUIRE_RANKS(2);
  // Only rank 0 runs a backward (the others had an empty share of the batch).
  SmallNet net;
  net.loss(100).backward();
  const Tensor expected = net.w2.grad().clone();
  net.zero_grad();
  GradientReducer reducer(net.params(), world());
  if (world().is_root()) reducer.backward(net.loss(100));
  reducer.wait_all();
  ASSERT_TRUE(net.w2.grad().defined()) << world().describe();
  EXPECT_TRUE(attn::test::all_close(net.w2.grad(), expected, 0, 0, "w2"));
}

TEST(MpiGradientReducer, ParameterListsThatDifferBetweenRanksFailOnEveryRank) {
  ATTN_REQUIRE_RANKS(2);
  SmallNet net;
  std::vector<Tensor> params = net.params();
  if (world().rank() == 1) params.pop_back();
  try {
    GradientReducer reducer(params, world());
    ADD_FAILURE() << world().describe() << ": no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("differs between ranks"), std::string::npos) << e.what();
  }
  std::vector<Tensor> shapes = {test::random_leaf({world().rank() == 1 ? 3 : 2}, 1)};
  EXPECT_THROW(broadcast_parameters(shapes, world()), Error);
}

TEST(MpiBroadcastParameters, EveryRankEndsWithRankZerosValues) {
  ATTN_REQUIRE_RANKS(2);
  SmallNet net(1 + 10 * static_cast<uint64_t>(world().rank()));  // different values per rank
  const Tensor w64 = test::random_leaf({3, 3}, 50 + static_cast<uint64_t>(world().rank()), DType::F64);
  std::vector<Tensor> params = net.params();
  params.push_back(w64);
  broadcast_parameters(params, world());
  const SmallNet root_net(1);
  EXPECT_EQ(net.w1.to_vector<float>(), root_net.w1.to_vector<float>());
  EXPECT_EQ(net.extra.to_vector<float>(), root_net.extra.to_vector<float>());
  EXPECT_EQ(w64.to_vector<double>(), test::random_leaf({3, 3}, 50, DType::F64).to_vector<double>());
}

}  // namespace
}  // namespace attn::dist
