// attn/nn/kv_cache.h — the key/value cache of incremental decoding (paper §3.2.3: the decoder
// is auto-regressive, so at step t only the new position's keys and values are new).
// Per decoder layer: the self-attention K/V of every position decoded so far, grown by one
// position per step, and the cross-attention K/V of the encoder output, computed once per
// source. Rows (hypotheses) are reordered together for beam search. Typed, no string maps;
// no paged storage or preallocated capacity (growing concatenates).
#pragma once

#include <cstdint>
#include <vector>

#include "attn/core/tensor.h"

namespace attn::nn {

// One decoder layer's cached keys and values, already split into heads.
struct LayerKV {
  Tensor self_k, self_v;    // [N, H, T, Dh]; undefined before the first step
  Tensor cross_k, cross_v;  // [N, H, S, Dh]
};

class KVCache {
 public:
  KVCache() = default;
  explicit KVCache(int64_t n_layers) : layers_(static_cast<size_t>(n_layers)) {}

  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  LayerKV& layer(int64_t i);
  const LayerKV& layer(int64_t i) const;
  std::vector<LayerKV>& layers() { return layers_; }

  // Rows N (0 before anything is cached) and cached target length T (0 before the first step).
  int64_t rows() const;
  int64_t length() const;

  // Source key padding Bool [N, S] (true = PAD) or undefined: reordered with the rows.
  const Tensor& memory_padding() const { return memory_padding_; }
  void set_memory_padding(const Tensor& padding) { memory_padding_ = padding; }

  // Target key padding: one flag per row for the position just decoded (is_pad [N]); and the
  // whole mask Bool [N, T], undefined when no cached position is PAD.
  void append_self_padding(const std::vector<int>& is_pad);
  Tensor self_padding() const;

  // Keeps row rows[i] as the new row i (rows may repeat and drop rows), for every tensor.
  void reorder(const std::vector<int64_t>& rows);

  // Bytes held by the cached tensors: 2 * layers * N * H * (T + S) * Dh * sizeof(dtype).
  int64_t memory_bytes() const;

 private:
  std::vector<LayerKV> layers_;
  Tensor memory_padding_;      // Bool [N, S] or undefined
  std::vector<int> self_pad_;  // [N * T] row-major flags
  int64_t self_pad_len_ = 0;   // T of self_pad_
};

// The bytes a KVCache of an encoder-decoder holds after `tgt_len` decoding steps for `rows`
// hypotheses over sources of `src_len` tokens: self-attention K and V [rows, H, tgt_len, Dh]
// plus cross-attention K and V [rows, H, src_len, Dh] in each of `layers` decoder layers,
// i.e. 2 * layers * rows * H * (tgt_len + src_len) * Dh * sizeof(dtype). What memory_bytes()
// reports for such a cache; `attn info --batch --length` prints it.
struct KVCacheSize {
  int64_t self_bytes = 0;   // the part that grows with every step
  int64_t cross_bytes = 0;  // computed once per source
  int64_t total() const { return self_bytes + cross_bytes; }
};
KVCacheSize kv_cache_size(int64_t layers, int64_t rows, int64_t heads, int64_t head_dim,
                          int64_t tgt_len, int64_t src_len, DType dtype);

}  // namespace attn::nn
