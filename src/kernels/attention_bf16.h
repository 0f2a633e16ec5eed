// kernels/attention_bf16.h — scaled dot-product attention (paper §3.2.1, Eq. 1) with its two
// products on bf16 operands, for the bidirectional self-attention of bf16 models (the
// encoder's; nn/attention.cpp asks for it through SdpaOptions::bf16_products). Inference only:
// no backward, no weights, no dropout. For one query row i of slice (b, h):
//   s_j = scale * sum_d bf16(q_d) bf16(k_jd)   (float32 sums; then the mask as
//                                              apply_attention_mask_row applies it)
//   m = max_j s_j,  e_j = exp(s_j - m),  l = sum_j e_j   (float32)
//   out = (sum_j bf16(e_j) bf16(v_j)) * (1 / l),  lse = m + log l
// bf16() is round-to-nearest-even. The products run on AMX tiles (tdpbf16ps, float32 sums in
// the hardware's order), or without them in order (AttentionBf16Path below); the row-wise work
// (scale, mask, max, exp, sum) stays float32. Every sum
// runs over fixed chunks from key 0 (32 keys, 32 features), and masked keys or keys past Tk add
// exact zeros, so a row's bits depend on its own keys only: not on the other rows of the call,
// on right padding with masked keys, on Tq, or on the thread count (batch-invariant by
// construction, as the engine needs). A row whose keys are all masked gives 0 and lse = -inf.
// Any Dh and Dv (features past them are zero-padded to a multiple of 32), any mask kind.
#pragma once

#include <cstdint>

#include "kernels/attention_naive.h"  // AttentionMask, AttentionDims, AttentionLayout

namespace attn::kernels {

// The two ways attention_bf16_forward computes: on the AMX-BF16 tiles, or without them (the
// same roundings of q, k, v and the probabilities, each float32 sum taken in order: over the
// features for a score, over the keys for an output). The bits of the two differ (the tiles sum
// each chunk of 32 in the hardware's own order); both meet the same bound, and both give a row
// the same bits alone as among other rows, right-padded or not, under any thread count.
enum class AttentionBf16Path : uint8_t { Tiles, Portable };

// Whether this CPU and build can run the path (Portable: always; Tiles: AMX-BF16, granted by
// the OS).
bool attention_bf16_path_supported(AttentionBf16Path path);

// Whether the attention op runs this kernel (on the tiles) instead of the float32 one: the
// tiles exist and the bf16 products' path is the tiles (ATTN_AMX=0 or ATTN_ISA below avx512 turn
// it off). Elsewhere the float32 kernels are the faster choice.
bool attention_bf16_available();

// out [B, H, Tq, Dv] and lse [B, H, Tq] (packed; may be null) from q [B, H, Tq, Dh],
// k [B, Hkv, Tk, Dh], v [B, Hkv, Tk, Dv] laid out as `layout` says; query head h reads K/V head
// h / (H / Hkv). Parallel over (batch row, head) pairs. The first form takes the tiles where
// they exist and the portable path elsewhere; the second the path given (an attn::Error if the
// CPU cannot run it).
void attention_bf16_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                            const AttentionMask<float>& mask, const AttentionDims& d, float scale,
                            const AttentionLayout& layout);
void attention_bf16_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                            const AttentionMask<float>& mask, const AttentionDims& d, float scale,
                            const AttentionLayout& layout, AttentionBf16Path path);

}  // namespace attn::kernels
