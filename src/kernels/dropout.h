// kernels/dropout.h — inverted dropout (§5.4 "Residual Dropout", P_drop = 0.1): each element is
// zeroed with probability p and survivors are scaled by 1/(1-p), so evaluation needs no rescale.
// The mask is drawn from attn::Rng in row-major order, one uniform() per element, so a seed
// fixes it bit for bit. No allocation here: the op owns the mask buffer.
#pragma once

#include <cstdint>

#include "attn/core/rng.h"

namespace attn::kernels {

// keep[i] = !(rng.uniform() < p) for i < n: one draw per element in row-major order, leaving
// rng exactly where n calls of uniform() would (for any op that drops with its own scale).
void dropout_mask(uint8_t* keep, int64_t n, double p, Rng& rng);

// keep = dropout_mask(n, p, rng);  out[i] = keep[i] ? x[i] * scale : 0, scale = 1 / (1 - p).
template <class T>
void dropout_forward(T* out, uint8_t* keep, const T* x, int64_t n, double p, Rng& rng);
// forward: out = x * keep * scale;  d out / dx = keep * scale, so dx[i] += dout[i] * keep[i] * scale.
template <class T>
void dropout_backward(T* dx, const T* dout, const uint8_t* keep, T scale, int64_t n);

}  // namespace attn::kernels
