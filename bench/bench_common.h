// bench/bench_common.h — what the Google Benchmark binaries of bench/ share: one thread
// count for OpenMP and OpenBLAS (our `--threads=N` flag, read before Google Benchmark sees
// the command line), random float32 inputs, and the main() that runs the registered cases.
// The PyTorch twins live in bench/torch_bench.py; bench/compare.py runs both sides.
// Not here: timing logic (Google Benchmark's) or any statistics beyond its aggregates.
#pragma once

#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "attn/core/rng.h"
#include "attn/core/tensor.h"
#include "attn/ops/threads.h"

namespace attn::bench {

// Removes `--threads=N` (or `--threads N`) from argv and returns N (0 when absent).
inline int take_threads_flag(int& argc, char** argv) {
  int threads = 0, out = 1;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strncmp(a, "--threads=", 10) == 0) {
      threads = std::atoi(a + 10);
    } else if (std::strcmp(a, "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  return threads;
}

// Sets the thread count of OpenMP and OpenBLAS together (n <= 0: leave the defaults).
inline void set_threads(int n) {
  if (n <= 0) return;
  attn::set_num_threads(n);
}

// A float32 tensor of standard normal values, drawn from a fixed seed.
inline Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Rng rng(seed);
  return Tensor::randn(shape, rng, DType::F32);
}

inline int run_main(int argc, char** argv) {
  set_threads(take_threads_flag(argc, argv));
  benchmark::AddCustomContext("threads", std::to_string(omp_get_max_threads()));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace attn::bench

#define ATTN_BENCH_MAIN() \
  int main(int argc, char** argv) { return attn::bench::run_main(argc, argv); }
