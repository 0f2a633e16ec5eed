// kernels/dropout.h — inverted dropout (§5.4 "Residual Dropout", P_drop = 0.1): each element is
// zeroed with probability p and survivors are scaled by 1/(1-p), so evaluation needs no rescale.
// The mask comes from eight xoshiro256** lanes seeded from the caller's attn::Rng, so a seed
// fixes it bit for bit (whatever the thread count or ISA) while the lanes advance together in
// vector registers. No allocation here: the op owns the mask buffer.
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

// The mask definition. A mask draw sets up 8 lanes: lane l (l = 0..7) is an attn::Rng seeded
// with rng.next_u64() (Rng(seed): xoshiro256** seeded through splitmix64), the 8 seeds drawn
// from the caller's generator in lane order, so the caller's generator advances by exactly 8
// draws per mask, whatever n. Elements go in groups of 4, one 64-bit draw per group: element
// 4g + f uses bits 16f..16f+15 of group g's draw, and group g takes lane (g % 8)'s (g / 8)-th
// draw. The draws are consumed in rounds (one draw from every lane, in lane order); a partial
// last round still advances every lane. keep[i] = field(i) >= dropout_threshold(p).
//
// A stream draws one mask in chunks: each next() continues the same mask where the last one
// stopped, so the chunks join up into the one-call mask. Every chunk but the last must be a
// multiple of 32 elements (one round), checked: a next() after a chunk of another length
// throws attn::Error.
class DropoutMaskStream {
 public:
  // Draws the 8 lane seeds from rng (8 next_u64 calls); rng is not used afterwards.
  DropoutMaskStream(double p, Rng& rng);
  // keep[0..n) = the next n elements of the mask (n >= 0).
  void next(uint8_t* keep, int64_t n);

 private:
  uint64_t state_[32];          // the lanes' xoshiro256** words: state_[w * 8 + l] = word w of lane l
  uint32_t t_;                  // dropout_threshold(p)
  int64_t last_odd_chunk_ = 0;  // the length of a chunk that was not a multiple of 32, once drawn
};

// The whole mask in one call: DropoutMaskStream(p, rng).next(keep, n).
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

// ---- fused forms: one pass where the composition makes two (and one tensor fewer) --------
// The mask is drawn exactly as dropout_forward draws it (the same rng consumption), and the
// arithmetic repeats the composition's operations, so the results are its bits.

// keep = dropout_mask(n, p, rng);  out[i] = residual[i] + (keep[i] ? x[i] * scale : 0): the
// residual connection around a dropped-out sub-layer output (§3.1 with §5.4), equal to
// dropout_forward followed by add (a dropped element gives residual + 0, so -0 becomes +0).
// Its backward needs no kernel of its own: d residual = dout, dx = dropout_backward_write.
template <class T>
void dropout_add_forward(T* out, uint8_t* keep, const T* residual, const T* x, int64_t n, double p, Rng& rng);

// keep = dropout_mask(n, p, rng);  out[i] = keep[i] ? relu(x[i]) * scale : 0 with relu(x) =
// x < 0 ? 0 : x (as relu_forward: -0 and NaN pass through): dropout(relu(x)), the FFN's
// inner activation (§3.3) and its dropout. keep is scratch here: the backward reads out.
template <class T>
void relu_dropout_forward(T* out, uint8_t* keep, const T* x, int64_t n, double p, Rng& rng);

// forward: y = keep * relu(x) * scale;  dy/dx = scale where keep and x > 0, else 0 (relu's
// gradient at 0 is 0). Since scale >= 1, that is exactly where y > 0, so the backward reads
// the output y instead of x and the mask. Written, not accumulated (dx may be uninitialised):
// dx[i] = 0 + (y[i] > 0 ? dout[i] * scale : 0), the + 0 giving the composition's bits (its
// relu_backward adds into zeros, which turns a -0 gradient into +0).
template <class T>
void relu_dropout_backward_write(T* dx, const T* dout, const T* y, T scale, int64_t n);

}  // namespace attn::kernels
