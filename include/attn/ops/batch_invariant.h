// attn/ops/batch_invariant.h — the batch-invariant mode of decoding (continuous batching in
// attn serve): while it is on, a row's results are the same bits whatever else is computed with
// it. Concretely, for the forward pass of inference:
//   - every product x W^T (float32 and float64: linear layers, the output head, the experts of
//     a mixture) sums each output element in one fixed order, whatever the number of rows M,
//     the row's place among them and the thread count (kernels/gemm.h: the small-M dot
//     products, in chunks of kSmallM rows, for any M and any weight size);
//   - scaled_dot_product_attention (float32 and float64, without need_weights or dropout)
//     visits, for each (row, head, query), only the keys it may see, in increasing key order,
//     and skips masked keys entirely: left or right padding, the key length Tk, the batch size,
//     grouped heads and the thread count do not change the bits. Key padding, causal masks,
//     sliding windows, ALiBi and additive float masks are all supported (a -inf entry is a
//     skipped key); a call with need_weights or dropout_p > 0 runs the naive kernels and is NOT
//     invariant. The backward of the mode's attention is the flash kernel's (same gradients).
//   - the row-wise kernels (layer and RMS norm, softmax, log_softmax, element-wise ops,
//     embedding, rotary and sinusoidal positions) are invariant in any mode: each row runs
//     one vector kernel whose order depends only on the row's length.
// Not invariant in the mode: products with op(A) = A^T or op(B) = B (BLAS; no layer uses them
// in a decoding step), a mixture of experts with a capacity factor > 0 (which tokens are dropped
// depends on the whole batch), and anything called from other threads than the one that turned
// the mode on (the flag is per thread; OpenMP workers inherit the caller's decisions).
// The mode costs speed: BLAS is faster than the fixed-order dot products once a product has
// many rows (prefill of long prompts), and the flash kernel than the row-wise one.
#pragma once

namespace attn {

// Whether the mode is on for the calling thread.
bool batch_invariant();

// Turns the mode on (or, with on = false, off) for the calling thread for the guard's lifetime,
// then restores the previous setting. Guards nest.
class BatchInvariantGuard {
 public:
  explicit BatchInvariantGuard(bool on = true);
  ~BatchInvariantGuard();
  BatchInvariantGuard(const BatchInvariantGuard&) = delete;
  BatchInvariantGuard& operator=(const BatchInvariantGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace attn
