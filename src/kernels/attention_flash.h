// kernels/attention_flash.h — scaled dot-product attention (paper §3.2.1, Eq. 1) as a tiled,
// fused kernel pair in the FlashAttention-2 manner, on CPU caches instead of GPU SRAM: query
// tiles x key tiles, an online softmax, and only the per-row log-sum-exp saved; the backward
// recomputes the scores tile by tile. Extra memory is O(B*H*Tq) plus, per thread, the tiles
// and a transposed copy of one K/V slice (O(Tk*(Dh+Dv))).
// It does no dropout and returns no weights (the naive kernel does both); it does not check
// shapes or allocate tensors. It must match attention_naive for every mask kind.
#pragma once

#include <bit>
#include <cstdint>

#include "kernels/attention_naive.h"  // AttentionMask, apply_attention_mask_row

namespace attn::kernels {

// Default tile sizes: a 64 x 128 score tile is 32 KiB in f32, so it fits in L1d (64 KiB on
// the AMD EPYC measured) next to a row block, and the slice's K^T (Dh x T) stays in the 2 MiB
// L2 up to T = 4096. Measured at T = 2048, Dh = 64 (float32, one thread): 64 x 128 was the
// fastest of 32..128 x 64..128, by a few percent; tiles with Br * Bc * Dh above 100^3 leave
// OpenBLAS's small-matrix kernels and are slower (128 x 128: +15%). Tunable per call.
inline constexpr int64_t kFlashTileQ = 64;
inline constexpr int64_t kFlashTileK = 128;

// Tile sizes of one call (tests use small ones to cross many tile edges at small T).
struct FlashTiles {
  int64_t q = kFlashTileQ;  // query rows per tile, Br
  int64_t k = kFlashTileK;  // key columns per tile, Bc
};

// out [B, H, Tq, Dv] = softmax(q k^T * scale + mask) v, and lse [B, H, Tq] the per-row
// log-sum-exp of the masked scores, L_i = m_i + log sum_j exp(S_ij - m_i). A row whose keys
// are all masked gets output 0 and lse = -inf (the marker the backward reads).
// q [B, H, Tq, Dh], k [B, Hkv, Tk, Dh], v [B, Hkv, Tk, Dv] and out (sizes d) lie as `layout`
// says (attention_naive.h: HeadLayout; a KV cache with spare room is k and v with a head
// stride of capacity * Dh, read in place); lse is packed. Query head h reads K/V head
// h / (H / Hkv) (grouped-query attention).
template <class T>
void attention_flash_forward(T* out, T* lse, const T* q, const T* k, const T* v,
                             const AttentionMask<T>& mask, const AttentionDims& d, T scale,
                             FlashTiles tiles, const AttentionLayout& layout);

// Keys and values of a paged KV cache (nn/kv_cache.h: BlockPool): k [blocks, Hkv, Bs, Dh] and
// v [blocks, Hkv, Bs, Dv] packed, `block` = Bs slots per block. Batch row b reads key j at
// cache position first + j, its own position p = first + j - origin[b], which lies in slot
// p % Bs of block tables[b * table_stride + p / Bs]. A position with p < 0, past the table,
// or in an entry < 0 reads as zeros (the caller masks such keys).
// bf16 blocks (a KV cache of --kv-dtype bf16): k16 and v16 instead of k and v, the raw bf16
// bits of pools laid out alike; the kernels widen each row to T as they stage it (exact), so
// everything after the staging is the T kernel's, on the rounded keys and values.
template <class T>
struct PagedKV;

// out[i] = the bf16 x[i] as a float (its bits in the top half: exact, float_from_bf16's value),
// written so that the compiler vectorises it at the baseline ISA: decoding widens every cached
// key and value once per step, and a scalar loop there costs a third of a small model's step.
inline void widen_bf16(float* __restrict__ out, const uint16_t* __restrict__ x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(static_cast<uint32_t>(x[i]) << 16);
}

template <class T>
struct PagedKV {
  const T* k = nullptr;
  const T* v = nullptr;
  const uint16_t* k16 = nullptr;  // set (with v16) for bf16 blocks; k and v are then null
  const uint16_t* v16 = nullptr;
  const int32_t* tables = nullptr;  // [B, table_stride]
  int64_t table_stride = 0;
  const int64_t* origin = nullptr;  // [B]
  int64_t first = 0;
  int64_t block = 16;
};

// attention_flash_forward with k and v read from blocks (PagedKV): the same tiles, products
// and accumulation order, so the result is bit-identical to the forward over the same keys
// and values laid out contiguously. Each thread stages one key tile's K and V rows (Bc rows)
// in its scratch before the tile's products. q and out lie as their layouts say.
template <class T>
void attention_flash_forward_paged(T* out, T* lse, const T* q, const PagedKV<T>& kv, const AttentionMask<T>& mask,
                                   const AttentionDims& d, T scale, FlashTiles tiles, const HeadLayout& q_layout,
                                   const HeadLayout& out_layout);

// Given dout = dL/dout and the forward's out and lse, writes dq, dk, dv: every element (each
// thread zeroes the slices it owns, in cache, before adding the tiles' contributions; the
// caller need not zero them). P is recomputed per tile as exp(S - L); nothing of size
// Tq x Tk is stored. With Hkv < H each K/V head gathers the gradients of its H / Hkv query
// heads. q, k, v and out lie as x says, dq, dk, dv and dout as dx says.
template <class T>
void attention_flash_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse,
                              const T* q, const T* k, const T* v, const AttentionMask<T>& mask,
                              const AttentionDims& d, T scale, FlashTiles tiles, const AttentionLayout& x,
                              const AttentionLayout& dx);

}  // namespace attn::kernels
