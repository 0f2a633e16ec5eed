// KVCache (paper §3.2.3, incremental decoding): per-layer cached keys and values, PAD flags and
// left padding per row, row reorder (a copy into a buffer of the same capacity for the growing
// self-attention K/V; for the per-source cross-attention K/V only the row-to-source map, plus an
// embedding lookup of the sources that stay when some go), byte accounting, and
// append_positions: self-attention K/V grow in place inside a buffer with spare room.
#include "attn/nn/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "attn/core/error.h"
#include "attn/ops/attention.h"  // paged_kv_write
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

// Where x [N, Hkv, T', Dh] lies in its buffer when it is a view of positions [start, start + T')
// of a buffer [N, Hkv, capacity, Dh] (the layout append_positions makes); capacity 0 otherwise.
struct BufferView {
  int64_t capacity = 0, start = 0;
};
BufferView buffer_view(const Tensor& x) {
  if (!x.defined() || x.dim() != 4 || !is_floating(x.dtype())) return {};
  const Shape& st = x.strides();
  const int64_t N = x.size(0), H = x.size(1), len = x.size(2), Dh = x.size(3);
  if (Dh < 1 || st[3] != 1 || st[2] != Dh || st[1] % Dh != 0 || st[0] != H * st[1] || x.offset() % Dh != 0)
    return {};
  BufferView b{st[1] / Dh, x.offset() / Dh};
  const size_t need = static_cast<size_t>(N * H * b.capacity * Dh) * dtype_size(x.dtype());
  if (b.start + len > b.capacity || x.storage()->nbytes() < need) return {};
  return b;
}

}  // namespace

Tensor append_positions(const Tensor& cached, const Tensor& fresh) {
  ATTN_CHECK(fresh.defined() && fresh.dim() == 4 && is_floating(fresh.dtype()), kOp,
             "append_positions: new positions must be f32 or f64 [N, Hkv, T, Dh], got ",
             fresh.defined() ? fresh.str() : "undefined");
  const int64_t N = fresh.size(0), H = fresh.size(1), T = fresh.size(2), Dh = fresh.size(3);
  if (cached.defined())
    ATTN_CHECK(cached.dim() == 4 && cached.size(0) == N && cached.size(1) == H && cached.size(3) == Dh &&
                   cached.dtype() == fresh.dtype(),
               kOp, "append_positions: cached ", cached.str(), " and new ", fresh.str(),
               " must agree in every dimension but the positions (2), and in dtype");
  const int64_t len = cached.defined() ? cached.size(2) : 0;
  const BufferView at = buffer_view(cached);
  // Writing past the view is safe when no other tensor holds the buffer: views of it taken
  // earlier end at or before `len` and never see those rows; another cache sharing it would.
  const bool in_place = at.capacity > 0 && at.start + len + T <= at.capacity && cached.storage().use_count() == 1;
  Tensor view;
  if (in_place) {
    // The buffer again from its first position, then the old positions plus the new ones.
    Tensor whole = Tensor::from_storage(cached.storage(), cached.offset() - at.start * Dh,
                                        {N, H, at.capacity, Dh}, cached.dtype());  // [N, Hkv, C, Dh]
    view = whole.slice(2, at.start, at.start + len + T);  // [N, Hkv, T' + T, Dh]
  } else {
    const int64_t capacity = std::max(kMinCachePositions, 2 * (len + T));
    Tensor buffer = Tensor::empty({N, H, capacity, Dh}, fresh.dtype());  // [N, Hkv, C, Dh]
    view = buffer.slice(2, 0, len + T);  // [N, Hkv, T' + T, Dh]
    if (len > 0) view.slice(2, 0, len).copy_from(cached);
  }
  if (T > 0) view.slice(2, len, len + T).copy_from(fresh.detach());
  return view;
}

int64_t cache_capacity(const Tensor& x) {
  const BufferView at = buffer_view(x);
  if (at.capacity > 0) return at.capacity - at.start;
  return x.defined() && x.dim() == 4 ? x.size(2) : 0;
}

namespace {

// x [N, Hkv, T', Dh] -> [rows.size(), Hkv, T', Dh] with new row i = x[rows[i]], in a buffer with
// the room x's had (or the default room), so that the next append stays in place.
Tensor take_positions(const Tensor& x, const std::vector<int64_t>& rows) {
  if (!x.defined()) return x;
  const int64_t len = x.size(2), m = static_cast<int64_t>(rows.size());
  const int64_t capacity = std::max({cache_capacity(x), kMinCachePositions, len});
  Tensor buffer = Tensor::empty({m, x.size(1), capacity, x.size(3)}, x.dtype());  // [M, Hkv, C, Dh]
  Tensor view = buffer.slice(2, 0, len);  // [M, Hkv, T', Dh]
  if (len > 0)
    for (int64_t i = 0; i < m; ++i) {
      const int64_t r = rows[static_cast<size_t>(i)];
      view.slice(0, i, i + 1).copy_from(x.slice(0, r, r + 1));  // [1, Hkv, T', Dh]
    }
  return view;
}

// Where cross-attention K/V x [N_src, Hkv, S, Dh] lies when it is a view of the first N_src
// sources and S positions of a buffer [rows, Hkv, positions, Dh] (what stack_sources makes):
// the buffer's rows and positions, or zeros when x is no such view.
struct SourceRoom {
  int64_t rows = 0, positions = 0;
};
SourceRoom source_room(const Tensor& x) {
  if (!x.defined() || x.dim() != 4 || !is_floating(x.dtype()) || x.offset() != 0) return {};
  const Shape& st = x.strides();
  const int64_t H = x.size(1), S = x.size(2), Dh = x.size(3);
  if (H < 1 || Dh < 1 || st[3] != 1 || st[2] != Dh || st[1] % Dh != 0 || st[1] / Dh < S || st[0] != H * st[1])
    return {};
  const int64_t positions = st[1] / Dh;
  const size_t slab = static_cast<size_t>(H * positions * Dh) * dtype_size(x.dtype());
  const int64_t rows = static_cast<int64_t>(x.storage()->nbytes() / slab);
  if (rows < x.size(0)) return {};
  return {rows, positions};
}

// The whole buffer of a view that source_room accepted: [room.rows, Hkv, room.positions, Dh].
Tensor source_buffer(const Tensor& x, const SourceRoom& room) {
  return Tensor::from_storage(x.storage(), 0, {room.rows, x.size(1), room.positions, x.size(3)}, x.dtype());
}

// Zeros positions [from, P) of every row and head of x [N, H, P, Dh], a view of whole rows of a
// source buffer (each head's positions one run of memory).
void zero_positions_from(const Tensor& x, int64_t from) {
  const int64_t N = x.size(0), H = x.size(1), P = x.size(2), Dh = x.size(3);
  if (from >= P) return;
  const size_t es = dtype_size(x.dtype());
  auto* base = static_cast<unsigned char*>(x.raw_data());
  const Shape& st = x.strides();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      std::memset(base + static_cast<size_t>(n * st[0] + h * st[1] + from * Dh) * es, 0,
                  static_cast<size_t>((P - from) * Dh) * es);
}

// Sources a [Na, H, Sa, Dh] and b [Nb, H, Sb, Dh] stacked, each left-aligned to S = max(Sa, Sb)
// positions with zeros after: a view of the first Na + Nb rows and S positions of a buffer with
// room for more of both. When a is such a view with room enough and no other tensor holds its
// buffer, b's rows are written into the spare rows (a continuous-batching join then copies the
// newcomer's sources only, not every running one's). Copies of a cache share a's tensor: the
// first to append writes past every view of the buffer, and its new view then holds the buffer
// too, so that the others' appends copy (as append_positions). Otherwise a new buffer
// with room for half as many rows again (at least 8) and a quarter more positions (at least
// kMinCachePositions). Every source row holds zeros past the view's positions (its whole row is
// written when it arrives, a former source's values overwritten), so widening the view to a
// longer newcomer shows zeros in the others' new positions, which their padding masks.
Tensor stack_sources(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  const int64_t na = a.size(0), nb = b.size(0), s = std::max(a.size(2), b.size(2));
  const SourceRoom at = source_room(a);
  Tensor buffer;  // [rows, H, positions, Dh]
  if (at.rows >= na + nb && at.positions >= s && a.storage().use_count() == 1) {
    buffer = source_buffer(a, at);
  } else {
    const int64_t rows = std::max<int64_t>(8, na + nb + (na + nb) / 2);
    const int64_t positions = std::max(kMinCachePositions, s + s / 4);
    // Rows are written when they are taken (fresh pages cost more than the copy).
    buffer = Tensor::empty({rows, a.size(1), positions, a.size(3)}, a.dtype());
    const Tensor kept = buffer.slice(0, 0, na);  // [Na, H, positions, Dh]
    kept.slice(2, 0, a.size(2)).copy_from(a);
    zero_positions_from(kept, a.size(2));
  }
  const Tensor mine = buffer.slice(0, na, na + nb);  // [Nb, H, positions, Dh]
  mine.slice(2, 0, b.size(2)).copy_from(b);
  zero_positions_from(mine, b.size(2));  // also over a former row's values
  return buffer.slice(0, 0, na + nb).slice(2, 0, s);
}

// Cross-attention K/V x [N_src, H, S, Dh] keeping the sources `kept` (increasing), as rows 0, 1,
// .... In place, moving each kept source's S positions of every head down, when x is a view of a
// buffer with room (stack_sources) and nothing else holds that buffer or x itself (a copy of the
// cache shares x: it must keep seeing its rows); else into a new tensor. Every row of the buffer
// holds zeros from the view's positions on (stack_sources), the moved row and the one it
// replaces alike, so the positions past S need no move.
Tensor keep_sources(const Tensor& x, const std::vector<int64_t>& kept) {
  const int64_t m = static_cast<int64_t>(kept.size());
  const SourceRoom at = source_room(x);
  if (at.rows == 0 || x.storage().use_count() != 1 || x.impl_ptr().use_count() != 1) {
    return take_rows(x, Tensor::from_vector<int64_t>(kept, {m}));  // [M, H, S, Dh]
  }
  const int64_t H = x.size(1);
  const size_t es = dtype_size(x.dtype());
  const size_t head = static_cast<size_t>(at.positions * x.size(3)) * es, slab = static_cast<size_t>(H) * head;
  const size_t used = static_cast<size_t>(x.size(2) * x.size(3)) * es;  // a head's S positions
  auto* base = static_cast<unsigned char*>(x.storage()->data());
  for (int64_t i = 0; i < m; ++i) {
    const int64_t from = kept[static_cast<size_t>(i)];
    if (from == i) continue;
    for (int64_t h = 0; h < H; ++h)
      std::memmove(base + static_cast<size_t>(i) * slab + static_cast<size_t>(h) * head,
                   base + static_cast<size_t>(from) * slab + static_cast<size_t>(h) * head, used);
  }
  return source_buffer(x, at).slice(0, 0, m).slice(2, 0, x.size(2));
}

}  // namespace


// ---- paged layout -----------------------------------------------------------------------------

int64_t BlockPool::bytes_per_block(int64_t layers, int64_t kv_heads, int64_t head_dim, DType dtype,
                                   int64_t block_size) {
  const char* op = "BlockPool";
  int64_t b = 2 * static_cast<int64_t>(dtype_size(dtype));
  for (const int64_t f : {layers, kv_heads, head_dim, block_size}) b = checked_mul(b, f, op, "the block size");
  return b;
}

BlockPool::BlockPool(int64_t layers, int64_t kv_heads, int64_t head_dim, DType dtype, int64_t block_size,
                     int64_t blocks)
    : layers_(layers), kv_heads_(kv_heads), head_dim_(head_dim), block_size_(block_size), dtype_(dtype) {
  ATTN_CHECK(layers >= 1 && kv_heads >= 1 && head_dim >= 1 && block_size >= 1 && blocks >= 1, "BlockPool",
             "layers, heads, head size, block size and blocks must be >= 1; got ", layers, ", ", kv_heads, ", ",
             head_dim, ", ", block_size, ", ", blocks);
  ATTN_CHECK(is_floating(dtype) || dtype == DType::BF16, "BlockPool",
             "the pool holds f32, f64 or bf16 keys and values, got ", dtype_name(dtype));
  ATTN_CHECK(blocks <= (int64_t{1} << 30), "BlockPool", "at most 2^30 blocks, got ", blocks);
  checked_mul(bytes_per_block(layers, kv_heads, head_dim, dtype, block_size), blocks, "BlockPool", "the pool size");
  for (int64_t l = 0; l < layers; ++l) {
    k_.push_back(Tensor::empty({blocks, kv_heads, block_size, head_dim}, dtype));  // [blocks, Hkv, Bs, Dh]
    v_.push_back(Tensor::empty({blocks, kv_heads, block_size, head_dim}, dtype));
  }
  refs_.assign(static_cast<size_t>(blocks), 0);
  for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int32_t BlockPool::refcount(int32_t block) const {
  ATTN_CHECK(block >= 0 && block < num_blocks(), "BlockPool", "block ", block, " out of range [0, ", num_blocks(), ")");
  return refs_[static_cast<size_t>(block)];
}

int32_t BlockPool::allocate() {
  ATTN_CHECK(!free_.empty(), "BlockPool", "the KV cache pool is full: all ", num_blocks(), " blocks of ",
             block_size_, " positions (", num_blocks() * block_bytes() / (1024 * 1024),
             " MiB) are in use; ", full_hint_);
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(b)] = 1;
  peak_used_ = std::max(peak_used_, used_blocks());
  return b;
}

void BlockPool::retain(int32_t block) {
  ATTN_CHECK(refcount(block) > 0, "BlockPool", "retain of free block ", block);
  ++refs_[static_cast<size_t>(block)];
}

void BlockPool::release(int32_t block) {
  ATTN_CHECK(refcount(block) > 0, "BlockPool", "release of free block ", block);
  if (--refs_[static_cast<size_t>(block)] == 0) {
    // Keep the stack's lowest-first order cheap: push, then let the smallest stay on top.
    free_.push_back(block);
    if (free_.size() > 1 && free_[free_.size() - 2] < block) std::swap(free_[free_.size() - 2], free_.back());
  }
}

int32_t BlockPool::writable(int32_t block) {
  if (refcount(block) == 1 || !copy_on_write_) return block;
  const int32_t fresh = allocate();
  const int64_t n = kv_heads_ * block_size_ * head_dim_ * static_cast<int64_t>(dtype_size(dtype_));
  for (int64_t l = 0; l < layers_; ++l)
    for (const Tensor* t : {&k_[static_cast<size_t>(l)], &v_[static_cast<size_t>(l)]}) {
      char* base = static_cast<char*>(t->raw_data());
      std::memcpy(base + fresh * n, base + block * n, static_cast<size_t>(n));
    }
  release(block);
  return fresh;
}

PagedSelf::PagedSelf(const PagedSelf& other)
    : pool(other.pool),
      tables(other.tables),
      origin(other.origin),
      flat(other.flat),
      stride(other.stride),
      length(other.length) {
  for (const auto& t : tables)
    for (int32_t b : t)
      if (b >= 0) pool->retain(b);
}

PagedSelf::~PagedSelf() { release_all(); }

void PagedSelf::release_all() {
  for (auto& t : tables)
    for (int32_t& b : t)
      if (b >= 0) {
        pool->release(b);
        b = -1;
      }
}

void PagedSelf::rebuild_flat() {
  stride = 0;
  for (const auto& t : tables) stride = std::max<int64_t>(stride, static_cast<int64_t>(t.size()));
  flat.assign(static_cast<size_t>(static_cast<int64_t>(tables.size()) * stride), -1);
  for (size_t r = 0; r < tables.size(); ++r)
    std::copy(tables[r].begin(), tables[r].end(), flat.begin() + static_cast<int64_t>(r) * stride);
}

void PagedSelf::write(int64_t layer, const Tensor& x, int64_t at, bool values) {
  const int64_t N = x.size(0), H = x.size(1), D = x.size(3);
  const DType pd = pool->dtype();
  ATTN_CHECK(N == static_cast<int64_t>(tables.size()) && H == pool->kv_heads() && D == pool->head_dim() &&
                 (x.dtype() == pd || (pd == DType::BF16 && x.dtype() == DType::F32)),
             kOp, "paged write of ", x.str(), " into a pool of ", pool->kv_heads(), " heads of ", pool->head_dim(),
             " (", dtype_name(pd), ") for ", tables.size(), " rows");
  ATTN_CHECK(static_cast<int64_t>(flat.size()) == N * stride, kOp, "paged write before the block tables were built");
  // The test reference of a bf16 pool: the same rounding, kept in f32 (BlockPool::set_round_to_bf16).
  const Tensor stored = pool->round_to_bf16() && x.dtype() == DType::F32 ? x.to(DType::BF16).to(DType::F32) : x;
  paged_kv_write(values ? pool->v(layer) : pool->k(layer), stored, flat.data(), stride, origin.data(), at);
}

KVCache::KVCache(const KVCache& other)
    : layers_(other.layers_),
      memory_padding_(other.memory_padding_),
      self_pad_(other.self_pad_),
      self_pad_len_(other.self_pad_len_),
      left_pad_(other.left_pad_),
      row_sources_(other.row_sources_) {
  if (other.paged_) paged_ = std::make_unique<PagedSelf>(*other.paged_);
  rebind();
}

KVCache& KVCache::operator=(const KVCache& other) {
  if (this == &other) return *this;
  KVCache copy(other);
  *this = std::move(copy);
  return *this;
}

void KVCache::rebind() {
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i].self.paged = paged_.get();
    layers_[i].self.layer = static_cast<int64_t>(i);
    if (!paged_) layers_[i].self.held = 0;
  }
}

void KVCache::use_pool(std::shared_ptr<BlockPool> pool) {
  ATTN_CHECK(pool != nullptr, kOp, "use_pool without a pool");
  ATTN_CHECK(self_pad_len_ == 0 && !paged_, kOp, "use_pool on a cache that already holds ", self_pad_len_,
             " positions or is paged");
  for (const LayerKV& l : layers_)
    ATTN_CHECK(!l.self.k.defined(), kOp, "use_pool on a cache that already holds self-attention keys");
  ATTN_CHECK(pool->layers() == num_layers(), kOp, "a pool for ", pool->layers(), " layers, the cache has ",
             num_layers());
  paged_ = std::make_unique<PagedSelf>();
  paged_->pool = std::move(pool);
  rebind();
}

void KVCache::paged_grow(int64_t n, int64_t count) {
  PagedSelf& ps = *paged_;
  BlockPool& pool = *ps.pool;
  const int64_t Bs = pool.block_size();
  if (ps.tables.empty()) {
    ps.tables.assign(static_cast<size_t>(n), {});
    ps.origin.assign(static_cast<size_t>(n), 0);
  }
  ATTN_CHECK(static_cast<int64_t>(ps.tables.size()) == n, kOp, "paged cache of ", ps.tables.size(),
             " rows grown by ", n);
  // Positions before T - held (the fewest any layer holds) are never read again.
  int64_t held = self_pad_len_;
  for (const LayerKV& l : layers_) held = std::min(held, l.self.held);
  const int64_t oldest = self_pad_len_ - held;
  for (int64_t r = 0; r < n; ++r) {
    std::vector<int32_t>& table = ps.tables[static_cast<size_t>(r)];
    const int64_t org = ps.origin[static_cast<size_t>(r)];
    for (int64_t i = 0; i < static_cast<int64_t>(table.size()) && (i + 1) * Bs + org <= oldest; ++i)
      if (table[static_cast<size_t>(i)] >= 0) {
        pool.release(table[static_cast<size_t>(i)]);
        table[static_cast<size_t>(i)] = -1;
      }
    const int64_t p0 = self_pad_len_ - org, p1 = self_pad_len_ + count - org;  // own positions to write
    for (int64_t i = std::max<int64_t>(0, p0) / Bs; i * Bs < p1; ++i) {
      if (i >= static_cast<int64_t>(table.size())) table.resize(static_cast<size_t>(i + 1), -1);
      int32_t& b = table[static_cast<size_t>(i)];
      b = b < 0 ? pool.allocate() : pool.writable(b);
    }
  }
  ps.rebuild_flat();
}

int64_t KVCache::blocks_held() const {
  if (!paged_) return 0;
  std::set<int32_t> blocks;
  for (const auto& t : paged_->tables)
    for (int32_t b : t)
      if (b >= 0) blocks.insert(b);
  return static_cast<int64_t>(blocks.size());
}

int64_t KVCache::positions_held() const {
  if (!paged_) return 0;
  int64_t held = self_pad_len_;
  for (const LayerKV& l : layers_) held = std::min(held, l.self.held);
  int64_t total = 0;
  for (size_t r = 0; r < paged_->tables.size(); ++r)
    total += std::max<int64_t>(0, std::min(held, self_pad_len_ - paged_->origin[r]));
  return total;
}

LayerKV& KVCache::layer(int64_t i) {
  ATTN_CHECK(i >= 0 && i < num_layers(), kOp, "layer ", i, " out of range [0, ", num_layers(), ")");
  return layers_[static_cast<size_t>(i)];
}

const LayerKV& KVCache::layer(int64_t i) const {
  ATTN_CHECK(i >= 0 && i < num_layers(), kOp, "layer ", i, " out of range [0, ", num_layers(), ")");
  return layers_[static_cast<size_t>(i)];
}

int64_t KVCache::rows() const {
  if (!row_sources_.empty()) return static_cast<int64_t>(row_sources_.size());
  if (paged_ && !paged_->tables.empty()) return static_cast<int64_t>(paged_->tables.size());
  for (const LayerKV& l : layers_) {
    if (l.cross.k.defined()) return l.cross.k.size(0);
    if (l.self.k.defined()) return l.self.k.size(0);
  }
  if (memory_padding_.defined()) return memory_padding_.size(0);
  if (self_pad_len_ > 0) return static_cast<int64_t>(self_pad_.size()) / self_pad_len_;
  return static_cast<int64_t>(left_pad_.size());
}

int64_t KVCache::sources() const {
  for (const LayerKV& l : layers_)
    if (l.cross.k.defined()) return l.cross.k.size(0);
  return memory_padding_.defined() ? memory_padding_.size(0) : 0;
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
  if (paged_) paged_grow(n, count);  // may refuse (pool full) before anything changed but blocks
  const int64_t len = self_pad_len_ + count;
  std::vector<int> next(static_cast<size_t>(n * len));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t t = 0; t < self_pad_len_; ++t) next[i * len + t] = self_pad_[i * self_pad_len_ + t];
    for (int64_t t = 0; t < count; ++t) next[i * len + self_pad_len_ + t] = is_pad[i * count + t] != 0 ? 1 : 0;
  }
  self_pad_ = std::move(next);
  self_pad_len_ = len;
  if (paged_) paged_->length = len;
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
  if (paged_) {
    // Tables copied, blocks retained: no keys or values move (a later write copies a shared block).
    PagedSelf& ps = *paged_;
    if (!ps.tables.empty()) {
      std::vector<std::vector<int32_t>> tables(static_cast<size_t>(m));
      std::vector<int64_t> origin(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; ++i) {
        tables[static_cast<size_t>(i)] = ps.tables[static_cast<size_t>(rows[static_cast<size_t>(i)])];
        origin[static_cast<size_t>(i)] = ps.origin[static_cast<size_t>(rows[static_cast<size_t>(i)])];
        for (int32_t b : tables[static_cast<size_t>(i)])
          if (b >= 0) ps.pool->retain(b);
      }
      ps.release_all();
      ps.tables = std::move(tables);
      ps.origin = std::move(origin);
      ps.rebuild_flat();
    }
  }
  for (LayerKV& l : layers_)
    for (Tensor* t : {&l.self.k, &l.self.v}) *t = take_positions(*t, rows);  // [M, Hkv, T', Dh]
  const int64_t n_src = sources();
  if (n_src > 0 || !row_sources_.empty()) {
    // The cross-attention side stays one row per source: rows only change which source they read.
    std::vector<int64_t> src(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i)
      src[static_cast<size_t>(i)] = row_sources_.empty() ? rows[static_cast<size_t>(i)]
                                                          : row_sources_[static_cast<size_t>(rows[static_cast<size_t>(i)])];
    std::vector<int64_t> slot(static_cast<size_t>(n_src), -1), kept;  // source -> its new row; the sources kept
    for (int64_t s : src) slot[static_cast<size_t>(s)] = 0;
    for (int64_t s = 0; s < n_src; ++s)
      if (slot[static_cast<size_t>(s)] == 0) {
        slot[static_cast<size_t>(s)] = static_cast<int64_t>(kept.size());
        kept.push_back(s);
      }
    if (static_cast<int64_t>(kept.size()) < n_src) {  // sources no row reads any more are dropped
      for (LayerKV& l : layers_)
        for (Tensor* t : {&l.cross.k, &l.cross.v}) *t = keep_sources(*t, kept);  // [N_src', Hkv, S, Dh]
      const Tensor ids = Tensor::from_vector<int64_t>(kept, {static_cast<int64_t>(kept.size())});  // [N_src']
      memory_padding_ = take_rows(memory_padding_, ids);                         // [N_src', S]
    }
    bool identity = static_cast<int64_t>(kept.size()) == m;
    for (int64_t i = 0; i < m; ++i) {
      src[static_cast<size_t>(i)] = slot[static_cast<size_t>(src[static_cast<size_t>(i)])];
      identity = identity && src[static_cast<size_t>(i)] == i;
    }
    row_sources_ = identity ? std::vector<int64_t>() : std::move(src);
  }
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

namespace {

// The rows of a [Na, H, ha, Dh] and b [Nb, H, hb, Dh] (either undefined = no positions yet, with
// na / nb rows) in one buffer [Na + Nb, H, capacity, Dh], each right-aligned to max(ha, hb)
// positions with zeros before; returns the view of those positions. `heads`/`dh` describe an
// undefined side from the defined one.
Tensor stack_right_aligned(const Tensor& a, int64_t na, const Tensor& b, int64_t nb) {
  if (!a.defined() && !b.defined()) return Tensor();
  const Tensor& ref = a.defined() ? a : b;
  const int64_t H = ref.size(1), Dh = ref.size(3);
  const int64_t ha = a.defined() ? a.size(2) : 0, hb = b.defined() ? b.size(2) : 0;
  const int64_t h = std::max(ha, hb);
  const int64_t capacity = std::max({kMinCachePositions, 2 * h, a.defined() ? cache_capacity(a) : 0});
  Tensor buffer = Tensor::zeros({na + nb, H, capacity, Dh}, ref.dtype());  // [N, H, C, Dh]
  Tensor view = buffer.slice(2, 0, h);                                      // [N, H, h, Dh]
  if (ha > 0) view.slice(0, 0, na).slice(2, h - ha, h).copy_from(a);
  if (hb > 0) view.slice(0, na, na + nb).slice(2, h - hb, h).copy_from(b);
  return view;
}

}  // namespace

void KVCache::append_rows(const KVCache& other) {
  const int64_t na = rows(), nb = other.rows();
  if (na == 0) {
    *this = other;
    return;
  }
  if (nb == 0) return;
  ATTN_CHECK(other.num_layers() == num_layers(), kOp, "append_rows: the caches have ", num_layers(), " and ",
             other.num_layers(), " layers");
  ATTN_CHECK((paged_ == nullptr) == (other.paged_ == nullptr) &&
                 (!paged_ || paged_->pool == other.paged_->pool),
             kOp, "append_rows: both caches must be contiguous, or paged over the same pool");
  // Self-attention: right-aligned to the longer history T.
  const int64_t ta = self_pad_len_, tb = other.self_pad_len_, t = std::max(ta, tb);
  if (paged_) {
    // Tables appended (other's blocks held once more) and origins moved right: nothing copied.
    PagedSelf& ps = *paged_;
    const PagedSelf& po = *other.paged_;
    if (ps.tables.empty()) {
      ps.tables.assign(static_cast<size_t>(na), {});
      ps.origin.assign(static_cast<size_t>(na), 0);
    }
    for (int64_t& o : ps.origin) o += t - ta;
    for (int64_t r = 0; r < nb; ++r) {
      std::vector<int32_t> table = po.tables.empty() ? std::vector<int32_t>() : po.tables[static_cast<size_t>(r)];
      for (int32_t b : table)
        if (b >= 0) ps.pool->retain(b);
      ps.tables.push_back(std::move(table));
      ps.origin.push_back((po.origin.empty() ? 0 : po.origin[static_cast<size_t>(r)]) + t - tb);
    }
    ps.rebuild_flat();
    for (int64_t i = 0; i < num_layers(); ++i) {
      SelfKV& l = layers_[static_cast<size_t>(i)].self;
      l.held = std::max(l.held, other.layers_[static_cast<size_t>(i)].self.held);
    }
  }
  for (int64_t i = 0; i < num_layers(); ++i) {
    LayerKV& l = layers_[static_cast<size_t>(i)];
    const LayerKV& o = other.layers_[static_cast<size_t>(i)];
    l.self.k = stack_right_aligned(l.self.k, na, o.self.k, nb);  // [Na + Nb, Hkv, T', Dh]
    l.self.v = stack_right_aligned(l.self.v, na, o.self.v, nb);
  }
  std::vector<int> flags(static_cast<size_t>((na + nb) * t), 1);
  for (int64_t r = 0; r < na; ++r)
    for (int64_t j = 0; j < ta; ++j) flags[static_cast<size_t>(r * t + t - ta + j)] = self_pad_[static_cast<size_t>(r * ta + j)];
  for (int64_t r = 0; r < nb; ++r)
    for (int64_t j = 0; j < tb; ++j)
      flags[static_cast<size_t>((na + r) * t + t - tb + j)] = other.self_pad_[static_cast<size_t>(r * tb + j)];
  std::vector<int64_t> left(static_cast<size_t>(na + nb));
  for (int64_t r = 0; r < na; ++r) left[static_cast<size_t>(r)] = (left_pad_.empty() ? 0 : left_pad_[static_cast<size_t>(r)]) + t - ta;
  for (int64_t r = 0; r < nb; ++r)
    left[static_cast<size_t>(na + r)] = (other.left_pad_.empty() ? 0 : other.left_pad_[static_cast<size_t>(r)]) + t - tb;
  self_pad_ = std::move(flags);
  self_pad_len_ = t;
  left_pad_ = std::move(left);
  if (paged_) paged_->length = t;

  // Cross-attention: sources stacked, other's rows reading theirs.
  const int64_t sa = sources(), sb = other.sources();
  ATTN_CHECK((sa > 0) == (sb > 0), kOp, "append_rows: one cache has cross-attention sources and the other not");
  if (sa > 0) {
    const int64_t len_a = layers_.empty() ? memory_padding_.size(1) : layers_[0].cross.k.size(2);
    const int64_t len_b = other.layers_.empty() ? other.memory_padding_.size(1) : other.layers_[0].cross.k.size(2);
    const int64_t s = std::max(len_a, len_b);
    for (int64_t i = 0; i < num_layers(); ++i) {
      LayerKV& l = layers_[static_cast<size_t>(i)];
      const LayerKV& o = other.layers_[static_cast<size_t>(i)];
      l.cross.k = stack_sources(l.cross.k, o.cross.k);  // [Sa + Sb, Hkv, S, Dh]
      l.cross.v = stack_sources(l.cross.v, o.cross.v);
    }
    if (memory_padding_.defined() || other.memory_padding_.defined() || len_a != len_b) {
      std::vector<int> pad(static_cast<size_t>((sa + sb) * s), 1);
      const auto fill = [&](const Tensor& mask, int64_t first, int64_t count, int64_t len) {
        const std::vector<int64_t> m = mask.defined() ? mask.to_vector<int64_t>() : std::vector<int64_t>();
        for (int64_t r = 0; r < count; ++r)
          for (int64_t j = 0; j < len; ++j)
            pad[static_cast<size_t>((first + r) * s + j)] = m.empty() ? 0 : static_cast<int>(m[static_cast<size_t>(r * len + j)]);
      };
      fill(memory_padding_, 0, sa, len_a);
      fill(other.memory_padding_, sa, sb, len_b);
      memory_padding_ = Tensor::from_bools(pad, {sa + sb, s});  // [Sa + Sb, S]
    }
    std::vector<int64_t> src(static_cast<size_t>(na + nb));
    for (int64_t r = 0; r < na; ++r) src[static_cast<size_t>(r)] = row_sources_.empty() ? r : row_sources_[static_cast<size_t>(r)];
    for (int64_t r = 0; r < nb; ++r)
      src[static_cast<size_t>(na + r)] = sa + (other.row_sources_.empty() ? r : other.row_sources_[static_cast<size_t>(r)]);
    bool identity = sa + sb == na + nb;
    for (int64_t r = 0; r < na + nb && identity; ++r) identity = src[static_cast<size_t>(r)] == r;
    row_sources_ = identity ? std::vector<int64_t>() : std::move(src);
  }
}

void KVCache::share_prefix(const KVCache& from, int64_t row, int64_t positions) {
  ATTN_CHECK(paged_ && from.paged_ && paged_->pool == from.paged_->pool, kOp,
             "share_prefix needs two caches paged over the same pool");
  ATTN_CHECK(self_pad_len_ == 0 && paged_->tables.empty() && rows() <= 1, kOp,
             "share_prefix into a cache that already holds positions or several rows");
  ATTN_CHECK(from.num_layers() == num_layers(), kOp, "share_prefix: the caches have ", num_layers(), " and ",
             from.num_layers(), " layers");
  ATTN_CHECK(sources() == 0 && from.sources() == 0, kOp, "share_prefix shares self-attention positions only; ",
             "a cache with cross-attention sources cannot take part");
  const PagedSelf& po = *from.paged_;
  const int64_t n = static_cast<int64_t>(po.tables.size()), Bs = po.pool->block_size();
  ATTN_CHECK(row >= 0 && row < n, kOp, "share_prefix of row ", row, " of a cache of ", n, " rows");
  const size_t r = static_cast<size_t>(row);
  const int64_t origin = po.origin[r];
  const int64_t own = from.self_pad_len_ - origin;  // the row's own positions
  ATTN_CHECK(positions >= 1 && positions % Bs == 0 && positions <= own, kOp, "share_prefix of ", positions,
             " positions: must be a positive multiple of the block size ", Bs, " and at most the row's ", own);
  ATTN_CHECK((from.left_pad_.empty() ? 0 : from.left_pad_[r]) == origin, kOp, "share_prefix: row ", row,
             "'s cache indices are not its positions (left padding ", from.left_pad_.empty() ? 0 : from.left_pad_[r],
             ", origin ", origin, ")");
  for (const LayerKV& l : from.layers_)
    ATTN_CHECK(l.self.held == from.self_pad_len_, kOp, "share_prefix: a layer holds ", l.self.held, " of ",
               from.self_pad_len_, " positions (a sliding window dropped the oldest)");
  for (int64_t t = 0; t < positions; ++t)
    ATTN_CHECK(from.self_pad_[static_cast<size_t>(row * from.self_pad_len_ + origin + t)] == 0, kOp,
               "share_prefix: position ", t, " of row ", row, " is padding");
  ATTN_CHECK(static_cast<int64_t>(po.tables[r].size()) >= positions / Bs, kOp, "share_prefix: row ", row,
             " has blocks for ", po.tables[r].size() * static_cast<size_t>(Bs), " positions, fewer than ", positions);
  std::vector<int32_t> table(po.tables[r].begin(), po.tables[r].begin() + positions / Bs);
  for (int32_t b : table) ATTN_CHECK(b >= 0, kOp, "share_prefix: row ", row, " no longer holds its first positions");
  for (int32_t b : table) paged_->pool->retain(b);
  paged_->tables = {std::move(table)};
  paged_->origin = {0};
  paged_->length = positions;
  paged_->rebuild_flat();
  self_pad_.assign(static_cast<size_t>(positions), 0);
  self_pad_len_ = positions;
  left_pad_.assign(1, 0);
  for (LayerKV& l : layers_) l.self.held = positions;
}

void KVCache::truncate(int64_t length) {
  ATTN_CHECK(length >= 0 && length <= self_pad_len_, kOp, "truncate(", length, ") of ", self_pad_len_,
             " cached positions");
  const int64_t drop = self_pad_len_ - length;
  if (drop == 0) return;
  if (paged_) {
    for (LayerKV& l : layers_)
      ATTN_CHECK(l.self.held == self_pad_len_, kOp, "truncate: a layer holds ", l.self.held, " of ", self_pad_len_,
                 " positions (a sliding window dropped the oldest), so positions cannot be dropped from the end");
    for (LayerKV& l : layers_) l.self.held = length;
    PagedSelf& ps = *paged_;
    const int64_t Bs = ps.pool->block_size();
    for (size_t r = 0; r < ps.tables.size(); ++r) {
      const int64_t keep = std::max<int64_t>(0, length - ps.origin[r]);  // own positions kept
      std::vector<int32_t>& table = ps.tables[r];
      while (static_cast<int64_t>(table.size()) * Bs >= keep + Bs && !table.empty()) {
        if (table.back() >= 0) ps.pool->release(table.back());
        table.pop_back();
      }
    }
    ps.rebuild_flat();
  }
  for (LayerKV& l : layers_)
    for (Tensor* x : {&l.self.k, &l.self.v}) {
      if (!x->defined()) continue;
      const int64_t held = x->size(2);
      ATTN_CHECK(held == self_pad_len_, kOp, "truncate: a layer holds ", held, " of ", self_pad_len_,
                 " positions (a sliding window dropped the oldest), so positions cannot be dropped from the end");
      *x = x->slice(2, 0, length);  // [N, Hkv, length, Dh], a view of the same buffer
    }
  const int64_t n = static_cast<int64_t>(self_pad_.size()) / self_pad_len_;
  std::vector<int> flags(static_cast<size_t>(n * length));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < length; ++j)
      flags[static_cast<size_t>(r * length + j)] = self_pad_[static_cast<size_t>(r * self_pad_len_ + j)];
  self_pad_ = std::move(flags);
  self_pad_len_ = length;
  if (paged_) paged_->length = length;
}

int64_t KVCache::trim_padding() {
  const int64_t n = rows();
  if (n == 0 || self_pad_len_ == 0 || left_pad_.empty()) return 0;
  int64_t drop = self_pad_len_;
  for (int64_t r = 0; r < n; ++r) {
    int64_t lead = 0;  // leading PAD flags of row r
    while (lead < self_pad_len_ && self_pad_[static_cast<size_t>(r * self_pad_len_ + lead)] != 0) ++lead;
    drop = std::min({drop, lead, left_pad_[static_cast<size_t>(r)]});
  }
  if (drop == 0) return 0;
  const int64_t t = self_pad_len_ - drop;
  if (paged_) {
    for (LayerKV& l : layers_) l.self.held -= std::max<int64_t>(0, l.self.held - t);
    for (int64_t& o : paged_->origin) o -= drop;  // blocks stay; the positions keep their slots
  }
  for (LayerKV& l : layers_)
    for (Tensor* x : {&l.self.k, &l.self.v}) {
      if (!x->defined()) continue;
      const int64_t held = x->size(2);  // the last `held` of the T positions
      const int64_t cut = std::max<int64_t>(0, held - t);
      if (cut > 0) *x = x->slice(2, cut, held);  // [N, Hkv, held - cut, Dh], a view of the same buffer
    }
  std::vector<int> flags(static_cast<size_t>(n * t));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < t; ++j) flags[static_cast<size_t>(r * t + j)] = self_pad_[static_cast<size_t>(r * self_pad_len_ + drop + j)];
  self_pad_ = std::move(flags);
  self_pad_len_ = t;
  if (paged_) paged_->length = t;
  for (int64_t& p : left_pad_) p -= drop;
  return drop;
}

int64_t KVCache::memory_bytes() const {
  int64_t bytes = paged_ ? blocks_held() * paged_->pool->block_bytes() : 0;
  for (const LayerKV& l : layers_)
    for (const Tensor* t : {&l.self.k, &l.self.v, &l.cross.k, &l.cross.v})
      if (t->defined()) bytes += t->numel() * static_cast<int64_t>(dtype_size(t->dtype()));
  return bytes;
}

KVCacheSize kv_cache_size(int64_t layers, int64_t rows, int64_t heads, int64_t head_dim,
                          int64_t tgt_len, int64_t src_len, DType dtype) {
  ATTN_CHECK(layers >= 0 && rows >= 0 && heads > 0 && head_dim > 0 && tgt_len >= 0 && src_len >= 0,
             "kv_cache_size", "sizes must be non-negative (heads and head_dim positive): layers ", layers,
             ", rows ", rows, ", heads ", heads, ", head_dim ", head_dim, ", tgt_len ", tgt_len,
             ", src_len ", src_len);
  // Checked: the sizes come from the command line (attn info --batch --length) and a config.
  const char* op = "kv_cache_size";
  int64_t per_position = 2 * static_cast<int64_t>(dtype_size(dtype));
  for (const int64_t f : {layers, rows, heads, head_dim}) per_position = checked_mul(per_position, f, op, "the cache size");
  return {checked_mul(per_position, tgt_len, op, "the self-attention cache size"),
          checked_mul(per_position, src_len, op, "the cross-attention cache size")};
}

}  // namespace attn::nn
