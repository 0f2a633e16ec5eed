// kernels/attention_flash.cpp — tiled exact attention with an online softmax (paper §3.2.1,
// Eq. 1; FlashAttention-2, Dao 2023, Algorithms 1 and 2) on CPU: tile products through
// kernels::gemm, masks applied inside the tiles, tiles that causal or a sliding window hide
// entirely skipped, only L = m + log l saved, P recomputed in the backward. Grouped-query
// attention reads K/V head h / (H / Hkv); ALiBi biases are computed inside the tiles. The
// float32 row loops (max, exp with the row sum, rescales, dS) go through the per-ISA vector
// kernels (simd/vector_kernels.h); float64 keeps plain loops. Each thread keeps a transposed
// copy of the K (and V) slice it works on, so no tile product has a transposed right operand
// (see score_tile). Every operand is read and written through its HeadLayout (split heads
// where a projection left them, a KV cache's buffer with spare room), never copied into a
// packed one; the backward writes its gradients (each thread zeroes the slices it owns).
// No dropout, no weights output, no micro-kernel of its own.
// Derivation: docs/derivations/attention.md ("Tiled forward" and "Recomputing backward").
#include "kernels/attention_flash.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "attn/core/dtype.h"  // float_from_bf16
#include "kernels/gemm.h"
#include "kernels/parallel_for.h"
#include "kernels/simd/isa.h"
#include "kernels/simd/vector_kernels.h"
#include "kernels/transpose16.h"

namespace attn::kernels {

namespace {

// From this many query rows on, the kernels transpose each slice's K (and V in the backward)
// once, for products without transposed operands (score_tile); below it (decoding, Tq = 1)
// the copy would cost about as much as the products themselves.
constexpr int64_t kTransposeMinQueries = 32;

// Below this many multiply-adds (B*H*Tq*Tk*(Dh+Dv)) a call stays on one thread: starting a
// team costs more than it saves. Same threshold as the naive kernel.
constexpr int64_t kParallelWork = 32768;

// The row loops of the tiles: float32 through the vector-kernel table (fetched once per call,
// before any OpenMP region), float64 as plain loops (the reference dtype of gradient checks).
template <class T>
struct RowKernels {
  const simd::VectorKernels* vk = nullptr;  // float32 only

  static RowKernels make() {
    RowKernels r;
    if constexpr (std::is_same_v<T, float>) r.vk = &simd::vector_kernels();
    return r;
  }
  // max(init, x[0..n))
  T max(const T* x, int64_t n, T init) const {
    if constexpr (std::is_same_v<T, float>) {
      return vk->row_max(x, n, init);
    } else {
      for (int64_t c = 0; c < n; ++c) init = x[c] > init ? x[c] : init;
      return init;
    }
  }
  // y = exp(x - m) (y may be x), returns sum y; exp(-inf - m) = 0 for masked entries.
  T exp_shifted_sum(T* y, const T* x, T m, int64_t n) const {
    if constexpr (std::is_same_v<T, float>) {
      return vk->exp_shifted_sum(y, x, m, n);
    } else {
      T sum = 0;
      for (int64_t c = 0; c < n; ++c) {
        y[c] = std::exp(x[c] - m);
        sum += y[c];
      }
      return sum;
    }
  }
  // x *= s
  void scale(T* x, T s, int64_t n) const {
    if constexpr (std::is_same_v<T, float>) {
      vk->scale(x, x, s, n);
    } else {
      for (int64_t c = 0; c < n; ++c) x[c] *= s;
    }
  }
  // ds = p * (dp - d) (ds may be dp)
  void softmax_grad(T* ds, const T* p, const T* dp, T d, int64_t n) const {
    if constexpr (std::is_same_v<T, float>) {
      vk->softmax_grad_shifted(ds, p, dp, d, n);
    } else {
      for (int64_t c = 0; c < n; ++c) ds[c] = p[c] * (dp[c] - d);
    }
  }
  // sum x * y
  T dot(const T* x, const T* y, int64_t n) const {
    if constexpr (std::is_same_v<T, float>) {
      return vk->dot(x, y, n);
    } else {
      T acc = 0;
      for (int64_t c = 0; c < n; ++c) acc += x[c] * y[c];
      return acc;
    }
  }
};

struct Span {
  int64_t begin = 0, end = 0;  // [begin, end), empty when end <= begin
};

// The keys that at least one query of rows [i0, i1) may see under causal and the window:
// row i sees j <= i + off (causal) and j > i + off - W (window), off = Tk - Tq.
template <class T>
Span visible_keys(const AttentionMask<T>& m, int64_t i0, int64_t i1, int64_t Tq, int64_t Tk) {
  const int64_t off = Tk - Tq;
  Span s{0, Tk};
  if (m.causal) s.end = std::min(Tk, i1 + off);  // the last row's last key, plus one
  if (m.window > 0) s.begin = std::max<int64_t>(0, i0 + off - m.window + 1);
  return s;
}

// The queries that may see at least one key of columns [j0, j1) (the same two rules).
template <class T>
Span visible_queries(const AttentionMask<T>& m, int64_t j0, int64_t j1, int64_t Tq, int64_t Tk) {
  const int64_t off = Tk - Tq;
  Span s{0, Tq};
  if (m.causal) s.begin = std::max<int64_t>(0, j0 - off);  // i + off >= j0
  if (m.window > 0) s.end = std::min(Tq, j1 - off + m.window - 1);  // i + off - W < j1 - 1
  return s;
}

// True when some entry of tile rows [i0, i1) x columns [j0, j1) needs masking element by
// element; false when the tile lies wholly inside the causal/window band and there is no
// bias or padding, so the mask pass can be skipped.
template <class T>
bool tile_needs_mask(const AttentionMask<T>& m, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                     int64_t Tq, int64_t Tk) {
  if (m.bias || m.key_padding || m.alibi) return true;
  const int64_t off = Tk - Tq;
  if (m.causal && j1 - 1 > i0 + off) return true;                  // crosses the diagonal
  if (m.window > 0 && j0 <= i1 - 1 + off - m.window) return true;  // crosses the left edge
  return false;
}

// One head's [rows, cols] block of an operand: row r at p + r * ld (ld = HeadLayout::row).
template <class P>
struct Rows {
  P* p = nullptr;
  int64_t ld = 0;
  P* row(int64_t r) const { return p + r * ld; }
};

// The block of head h of batch entry b of x, laid out as l.
template <class P>
Rows<P> head_rows(P* x, const HeadLayout& l, int64_t b, int64_t h) {
  return {l.at(x, b, h), l.row};
}

// rows x cols of zeros into a block.
template <class T>
void zero_rows(Rows<T> x, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) std::fill(x.row(r), x.row(r) + cols, T(0));
}

// dst [cols, rows] = src [rows, cols]^T. Float on AVX-512: 16 x 16 blocks through registers.
// Otherwise one element at a time, in blocks of 16 rows x 8 columns: each destination row gets
// one 64-byte run per block, and the 8 destination lines (a power-of-two stride apart at T = 2^k)
// still fit in one 8-way L1 set.
template <class T>
void transpose(T* dst, Rows<const T> src, int64_t rows, int64_t cols) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>)
    if (simd::active_isa() == simd::Isa::Avx512) return transpose_avx512(src.p, src.ld, rows, cols, dst, rows);
#endif
  constexpr int64_t kRows = 16, kCols = 8;
  for (int64_t c0 = 0; c0 < cols; c0 += kCols)
    for (int64_t r0 = 0; r0 < rows; r0 += kRows)
      for (int64_t c = c0; c < std::min(cols, c0 + kCols); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + kRows); ++r) dst[c * rows + r] = src.row(r)[c];
}

// S[rows, cols] (row stride ld) = scale * Q_i K_j^T, then the mask: bias added, masked
// entries set to -inf. Shared by the forward and the backward so both see the same scores.
// K comes as stored (ks [Tk, Dh]) and, when the caller made it, transposed (kts = K^T [Dh, Tk]
// of the slice, else null): a product without transposed operands takes OpenBLAS's
// small-matrix kernel at these sizes, while Q K^T with K as stored (a "TN" product in its
// column-major terms) goes through its packing path, about twice as slow.
// `ktile` holds the tile's keys from its first (row 0 = key j0).
template <class T>
void score_tile(T* s, int64_t ld, Rows<const T> qs, Rows<const T> ktile, const T* kts,
                const AttentionMask<T>& mask, int64_t b, int64_t h, int64_t i0, int64_t rows,
                int64_t j0, int64_t cols, int64_t Tq, int64_t Tk, int64_t Dh, T scale) {
  if (kts)
    gemm<T>(false, false, rows, cols, Dh, scale, qs.row(i0), qs.ld, kts + j0, Tk, T(0), s, ld);
  else
    gemm<T>(false, true, rows, cols, Dh, scale, qs.row(i0), qs.ld, ktile.p, ktile.ld, T(0), s, ld);
  if (tile_needs_mask(mask, i0, i0 + rows, j0, j0 + cols, Tq, Tk))
    for (int64_t r = 0; r < rows; ++r)
      apply_attention_mask_row(s + r * ld, mask, b, h, i0 + r, j0, j0 + cols, Tq, Tk);
}

// Keys and values read where they lie (one head's rows, any row stride).
template <class T>
struct StridedKV {
  Rows<const T> ks, vs;
  Rows<const T> k(int64_t j0, int64_t) const { return {ks.row(j0), ks.ld}; }
  Rows<const T> v(int64_t j0, int64_t) const { return {vs.row(j0), vs.ld}; }
};

// Keys and values of one (row, K/V head) in a block pool (attention_flash.h: PagedKV): key j
// is cache position first + j, the row's own position p = first + j - origin, in slot p % Bs
// of block table[p / Bs]. A tile's rows are copied run by run (a block's slots of one head
// are consecutive) into the thread's tile buffers, so the products see the same operands, in
// the same order, as over a contiguous cache. Positions before the row's start (p < 0) or in
// a released block read as zeros (they are masked: the contiguous cache holds zeros there).
// With bf16 blocks (kpool16, vpool16) each run is widened to T as it is staged (widen_bf16,
// exact), so the products see exactly the f32 values the rounded keys and values stand for.
template <class T>
struct PagedKVTiles {
  const T* kpool = nullptr;
  const T* vpool = nullptr;
  const uint16_t* kpool16 = nullptr;  // bf16 blocks instead of kpool and vpool
  const uint16_t* vpool16 = nullptr;
  const int32_t* table = nullptr;  // this row's block table
  int64_t table_len = 0, origin = 0, first = 0, Bs = 0, Hkv = 0, hkv = 0, Dh = 0, Dv = 0;
  T* kbuf = nullptr;  // [Bc, Dh]
  T* vbuf = nullptr;  // [Bc, Dv]

  void copy_rows(T* dst, const T* pool, const uint16_t* pool16, int64_t D, int64_t j0, int64_t cols) const {
    for (int64_t c = 0; c < cols;) {
      const int64_t p = first + j0 + c - origin;
      if (p < 0) {
        std::fill(dst + c * D, dst + (c + 1) * D, T(0));
        ++c;
        continue;
      }
      const int64_t slot = p % Bs, run = std::min(cols - c, Bs - slot);
      const int64_t blk = p / Bs < table_len ? table[p / Bs] : -1;
      const int64_t at = ((blk * Hkv + hkv) * Bs + slot) * D;
      if (blk < 0)
        std::fill(dst + c * D, dst + (c + run) * D, T(0));
      else if (pool16 == nullptr)
        std::copy(pool + at, pool + at + run * D, dst + c * D);
      else if constexpr (std::is_same_v<T, float>)
        widen_bf16(dst + c * D, pool16 + at, run * D);
      else
        for (int64_t e = 0; e < run * D; ++e) dst[c * D + e] = static_cast<T>(float_from_bf16(pool16[at + e]));
      c += run;
    }
  }
  Rows<const T> k(int64_t j0, int64_t cols) const {
    copy_rows(kbuf, kpool, kpool16, Dh, j0, cols);
    return {kbuf, Dh};
  }
  Rows<const T> v(int64_t j0, int64_t cols) const {
    copy_rows(vbuf, vpool, vpool16, Dv, j0, cols);
    return {vbuf, Dv};
  }
};

// One query tile of one (b, h) slice: rows [i0, i0 + rows) of out and lse.
// Online softmax (FA2 Algorithm 1), per row r and key tile j:
//   m' = max(m, rowmax S_j),  P = exp(S_j - m'),  l = exp(m - m') l + rowsum P,
//   O = exp(m - m') O + P V_j;  at the end O /= l and L = m + log l.
// A row with no visible key so far keeps m = -inf, l = 0, O = 0 (its P row is zeroed rather
// than computed as exp(-inf - (-inf)) = NaN).
// The keys and values come tile by tile from `kv` (StridedKV: where they lie; PagedKVTiles: a
// block table's blocks): kv.k(j0, cols) and kv.v(j0, cols) give rows j0 .. j0 + cols - 1.
template <class T, class KV>
void forward_query_tile(Rows<T> os, T* lse_s, Rows<const T> qs, const KV& kv, const T* kts,
                        const AttentionMask<T>& mask, int64_t b, int64_t h, int64_t i0,
                        int64_t rows, int64_t Tq, int64_t Tk, int64_t Dh, int64_t Dv, T scale,
                        int64_t Bc, const RowKernels<T>& rk, T* s, T* m, T* l) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const Rows<T> o{os.row(i0), os.ld};  // [rows, Dv], used as the accumulator
  zero_rows(o, rows, Dv);
  for (int64_t r = 0; r < rows; ++r) {
    m[r] = kNegInf;
    l[r] = T(0);
  }
  const Span keys = visible_keys(mask, i0, i0 + rows, Tq, Tk);
  for (int64_t j0 = keys.begin; j0 < keys.end; j0 += Bc) {
    const int64_t cols = std::min(Bc, keys.end - j0);
    score_tile(s, Bc, qs, kts ? Rows<const T>{} : kv.k(j0, cols), kts, mask, b, h, i0, rows, j0, cols, Tq, Tk, Dh,
               scale);  // [rows, cols]
    for (int64_t r = 0; r < rows; ++r) {
      T* row = s + r * Bc;
      const T mx = rk.max(row, cols, m[r]);
      if (mx == kNegInf) {  // nothing visible yet in this row: P = 0, state unchanged
        std::fill(row, row + cols, T(0));
        continue;
      }
      const T sum = rk.exp_shifted_sum(row, row, mx, cols);  // exp(-inf - mx) = 0 when masked
      const T alpha = std::exp(m[r] - mx);  // 0 when m = -inf; 1 when the max did not move
      l[r] = alpha * l[r] + sum;
      m[r] = mx;
      if (alpha != T(1)) rk.scale(o.row(r), alpha, Dv);
    }
    // O += P V_j
    const Rows<const T> vtile = kv.v(j0, cols);
    gemm<T>(false, false, rows, Dv, cols, T(1), s, Bc, vtile.p, vtile.ld, T(1), o.p, o.ld);
  }
  for (int64_t r = 0; r < rows; ++r) {
    T* orow = o.row(r);
    if (l[r] > T(0)) {  // l >= 1 once any key was seen: the maximum contributes exp(0)
      rk.scale(orow, T(1) / l[r], Dv);
      lse_s[i0 + r] = m[r] + std::log(l[r]);
    } else {  // fully masked row: output 0, the -inf marker for the backward
      for (int64_t c = 0; c < Dv; ++c) orow[c] = T(0);
      lse_s[i0 + r] = kNegInf;
    }
  }
}

// Backward of one key tile [j0, j0 + cols) of one (b, h) slice, over every query tile that
// can see it (FA2 Algorithm 2, outer loop over key tiles). With L and D = rowsum(dO ∘ O):
//   P   = exp(S - L)              (recomputed; L = -inf marks a fully masked row: P = 0)
//   dV_j += P^T dO_i
//   dP  = dO_i V_j^T
//   dS  = P ∘ (dP - D_i)          (the softmax Jacobian with D_i = sum_j P_ij dP_ij)
//   dQ_i += scale dS K_j,   dK_j += scale dS^T Q_i
// dK and dV rows of this key tile are owned by the caller's thread; dq_s may be shared with
// other key tiles, so the caller decides who owns it.
template <class T>
void backward_key_tile(Rows<T> dq_s, Rows<T> dk_s, Rows<T> dv_s, Rows<const T> dos, const T* ls, const T* dd,
                       Rows<const T> qs, Rows<const T> ks, Rows<const T> vs, const T* kts, const T* vts,
                       const AttentionMask<T>& mask, int64_t b, int64_t h, int64_t j0,
                       int64_t cols, int64_t Tq, int64_t Tk, int64_t Dh, int64_t Dv, T scale,
                       int64_t Br, int64_t Bc, const RowKernels<T>& rk, T* p, T* dp) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const Span queries = visible_queries(mask, j0, j0 + cols, Tq, Tk);
  for (int64_t i0 = queries.begin; i0 < queries.end; i0 += Br) {
    const int64_t rows = std::min(Br, queries.end - i0);
    score_tile(p, Bc, qs, Rows<const T>{ks.row(j0), ks.ld}, kts, mask, b, h, i0, rows, j0, cols, Tq, Tk, Dh,
               scale);  // [rows, cols]
    for (int64_t r = 0; r < rows; ++r) {
      T* row = p + r * Bc;
      const T L = ls[i0 + r];
      if (L == kNegInf)
        std::fill(row, row + cols, T(0));
      else
        rk.exp_shifted_sum(row, row, L, cols);  // the sum is not needed here
    }
    // dV_j += P^T dO_i
    gemm<T>(true, false, cols, Dv, rows, T(1), p, Bc, dos.row(i0), dos.ld, T(1), dv_s.row(j0), dv_s.ld);
    // dP = dO_i V_j^T, then dS = P ∘ (dP - D) in place
    if (vts)
      gemm<T>(false, false, rows, cols, Dv, T(1), dos.row(i0), dos.ld, vts + j0, Tk, T(0), dp, Bc);
    else
      gemm<T>(false, true, rows, cols, Dv, T(1), dos.row(i0), dos.ld, vs.row(j0), vs.ld, T(0), dp, Bc);
    for (int64_t r = 0; r < rows; ++r)
      rk.softmax_grad(dp + r * Bc, p + r * Bc, dp + r * Bc, dd[i0 + r], cols);
    // dQ_i += scale dS K_j,  dK_j += scale dS^T Q_i
    gemm<T>(false, false, rows, Dh, cols, scale, dp, Bc, ks.row(j0), ks.ld, T(1), dq_s.row(i0), dq_s.ld);
    gemm<T>(true, false, cols, Dh, rows, scale, dp, Bc, qs.row(i0), qs.ld, T(1), dk_s.row(j0), dk_s.ld);
  }
}

// D_i = sum_c dO_ic O_ic for every row of one slice; it equals sum_j P_ij dP_ij (see the
// derivation), which the backward cannot form without P.
template <class T>
void row_dots(T* dd, Rows<const T> dos, Rows<const T> os, int64_t Tq, int64_t Dv, const RowKernels<T>& rk) {
  for (int64_t i = 0; i < Tq; ++i) dd[i] = rk.dot(dos.row(i), os.row(i), Dv);
}

}  // namespace

template <class T>
void attention_flash_forward(T* out, T* lse, const T* q, const T* k, const T* v,
                             const AttentionMask<T>& mask, const AttentionDims& d, T scale,
                             FlashTiles tiles, const AttentionLayout& layout) {
  const int64_t B = d.B, H = d.H, Hkv = d.Hkv, Tq = d.Tq, Tk = d.Tk, Dh = d.Dh, Dv = d.Dv;
  const int64_t BH = B * H, Br = tiles.q, Bc = tiles.k, group = H / Hkv;
  const int64_t n_qt = (Tq + Br - 1) / Br;  // query tiles per slice
  const int64_t items = BH * n_qt;          // (slice, query tile) work items
  const bool parallel = items > 1 && BH * Tq * Tk * (Dh + Dv) >= kParallelWork;
  const int n_threads = parallel ? omp_get_max_threads() : 1;
  const RowKernels<T> rk = RowKernels<T>::make();
  // Per-thread scratch, allocated once per call: S/P [Br, Bc], m [Br], l [Br], and K^T [Dh, Tk]
  // of the slice the thread last worked on (kept across its query tiles).
  const bool use_kt = Tq >= kTransposeMinQueries;
  const int64_t per_thread = Br * Bc + 2 * Br + (use_kt ? Dh * Tk : 0);
  std::vector<T> scratch(static_cast<size_t>(n_threads * per_thread));  // [threads, per_thread]
  std::vector<int64_t> kt_head(static_cast<size_t>(n_threads), -1);     // [threads]: whose K^T
  // Work is uneven under causal masks (late query tiles see more keys): dynamic schedule.
  parallel_for_team<Schedule::Dynamic>(items, n_threads, [&](int64_t item, int t) {
    const int64_t bh = item / n_qt, i0 = (item % n_qt) * Br;
    const int64_t b = bh / H, h = bh % H, hkv = h / group;  // the K/V head query head h reads
    const int64_t bkv = b * Hkv + hkv;
    const Rows<const T> ks = head_rows(k, layout.k, b, hkv);  // [Tk, Dh]
    T* s = scratch.data() + t * per_thread;
    T* kt = use_kt ? s + Br * Bc + 2 * Br : nullptr;  // [Dh, Tk]
    if (use_kt && kt_head[static_cast<size_t>(t)] != bkv) {
      transpose(kt, ks, Tk, Dh);
      kt_head[static_cast<size_t>(t)] = bkv;
    }
    forward_query_tile(head_rows(out, layout.out, b, h), lse + bh * Tq, head_rows(q, layout.q, b, h),
                       StridedKV<T>{ks, head_rows(v, layout.v, b, hkv)}, kt, mask, b, h, i0, std::min(Br, Tq - i0),
                       Tq, Tk, Dh, Dv, scale, Bc, rk, s, s + Br * Bc, s + Br * Bc + Br);
  });
}

// The forward above with K and V in a block pool: the same work items, tiles and products in
// the same order; only the key and value tiles are staged from the blocks (PagedKVTiles).
template <class T>
void attention_flash_forward_paged(T* out, T* lse, const T* q, const PagedKV<T>& kv, const AttentionMask<T>& mask,
                                   const AttentionDims& d, T scale, FlashTiles tiles, const HeadLayout& q_layout,
                                   const HeadLayout& out_layout) {
  const int64_t B = d.B, H = d.H, Hkv = d.Hkv, Tq = d.Tq, Tk = d.Tk, Dh = d.Dh, Dv = d.Dv;
  const int64_t BH = B * H, Br = tiles.q, Bc = tiles.k, group = H / Hkv;
  const int64_t n_qt = (Tq + Br - 1) / Br;
  const int64_t items = BH * n_qt;
  const bool parallel = items > 1 && BH * Tq * Tk * (Dh + Dv) >= kParallelWork;
  const int n_threads = parallel ? omp_get_max_threads() : 1;
  const RowKernels<T> rk = RowKernels<T>::make();
  // Per thread: S/P [Br, Bc], m [Br], l [Br], the staged K and V tiles [Bc, Dh] and [Bc, Dv],
  // and K^T [Dh, Tk] as in the forward above.
  const bool use_kt = Tq >= kTransposeMinQueries;
  const int64_t per_thread = Br * Bc + 2 * Br + Bc * (Dh + Dv) + (use_kt ? Dh * Tk : 0);
  std::vector<T> scratch(static_cast<size_t>(n_threads * per_thread));
  std::vector<int64_t> kt_head(static_cast<size_t>(n_threads), -1);
  parallel_for_team<Schedule::Dynamic>(items, n_threads, [&](int64_t item, int t) {
    const int64_t bh = item / n_qt, i0 = (item % n_qt) * Br;
    const int64_t b = bh / H, h = bh % H, hkv = h / group;
    const int64_t bkv = b * Hkv + hkv;
    T* s = scratch.data() + t * per_thread;
    PagedKVTiles<T> tiles_kv;
    tiles_kv.kpool = kv.k;
    tiles_kv.vpool = kv.v;
    tiles_kv.kpool16 = kv.k16;
    tiles_kv.vpool16 = kv.v16;
    tiles_kv.table = kv.tables + b * kv.table_stride;
    tiles_kv.table_len = kv.table_stride;
    tiles_kv.origin = kv.origin[b];
    tiles_kv.first = kv.first;
    tiles_kv.Bs = kv.block;
    tiles_kv.Hkv = Hkv;
    tiles_kv.hkv = hkv;
    tiles_kv.Dh = Dh;
    tiles_kv.Dv = Dv;
    tiles_kv.kbuf = s + Br * Bc + 2 * Br;
    tiles_kv.vbuf = tiles_kv.kbuf + Bc * Dh;
    T* kt = use_kt ? tiles_kv.vbuf + Bc * Dv : nullptr;  // [Dh, Tk]
    if (use_kt && kt_head[static_cast<size_t>(t)] != bkv) {
      for (int64_t j0 = 0; j0 < Tk; j0 += Bc) {
        const int64_t cols = std::min(Bc, Tk - j0);
        const Rows<const T> rows = tiles_kv.k(j0, cols);
        for (int64_t c = 0; c < Dh; ++c)
          for (int64_t j = 0; j < cols; ++j) kt[c * Tk + j0 + j] = rows.row(j)[c];
      }
      kt_head[static_cast<size_t>(t)] = bkv;
    }
    forward_query_tile(head_rows(out, out_layout, b, h), lse + bh * Tq, head_rows(q, q_layout, b, h), tiles_kv, kt,
                       mask, b, h, i0, std::min(Br, Tq - i0), Tq, Tk, Dh, Dv, scale, Bc, rk, s, s + Br * Bc,
                       s + Br * Bc + Br);
  });
}

// Backward of, per slice, S = scale Q K^T (+ mask), P = softmax_rows(S), O = P V, given
// L = logsumexp_rows(S) from the forward. Local derivatives as in the naive kernel
// (dS = P ∘ (dP - rowsum(dP ∘ P))), with rowsum(dP ∘ P) = rowsum(dO ∘ O) and P = exp(S - L).
// Two ways to share the work, both deterministic for a given thread count:
//   B*Hkv >= threads: one K/V head per iteration, its query heads in order; each thread owns
//                     that K/V head's dk, dv and its query heads' dq;
//   B*Hkv <  threads: slice by slice, key tiles split round-robin across threads, each thread
//                     owns its key tiles' dk, dv rows and a private dq [Tq, Dh], summed after.
// Whoever owns a block zeroes it first, so dq, dk and dv come back fully written.
template <class T>
void attention_flash_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse,
                              const T* q, const T* k, const T* v, const AttentionMask<T>& mask,
                              const AttentionDims& d, T scale, FlashTiles tiles, const AttentionLayout& x,
                              const AttentionLayout& dx) {
  const int64_t B = d.B, H = d.H, Hkv = d.Hkv, Tq = d.Tq, Tk = d.Tk, Dh = d.Dh, Dv = d.Dv;
  const int64_t BH = B * H, BHkv = B * Hkv, Br = tiles.q, Bc = tiles.k, group = H / Hkv;
  if (BH == 0 || Tq == 0 || Tk == 0) {  // no keys (the output was constant 0) or no queries
    zero_heads(dq, dx.q, B, H, Tq, Dh);
    zero_heads(dk, dx.k, B, Hkv, Tk, Dh);
    zero_heads(dv, dx.v, B, Hkv, Tk, Dv);
    return;
  }
  const int64_t n_kt = (Tk + Bc - 1) / Bc;
  const RowKernels<T> rk = RowKernels<T>::make();
  const bool big = BH * Tq * Tk * (Dh + Dv) >= kParallelWork;
  const int max_threads = big ? omp_get_max_threads() : 1;
  const bool by_slice = BHkv >= max_threads || n_kt == 1;
  const int n_threads = by_slice ? static_cast<int>(std::min<int64_t>(max_threads, BHkv))
                                 : static_cast<int>(std::min<int64_t>(max_threads, n_kt));
  // Per-thread scratch, allocated once: P [Br, Bc], dP [Br, Bc], D [Tq], then by slices the
  // slice's K^T [Dh, Tk] and V^T [Dv, Tk], or with key-tile splitting a private dQ [Tq, Dh]
  // (and one shared K^T, V^T).
  const bool use_kvt = Tq >= kTransposeMinQueries;
  const int64_t kvt_size = use_kvt ? (Dh + Dv) * Tk : 0;
  const int64_t per_thread = 2 * Br * Bc + Tq + (by_slice ? kvt_size : Tq * Dh);
  std::vector<T> scratch(static_cast<size_t>(n_threads * per_thread));  // [threads, per_thread]

  if (by_slice) {
    parallel_for_team<Schedule::Static>(BHkv, n_threads, [&](int64_t bkv, int t) {
      const int64_t b = bkv / Hkv, hkv = bkv % Hkv;
      const Rows<const T> ks = head_rows(k, x.k, b, hkv), vs = head_rows(v, x.v, b, hkv);
      const Rows<T> dks = head_rows(dk, dx.k, b, hkv), dvs = head_rows(dv, dx.v, b, hkv);
      zero_rows(dks, Tk, Dh);
      zero_rows(dvs, Tk, Dv);
      T* p = scratch.data() + t * per_thread;
      T* dp = p + Br * Bc;
      T* dd = dp + Br * Bc;  // [Tq]
      T* kt = use_kvt ? dd + Tq : nullptr;       // [Dh, Tk]
      T* vt = use_kvt ? kt + Dh * Tk : nullptr;  // [Dv, Tk]
      if (use_kvt) {
        transpose(kt, ks, Tk, Dh);
        transpose(vt, vs, Tk, Dv);
      }
      for (int64_t g = 0; g < group; ++g) {
        const int64_t h = hkv * group + g, bh = b * H + h;  // query head of this K/V head
        const Rows<const T> dos = head_rows(dout, dx.out, b, h);
        const Rows<T> dqs = head_rows(dq, dx.q, b, h);
        zero_rows(dqs, Tq, Dh);
        row_dots(dd, dos, head_rows(out, x.out, b, h), Tq, Dv, rk);
        for (int64_t j0 = 0; j0 < Tk; j0 += Bc)
          backward_key_tile(dqs, dks, dvs, dos, lse + bh * Tq, dd, head_rows(q, x.q, b, h), ks, vs, kt, vt, mask,
                            b, h, j0, std::min(Bc, Tk - j0), Tq, Tk, Dh, Dv, scale, Br, Bc, rk, p, dp);
      }
    });
    return;
  }

  std::vector<T> kvt(static_cast<size_t>(kvt_size));  // K^T [Dh, Tk], V^T [Dv, Tk]
  T* kt = use_kvt ? kvt.data() : nullptr;
  T* vt = use_kvt ? kt + Dh * Tk : nullptr;
  for (int64_t bh = 0; bh < BH; ++bh) {
    const int64_t b = bh / H, h = bh % H, hkv = h / group;
    const Rows<const T> ks = head_rows(k, x.k, b, hkv), vs = head_rows(v, x.v, b, hkv);
    const Rows<T> dks = head_rows(dk, dx.k, b, hkv), dvs = head_rows(dv, dx.v, b, hkv);
    if (h % group == 0) {  // the first query head of this K/V head
      zero_rows(dks, Tk, Dh);
      zero_rows(dvs, Tk, Dv);
      if (use_kvt) {
        transpose(kt, ks, Tk, Dh);
        transpose(vt, vs, Tk, Dv);
      }
    }
    const Rows<const T> dos = head_rows(dout, dx.out, b, h), qs = head_rows(q, x.q, b, h);
    const Rows<const T> os = head_rows(out, x.out, b, h);
    const Rows<T> dq_s = head_rows(dq, dx.q, b, h);  // [Tq, Dh]
#pragma omp parallel num_threads(n_threads)
    {
      const int t = omp_get_thread_num();
      const int team = omp_get_num_threads();  // may be < n_threads when nested
      T* p = scratch.data() + t * per_thread;
      T* dp = p + Br * Bc;
      T* dd = dp + Br * Bc;   // [Tq], each thread its own copy
      T* dq_t = dd + Tq;      // [Tq, Dh], this thread's share of dQ
      row_dots(dd, dos, os, Tq, Dv, rk);
      std::fill(dq_t, dq_t + Tq * Dh, T(0));
      // Round-robin over key tiles balances the triangle a causal mask leaves.
#pragma omp for schedule(static, 1)
      for (int64_t tile = 0; tile < n_kt; ++tile) {
        const int64_t j0 = tile * Bc;
        backward_key_tile(Rows<T>{dq_t, Dh}, dks, dvs, dos, lse + bh * Tq, dd, qs, ks, vs, kt, vt, mask, b, h,
                          j0, std::min(Bc, Tk - j0), Tq, Tk, Dh, Dv, scale, Br, Bc, rk, p, dp);
      }
      // dQ = sum of the threads' shares, in thread order; rows split across threads.
#pragma omp for schedule(static)
      for (int64_t e = 0; e < Tq * Dh; ++e) {
        T acc = T(0);
        for (int u = 0; u < team; ++u) acc += scratch[static_cast<size_t>(u * per_thread + 2 * Br * Bc + Tq + e)];
        dq_s.row(e / Dh)[e % Dh] = acc;
      }
    }
  }
}

template void attention_flash_forward<float>(float*, float*, const float*, const float*, const float*,
                                             const AttentionMask<float>&, const AttentionDims&, float, FlashTiles,
                                             const AttentionLayout&);
template void attention_flash_forward<double>(double*, double*, const double*, const double*, const double*,
                                              const AttentionMask<double>&, const AttentionDims&, double,
                                              FlashTiles, const AttentionLayout&);
template void attention_flash_forward_paged<float>(float*, float*, const float*, const PagedKV<float>&,
                                                   const AttentionMask<float>&, const AttentionDims&, float,
                                                   FlashTiles, const HeadLayout&, const HeadLayout&);
template void attention_flash_forward_paged<double>(double*, double*, const double*, const PagedKV<double>&,
                                                    const AttentionMask<double>&, const AttentionDims&, double,
                                                    FlashTiles, const HeadLayout&, const HeadLayout&);
template void attention_flash_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                              const float*, const float*, const float*, const AttentionMask<float>&,
                                              const AttentionDims&, float, FlashTiles, const AttentionLayout&,
                                              const AttentionLayout&);
template void attention_flash_backward<double>(double*, double*, double*, const double*, const double*,
                                               const double*, const double*, const double*, const double*,
                                               const AttentionMask<double>&, const AttentionDims&, double,
                                               FlashTiles, const AttentionLayout&, const AttentionLayout&);

}  // namespace attn::kernels
