// kernels/rotary_embedding.h — rotary position embedding (RoPE; Su et al. 2021, "RoFormer",
// Eq. 34), the rotation attention applies to queries and keys so that their dot product sees
// only the offset between positions. Raw pointers and sizes; no allocation, no shape checks
// (src/ops/rotary_embedding.cpp does those). Angles are computed in double, then applied in T.
#pragma once

#include <cstdint>

namespace attn::kernels {

// out [B, H, T, Dh] = x rotated: for every (b, h, t) and pair i = 0 .. Dh/2 - 1 with features
// (a, b) = (2i, 2i+1) (interleaved) or (i, i + Dh/2) (half), angle = p * theta^(-2i / Dh) and
// p = positions[b * pos_stride_b + t]:
//   out_a = x_a cos(angle) - x_b sin(angle),   out_b = x_a sin(angle) + x_b cos(angle).
// pos_stride_b is T (positions [B, T]) or 0 (positions [T] shared by the batch). out may alias x.
template <class T>
void rotary_embedding_forward(T* out, const T* x, const int64_t* positions, int64_t pos_stride_b, int64_t B,
                              int64_t H, int64_t T_, int64_t Dh, double theta, bool half);

// Accumulates (+=) dx, which the caller zeroed, given dout = dL/dout. The rotation R is
// orthogonal, so dx = R^T dout: the same rotation by -angle.
template <class T>
void rotary_embedding_backward(T* dx, const T* dout, const int64_t* positions, int64_t pos_stride_b, int64_t B,
                               int64_t H, int64_t T_, int64_t Dh, double theta, bool half);

}  // namespace attn::kernels
