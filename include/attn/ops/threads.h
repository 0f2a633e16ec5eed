// attn/ops/threads.h — how many threads the operations use: OpenMP's team size and OpenBLAS's
// thread count, set together (the kernels layer owns both; src/kernels/gemm.cpp is the only
// caller of BLAS). Upper layers (training, the command line) set threads through this header
// and never declare BLAS symbols themselves. Not here: which count a run should use (that is
// train::training_threads), or thread binding.
#pragma once

#include <cstdint>
#include <string>

namespace attn {

// Sets the OpenMP thread count and OpenBLAS's to n (n >= 1); n = 0 leaves the runtime's default.
// With Debian's OpenMP build of OpenBLAS, BLAS follows omp_set_num_threads and runs single-
// threaded inside parallel regions, so one setting drives both.
void set_num_threads(int64_t n);
// The OpenMP team size the calling thread's operations use now. OpenMP keeps it per thread: a
// thread started with std::thread has the runtime's default again (all cores), whatever
// set_num_threads chose on the thread that started it. Code that starts threads which run
// operations passes this count on: set_num_threads(num_threads_of_creator) on the new thread.
int64_t num_threads();

// OpenBLAS picks its matrix kernels for the CPU it detects, once, when it is loaded. Debian 12's
// OpenBLAS (0.3.21) does not know some AVX-512 CPUs (Intel family 6 model 207, for one) and falls
// back to its generic SSE3 kernels ("Prescott"), which run sgemm 3-4x slower there. When that
// happened and OPENBLAS_CORETYPE is unset, returns the core type this CPU's kernels are:
// "Cooperlake" with AVX512-BF16, else "SkylakeX"; empty otherwise (nothing to fix, or the user
// chose). The choice takes effect only in a process that loads OpenBLAS with OPENBLAS_CORETYPE
// set to it (the command line executes itself again so; see cli/main.cpp).
std::string blas_core_type_fix();

}  // namespace attn
