// kernels/layer_norm.h — layer normalisation and RMS normalisation over the last dimension.
// LayerNorm(x + Sublayer(x)) of §3.1 (nn.LayerNorm semantics: biased variance, eps inside
// the square root) and its RMSNorm variant. Raw pointers to contiguous [rows, D] blocks,
// no allocation, float and double. w and b may be null (no affine part); gradient outputs
// may be null when that gradient is not wanted. The backward is derived in
// docs/derivations/layer_norm.md.
#pragma once

#include <cstdint>

namespace attn::kernels {

// y = (x - mean) * rstd * w + b per row, rstd = 1 / sqrt(var + eps) with the biased
// variance; mean[rows] and rstd[rows] are saved for the backward.
template <class T>
void layer_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t rows,
                        int64_t D, double eps);

// layer_norm_forward of the sum x + r (elementwise, one rounding: the add op's bits), with the
// sum written into y's row and normalised there: the bits of add then layer_norm_forward,
// without the sum's pass over memory. y may not alias x or r.
template <class T>
void add_layer_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* r, const T* w, const T* b, int64_t rows,
                            int64_t D, double eps);

// dx += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w; dw += sum_rows dy * xhat;
// db += sum_rows dy. Any of dx, dw, db may be null.
template <class T>
void layer_norm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean,
                         const T* rstd, int64_t rows, int64_t D);

// y = x * rstd * w per row, rstd = 1 / sqrt(mean(x^2) + eps), saved in rstd[rows].
template <class T>
void rms_norm_forward(T* y, T* rstd, const T* x, const T* w, int64_t rows, int64_t D, double eps);

// dx += rstd * (g - xhat * mean(g * xhat)), g = dy * w, xhat = x * rstd; dw += sum_rows dy * xhat.
template <class T>
void rms_norm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd,
                       int64_t rows, int64_t D);

}  // namespace attn::kernels
