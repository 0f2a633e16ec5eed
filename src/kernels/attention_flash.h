// kernels/attention_flash.h — scaled dot-product attention (paper §3.2.1, Eq. 1) as a tiled,
// fused kernel pair in the FlashAttention-2 manner, on CPU caches instead of GPU SRAM: query
// tiles x key tiles, an online softmax, and only the per-row log-sum-exp saved; the backward
// recomputes the scores tile by tile. Extra memory is O(B*H*Tq) plus per-thread tiles.
// It does no dropout and returns no weights (the naive kernel does both); it does not check
// shapes or allocate tensors. It must match attention_naive for every mask kind.
#pragma once

#include <cstdint>

#include "kernels/attention_naive.h"  // AttentionMask, apply_attention_mask_row

namespace attn::kernels {

// Default tile sizes: a 64 x 64 score tile is 16 KiB in f32, so the score tile, one query
// tile and one key/value tile of Dh = 64 fit together in a 256 KiB L2. Tunable.
inline constexpr int64_t kFlashTileQ = 64;
inline constexpr int64_t kFlashTileK = 64;

// Tile sizes of one call (tests use small ones to cross many tile edges at small T).
struct FlashTiles {
  int64_t q = kFlashTileQ;  // query rows per tile, Br
  int64_t k = kFlashTileK;  // key columns per tile, Bc
};

// out [B, H, Tq, Dv] = softmax(q k^T * scale + mask) v, and lse [B, H, Tq] the per-row
// log-sum-exp of the masked scores, L_i = m_i + log sum_j exp(S_ij - m_i). A row whose keys
// are all masked gets output 0 and lse = -inf (the marker the backward reads).
// q [B, H, Tq, Dh], k [B, Hkv, Tk, Dh], v [B, Hkv, Tk, Dv], all contiguous; query head h
// reads K/V head h / (H / Hkv) (grouped-query attention; the overload without Hkv has Hkv = H).
template <class T>
void attention_flash_forward(T* out, T* lse, const T* q, const T* k, const T* v,
                             const AttentionMask<T>& mask, int64_t B, int64_t H, int64_t Hkv,
                             int64_t Tq, int64_t Tk, int64_t Dh, int64_t Dv, T scale,
                             FlashTiles tiles = {});
template <class T>
inline void attention_flash_forward(T* out, T* lse, const T* q, const T* k, const T* v,
                                    const AttentionMask<T>& mask, int64_t B, int64_t H, int64_t Tq,
                                    int64_t Tk, int64_t Dh, int64_t Dv, T scale, FlashTiles tiles = {}) {
  attention_flash_forward<T>(out, lse, q, k, v, mask, B, H, H, Tq, Tk, Dh, Dv, scale, tiles);
}

// Given dout = dL/dout and the forward's out and lse, accumulates (+=) dq, dk, dv, which the
// caller zeroed. P is recomputed per tile as exp(S - L); nothing of size Tq x Tk is stored.
// With Hkv < H each K/V head gathers the gradients of its H / Hkv query heads.
template <class T>
void attention_flash_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse,
                              const T* q, const T* k, const T* v, const AttentionMask<T>& mask,
                              int64_t B, int64_t H, int64_t Hkv, int64_t Tq, int64_t Tk, int64_t Dh,
                              int64_t Dv, T scale, FlashTiles tiles = {});
template <class T>
inline void attention_flash_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse,
                                     const T* q, const T* k, const T* v, const AttentionMask<T>& mask,
                                     int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t Dh, int64_t Dv,
                                     T scale, FlashTiles tiles = {}) {
  attention_flash_backward<T>(dq, dk, dv, dout, out, lse, q, k, v, mask, B, H, H, Tq, Tk, Dh, Dv, scale, tiles);
}

}  // namespace attn::kernels
