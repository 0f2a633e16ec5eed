// attn/ops/attention.h — scaled dot-product attention as one fused op (paper §3.2.1, Eq. 1):
//   out = softmax(q k^T * scale + mask) v,  scale = 1/sqrt(Dh) by default.
// Mask convention (PyTorch's nn.MultiheadAttention): a Bool mask is true where a key is
// masked OUT; a float mask is ADDED to the scores. Masked entries get exactly zero weight.
// A query row whose keys are all masked outputs zeros (and zero gradient), never NaN.
// Causal alignment is bottom-right: with Tq queries and Tk keys, query i sees keys
// j <= i + (Tk - Tq) (top-left and bottom-right agree when Tq == Tk; bottom-right is what a
// KV cache needs).
// Kernels: the tiled FlashAttention-style pair (src/kernels/attention_flash.cpp, memory
// O(B*H*Tq) beyond the inputs) runs whenever need_weights is false and dropout_p == 0; the
// naive pair, which stores the [B, H, Tq, Tk] weights, runs otherwise. Both give the same
// result within floating-point rounding.
#pragma once

#include <cstdint>

#include "attn/core/tensor.h"

namespace attn {

struct SdpaOptions {
  // Bool [Tq, Tk] or [B, H, Tq, Tk] (or any shape broadcastable to [B, H, Tq, Tk]),
  // true = masked out; or float of the same shapes, added to the scores. Optional.
  Tensor attn_mask;
  // Bool [B, Tk], true = this key is padding and no query may see it. Optional.
  Tensor key_padding_mask;
  // Query i may not see key j > i + (Tk - Tq).
  bool causal = false;
  // Sliding-window (local) attention when > 0: query i sees only the keys
  // i' - window < j <= i', i' = i + (Tk - Tq) (bottom-right aligned), so it implies causal.
  // window = 1 lets each query see its own position only. 0 = no window.
  int64_t window = 0;
  // 0 means 1/sqrt(Dh).
  double scale = 0.0;
  // Dropout on the attention weights (training only).
  double dropout_p = 0.0;
  Rng* rng = nullptr;  // required when dropout_p > 0
  // Return the attention weights [B, H, Tq, Tk] (after masking, before dropout).
  bool need_weights = false;

  static SdpaOptions causal_mask() { SdpaOptions o; o.causal = true; return o; }
  static SdpaOptions padding(Tensor key_padding) { SdpaOptions o; o.key_padding_mask = std::move(key_padding); return o; }
  static SdpaOptions sliding_window(int64_t w) { SdpaOptions o; o.causal = true; o.window = w; return o; }
};

struct SdpaResult {
  Tensor out;      // [B, H, Tq, Dv]
  Tensor weights;  // [B, H, Tq, Tk] when need_weights, else undefined (not differentiable)
};

// q [B, H, Tq, Dh], k [B, H, Tk, Dh], v [B, H, Tk, Dv] -> out [B, H, Tq, Dv].
// Differentiable with respect to q, k, v (and a float attn_mask is treated as a constant).
SdpaResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const SdpaOptions& options = {});

}  // namespace attn
