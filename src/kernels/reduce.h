// kernels/reduce.h — sums: over all elements (for losses and gradient checks) and over one
// dimension (for bias gradients and pooled statistics). Raw pointers and sizes, no allocation.
// Float sums accumulate in double. Not here: max/argmax reductions, multi-dimension sums.
#pragma once

#include <cstdint>

namespace attn::kernels {

// out[0] = sum_i x[i] over n elements, accumulated in double.
template <class T> void sum_forward(T* out, const T* x, int64_t n);
// forward: out = sum_i x[i];  d out / d x[i] = 1, so dx[i] += dout[0] * 1.
// mean passes dout[0] / n.
template <class T> void sum_backward(T* dx, const T* dout, int64_t n);

// Viewing x as [outer, n, inner]: out[o, i] = sum_k x[o, k, i] (accumulated in double).
template <class T> void sum_dim_forward(T* out, const T* x, int64_t outer, int64_t n, int64_t inner);
// forward: out[o, i] = sum_k x[o, k, i];  dx[o, k, i] += dout[o, i].
template <class T> void sum_dim_backward(T* dx, const T* dout, int64_t outer, int64_t n, int64_t inner);

}  // namespace attn::kernels
