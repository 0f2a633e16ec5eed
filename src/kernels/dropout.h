// kernels/dropout.h — inverted dropout (§5.4 "Residual Dropout", P_drop = 0.1): each element is
// zeroed with probability p and survivors are scaled by 1/(1-p), so evaluation needs no rescale.
// The mask is drawn from attn::Rng in row-major order, four elements per 64-bit draw, so a seed
// fixes it bit for bit (whatever the thread count or ISA). No allocation here: the op owns the
// mask buffer.
#pragma once

#include <cstdint>

#include "attn/core/rng.h"

namespace attn::kernels {

// The drop threshold on a 16-bit field: t = round(p * 2^16), halves rounded up (p * 2^16 is
// exact in double), then clamped to [1, 65535] when p > 0; t = 0 for p <= 0. An element is
// dropped when its field < t, with probability t / 2^16: p quantised to a multiple of 2^-16
// (within 2^-17 of p), except that any p > 0 still drops (t >= 1) and a p within 2^-17 of 1
// still keeps one field value in 2^16 (t <= 65535).
uint32_t dropout_threshold(double p);

// The mask: draw j = rng.next_u64() for j < ceil(n / 4), in order, decides elements 4j..4j+3
// from its four 16-bit fields (element 4j + f uses bits 16f..16f+15), and
// keep[i] = field(i) >= dropout_threshold(p). A trailing partial group still consumes one
// whole draw, so the generator ends ceil(n / 4) draws on, and a call on n = 4k + m elements
// draws the same mask as a call on 4k followed by one on m.
void dropout_mask(uint8_t* keep, int64_t n, double p, Rng& rng);

// keep = dropout_mask(n, p, rng);  out[i] = keep[i] ? x[i] * scale : 0, scale = 1 / (1 - p).
// (The scale uses p itself, not its quantised t / 2^16.)
template <class T>
void dropout_forward(T* out, uint8_t* keep, const T* x, int64_t n, double p, Rng& rng);
// forward: out = x * keep * scale;  d out / dx = keep * scale, so dx[i] += dout[i] * keep[i] * scale.
template <class T>
void dropout_backward(T* dx, const T* dout, const uint8_t* keep, T scale, int64_t n);
// The same gradient written instead of accumulated: dx[i] = keep[i] ? dout[i] * scale : 0, so
// dx may be uninitialised (no zero fill first).
template <class T>
void dropout_backward_write(T* dx, const T* dout, const uint8_t* keep, T scale, int64_t n);

}  // namespace attn::kernels
