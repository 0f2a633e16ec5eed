// kernels/attention_short.h — scaled dot-product attention (paper §3.2.1, Eq. 1) for short
// sequences in float32: the naive kernel pair's algorithm and contract (attention_naive.h:
// probs saved, dropout through a keep-scale, masks, grouped-query heads, strided operands),
// but each (batch, head) slice is computed by the vector kernels (simd/vector_kernels.h)
// instead of six BLAS calls and scalar softmax loops. At T = 9 a slice is a few thousand
// multiply-adds, so call overhead, not arithmetic, is what the naive kernel spends its time on.
// Not here: float64 (the naive kernel serves it), long sequences (the BLAS products win there).
#pragma once

#include <cstdint>

#include "kernels/attention_naive.h"

namespace attn::kernels {

// Sequences up to this many queries and keys take the short kernel (measured: bench/).
inline constexpr int64_t kShortAttentionMaxT = 32;

inline bool use_short_attention(int64_t Tq, int64_t Tk) {
  return Tq <= kShortAttentionMaxT && Tk <= kShortAttentionMaxT;
}

// As attention_naive_forward<float> (same arguments, same outputs within float rounding).
void attention_short_forward(float* out, float* probs, float* work, const float* q, const float* k,
                             const float* v, const AttentionMask<float>& mask, const float* dropout_scale,
                             const AttentionDims& d, float scale, const AttentionLayout& layout);

// As attention_naive_backward<float>: dq, dk, dv written (not accumulated).
void attention_short_backward(float* dq, float* dk, float* dv, float* work, const float* dout,
                              const float* probs, const float* dropout_scale, const float* q,
                              const float* k, const float* v, const AttentionDims& d, float scale,
                              const AttentionLayout& x, const AttentionLayout& dx);

}  // namespace attn::kernels
