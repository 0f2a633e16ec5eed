// kernels/attention_invariant.cpp — the batch-invariant mode's attention (attention_invariant.h):
// per (batch row, head, query) the visible keys are gathered in increasing order, scored, and
// softmax-weighted into the output, all on one thread; masked keys are never touched.
#include "kernels/attention_invariant.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "attn/core/dtype.h"  // float_from_bf16
#include "kernels/parallel_for.h"
#include "kernels/simd/vector_kernels.h"

namespace attn::kernels {

namespace {

// Below this many multiply-adds (B*H*Tq*Tk*(Dh+Dv)) a call stays on one thread, as the other
// attention kernels do. Threads never change a result: each query is one thread's.
constexpr int64_t kParallelWork = 32768;

// The vector kernels for float32 (fetched before any OpenMP region), plain loops for float64.
template <class T>
struct Rows {
  const simd::VectorKernels* vk = nullptr;

  static Rows make() {
    Rows r;
    if constexpr (std::is_same_v<T, float>) r.vk = &simd::vector_kernels();
    return r;
  }
  // sum_c x[c] y[c], in an order fixed by n.
  T dot(const T* x, const T* y, int64_t n) const {
    if constexpr (std::is_same_v<T, float>) {
      return vk->dot(x, y, n);
    } else {
      T acc = 0;
      for (int64_t c = 0; c < n; ++c) acc += x[c] * y[c];
      return acc;
    }
  }
  // max over x[0..n) (n >= 1; the order does not matter for a max).
  T max(const T* x, int64_t n) const {
    if constexpr (std::is_same_v<T, float>) {
      return vk->row_max(x, n, -std::numeric_limits<float>::infinity());
    } else {
      T m = x[0];
      for (int64_t c = 1; c < n; ++c) m = x[c] > m ? x[c] : m;
      return m;
    }
  }
  // x[c] = exp(x[c] - m) in place; returns their sum, in an order fixed by n.
  T exp_shifted_sum(T* x, T m, int64_t n) const {
    if constexpr (std::is_same_v<T, float>) {
      return vk->exp_shifted_sum(x, x, m, n);
    } else {
      T sum = 0;
      for (int64_t c = 0; c < n; ++c) {
        x[c] = std::exp(x[c] - m);
        sum += x[c];
      }
      return sum;
    }
  }
  // out[j] = dot(x, ys[j], n) for j < count.
  void dots(T* out, const T* x, const T* const* ys, int64_t count, int64_t n) const {
    if constexpr (std::is_same_v<T, float>) {
      vk->dots(out, x, ys, count, n);
    } else {
      for (int64_t j = 0; j < count; ++j) out[j] = dot(x, ys[j], n);
    }
  }
  // accumulate(acc, xs[t], ws[t], n) for t < count in turn.
  void accumulate_rows(T* acc, const T* const* xs, const T* ws, int64_t count, int64_t n) const {
    if constexpr (std::is_same_v<T, float>) {
      vk->accumulate_rows(acc, xs, ws, count, n);
    } else {
      for (int64_t t = 0; t < count; ++t) accumulate(acc, xs[t], ws[t], n);
    }
  }
  // acc[c] += s * x[c]
  void accumulate(T* acc, const T* x, T s, int64_t n) const {
    if constexpr (std::is_same_v<T, float>) {
      vk->accumulate(acc, x, s, n);
    } else {
      for (int64_t c = 0; c < n; ++c) acc[c] += x[c] * s;
    }
  }
  // y[c] = x[c] * s
  void scale(T* y, const T* x, T s, int64_t n) const {
    if constexpr (std::is_same_v<T, float>) {
      vk->scale(y, x, s, n);
    } else {
      for (int64_t c = 0; c < n; ++c) y[c] = x[c] * s;
    }
  }
};

// The kernel over any key storage: keys_of(b, kh) gives an object whose k(j) and v(j) point at
// key j's K row [Dh] and V row [Dv] of batch row b, K/V head kh.
template <class T, class KeysOf>
void invariant_forward(T* out, T* lse, const T* q, KeysOf keys_of, const AttentionMask<T>& mask,
                       const AttentionDims& d, T scale, const HeadLayout& q_layout, const HeadLayout& out_layout) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const Rows<T> rows = Rows<T>::make();
  const int64_t BH = d.B * d.H, group = d.H / d.Hkv, off = d.Tk - d.Tq;
  const bool parallel = BH > 1 && BH * d.Tq * d.Tk * (d.Dh + d.Dv) >= kParallelWork && !omp_in_parallel();
  parallel_ranges(BH, parallel, [&](int64_t bh_begin, int64_t bh_end) {
    // One thread's scratch: the visible keys' scores (then weights) and indices, and the
    // output accumulator.
    std::vector<T> score(static_cast<size_t>(d.Tk));
    std::vector<int64_t> key(static_cast<size_t>(d.Tk));
    std::vector<const T*> rows_of(static_cast<size_t>(d.Tk));  // the visible keys' K (then V) rows
    std::vector<T> acc(static_cast<size_t>(d.Dv));
    for (int64_t bh = bh_begin; bh < bh_end; ++bh) {
      const int64_t b = bh / d.H, h = bh % d.H, kh = h / group;
      const T* qh = q_layout.at(q, b, h);     // [Tq, Dh], rows q_layout.row apart
      const auto keys = keys_of(b, kh);       // K [Tk, Dh] and V [Tk, Dv], row by row
      T* oh = out_layout.at(out, b, h);       // [Tq, Dv]
      const uint8_t* pad = mask.key_padding ? mask.key_padding + b * d.Tk : nullptr;
      const T slope = mask.alibi ? mask.alibi[h] : T(0);
      for (int64_t i = 0; i < d.Tq; ++i) {
        const T* qi = qh + i * q_layout.row;
        T* oi = oh + i * out_layout.row;
        const int64_t self = i + off;  // the query's own position among the keys
        const int64_t last = mask.causal ? std::min(self, d.Tk - 1) : d.Tk - 1;
        const int64_t first = mask.window > 0 ? std::max<int64_t>(0, self - mask.window + 1) : 0;
        const T* brow = mask.bias ? mask.bias + b * mask.bias_stride_b + h * mask.bias_stride_h + i * d.Tk : nullptr;
        // The visible keys in increasing order, and their scores. Keys whose rows stay where
        // they are are scored together (the same bits as one at a time).
        int64_t n = 0;
        for (int64_t j = first; j <= last; ++j) {
          if (pad && pad[j]) continue;
          if (brow && brow[j] == kNegInf) continue;
          key[static_cast<size_t>(n++)] = j;
        }
        if (keys.stable()) {
          for (int64_t t = 0; t < n; ++t) rows_of[static_cast<size_t>(t)] = keys.k(key[static_cast<size_t>(t)]);
          rows.dots(score.data(), qi, rows_of.data(), n, d.Dh);
        } else {
          for (int64_t t = 0; t < n; ++t)
            score[static_cast<size_t>(t)] = rows.dot(qi, keys.k(key[static_cast<size_t>(t)]), d.Dh);
        }
        for (int64_t t = 0; t < n; ++t) {
          const int64_t j = key[static_cast<size_t>(t)];
          T s = scale * score[static_cast<size_t>(t)];
          if (brow) s += brow[j];
          if (mask.alibi) s -= slope * static_cast<T>(j > self ? j - self : self - j);
          score[static_cast<size_t>(t)] = s;
        }
        T* li = lse + bh * d.Tq + i;
        if (n == 0) {  // no visible key: zeros, and the backward's marker
          for (int64_t c = 0; c < d.Dv; ++c) oi[c] = T(0);
          *li = kNegInf;
          continue;
        }
        const T m = rows.max(score.data(), n);
        const T l = rows.exp_shifted_sum(score.data(), m, n);  // score now holds e_j
        std::fill(acc.begin(), acc.end(), T(0));
        if (keys.stable()) {
          for (int64_t t = 0; t < n; ++t) rows_of[static_cast<size_t>(t)] = keys.v(key[static_cast<size_t>(t)]);
          rows.accumulate_rows(acc.data(), rows_of.data(), score.data(), n, d.Dv);
        } else {
          for (int64_t t = 0; t < n; ++t)
            rows.accumulate(acc.data(), keys.v(key[static_cast<size_t>(t)]), score[static_cast<size_t>(t)], d.Dv);
        }
        rows.scale(oi, acc.data(), T(1) / l, d.Dv);
        *li = m + std::log(l);
      }
    }
  });
}

// Keys laid out as a HeadLayout says.
template <class T>
struct DenseKeys {
  const T* kb;
  const T* vb;
  int64_t krow, vrow;
  const T* k(int64_t j) const { return kb + j * krow; }
  const T* v(int64_t j) const { return vb + j * vrow; }
  bool stable() const { return true; }  // a row's pointer stays valid while others are read
};

// Keys in the blocks of a pool (PagedKV): key j of batch row b is the row's position
// p = first + j - origin[b], in block tables[b][p / Bs], slot p % Bs; a position before the
// row's origin or without a block reads as zeros, as paged_kv_gather lays it out. bf16 blocks
// (kv->k16, kv->v16): each row is widened (exactly) into this object's own row buffer, which
// the caller reads before it asks for the next row of the same kind.
template <class T>
struct PagedKeys {
  const PagedKV<T>* kv;
  const int32_t* table;
  int64_t origin, Hkv, kh, Dh, Dv;
  const T* zeros;
  mutable std::vector<T> kw, vw;  // [Dh], [Dv]: the last widened rows (bf16 blocks only)
  static const T* widen(std::vector<T>& dst, const uint16_t* src, int64_t n) {
    if constexpr (std::is_same_v<T, float>)
      widen_bf16(dst.data(), src, n);
    else
      for (int64_t c = 0; c < n; ++c) dst[static_cast<size_t>(c)] = static_cast<T>(float_from_bf16(src[c]));
    return dst.data();
  }
  int64_t slot(int64_t j) const {  // the pool row of key j, or -1
    const int64_t p = kv->first + j - origin;
    if (p < 0 || p / kv->block >= kv->table_stride) return -1;
    const int64_t blk = table[p / kv->block];
    if (blk < 0) return -1;
    return (blk * Hkv + kh) * kv->block + p % kv->block;
  }
  const T* k(int64_t j) const {
    const int64_t r = slot(j);
    if (r < 0) return zeros;
    return kv->k16 != nullptr ? widen(kw, kv->k16 + r * Dh, Dh) : kv->k + r * Dh;
  }
  const T* v(int64_t j) const {
    const int64_t r = slot(j);
    if (r < 0) return zeros;
    return kv->v16 != nullptr ? widen(vw, kv->v16 + r * Dv, Dv) : kv->v + r * Dv;
  }
  // Whether a row's pointer stays valid while others are read: not for bf16 blocks, whose rows
  // are widened into one buffer.
  bool stable() const { return kv->k16 == nullptr; }
};

}  // namespace

template <class T>
void attention_invariant_forward(T* out, T* lse, const T* q, const T* k, const T* v, const AttentionMask<T>& mask,
                                 const AttentionDims& d, T scale, const AttentionLayout& layout) {
  const auto keys_of = [&](int64_t b, int64_t kh) {
    return DenseKeys<T>{layout.k.at(k, b, kh), layout.v.at(v, b, kh), layout.k.row, layout.v.row};
  };
  invariant_forward<T>(out, lse, q, keys_of, mask, d, scale, layout.q, layout.out);
}

template <class T>
void attention_invariant_forward_paged(T* out, T* lse, const T* q, const PagedKV<T>& kv, const AttentionMask<T>& mask,
                                       const AttentionDims& d, T scale, const HeadLayout& q_layout,
                                       const HeadLayout& out_layout) {
  const std::vector<T> zeros(static_cast<size_t>(std::max<int64_t>(d.Dh, d.Dv)), T(0));
  const auto keys_of = [&](int64_t b, int64_t kh) {
    const int32_t* table = kv.tables != nullptr ? kv.tables + b * kv.table_stride : nullptr;  // none: no blocks
    PagedKeys<T> keys{&kv, table, kv.origin[b], d.Hkv, kh, d.Dh, d.Dv, zeros.data(), {}, {}};
    if (kv.k16 != nullptr) {
      keys.kw.resize(static_cast<size_t>(d.Dh));
      keys.vw.resize(static_cast<size_t>(d.Dv));
    }
    return keys;
  };
  invariant_forward<T>(out, lse, q, keys_of, mask, d, scale, q_layout, out_layout);
}

template void attention_invariant_forward<float>(float*, float*, const float*, const float*, const float*,
                                                 const AttentionMask<float>&, const AttentionDims&, float,
                                                 const AttentionLayout&);
template void attention_invariant_forward<double>(double*, double*, const double*, const double*, const double*,
                                                  const AttentionMask<double>&, const AttentionDims&, double,
                                                  const AttentionLayout&);
template void attention_invariant_forward_paged<float>(float*, float*, const float*, const PagedKV<float>&,
                                                       const AttentionMask<float>&, const AttentionDims&, float,
                                                       const HeadLayout&, const HeadLayout&);
template void attention_invariant_forward_paged<double>(double*, double*, const double*, const PagedKV<double>&,
                                                        const AttentionMask<double>&, const AttentionDims&, double,
                                                        const HeadLayout&, const HeadLayout&);

}  // namespace attn::kernels
