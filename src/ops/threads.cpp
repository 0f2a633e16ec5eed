// The thread count of the operations (attn/ops/threads.h): checks the count and hands it to the
// kernels layer, which sets OpenMP's and OpenBLAS's together (kernels::set_num_threads).
// Not here: the policy of how many threads a run uses (train/trainer.h).
#include "attn/ops/threads.h"

#include "attn/core/error.h"
#include "kernels/gemm.h"

namespace attn {

std::string blas_core_type_fix() { return kernels::blas_core_type_fix(); }

void set_num_threads(int64_t n) {
  ATTN_CHECK(n >= 0, "set_num_threads", "the thread count must not be negative, got ", n);
  if (n == 0) return;
  kernels::set_num_threads(static_cast<int>(n));
}

int64_t num_threads() { return kernels::num_threads(); }

}  // namespace attn
