// kernels/attention_rows.h — scaled dot-product attention (paper §3.2.1, Eq. 1) in float32 for
// sequences longer than the short kernel takes, when the call needs the naive pair's
// contract (weights returned, or attention dropout: training): the naive pair's products
// (kernels::gemm, the same calls) and order of operations, with its row-wise loops on the vector
// kernels (simd/vector_kernels.h): the softmax rows (scalar std::exp in the naive kernel), the
// dropout product and the softmax backward. On the base encoder layer's training step
// (T = 128) the naive pair's scalar loops took about 7% of the step.
// Not here: float64 and the reference itself (attention_naive.h), short sequences
// (attention_short.h), calls without weights or dropout (attention_flash.h).
#pragma once

#include "kernels/attention_naive.h"

namespace attn::kernels {

// As attention_naive_forward<float> (same arguments, same outputs within float rounding).
void attention_rows_forward(float* out, float* probs, float* work, const float* q, const float* k, const float* v,
                            const AttentionMask<float>& mask, const float* dropout_scale, const AttentionDims& d,
                            float scale, const AttentionLayout& layout);

// As attention_naive_backward<float>: dq, dk, dv written (not accumulated).
void attention_rows_backward(float* dq, float* dk, float* dv, float* work, const float* dout, const float* probs,
                             const float* dropout_scale, const float* q, const float* k, const float* v,
                             const AttentionDims& d, float scale, const AttentionLayout& x, const AttentionLayout& dx);

}  // namespace attn::kernels
