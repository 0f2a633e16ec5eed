// attn/ops/threads.h — how many threads the operations use: OpenMP's team size and OpenBLAS's
// thread count, set together (the kernels layer owns both; src/kernels/gemm.cpp is the only
// caller of BLAS). Upper layers (training, the command line) set threads through this header
// and never declare BLAS symbols themselves. Not here: which count a run should use (that is
// train::training_threads), or thread binding.
#pragma once

#include <cstdint>

namespace attn {

// Sets the OpenMP thread count and OpenBLAS's to n (n >= 1); n = 0 leaves the runtime's default.
// With Debian's OpenMP build of OpenBLAS, BLAS follows omp_set_num_threads and runs single-
// threaded inside parallel regions, so one setting drives both.
void set_num_threads(int64_t n);

}  // namespace attn
