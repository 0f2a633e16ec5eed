// kernels/parallel_for.h — runs a loop's iterations over OpenMP's threads when the loop is worth
// threading, and as a plain loop on the calling thread otherwise, without entering a parallel
// region. libgomp builds a team for every region and ends it with a futex system call, also for
// a team of one: an `if` clause that is false, one thread set, or a region nested in another
// still pays that (a few microseconds each on a VM), and a decoding step of a small model runs
// dozens of regions that should not be threaded.
// Only loops whose iterations are independent belong here: which thread runs an iteration, and
// how many threads there are, must not change any result (reductions keep their own pragmas).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace attn::kernels {

// True when a parallel region entered here would run on more than one thread: more than one
// thread is set, and the region would not be nested inside an active one (OpenMP's default
// allows one active level; nested regions then run on one thread).
inline bool threads_available() {
  return omp_get_max_threads() > 1 && omp_get_active_level() < omp_get_max_active_levels();
}

// f(i) for every i in [0, n): over the threads (schedule(static)) when `parallel` is true, n > 1
// and threads_available(); in order on the calling thread otherwise.
template <class F>
inline void parallel_for(int64_t n, bool parallel, F&& f) {
  if (parallel && n > 1 && threads_available()) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) f(i);
  } else {
    for (int64_t i = 0; i < n; ++i) f(i);
  }
}

// Each thread's contiguous share of [0, n): f(begin, end) once per thread (the split of
// schedule(static)), for loops that set up per-thread scratch once; f(0, n) on the calling thread
// when the loop is not threaded. f must not contain OpenMP worksharing constructs.
template <class F>
inline void parallel_ranges(int64_t n, bool parallel, F&& f) {
  if (parallel && n > 1 && threads_available()) {
#pragma omp parallel
    {
      const int64_t team = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t q = n / team, r = n % team;
      const int64_t begin = t * q + std::min(t, r), end = begin + q + (t < r ? 1 : 0);
      if (begin < end) f(begin, end);
    }
  } else if (n > 0) {
    f(int64_t{0}, n);
  }
}

enum class Schedule { Static, Dynamic };

// f(i, thread) for every i in [0, n), on a team of at most `threads` threads (schedule(static)
// or schedule(dynamic, 1), for uneven items) when threads > 1, n > 1 and threads_available();
// `thread` is omp_get_thread_num() in the team, below `threads`, to index per-thread scratch.
// On the calling thread otherwise, with thread 0 (even inside an enclosing parallel region,
// where omp_get_thread_num() would name the outer team's thread).
template <Schedule S, class F>
inline void parallel_for_team(int64_t n, int threads, F&& f) {
  if (threads > 1 && n > 1 && threads_available()) {
    if constexpr (S == Schedule::Dynamic) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
      for (int64_t i = 0; i < n; ++i) f(i, omp_get_thread_num());
    } else {
#pragma omp parallel for schedule(static) num_threads(threads)
      for (int64_t i = 0; i < n; ++i) f(i, omp_get_thread_num());
    }
  } else {
    for (int64_t i = 0; i < n; ++i) f(i, 0);
  }
}

}  // namespace attn::kernels
