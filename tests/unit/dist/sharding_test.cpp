// Shares of a global batch per rank, and the token weights that keep a mean loss the same
// whatever the number of ranks (attn/dist/sharding.h), in a world of one process.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "attn/dist/sharding.h"

namespace attn::dist {
namespace {

TEST(ShardRange, SharesCoverEveryItemOnceInRankOrderAndDifferByAtMostOne) {
  for (int64_t n : {0, 1, 2, 3, 7, 8, 64, 101}) {
    for (int size : {1, 2, 3, 4, 5, 8}) {
      int64_t next = 0, smallest = n, largest = 0;
      for (int r = 0; r < size; ++r) {
        const Range s = shard_range(n, r, size);
        EXPECT_EQ(s.begin, next) << "n " << n << " size " << size << " rank " << r;
        EXPECT_GE(s.size(), 0);
        next = s.end;
        smallest = std::min(smallest, s.size());
        largest = std::max(largest, s.size());
      }
      EXPECT_EQ(next, n) << "n " << n << " size " << size;
      EXPECT_LE(largest - smallest, 1) << "n " << n << " size " << size;
    }
  }
}

TEST(ShardRange, TheFirstRanksTakeTheRemainder) {
  // 10 items over 4 ranks: 3, 3, 2, 2.
  EXPECT_EQ(shard_range(10, 0, 4).size(), 3);
  EXPECT_EQ(shard_range(10, 1, 4).begin, 3);
  EXPECT_EQ(shard_range(10, 2, 4).begin, 6);
  EXPECT_EQ(shard_range(10, 3, 4).end, 10);
  EXPECT_EQ(shard_range(10, 3, 4).size(), 2);
  // Fewer items than ranks: the last ranks get nothing.
  EXPECT_EQ(shard_range(1, 1, 2).size(), 0);
}

TEST(Shard, ConcatenatedSharesGiveBackTheBatch) {
  std::vector<int64_t> batch(11);
  std::iota(batch.begin(), batch.end(), 100);
  std::vector<int64_t> joined;
  for (int r = 0; r < 3; ++r) {
    const std::vector<int64_t> part = shard(batch, r, 3);
    joined.insert(joined.end(), part.begin(), part.end());
  }
  EXPECT_EQ(joined, batch);
  EXPECT_EQ(shard(batch, 0, 1), batch);
}

TEST(ShardRange, RejectsBadArguments) {
  EXPECT_THROW(shard_range(-1, 0, 2), Error);
  EXPECT_THROW(shard_range(4, 0, 0), Error);
  EXPECT_THROW(shard_range(4, 2, 2), Error);
  EXPECT_THROW(shard_range(4, -1, 2), Error);
}

TEST(TokenShare, WeightIsTheLocalFractionOfAllTokens) {
  EXPECT_DOUBLE_EQ((TokenShare{30, 120}).weight(), 0.25);
  EXPECT_DOUBLE_EQ((TokenShare{0, 0}).weight(), 0.0);
  // Weighted local means add up to the global mean: ranks with means 2 (30 tokens) and
  // 4 (90 tokens) give (2*30 + 4*90) / 120 = 3.5.
  const TokenShare first{30, 120}, second{90, 120};
  EXPECT_DOUBLE_EQ(first.weight() * 2 + second.weight() * 4, 3.5);
}

TEST(TokenShare, InAWorldOfOneTheGlobalCountIsTheLocalOne) {
  const Communicator& world = Communicator::world();
  ASSERT_EQ(world.size(), 1);
  const TokenShare s = share_tokens(17, world);
  EXPECT_EQ(s.local, 17);
  EXPECT_EQ(s.global, 17);
  EXPECT_DOUBLE_EQ(s.weight(), 1.0);
  EXPECT_DOUBLE_EQ(global_mean(2.5, s, world), 2.5);
  EXPECT_DOUBLE_EQ(global_mean(7.0, TokenShare{0, 0}, world), 0.0);
  EXPECT_THROW(share_tokens(-1, world), Error);
}

}  // namespace
}  // namespace attn::dist
