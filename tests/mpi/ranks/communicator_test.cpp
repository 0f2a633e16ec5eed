// The communicator's collectives on a real MPI job (mpirun -np 2): sums, minima and maxima
// of every dtype, broadcasts from any root, non-blocking sums, a buffer large enough to take
// MPI's large-message path, and errors that name the rank and carry MPI's own message.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mpi_util.h"

namespace attn::dist {
namespace {

using test::world;

TEST(MpiCommunicator, RanksAreNumberedFromZero) {
  ATTN_REQUIRE_RANKS(2);
  const int r = world().rank(), n = world().size();
  EXPECT_GE(r, 0);
  EXPECT_LT(r, n);
  EXPECT_EQ(launcher_world_size(), n);
  EXPECT_EQ(world().all_reduce_value(int64_t{r}), int64_t{n} * (n - 1) / 2);  // each rank once
  EXPECT_EQ(world().all_reduce_value(int64_t{r}, ReduceOp::Min), 0);
  EXPECT_EQ(world().all_reduce_value(int64_t{r}, ReduceOp::Max), n - 1);
  EXPECT_EQ(world().describe(), "rank " + std::to_string(r) + " of " + std::to_string(n));
  EXPECT_TRUE(mpi_built());
}

TEST(MpiCommunicator, AllReduceSumsEveryDtype) {
  ATTN_REQUIRE_RANKS(2);
  const int r = world().rank(), n = world().size();
  std::vector<float> f = {1.0f, static_cast<float>(r), 0.5f};
  std::vector<double> d = {static_cast<double>(r) * 0.25, -1.0};
  world().all_reduce(f.data(), 3);
  world().all_reduce(d.data(), 2);
  const double ranks = n * (n - 1) / 2.0;
  EXPECT_EQ(f, (std::vector<float>{static_cast<float>(n), static_cast<float>(ranks), 0.5f * n}));
  EXPECT_EQ(d, (std::vector<double>{ranks * 0.25, -1.0 * n}));
  Tensor t = Tensor::full({2, 2}, r + 1.0, DType::F64);
  world().all_reduce(t, ReduceOp::Max);
  EXPECT_EQ(t.to_vector<double>(), std::vector<double>(4, n));
  EXPECT_DOUBLE_EQ(world().all_reduce_value(1.5), 1.5 * n);
}

TEST(MpiCommunicator, AllGatherConcatenatesInRankOrder) {
  ATTN_REQUIRE_RANKS(2);
  const int64_t r = world().rank();
  const std::vector<int64_t> all = world().all_gather({r, -r, INT64_MIN + r});
  ASSERT_EQ(all.size(), static_cast<size_t>(3 * world().size()));
  for (int64_t k = 0; k < world().size(); ++k) {
    EXPECT_EQ(all[static_cast<size_t>(3 * k)], k);
    EXPECT_EQ(all[static_cast<size_t>(3 * k + 1)], -k);
    EXPECT_EQ(all[static_cast<size_t>(3 * k + 2)], INT64_MIN + k);
  }
  // Different lengths per rank: an error on every rank, not a hang.
  EXPECT_THROW(world().all_gather(std::vector<int64_t>(static_cast<size_t>(r + 1), 0)), Error);
}

TEST(MpiCommunicator, AllReduceOfALargeBuffer) {
  ATTN_REQUIRE_RANKS(2);
  // 8 MiB of floats: past the sizes that shared memory sends in one eager copy.
  const int64_t count = int64_t{1} << 21;
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = static_cast<float>((i % 1000) + world().rank());
  world().all_reduce(v.data(), count);
  const int n = world().size();
  int64_t wrong = 0;
  for (int64_t i = 0; i < count; ++i)
    if (v[static_cast<size_t>(i)] != static_cast<float>(n * (i % 1000) + n * (n - 1) / 2)) ++wrong;
  EXPECT_EQ(wrong, 0);
}

TEST(MpiCommunicator, BroadcastCopiesTheRootsValuesFromAnyRoot) {
  ATTN_REQUIRE_RANKS(2);
  const int root = world().size() - 1;
  Tensor t = Tensor::full({3}, world().rank() * 10.0);
  world().broadcast(t, root);
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(3, root * 10.0f));
  const std::string mine = "from rank " + std::to_string(world().rank()) + std::string(5000, 'x');
  EXPECT_EQ(world().broadcast_string(mine, root), "from rank " + std::to_string(root) + std::string(5000, 'x'));
  EXPECT_EQ(world().broadcast_string(world().is_root() ? "" : "not empty"), "");
  world().barrier();
}

TEST(MpiCommunicator, NonBlockingSumsCompleteInAnyWaitOrder) {
  ATTN_REQUIRE_RANKS(2);
  const int n = world().size();
  std::vector<float> a(1000, 1.0f);
  std::vector<double> b(3, world().rank());
  Request ra = world().start_all_reduce_sum(a.data(), 1000, DType::F32);
  Request rb = world().start_all_reduce_sum(b.data(), 3, DType::F64);
  EXPECT_FALSE(Request().test() == false);
  rb.wait();
  while (!ra.test()) {
  }
  EXPECT_TRUE(ra.done());
  EXPECT_EQ(a, std::vector<float>(1000, static_cast<float>(n)));
  EXPECT_EQ(b, std::vector<double>(3, n * (n - 1) / 2.0));
}

TEST(MpiCommunicator, AnMpiErrorNamesTheRankAndMpisMessage) {
  ATTN_REQUIRE_RANKS(2);
  // Two ranks disagree on the size of a broadcast: the root sends 16 bytes, rank 1 expects
  // 8, and MPI reports the truncation to it (the communicator returns errors). With more
  // ranks a broadcast tree would leave the ranks below rank 1 waiting, so only with two.
  if (world().size() != 2) GTEST_SKIP() << "the scenario needs exactly 2 ranks";
  char buffer[16] = {0};
  if (world().is_root()) {
    EXPECT_NO_THROW(world().broadcast(buffer, 16, 0));
  } else {
    try {
      world().broadcast(buffer, 8, 0);
      ADD_FAILURE() << "no error for a truncated broadcast";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("[broadcast] " + world().describe()), std::string::npos) << what;
      EXPECT_NE(what.find("MPI_ERR_TRUNCATE"), std::string::npos) << what;
    }
  }
  world().barrier();  // the job goes on
}

TEST(MpiCommunicator, BadArgumentsAreErrorsBeforeAnyMessage) {
  ATTN_REQUIRE_RANKS(2);
  float x = 0;
  EXPECT_THROW(world().broadcast(&x, 4, world().size()), Error);
  EXPECT_THROW(world().broadcast(&x, 4, -1), Error);
  EXPECT_THROW(world().all_reduce(static_cast<float*>(nullptr), 4), Error);
  EXPECT_THROW(world().start_all_reduce_sum(&x, 1, DType::I64), Error);
  world().barrier();
}

}  // namespace
}  // namespace attn::dist
