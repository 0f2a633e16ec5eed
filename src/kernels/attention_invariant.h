// kernels/attention_invariant.h — scaled dot-product attention (paper §3.2.1, Eq. 1) one query
// row at a time, for the batch-invariant mode (batch_invariant.h; attn/ops/batch_invariant.h):
// each (batch row, head, query) visits only the keys it may see, in increasing key order, so a
// row's output bits do not depend on the other rows of the call, on masked key positions (left
// padding of rows that joined a shared KV cache later, right padding, a longer Tk), on grouped
// heads or on the thread count. For one query:
//   s_j = scale * dot(q, k_j) (+ bias_j) (- alibi_h * |i' - j|)   for the visible keys j, in order
//   m = max_j s_j,  e_j = exp(s_j - m),  l = sum_j e_j,  out = (sum_j e_j v_j) * (1 / l)
// where a key is visible unless key padding, causal (j > i'), the sliding window
// (j <= i' - window) or a -inf bias entry masks it (i' = i + Tk - Tq, bottom-right aligned, as
// attention_naive.h's AttentionMask): masked keys are skipped, never added as exp(-inf) = 0.
// The dot products, the exp-sum over the visible scores and the weighted sum of values run
// float32 through the vector kernels (simd/vector_kernels.h; their order depends only on Dh,
// Dv and the number of visible keys) and float64 as plain loops. Also writes the log-sum-exp
// L = m + log l per query (-inf when no key is visible, and the output is then 0), so the tiled
// kernel's backward (attention_flash_backward) serves as this kernel's backward.
// Not here: dropout, the weights output (attention_naive), BLAS tiles (the flash kernel is
// faster for long prompts; this one is what a decoding step with Tq = 1 needs).
#pragma once

#include <cstdint>

#include "kernels/attention_flash.h"  // PagedKV
#include "kernels/attention_naive.h"  // AttentionMask, AttentionDims, AttentionLayout

namespace attn::kernels {

// out [B, H, Tq, Dv] and lse [B, H, Tq] (packed) from q [B, H, Tq, Dh], k [B, Hkv, Tk, Dh],
// v [B, Hkv, Tk, Dv], laid out as `layout` says; query head h reads K/V head h / (H / Hkv).
// Parallel over (batch row, head) pairs only; each query's result is computed by one thread.
template <class T>
void attention_invariant_forward(T* out, T* lse, const T* q, const T* k, const T* v, const AttentionMask<T>& mask,
                                 const AttentionDims& d, T scale, const AttentionLayout& layout);

// The same with k and v read in place from the blocks of a pool (PagedKV, as
// attention_flash_forward_paged reads them): key j of row b is its position first + j - origin[b]
// in its block table, and a position with no block reads as zeros (paged_kv_gather's layout).
// Bit-identical to attention_invariant_forward over the gathered keys: the same visits in the
// same order. q and out lie as q_layout and out_layout say.
template <class T>
void attention_invariant_forward_paged(T* out, T* lse, const T* q, const PagedKV<T>& kv, const AttentionMask<T>& mask,
                                       const AttentionDims& d, T scale, const HeadLayout& q_layout,
                                       const HeadLayout& out_layout);

}  // namespace attn::kernels
