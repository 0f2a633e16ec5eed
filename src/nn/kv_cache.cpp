// KVCache (paper §3.2.3, incremental decoding): per-layer cached keys and values, PAD flags and
// left padding per row, row reorder through an embedding lookup (rows of a tensor viewed as
// [N, rest]), and byte accounting.
#include "attn/nn/kv_cache.h"

#include <algorithm>

#include "attn/core/error.h"
#include "attn/ops/ops.h"

namespace attn::nn {

namespace {

constexpr const char* kOp = "KVCache";

// x [N, ...] -> [rows.size(), ...] with new row i = x[rows[i]].
Tensor take_rows(const Tensor& x, const Tensor& ids) {
  if (!x.defined()) return x;
  Shape shape = x.shape();
  const int64_t n = shape[0], m = ids.size(0);
  const int64_t rest = n == 0 ? 0 : x.numel() / n;
  if (x.dtype() == DType::Bool) {
    const auto flags = x.to_vector<int64_t>();
    const auto idx = ids.to_vector<int64_t>();
    std::vector<int> out(static_cast<size_t>(m * rest));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < rest; ++j) out[i * rest + j] = static_cast<int>(flags[idx[i] * rest + j]);
    shape[0] = m;
    return Tensor::from_bools(out, shape);  // [M, ...]
  }
  Tensor picked = embedding(x.contiguous().reshape({n, rest}), ids);  // [M, rest]
  shape[0] = m;
  return picked.reshape(shape);  // [M, ...]
}

}  // namespace

LayerKV& KVCache::layer(int64_t i) {
  ATTN_CHECK(i >= 0 && i < num_layers(), kOp, "layer ", i, " out of range [0, ", num_layers(), ")");
  return layers_[static_cast<size_t>(i)];
}

const LayerKV& KVCache::layer(int64_t i) const {
  ATTN_CHECK(i >= 0 && i < num_layers(), kOp, "layer ", i, " out of range [0, ", num_layers(), ")");
  return layers_[static_cast<size_t>(i)];
}

int64_t KVCache::rows() const {
  for (const LayerKV& l : layers_) {
    if (l.cross_k.defined()) return l.cross_k.size(0);
    if (l.self_k.defined()) return l.self_k.size(0);
  }
  if (memory_padding_.defined()) return memory_padding_.size(0);
  if (self_pad_len_ > 0) return static_cast<int64_t>(self_pad_.size()) / self_pad_len_;
  return static_cast<int64_t>(left_pad_.size());
}

void KVCache::set_left_pad(std::vector<int64_t> left_pad) {
  const int64_t n = static_cast<int64_t>(left_pad.size());
  ATTN_CHECK(rows() == 0 || rows() == n, kOp, "set_left_pad with ", n, " rows, but the cache holds ", rows());
  for (int64_t p : left_pad) ATTN_CHECK(p >= 0, kOp, "left padding must be >= 0, got ", p);
  left_pad_ = std::move(left_pad);
}

Tensor KVCache::next_positions(int64_t count) const {
  ATTN_CHECK(count >= 0, kOp, "next_positions of ", count, " positions");
  const int64_t n = rows();
  std::vector<int64_t> pos(static_cast<size_t>(n * count));
  for (int64_t r = 0; r < n; ++r) {
    const int64_t pad = left_pad_.empty() ? 0 : left_pad_[static_cast<size_t>(r)];
    for (int64_t t = 0; t < count; ++t) pos[static_cast<size_t>(r * count + t)] = std::max<int64_t>(0, self_pad_len_ + t - pad);
  }
  return Tensor::from_vector<int64_t>(pos, {n, count});  // [N, count]
}

int64_t KVCache::length() const { return self_pad_len_; }

void KVCache::append_self_padding(const std::vector<int>& is_pad) { append_self_padding(is_pad, 1); }

void KVCache::append_self_padding(const std::vector<int>& is_pad, int64_t count) {
  ATTN_CHECK(count >= 1 && static_cast<int64_t>(is_pad.size()) % count == 0, kOp, "append_self_padding of ",
             is_pad.size(), " flags for ", count, " positions per row");
  const int64_t n = static_cast<int64_t>(is_pad.size()) / count;
  const int64_t held = self_pad_len_ > 0 ? static_cast<int64_t>(self_pad_.size()) / self_pad_len_ : rows();
  ATTN_CHECK(held == 0 || held == n, kOp, "append_self_padding with ", n, " rows, but the cache holds ", held);
  const int64_t len = self_pad_len_ + count;
  std::vector<int> next(static_cast<size_t>(n * len));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t t = 0; t < self_pad_len_; ++t) next[i * len + t] = self_pad_[i * self_pad_len_ + t];
    for (int64_t t = 0; t < count; ++t) next[i * len + self_pad_len_ + t] = is_pad[i * count + t] != 0 ? 1 : 0;
  }
  self_pad_ = std::move(next);
  self_pad_len_ = len;
}

Tensor KVCache::self_padding() const { return self_padding_last(self_pad_len_); }

Tensor KVCache::self_padding_last(int64_t columns) const {
  ATTN_CHECK(columns >= 0 && columns <= self_pad_len_, kOp, "self_padding_last(", columns, ") of ",
             self_pad_len_, " cached positions");
  if (self_pad_len_ == 0) return Tensor();
  const int64_t n = static_cast<int64_t>(self_pad_.size()) / self_pad_len_;
  std::vector<int> flags(static_cast<size_t>(n * columns));
  bool any = false;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < columns; ++t) {
      const int f = self_pad_[static_cast<size_t>(i * self_pad_len_ + self_pad_len_ - columns + t)];
      flags[static_cast<size_t>(i * columns + t)] = f;
      any = any || f != 0;
    }
  if (!any) return Tensor();
  return Tensor::from_bools(flags, {n, columns});  // [N, columns]
}

void KVCache::reorder(const std::vector<int64_t>& rows) {
  const int64_t n = this->rows();
  const int64_t m = static_cast<int64_t>(rows.size());
  for (int64_t r : rows) ATTN_CHECK(r >= 0 && r < n, kOp, "reorder row ", r, " out of range [0, ", n, ")");
  const Tensor ids = Tensor::from_vector<int64_t>(rows, {m});  // [M]
  for (LayerKV& l : layers_)
    for (Tensor* t : {&l.self_k, &l.self_v, &l.cross_k, &l.cross_v}) *t = take_rows(*t, ids);  // [M, ...]
  memory_padding_ = take_rows(memory_padding_, ids);  // [M, S]
  if (self_pad_len_ > 0) {
    std::vector<int> next(static_cast<size_t>(m * self_pad_len_));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t t = 0; t < self_pad_len_; ++t) next[i * self_pad_len_ + t] = self_pad_[rows[i] * self_pad_len_ + t];
    self_pad_ = std::move(next);
  }
  if (!left_pad_.empty()) {
    std::vector<int64_t> next(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) next[static_cast<size_t>(i)] = left_pad_[static_cast<size_t>(rows[i])];
    left_pad_ = std::move(next);
  }
}

int64_t KVCache::memory_bytes() const {
  int64_t bytes = 0;
  for (const LayerKV& l : layers_)
    for (const Tensor* t : {&l.self_k, &l.self_v, &l.cross_k, &l.cross_v})
      if (t->defined()) bytes += t->numel() * static_cast<int64_t>(dtype_size(t->dtype()));
  return bytes;
}

KVCacheSize kv_cache_size(int64_t layers, int64_t rows, int64_t heads, int64_t head_dim,
                          int64_t tgt_len, int64_t src_len, DType dtype) {
  ATTN_CHECK(layers >= 0 && rows >= 0 && heads > 0 && head_dim > 0 && tgt_len >= 0 && src_len >= 0,
             "kv_cache_size", "sizes must be non-negative (heads and head_dim positive): layers ", layers,
             ", rows ", rows, ", heads ", heads, ", head_dim ", head_dim, ", tgt_len ", tgt_len,
             ", src_len ", src_len);
  const int64_t per_position = 2 * layers * rows * heads * head_dim * static_cast<int64_t>(dtype_size(dtype));
  return {per_position * tgt_len, per_position * src_len};
}

}  // namespace attn::nn
