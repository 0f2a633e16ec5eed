// kernels/softmax.h — softmax and log_softmax over the last dimension of a [rows, cols] block.
// Used by attention (§3.2.1, Eq. 1) and by the output distribution (§3.4). Max-subtracted;
// a row that is entirely -inf gives zeros (softmax) or -inf (log_softmax) and a zero
// gradient instead of NaN. Raw pointers, contiguous rows, no allocation, float and double.
#pragma once

#include <cstdint>

namespace attn::kernels {

// y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)); all -inf rows give zeros.
template <class T>
void softmax_forward(T* y, const T* x, int64_t rows, int64_t cols);

// dx += y * (dy - sum(dy * y)) per row, with y the forward output.
template <class T>
void softmax_backward(T* dx, const T* dy, const T* y, int64_t rows, int64_t cols);

// y[r, :] = x[r, :] - max - log(sum(exp(x[r, :] - max))); all -inf rows stay -inf.
template <class T>
void log_softmax_forward(T* y, const T* x, int64_t rows, int64_t cols);

// dx += dy - exp(y) * sum(dy) per row, with y the forward output; 0 for all -inf rows.
template <class T>
void log_softmax_backward(T* dx, const T* dy, const T* y, int64_t rows, int64_t cols);

}  // namespace attn::kernels
