// append_positions (nn/kv_cache.h), the growing self-attention K/V of incremental decoding:
// appended positions land in the buffer's spare room without moving it, the buffer doubles
// when the room runs out, a buffer another tensor shares is never written past its views (two
// caches decoding on from one state stay independent), earlier views keep their values, a
// window's trailing view keeps appending, KVCache::reorder keeps the room, and misuse throws.
// Values against a plain concatenation of every appended row. The cross-attention sources of
// KVCache::append_rows likewise: newcomers written into spare rows, a reorder moving the rest
// down in place, zeros past each source (also where a longer one lay before), copies of the
// cache kept apart; against each source's K/V padded with zeros.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/nn/kv_cache.h"
#include "attn/ops/ops.h"

namespace attn::nn {
namespace {

// [N, H, T, Dh] filled with seed + 0.5 * (its row-major index): every position distinct.
Tensor positions_of(int64_t N, int64_t H, int64_t T, int64_t Dh, double seed, DType dtype = DType::F32) {
  std::vector<double> v(static_cast<size_t>(N * H * T * Dh));
  for (size_t i = 0; i < v.size(); ++i) v[i] = seed + 0.5 * static_cast<double>(i);
  return Tensor::from_vector<double>(v, {N, H, T, Dh}).to(dtype);
}

const void* buffer_of(const Tensor& x) { return x.storage()->data(); }

TEST(KVCacheBuffer, AppendsWriteIntoTheSpareRoomWithoutMovingTheBuffer) {
  NoGradGuard no_grad;
  Tensor cache;
  std::vector<Tensor> parts;
  const void* first = nullptr;
  for (int step = 0; step < 10; ++step) {
    const Tensor fresh = positions_of(2, 3, 1, 4, 100.0 * step);  // [2, 3, 1, 4]
    parts.push_back(fresh);
    cache = append_positions(cache, fresh);
    if (step == 0) first = buffer_of(cache);
    EXPECT_EQ(buffer_of(cache), first) << "step " << step;
    EXPECT_EQ(cache.shape(), (Shape{2, 3, step + 1, 4}));
    EXPECT_EQ(cache.to_vector<double>(), concat(parts, 2).to_vector<double>()) << "step " << step;
  }
  EXPECT_EQ(cache_capacity(cache), kMinCachePositions);
}

TEST(KVCacheBuffer, ABufferWithoutRoomMovesToOneTwiceAsLong) {
  NoGradGuard no_grad;
  const Tensor prompt = positions_of(1, 2, kMinCachePositions, 3, 1.0, DType::F64);  // [1, 2, 16, 3]
  Tensor full = append_positions(Tensor(), prompt);
  EXPECT_EQ(cache_capacity(full), 2 * kMinCachePositions);
  const void* buffer = buffer_of(full);
  for (int64_t t = kMinCachePositions; t < 2 * kMinCachePositions; ++t)
    full = append_positions(full, positions_of(1, 2, 1, 3, 1000.0 * t, DType::F64));
  EXPECT_EQ(buffer_of(full), buffer);
  const Tensor last = positions_of(1, 2, 1, 3, -7.0, DType::F64);
  const Tensor grown = append_positions(full, last);
  EXPECT_NE(buffer_of(grown), buffer_of(full));
  EXPECT_EQ(cache_capacity(grown), 2 * (2 * kMinCachePositions + 1));
  EXPECT_EQ(grown.to_vector<double>(), concat({full, last}, 2).to_vector<double>());
}

TEST(KVCacheBuffer, TwoCachesSharingABufferDecodeOnIndependently) {
  NoGradGuard no_grad;
  const Tensor start = append_positions(Tensor(), positions_of(2, 2, 3, 2, 1.0));  // [2, 2, 3, 2]
  const std::vector<double> before = start.to_vector<double>();
  Tensor a = start, b = start;  // one state, two continuations (as copies of a KVCache would be)
  const Tensor xa = positions_of(2, 2, 1, 2, 500.0), xb = positions_of(2, 2, 1, 2, -500.0);
  a = append_positions(a, xa);
  b = append_positions(b, xb);
  EXPECT_NE(buffer_of(a), buffer_of(b));
  EXPECT_EQ(a.to_vector<double>(), concat({start, xa}, 2).to_vector<double>());
  EXPECT_EQ(b.to_vector<double>(), concat({start, xb}, 2).to_vector<double>());
  EXPECT_EQ(start.to_vector<double>(), before);  // the earlier view keeps its values
}

TEST(KVCacheBuffer, AWindowsTrailingViewKeepsAppendingInPlaceUntilTheRoomRunsOut) {
  NoGradGuard no_grad;
  constexpr int64_t kWindow = 3;
  Tensor cache;
  std::vector<Tensor> parts;
  for (int step = 0; step < 3 * kMinCachePositions; ++step) {
    const Tensor fresh = positions_of(1, 2, 1, 2, 10.0 * step);  // [1, 2, 1, 2]
    parts.push_back(fresh);
    const void* before = cache.defined() ? buffer_of(cache) : nullptr;
    const int64_t room = cache.defined() ? cache_capacity(cache) - cache.size(2) : 0;
    cache = append_positions(cache, fresh);
    if (room >= 1) {
      EXPECT_EQ(buffer_of(cache), before) << "step " << step;
    }
    const int64_t len = cache.size(2);
    if (len > kWindow) cache = cache.slice(2, len - kWindow, len);  // what a sliding window keeps
    const std::vector<Tensor> kept(parts.end() - cache.size(2), parts.end());
    EXPECT_EQ(cache.to_vector<double>(), concat(kept, 2).to_vector<double>()) << "step " << step;
  }
}

TEST(KVCacheBuffer, ReorderGathersRowsAndKeepsTheRoom) {
  NoGradGuard no_grad;
  KVCache kv(1);
  LayerKV& l = kv.layer(0);
  const Tensor k = positions_of(2, 1, 5, 2, 0.0), v = positions_of(2, 1, 5, 2, 1000.0);  // [2, 1, 5, 2]
  l.self.k = append_positions(Tensor(), k);
  l.self.v = append_positions(Tensor(), v);
  const int64_t room = cache_capacity(l.self.k);
  kv.reorder({1, 1, 0});
  EXPECT_EQ(l.self.k.shape(), (Shape{3, 1, 5, 2}));
  const auto expect = [](const Tensor& x) {
    return concat({x.slice(0, 1, 2), x.slice(0, 1, 2), x.slice(0, 0, 1)}, 0).to_vector<double>();
  };
  EXPECT_EQ(l.self.k.to_vector<double>(), expect(k));
  EXPECT_EQ(l.self.v.to_vector<double>(), expect(v));
  EXPECT_EQ(cache_capacity(l.self.k), room);
  const void* buffer = buffer_of(l.self.k);
  l.self.k = append_positions(l.self.k, positions_of(3, 1, 1, 2, 7.0));
  EXPECT_EQ(buffer_of(l.self.k), buffer);
  EXPECT_EQ(kv.memory_bytes(), 2 * 3 * 1 * 2 * int64_t{sizeof(float)} * 5 + 3 * 1 * 2 * int64_t{sizeof(float)});
}

// A cache of one layer holding only the cross-attention K/V of one source of `len` positions
// (K and V filled from `seed`), as TransformerDecoder::join appends it.
KVCache one_source(int64_t len, double seed) {
  KVCache kv(1);
  kv.layer(0).cross.k = positions_of(1, 2, len, 3, seed);
  kv.layer(0).cross.v = positions_of(1, 2, len, 3, seed + 0.25);
  kv.set_memory_padding(Tensor::from_bools(std::vector<int>(static_cast<size_t>(len), 0), {1, len}));
  return kv;
}

// What the cache's cross K/V and memory padding must hold for the sources `live` (their lengths
// and seeds, in row order): each source's own positions, then zeros (K and V) and padding up to
// the longest (or `width` positions: a reorder keeps the width when the longest leaves).
void expect_sources(const KVCache& kv, const std::vector<std::pair<int64_t, double>>& live, const std::string& when,
                    int64_t width = 0) {
  int64_t s = width;
  for (const auto& [len, seed] : live) s = std::max(s, len);
  std::vector<Tensor> ks, vs;
  std::vector<int> pad;
  for (const auto& [len, seed] : live) {
    const Tensor zeros = Tensor::zeros({1, 2, s - len, 3});
    ks.push_back(concat({positions_of(1, 2, len, 3, seed), zeros}, 2));
    vs.push_back(concat({positions_of(1, 2, len, 3, seed + 0.25), zeros}, 2));
    for (int64_t j = 0; j < s; ++j) pad.push_back(j >= len ? 1 : 0);
  }
  const int64_t n = static_cast<int64_t>(live.size());
  ASSERT_EQ(kv.layer(0).cross.k.shape(), (Shape{n, 2, s, 3})) << when;
  EXPECT_EQ(kv.layer(0).cross.k.to_vector<double>(), concat(ks, 0).to_vector<double>()) << when;
  EXPECT_EQ(kv.layer(0).cross.v.to_vector<double>(), concat(vs, 0).to_vector<double>()) << when;
  EXPECT_EQ(kv.memory_padding().to_vector<int64_t>(), Tensor::from_bools(pad, {n, s}).to_vector<int64_t>()) << when;
  EXPECT_EQ(kv.sources(), n) << when;
}

TEST(KVCacheBuffer, CrossAttentionSourcesJoinIntoSpareRowsAndLeaveInPlace) {
  NoGradGuard no_grad;
  KVCache kv = one_source(5, 0.0);
  kv.append_rows(one_source(3, 100.0));  // into a new buffer with room
  expect_sources(kv, {{5, 0.0}, {3, 100.0}}, "two sources");
  const void* buffer = buffer_of(kv.layer(0).cross.k);
  kv.append_rows(one_source(7, 200.0));  // a longer one: the view widens in the same buffer
  expect_sources(kv, {{5, 0.0}, {3, 100.0}, {7, 200.0}}, "a longer third");
  EXPECT_EQ(buffer_of(kv.layer(0).cross.k), buffer);
  kv.reorder({1, 2});  // the first leaves: the others move down in place
  expect_sources(kv, {{3, 100.0}, {7, 200.0}}, "after the first left");
  EXPECT_EQ(buffer_of(kv.layer(0).cross.k), buffer);
  // A short newcomer takes the row that held the longer source: nothing of that one shows.
  kv.append_rows(one_source(2, 300.0));
  expect_sources(kv, {{3, 100.0}, {7, 200.0}, {2, 300.0}}, "a short newcomer in a former row");
  EXPECT_EQ(buffer_of(kv.layer(0).cross.k), buffer);

  // Copies share the buffer: the first to append writes past both views, the other's append
  // and a reorder that drops a source (which would move rows in place) copy instead.
  KVCache copy = kv, other = kv;
  other.reorder({0, 2});
  EXPECT_NE(buffer_of(other.layer(0).cross.k), buffer);
  kv.append_rows(one_source(4, 400.0));
  EXPECT_EQ(buffer_of(kv.layer(0).cross.k), buffer);
  copy.append_rows(one_source(6, 450.0));
  EXPECT_NE(buffer_of(copy.layer(0).cross.k), buffer);
  expect_sources(kv, {{3, 100.0}, {7, 200.0}, {2, 300.0}, {4, 400.0}}, "the cache");
  expect_sources(copy, {{3, 100.0}, {7, 200.0}, {2, 300.0}, {6, 450.0}}, "a copy that appended");
  expect_sources(other, {{3, 100.0}, {2, 300.0}}, "a copy that dropped a source", 7);

  // A source longer than the room, and more sources than the rows: a larger buffer.
  kv.append_rows(one_source(40, 500.0));
  for (int i = 0; i < 12; ++i) kv.append_rows(one_source(1 + i % 3, 600.0 + i));
  std::vector<std::pair<int64_t, double>> live = {{3, 100.0}, {7, 200.0}, {2, 300.0}, {4, 400.0}, {40, 500.0}};
  for (int i = 0; i < 12; ++i) live.push_back({1 + i % 3, 600.0 + i});
  expect_sources(kv, live, "after growing");
  // Rows reordered with a repeat keep one source row per source (the repeat reads it twice).
  kv.reorder({0, 0, 4, 16});
  expect_sources(kv, {{3, 100.0}, {40, 500.0}, {3, 611.0}}, "after the repeat");
  EXPECT_EQ(kv.row_sources(), (std::vector<int64_t>{0, 0, 1, 2}));
}

TEST(KVCacheBuffer, MismatchedShapesOrDtypesAreErrors) {
  NoGradGuard no_grad;
  const Tensor cache = append_positions(Tensor(), positions_of(2, 2, 3, 4, 0.0));
  EXPECT_THROW(append_positions(cache, positions_of(1, 2, 1, 4, 0.0)), Error);  // rows
  EXPECT_THROW(append_positions(cache, positions_of(2, 1, 1, 4, 0.0)), Error);  // heads
  EXPECT_THROW(append_positions(cache, positions_of(2, 2, 1, 3, 0.0)), Error);  // head dim
  EXPECT_THROW(append_positions(cache, positions_of(2, 2, 1, 4, 0.0, DType::F64)), Error);
  EXPECT_THROW(append_positions(cache, Tensor::zeros({2, 2, 4}, DType::F32)), Error);
  EXPECT_THROW(append_positions(cache, Tensor()), Error);
  EXPECT_THROW(append_positions(cache, Tensor::zeros({2, 2, 1, 4}, DType::I64)), Error);
}

}  // namespace
}  // namespace attn::nn
