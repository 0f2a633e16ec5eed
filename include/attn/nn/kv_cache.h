// attn/nn/kv_cache.h — the key/value cache of incremental decoding (paper §3.2.3: the decoder
// is auto-regressive, so at step t only the new position's keys and values are new).
// Per decoder layer: the self-attention K/V of every position decoded so far, grown by one
// position per step, and the cross-attention K/V of the encoder output, computed once per
// source and shared by every row (hypothesis) of that source: beam search reorders the rows'
// self-attention K/V and only remaps rows to sources for cross-attention. Decoder-only models
// (GPT style) use the self-attention part only, with left-padded prompts: each row records
// how many PAD positions precede its first token, so that its positions stay its own. With a
// sliding window the layers keep only the last W positions' K/V. The self-attention K/V are
// views of the first positions of a longer buffer: a step writes its rows into the spare
// room in place, and the buffer doubles when the room runs out (append_positions). Typed, no
// string maps.
// Paged layout (KVCache::use_pool): the self-attention K/V live instead in fixed-size blocks
// of a BlockPool shared by every cache of a model, one block table per row shared by every
// layer; blocks are allocated as rows grow and returned when no row holds them any more.
// Blocks carry reference counts: reorder (beam search), copies of the cache and append_rows
// copy tables, not K/V, and a write into a shared block copies it first (copy-on-write). The
// attention reads the blocks in place (ops/attention.h: paged_attention), bit-identical to the
// contiguous layout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attn/core/tensor.h"

namespace attn::nn {

// The self-attention keys and values of one layer, already split into heads: [N, Hkv, T', Dh];
// undefined before the first position. T' = T, or min(T, W) with a sliding window W; Hkv = the
// layer's key/value heads (n_heads without grouped-query attention). Views of T' consecutive
// positions of a buffer [N, Hkv, capacity, Dh] (rows packed within each (n, head) slice, slices
// capacity * Dh apart), not contiguous while room is spare.
struct PagedSelf;  // below: the paged layout's tables, shared by every layer of a cache
struct SelfKV {
  Tensor k, v;
  // Paged layout: k and v stay undefined; the K/V lie in paged->pool's blocks for layer
  // `layer`, and `held` = T' positions (the last T' of the cache's T) are attended.
  PagedSelf* paged = nullptr;
  int64_t layer = 0;
  int64_t held = 0;
  // T' in either layout.
  int64_t positions() const { return paged ? held : (k.defined() ? k.size(2) : 0); }
};

// The cross-attention keys and values of one layer, [N_src, Hkv, S, Dh]: one row per source,
// read by every cache row of that source (KVCache::row_sources); N_src = N until a reorder
// repeats or drops rows. The source padding and the row-to-source map are the cache's
// (KVCache::memory_padding, KVCache::row_sources), shared by every layer.
struct CrossKV {
  Tensor k, v;
};

// One decoder layer's cached keys and values.
struct LayerKV {
  SelfKV self;
  CrossKV cross;
};

// Fixed-size blocks of self-attention keys and values for every layer of one model: block b
// of layer l is k(l)[b] and v(l)[b], each [Hkv, block_size, Dh] (slot s of head h = position
// s of that block). Blocks are handed out one at a time (lowest free first) with a reference
// count of 1; retain/release count holders and a block returns to the free list at 0. Memory
// for all blocks is reserved at construction and touched only as blocks are first written.
// dtype: the model's (f32 or f64), or BF16 for an f32 model (--kv-dtype bf16): each written
// key and value is rounded to bf16 (half the bytes per block), and the attention widens them
// back to f32 exactly as it reads them (ops/attention.h: paged_attention).
class BlockPool {
 public:
  BlockPool(int64_t layers, int64_t kv_heads, int64_t head_dim, DType dtype, int64_t block_size, int64_t blocks);
  // Bytes one block takes over all layers, K and V: 2 * layers * Hkv * block_size * Dh * sizeof
  // (2 for bf16).
  static int64_t bytes_per_block(int64_t layers, int64_t kv_heads, int64_t head_dim, DType dtype,
                                 int64_t block_size);

  int64_t layers() const { return layers_; }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  DType dtype() const { return dtype_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return static_cast<int64_t>(refs_.size()); }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_blocks() const { return num_blocks() - free_blocks(); }
  int64_t peak_used_blocks() const { return peak_used_; }
  int64_t block_bytes() const { return bytes_per_block(layers_, kv_heads_, head_dim_, dtype_, block_size_); }
  int32_t refcount(int32_t block) const;

  // A free block with count 1; an Error naming the pool's size (and the hint, e.g. the
  // option that sizes it) when none is left.
  int32_t allocate();
  void set_full_hint(std::string hint) { full_hint_ = std::move(hint); }
  void retain(int32_t block);
  void release(int32_t block);
  // `block` itself when this holder is its only one; else a new block with its contents (every
  // layer), and this holder's count moves from `block` to it.
  int32_t writable(int32_t block);
  // A test's control only: off, writable() hands a shared block out as it is, so that one
  // holder's write reaches every holder (the bug copy-on-write prevents). On by default.
  void set_copy_on_write(bool on) { copy_on_write_ = on; }
  // A test's reference only: on, an f32 pool rounds what it stores to bf16 values (kept as f32,
  // the bits a bf16 pool's widened values have), so that decoding on it is the f32 kernels' on
  // exactly the keys and values a bf16 pool holds. Off by default.
  void set_round_to_bf16(bool on) { round_to_bf16_ = on; }
  bool round_to_bf16() const { return round_to_bf16_; }
  // [blocks, Hkv, block_size, Dh]
  const Tensor& k(int64_t layer) const { return k_[static_cast<size_t>(layer)]; }
  const Tensor& v(int64_t layer) const { return v_[static_cast<size_t>(layer)]; }

 private:
  int64_t layers_, kv_heads_, head_dim_, block_size_;
  DType dtype_;
  std::vector<Tensor> k_, v_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // a stack: the lowest free block on top
  int64_t peak_used_ = 0;
  bool copy_on_write_ = true;
  bool round_to_bf16_ = false;
  std::string full_hint_ = "give it more memory or decode fewer rows at once";
};

// The paged layout's state, shared by every layer of one KVCache: per row a block table
// (entry i = the block of the row's positions [i * Bs, (i + 1) * Bs); -1 = released) and
// origin, the cache index of the row's own position 0 (> 0 after append_rows left-padded it:
// the indices before read as zeros, and are masked), and the flat tables [rows, stride] the
// kernel reads. Copying one forks it: the copy holds every block once more.
struct PagedSelf {
  std::shared_ptr<BlockPool> pool;
  std::vector<std::vector<int32_t>> tables;
  std::vector<int64_t> origin;
  std::vector<int32_t> flat;  // [rows, stride], -1 past a row's table
  int64_t stride = 0;
  int64_t length = 0;  // the cache's T (KVCache::length())

  PagedSelf() = default;
  PagedSelf(const PagedSelf& other);
  PagedSelf& operator=(const PagedSelf&) = delete;
  ~PagedSelf();
  void release_all();
  void rebuild_flat();
  // Writes x [N, Hkv, T, Dh] (keys, or values when `values`) of `layer` at cache indices
  // [at, at + T) of every row; the blocks must be allocated and writable (and `flat` built).
  // A bf16 pool takes f32 x rounded to nearest even (ops/attention.h: paged_kv_write).
  void write(int64_t layer, const Tensor& x, int64_t at, bool values);
};

class KVCache {
 public:
  KVCache() = default;
  explicit KVCache(int64_t n_layers) : layers_(static_cast<size_t>(n_layers)) {}
  // Copies share the contiguous layout's buffers (as tensors do) and fork the paged layout's
  // blocks (each held once more; a write into a shared block copies it first).
  KVCache(const KVCache& other);
  KVCache& operator=(const KVCache& other);
  KVCache(KVCache&&) = default;
  KVCache& operator=(KVCache&&) = default;
  ~KVCache() = default;

  // Switches the self-attention K/V to the paged layout over `pool` (one per model: its
  // layers, heads and dtype must be the model's). Only before the first position is cached.
  void use_pool(std::shared_ptr<BlockPool> pool);
  bool paged() const { return paged_ != nullptr; }
  const PagedSelf* paged_state() const { return paged_.get(); }
  // Paged layout: the blocks this cache's tables hold (each counted once) and the positions
  // they hold (per row, its positions since its origin that are still held), for waste figures.
  int64_t blocks_held() const;
  int64_t positions_held() const;

  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  LayerKV& layer(int64_t i);
  const LayerKV& layer(int64_t i) const;
  std::vector<LayerKV>& layers() { return layers_; }

  // Rows N (0 before anything is cached or set) and the number of positions appended so far,
  // T (0 before the first step; with a sliding window more than the layers keep).
  int64_t rows() const;
  int64_t length() const;

  // Source rows N_src of the cross-attention K/V and of memory_padding() (0 when neither is set).
  int64_t sources() const;
  // Row r reads source row row_sources()[r] of the cross-attention K/V and memory padding.
  // Empty = row r reads source row r (before any reorder, or after one that kept every row).
  const std::vector<int64_t>& row_sources() const { return row_sources_; }

  // Left padding of decoder-only prompts: left_pad[r] PAD positions precede row r's first
  // token, and cache index t of row r holds position t - left_pad[r] (clamped at 0 for the
  // PAD positions themselves). Empty = no left padding. Reordered with the rows.
  void set_left_pad(std::vector<int64_t> left_pad);
  const std::vector<int64_t>& left_pad() const { return left_pad_; }
  // The positions of the next `count` cache indices of every row: I64 [N, count] with entry
  // (r, t) = max(0, length() + t - left_pad[r]). N = rows().
  Tensor next_positions(int64_t count) const;

  // Source key padding Bool [N_src, S] (true = PAD) or undefined: one row per source, as the
  // cross-attention K/V.
  const Tensor& memory_padding() const { return memory_padding_; }
  void set_memory_padding(const Tensor& padding) { memory_padding_ = padding; }

  // Target key padding: one flag per row for the position just decoded (is_pad [N]); and the
  // whole mask Bool [N, T], undefined when no cached position is PAD.
  void append_self_padding(const std::vector<int>& is_pad);
  // Flags for `count` new positions at once: is_pad [N * count], row-major.
  void append_self_padding(const std::vector<int>& is_pad, int64_t count);
  Tensor self_padding() const;
  // The last `columns` (<= T) columns of that mask, Bool [N, columns]; undefined when none of
  // them is PAD. What a layer that keeps only its last `columns` positions needs.
  Tensor self_padding_last(int64_t columns) const;

  // Keeps row rows[i] as the new row i (rows may repeat and drop rows). The self-attention K/V
  // and padding flags are copied row by row (into fresh buffers of the same capacity, so steps
  // keep appending in place); the cross-attention K/V and memory padding are not: new row i
  // reads the source old row rows[i] read (row_sources), and sources no row reads any more are
  // dropped: the sources that stay move down within their buffer when append_rows made it and
  // no copy of this cache shares it, else they are copied.
  void reorder(const std::vector<int64_t>& rows);

  // Continuous batching (serve/engine.h): appends `other`'s rows after this cache's rows, so
  // that a request that arrives mid-decoding joins the running batch. The two caches must have
  // as many layers. The shorter side is left-padded to the longer's length T: its rows get PAD
  // flags and zero K/V in the new leading positions and their left_pad grows by as much, so
  // every row keeps its own positions (next_positions). The cross-attention sources are
  // concatenated too, the shorter sources right-padded (memory_padding true there) and other's
  // rows reading their own sources. A cache without rows takes other's state as it is.
  // The sources live in a buffer with room for more rows and positions (nn/kv_cache.cpp):
  // while other's fit and no copy of this cache has appended into it, only other's sources are
  // written (as the self-attention K/V's append_positions). Every row's attention sees exactly
  // the keys it saw before (the rest is masked).
  void append_rows(const KVCache& other);
  // Prefix sharing (serve/engine.h): this cache, paged over `from`'s pool and still empty (no
  // positions, at most one row),
  // takes the first `positions` positions of row `row` of `from` as its one row, holding their
  // blocks once more (nothing is copied); its later positions go to blocks of its own, so the
  // shared ones are never written. `positions` must be a positive multiple of the block size,
  // real tokens of that row (no PAD among them), still held by every layer (no sliding window
  // dropped them), and the row's positions must be its own (cache index = origin + position).
  // The caller vouches that those positions hold what this row's own tokens would give (the
  // same tokens, computed on batch-invariant kernels): then this row decodes as if it had
  // computed them itself. Self-attention only: neither cache may have cross-attention sources.
  void share_prefix(const KVCache& from, int64_t row, int64_t positions);
  // Drops the leading positions that are padding in every row (after the rows that held them
  // left): T and every row's left_pad shrink by as much; positions are unchanged. Returns the
  // number of positions dropped.
  int64_t trim_padding();
  // Speculative decoding (decode/speculative.h): keeps the first `length` positions of every
  // row (0 <= length <= T) and drops the rest, the rejected draft tokens. The self-attention
  // K/V become shorter views of the same buffers, so the next step overwrites the dropped
  // positions in place; left padding, sources and cross-attention K/V are unchanged. An error
  // when a sliding window has already dropped positions (they could not come back).
  void truncate(int64_t length);

  // Bytes held by the cached positions: 2 * layers * Hkv * (N * T' + N_src * S) * Dh *
  // sizeof(dtype) (the spare room of the self-attention buffers is not counted). Paged
  // layout: the blocks held (each once, however many rows share it) times their bytes, plus
  // the cross-attention part.
  int64_t memory_bytes() const;

 private:
  void rebind();  // points every layer's SelfKV at paged_ (after a copy, a move or use_pool)
  // Paged layout: before `count` new positions of every row are written: releases blocks a
  // sliding window no longer reads, then allocates (or copies, when shared) the blocks of
  // positions [T, T + count) of each of n rows.
  void paged_grow(int64_t n, int64_t count);
  std::unique_ptr<PagedSelf> paged_;
  std::vector<LayerKV> layers_;
  Tensor memory_padding_;      // Bool [N, S] or undefined
  std::vector<int> self_pad_;  // [N * T] row-major flags
  int64_t self_pad_len_ = 0;   // T of self_pad_
  std::vector<int64_t> left_pad_;  // [N] or empty
  std::vector<int64_t> row_sources_;  // [N] source row of each row, or empty (the identity)
};

// Appends the positions `fresh` [N, Hkv, T, Dh] to `cached` [N, Hkv, T', Dh] (undefined = none
// yet): returns [N, Hkv, T' + T, Dh] with cached's positions, then fresh's. When `cached` is
// the view append_positions returned (or a later slice of it along the positions) and no
// other tensor shares its buffer, fresh's rows are written into the buffer's spare room and
// nothing is copied; otherwise, or when the room is too small, the positions move to a new
// buffer with room for twice as many (at least kMinCachePositions). Views taken earlier keep
// their values. Inference only: the result records no autograd history.
Tensor append_positions(const Tensor& cached, const Tensor& fresh);
// The positions a new buffer has room for, at least.
inline constexpr int64_t kMinCachePositions = 16;
// The positions x [N, Hkv, T', Dh] could grow to in place (its buffer's room from x's first
// position on); T' when x is not such a view of a buffer.
int64_t cache_capacity(const Tensor& x);

// The bytes a KVCache of an encoder-decoder holds after `tgt_len` decoding steps for `rows`
// hypotheses over sources of `src_len` tokens: self-attention K and V [rows, H, tgt_len, Dh]
// plus cross-attention K and V [rows, H, src_len, Dh] in each of `layers` decoder layers,
// i.e. 2 * layers * rows * H * (tgt_len + src_len) * Dh * sizeof(dtype). What memory_bytes()
// reports for such a cache with one row per source; `attn info --batch --length` prints it.
// With grouped-query attention pass the key/value heads as `heads`; with a sliding window W,
// min(tgt_len, W). (Beam search's rows share their source's cross part: count it per source.)
struct KVCacheSize {
  int64_t self_bytes = 0;   // the part that grows with every step
  int64_t cross_bytes = 0;  // computed once per source
  int64_t total() const { return self_bytes + cross_bytes; }
};
KVCacheSize kv_cache_size(int64_t layers, int64_t rows, int64_t heads, int64_t head_dim,
                          int64_t tgt_len, int64_t src_len, DType dtype);

}  // namespace attn::nn
