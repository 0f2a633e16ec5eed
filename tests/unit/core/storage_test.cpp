// Tests of Storage and its size-class cache: rounding and alignment, reuse of freed blocks,
// no block handed out twice while alive, a thread's own freed blocks first, zeros still zero on
// a recycled block, release, the limit, the off and poison modes, and concurrent use from OpenMP
// threads.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "attn/core/storage.h"
#include "attn/core/tensor.h"

namespace attn {
namespace {

// Restores the cache's mode and limit after a test changes them.
class CacheGuard {
 public:
  CacheGuard() : mode_(storage_cache_mode()), limit_(storage_cache_stats().limit_bytes) {
    set_storage_cache_mode(StorageCacheMode::On);
  }
  ~CacheGuard() {
    set_storage_cache_mode(mode_);
    set_storage_cache_limit(limit_);
  }

 private:
  StorageCacheMode mode_;
  size_t limit_;
};

TEST(StorageCache, SizeClassesRoundUpWithBoundedWaste) {
  EXPECT_EQ(storage_size_class(1), 64u);
  EXPECT_EQ(storage_size_class(64), 64u);
  EXPECT_EQ(storage_size_class(65), 128u);
  EXPECT_EQ(storage_size_class(4096), 4096u);
  EXPECT_EQ(storage_size_class(4097), 4608u);  // 4096 + 4096/8
  EXPECT_EQ(storage_size_class(1 << 20), size_t{1} << 20);
  for (size_t n = 1; n < (size_t{1} << 24); n = n * 3 / 2 + 7) {
    const size_t c = storage_size_class(n);
    EXPECT_GE(c, n);
    EXPECT_EQ(c % 64, 0u) << n;
    if (n > 4096) {
      EXPECT_LE(c, n + n / 8) << n;
    }
    EXPECT_EQ(storage_size_class(c), c) << "a class is its own class: " << n;
  }
}

TEST(StorageCache, BlocksAreAlignedAndKeepTheRequestedSize) {
  CacheGuard guard;
  for (size_t n : {1u, 63u, 64u, 1000u, 5000u, 100000u}) {
    auto s = Storage::allocate(n);
    EXPECT_EQ(s->nbytes(), n);
    ASSERT_NE(s->data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s->data()) % 64, 0u);
    std::memset(s->data(), 1, storage_size_class(n));  // the whole class is usable
  }
  EXPECT_EQ(Storage::allocate(0)->data(), nullptr);
}

TEST(StorageCache, FreedBlockIsReusedForARequestOfTheSameClass) {
  CacheGuard guard;
  void* first = nullptr;
  {
    auto s = Storage::allocate(10000);
    first = s->data();
  }
  const auto before = storage_cache_stats();
  auto s = Storage::allocate(9800);  // same class as 10000
  const auto after = storage_cache_stats();
  EXPECT_EQ(s->data(), first);
  EXPECT_EQ(after.hits, before.hits + 1);
  EXPECT_EQ(after.misses, before.misses);
}

TEST(StorageCache, AThreadTakesBackTheBlockItFreedBeforeOneAnotherThreadFreedLater) {
  // A block freed by this thread, then one of the same class freed by another thread: the
  // next request of this thread gets its own block back (likely still in its core's caches),
  // the one after that the other thread's (nothing is lost). Threads share 8 free-list slots
  // round robin, so of 8 threads started one after another at most one shares this thread's
  // slot (and then the later block comes first, as in a single list).
  CacheGuard guard;
  int own_first = 0;
  for (int trial = 0; trial < 8; ++trial) {
    release_cached_memory();
    auto a = Storage::allocate(40000);
    auto b = Storage::allocate(40000);
    void* pa = a->data();
    void* pb = b->data();
    a.reset();  // into this thread's slot
    std::thread other([b = std::move(b)]() mutable { b.reset(); });  // into the other's
    other.join();
    auto first = Storage::allocate(40000);
    auto second = Storage::allocate(40000);
    if (first->data() == pa) ++own_first;
    EXPECT_TRUE((first->data() == pa && second->data() == pb) || (first->data() == pb && second->data() == pa));
  }
  EXPECT_GE(own_first, 7);
}

TEST(StorageCache, ARequestMayTakeASomewhatLargerCachedBlockButNotAMuchLargerOne) {
  CacheGuard guard;
  release_cached_memory();
  void* big = nullptr;
  {
    auto s = Storage::allocate(40000);  // class 40960
    big = s->data();
  }
  auto before = storage_cache_stats();
  {
    auto s = Storage::allocate(36000);  // class 36864, empty: takes the 40960 block
    EXPECT_EQ(s->data(), big);
    std::memset(s->data(), 3, 40960);
  }
  auto after = storage_cache_stats();
  EXPECT_EQ(after.hits, before.hits + 1);
  EXPECT_EQ(after.cached_bytes, 40960u) << "the block returns to its own class";
  before = after;
  auto small = Storage::allocate(10000);  // class 10240: 40960 is too far up
  after = storage_cache_stats();
  EXPECT_NE(small->data(), big);
  EXPECT_EQ(after.misses, before.misses + 1);
}

TEST(StorageCache, LiveBlocksAreNeverSharedEvenAfterManyRecycles) {
  CacheGuard guard;
  for (int round = 0; round < 5; ++round) {
    std::vector<std::shared_ptr<Storage>> live;
    for (int i = 0; i < 64; ++i) live.push_back(Storage::allocate(256 + 32 * (i % 4)));
    std::set<void*> distinct;
    for (auto& s : live) distinct.insert(s->data());
    EXPECT_EQ(distinct.size(), live.size());
    // Distinct writes: each block keeps its own value.
    for (size_t i = 0; i < live.size(); ++i)
      std::memset(live[i]->data(), static_cast<int>(i), live[i]->nbytes());
    for (size_t i = 0; i < live.size(); ++i) {
      const auto* p = static_cast<const unsigned char*>(live[i]->data());
      for (size_t b = 0; b < live[i]->nbytes(); ++b) ASSERT_EQ(p[b], static_cast<unsigned char>(i));
    }
    live.resize(live.size() / 2);  // half go back to the cache for the next round
  }
}

TEST(StorageCache, ZerosAndFullFillARecycledBlock) {
  CacheGuard guard;
  set_storage_cache_mode(StorageCacheMode::Poison);  // recycled and fresh blocks hold 0xFF
  {
    Tensor junk = Tensor::full({3, 7}, 5.0);
  }
  Tensor z = Tensor::zeros({3, 7});
  for (float v : z.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  Tensor zd = Tensor::zeros({2, 5}, DType::F64);
  for (double v : zd.to_vector<double>()) EXPECT_EQ(v, 0.0);
  Tensor o = Tensor::ones({3, 7});
  for (float v : o.to_vector<float>()) EXPECT_EQ(v, 1.0f);
  Tensor e = Tensor::empty({4});
  for (float v : e.to_vector<float>()) EXPECT_TRUE(v != v) << "poison reads as NaN";
}

TEST(StorageCache, ReleaseGivesCachedBlocksBack) {
  CacheGuard guard;
  { auto s = Storage::allocate(1 << 16); }
  EXPECT_GT(storage_cache_stats().cached_bytes, 0u);
  release_cached_memory();
  const auto st = storage_cache_stats();
  EXPECT_EQ(st.cached_bytes, 0u);
  EXPECT_EQ(st.cached_blocks, 0u);
  // Blocks in use are untouched and still come back afterwards.
  auto s = Storage::allocate(1 << 16);
  std::memset(s->data(), 7, s->nbytes());
  s.reset();
  EXPECT_EQ(storage_cache_stats().cached_bytes, size_t{1} << 16);
}

TEST(StorageCache, LimitBoundsTheCachedBytes) {
  CacheGuard guard;
  release_cached_memory();
  set_storage_cache_limit(100000);
  {
    std::vector<std::shared_ptr<Storage>> v;
    for (int i = 0; i < 10; ++i) v.push_back(Storage::allocate(32768));
  }
  const auto st = storage_cache_stats();
  EXPECT_LE(st.cached_bytes, 100000u);
  EXPECT_EQ(st.cached_bytes, 3u * 32768u);
  set_storage_cache_limit(40000);  // lowering it trims at once
  EXPECT_EQ(storage_cache_stats().cached_bytes, 32768u);
}

TEST(StorageCache, OffModeFreesEveryBlock) {
  CacheGuard guard;
  { auto s = Storage::allocate(5000); }
  set_storage_cache_mode(StorageCacheMode::Off);
  EXPECT_EQ(storage_cache_stats().cached_bytes, 0u);
  const auto before = storage_cache_stats();
  { auto s = Storage::allocate(5000); }
  const auto after = storage_cache_stats();
  EXPECT_EQ(after.misses, before.misses + 1);
  EXPECT_EQ(after.freed, before.freed + 1);
  EXPECT_EQ(after.cached_bytes, 0u);
}

TEST(StorageCache, ConcurrentAllocationsFromOpenMPThreadsStayDistinct) {
  CacheGuard guard;
  const int threads = 4;
  std::vector<int> bad(threads, 0);
#pragma omp parallel for num_threads(threads) schedule(static, 1)
  for (int t = 0; t < threads; ++t) {
    for (int it = 0; it < 200; ++it) {
      std::vector<std::shared_ptr<Storage>> mine;
      for (int k = 0; k < 8; ++k) {
        mine.push_back(Storage::allocate(static_cast<size_t>(512 + 64 * k)));
        std::memset(mine.back()->data(), t * 16 + k, mine.back()->nbytes());
      }
      for (int k = 0; k < 8; ++k) {
        const auto* p = static_cast<const unsigned char*>(mine[static_cast<size_t>(k)]->data());
        for (size_t b = 0; b < mine[static_cast<size_t>(k)]->nbytes(); ++b)
          if (p[b] != static_cast<unsigned char>(t * 16 + k)) bad[static_cast<size_t>(t)] = 1;
      }
    }
  }
  for (int t = 0; t < threads; ++t) EXPECT_EQ(bad[static_cast<size_t>(t)], 0) << "thread " << t;
  const auto st = storage_cache_stats();
  EXPECT_LE(st.cached_bytes, st.limit_bytes);
}

TEST(StorageCache, WrappedMemoryIsNotCached) {
  CacheGuard guard;
  static float buffer[16];
  const auto before = storage_cache_stats();
  { auto s = Storage::wrap(buffer, sizeof buffer, nullptr); }
  const auto after = storage_cache_stats();
  EXPECT_EQ(after.returned, before.returned);
  EXPECT_EQ(after.cached_bytes, before.cached_bytes);
}

// A ShapesOnlyGuard tensor's storage gets memory on materialize(), zero-filled, and a view of
// it sees the same memory; a storage with memory is left alone.
TEST(Storage, MaterializeGivesAShapesOnlyStorageZeroedMemorySharedByItsViews) {
  Tensor t;
  {
    const ShapesOnlyGuard no_memory;
    t = Tensor::zeros({4, 1000}, DType::F32);
  }
  const Tensor view = t.slice(0, 2, 4);
  ASSERT_EQ(t.impl_ptr()->storage->data(), nullptr);
  t.impl_ptr()->storage->materialize();
  ASSERT_NE(t.impl_ptr()->storage->data(), nullptr);
  const std::vector<float> all = t.to_vector<float>();
  EXPECT_TRUE(std::all_of(all.begin(), all.end(), [](float x) { return x == 0.0f; }));
  t.fill(2.5);
  EXPECT_EQ(view.to_vector<float>().front(), 2.5f) << "the view shares the materialized memory";
  void* const data = t.impl_ptr()->storage->data();
  t.impl_ptr()->storage->materialize();
  EXPECT_EQ(t.impl_ptr()->storage->data(), data) << "a storage with memory is left alone";
  EXPECT_EQ(t.to_vector<float>().back(), 2.5f);
}

}  // namespace
}  // namespace attn
