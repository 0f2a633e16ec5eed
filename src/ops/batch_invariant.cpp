// The batch-invariant mode (attn/ops/batch_invariant.h): the guard sets the kernels layer's
// per-thread flag (kernels/batch_invariant.h), which gemm and the attention op read.
#include "attn/ops/batch_invariant.h"

#include "kernels/batch_invariant.h"

namespace attn {

bool batch_invariant() { return kernels::batch_invariant(); }

BatchInvariantGuard::BatchInvariantGuard(bool on) : previous_(kernels::batch_invariant()) {
  kernels::set_batch_invariant(on);
}

BatchInvariantGuard::~BatchInvariantGuard() { kernels::set_batch_invariant(previous_); }

}  // namespace attn
