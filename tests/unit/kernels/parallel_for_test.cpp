// kernels::parallel_for, parallel_ranges and parallel_for_team (src/kernels/parallel_for.h):
// every index is visited exactly once, on the threads when the loop is threaded; and a loop
// that is not threaded (too little work, one thread, or nested in an active region) runs on the
// calling thread without opening a parallel region of its own, which is what they are for: an
// OpenMP `if` clause that is false still opens one (its omp_get_level() inside is 1, the
// control below shows it), and each such region costs a system call.
#include "kernels/parallel_for.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <vector>

#include "attn/ops/threads.h"

namespace attn::kernels {
namespace {

// Restores the calling thread's OpenMP thread count at the end of a test.
struct ThreadCount {
  int64_t saved = num_threads();
  ~ThreadCount() { set_num_threads(saved); }
};

// Per index: how often it was visited, the nesting level and the thread that ran it.
struct Visits {
  explicit Visits(int64_t n) : count(static_cast<size_t>(n)), level(static_cast<size_t>(n), -1),
                               thread(static_cast<size_t>(n), -1) {}
  std::vector<std::atomic<int>> count;
  std::vector<int> level, thread;
  void visit(int64_t i) {
    count[static_cast<size_t>(i)].fetch_add(1);
    level[static_cast<size_t>(i)] = omp_get_level();
    thread[static_cast<size_t>(i)] = omp_get_thread_num();
  }
  bool each_once() const {
    for (const auto& c : count)
      if (c.load() != 1) return false;
    return true;
  }
};

TEST(ParallelFor, ThreadedLoopVisitsEveryIndexOnceOverTheThreads) {
  ThreadCount keep;
  set_num_threads(2);
  constexpr int64_t n = 1000;
  Visits v(n);
  parallel_for(n, true, [&](int64_t i) { v.visit(i); });
  EXPECT_TRUE(v.each_once());
  EXPECT_EQ(v.level.front(), 1);
  EXPECT_EQ(v.thread.front(), 0);  // schedule(static): the first run of indices on thread 0,
  EXPECT_EQ(v.thread.back(), 1);   // the last on thread 1
}

TEST(ParallelFor, LoopNotThreadedRunsInOrderWithoutARegion) {
  ThreadCount keep;
  for (const int threads : {1, 2}) {
    set_num_threads(threads);
    for (const bool parallel : {false, true}) {
      if (threads == 2 && parallel) continue;  // the threaded case above
      constexpr int64_t n = 300;
      Visits v(n);
      std::vector<int64_t> order;
      parallel_for(n, parallel, [&](int64_t i) {
        v.visit(i);
        order.push_back(i);
      });
      EXPECT_TRUE(v.each_once());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(order[static_cast<size_t>(i)], i);
        ASSERT_EQ(v.level[static_cast<size_t>(i)], 0) << "threads " << threads << ", parallel " << parallel;
      }
    }
  }
  // The control: the pragma this replaces, with a false `if`, opens a region (level 1), which
  // the check on the level above would catch.
  int level = -1;
  const bool no = num_threads() < 0;
#pragma omp parallel if (no)
  level = omp_get_level();
  EXPECT_EQ(level, 1);
}

TEST(ParallelFor, NestedInAnActiveRegionRunsOnTheCallingThread) {
  ThreadCount keep;
  set_num_threads(2);
  const int levels_saved = omp_get_max_active_levels();
  omp_set_max_active_levels(1);  // OpenMP's default: a nested region runs on one thread
  constexpr int64_t n = 64;
  std::vector<int> levels(2, -1), outer(2, -1);
  std::vector<int> ok(2, 0), team_thread(2, -1);
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    Visits v(n);
    parallel_for(n, true, [&](int64_t i) { v.visit(i); });
    levels[static_cast<size_t>(t)] = v.level.front();
    outer[static_cast<size_t>(t)] = v.thread.front();
    ok[static_cast<size_t>(t)] = v.each_once();
    // parallel_for_team hands its body thread 0 here, not the enclosing team's thread number.
    int seen = -1;
    parallel_for_team<Schedule::Dynamic>(4, 2, [&](int64_t, int thread) { seen = thread; });
    team_thread[static_cast<size_t>(t)] = seen;
  }
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(ok[static_cast<size_t>(t)], 1);
    EXPECT_EQ(levels[static_cast<size_t>(t)], 1);  // the enclosing region's level: none opened
    EXPECT_EQ(outer[static_cast<size_t>(t)], t);
    EXPECT_EQ(team_thread[static_cast<size_t>(t)], 0);
  }
  omp_set_max_active_levels(levels_saved);
}

TEST(ParallelRanges, SharesAreContiguousDisjointAndCoverTheRange) {
  ThreadCount keep;
  for (const int threads : {1, 2}) {
    set_num_threads(threads);
    for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{7}, int64_t{1000}}) {
      Visits v(n);
      std::atomic<int> calls{0};
      parallel_ranges(n, true, [&](int64_t begin, int64_t end) {
        calls.fetch_add(1);
        EXPECT_LT(begin, end);
        for (int64_t i = begin; i < end; ++i) v.visit(i);
      });
      EXPECT_TRUE(v.each_once()) << "threads " << threads << ", n " << n;
      EXPECT_EQ(calls.load(), n == 0 ? 0 : (threads == 1 || n == 1 ? 1 : 2));
      if (threads == 1 && n > 0) {
        EXPECT_EQ(v.level.front(), 0);
      }
    }
  }
}

TEST(ParallelForTeam, ThreadIndexStaysBelowTheTeamSize) {
  ThreadCount keep;
  set_num_threads(2);
  constexpr int64_t n = 200;
  for (const int threads : {1, 2}) {
    Visits v(n);
    std::vector<int> index(static_cast<size_t>(n), -1);
    const auto body = [&](int64_t i, int thread) {
      v.visit(i);
      index[static_cast<size_t>(i)] = thread;
    };
    parallel_for_team<Schedule::Dynamic>(n, threads, body);
    EXPECT_TRUE(v.each_once());
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(index[static_cast<size_t>(i)], v.thread[static_cast<size_t>(i)]);
      EXPECT_LT(index[static_cast<size_t>(i)], threads);
      EXPECT_EQ(v.level[static_cast<size_t>(i)], threads > 1 ? 1 : 0);
    }
    Visits w(n);
    parallel_for_team<Schedule::Static>(n, threads, [&](int64_t i, int thread) {
      w.visit(i);
      EXPECT_LT(thread, threads);
    });
    EXPECT_TRUE(w.each_once());
  }
}

}  // namespace
}  // namespace attn::kernels
