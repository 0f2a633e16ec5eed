// kernels/batch_invariant.h — the batch-invariant mode's flag, one per thread. In the mode a
// row's results must not depend on the other rows of the call (how many, which, in what order),
// on key positions that are masked out, or on the thread count: gemm<float> sums every output of
// x W^T in one fixed order for any M (gemm.h), and scaled_dot_product_attention runs the
// row-wise kernel (attention_invariant.h). Only the calling thread's flag counts: the kernels
// read it before any OpenMP region and hand the decision to their workers. Upper layers set it
// through attn/ops/batch_invariant.h (BatchInvariantGuard).
#pragma once

namespace attn::kernels {

// Turns the mode on or off for the calling thread (off in every new thread).
void set_batch_invariant(bool on);
// Whether the mode is on for the calling thread.
bool batch_invariant();

}  // namespace attn::kernels
