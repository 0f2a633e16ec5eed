// ops/attention_impl.h — private to attn: which kernel pair scaled_dot_product_attention
// runs (paper §3.2.1), decided in one place, and an entry point that forces one so tests and
// benchmarks can compare the tiled (flash) kernels with their naive twin on the same call.
// Not part of the public API: include/attn/ops/attention.h stays kernel-agnostic.
#pragma once

#include "attn/ops/attention.h"

namespace attn::detail {

enum class SdpaImpl {
  Auto,       // choose_sdpa_impl decides
  Naive,      // kernels/attention_naive: stores P [B, H, Tq, Tk]; weights and dropout
  Short,      // kernels/attention_short: the naive pair on the vector kernels (float32, T <= 32)
  Rows,       // kernels/attention_rows: the naive pair's products, its row-wise work on the vector
              // kernels (float32, any length)
  Flash,      // kernels/attention_flash: tiles, online softmax, saves only out and lse
  Invariant,  // kernels/attention_invariant: one query at a time over its visible keys in order
              // (the batch-invariant mode); saves out and lse, the flash backward
  Bf16,       // kernels/attention_bf16: bf16 products on AMX tiles (SdpaOptions::bf16_products);
              // forward only, batch-invariant by construction, so both modes run it
};

// The one decision: Flash unless the call asks for the weights or for dropout, which only
// the naive pair provides; then for float32 Short with at most kShortAttentionMaxT queries
// and keys (kernels/attention_short.h), Rows with more; Naive for float64 (the reference
// dtype). In the calling thread's batch-invariant mode (attn/ops/batch_invariant.h) Invariant
// instead of Flash. Bf16 before both when the options ask for bf16 products, q is float32 and
// attention_bf16_available(). Never returns Auto.
SdpaImpl choose_sdpa_impl(const SdpaOptions& options, DType dtype, int64_t Tq, int64_t Tk);

// scaled_dot_product_attention with the kernel pair forced (Auto = the normal op). Forcing
// Flash or Invariant together with need_weights or dropout_p > 0, or Short or Rows with float64, throws
// attn::Error.
SdpaResult scaled_dot_product_attention_impl(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const SdpaOptions& options, SdpaImpl impl);

}  // namespace attn::detail
