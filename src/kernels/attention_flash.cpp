// kernels/attention_flash.cpp — tiled exact attention with an online softmax (paper §3.2.1,
// Eq. 1; FlashAttention-2, Dao 2023, Algorithms 1 and 2) on CPU: tile products through
// kernels::gemm, masks applied inside the tiles, tiles that causal or a sliding window hide
// entirely skipped, only L = m + log l saved, P recomputed in the backward. Grouped-query
// attention reads K/V head h / (H / Hkv); ALiBi biases are computed inside the tiles. No
// dropout, no weights output, no SIMD of its own: exp and the row loops are plain C++.
// Derivation: docs/derivations/attention.md ("Tiled forward" and "Recomputing backward").
#include "kernels/attention_flash.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/gemm.h"

namespace attn::kernels {

namespace {

// Below this many multiply-adds (B*H*Tq*Tk*(Dh+Dv)) a call stays on one thread: starting a
// team costs more than it saves. Same threshold as the naive kernel.
constexpr int64_t kParallelWork = 32768;

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

// S[rows, cols] (row stride ld) = scale * Q_i K_j^T, then the mask: bias added, masked
// entries set to -inf. Shared by the forward and the backward so both see the same scores.
template <class T>
void score_tile(T* s, int64_t ld, const T* qs, const T* ks, const AttentionMask<T>& mask,
                int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                int64_t Tq, int64_t Tk, int64_t Dh, T scale) {
  gemm<T>(false, true, rows, cols, Dh, scale, qs + i0 * Dh, Dh, ks + j0 * Dh, Dh, T(0), s, ld);
  if (tile_needs_mask(mask, i0, i0 + rows, j0, j0 + cols, Tq, Tk))
    for (int64_t r = 0; r < rows; ++r)
      apply_attention_mask_row(s + r * ld, mask, b, h, i0 + r, j0, j0 + cols, Tq, Tk);
}

// One query tile of one (b, h) slice: rows [i0, i0 + rows) of out and lse.
// Online softmax (FA2 Algorithm 1), per row r and key tile j:
//   m' = max(m, rowmax S_j),  P = exp(S_j - m'),  l = exp(m - m') l + rowsum P,
//   O = exp(m - m') O + P V_j;  at the end O /= l and L = m + log l.
// A row with no visible key so far keeps m = -inf, l = 0, O = 0 (its P row is zeroed rather
// than computed as exp(-inf - (-inf)) = NaN).
template <class T>
void forward_query_tile(T* os, T* lse_s, const T* qs, const T* ks, const T* vs,
                        const AttentionMask<T>& mask, int64_t b, int64_t h, int64_t i0,
                        int64_t rows, int64_t Tq, int64_t Tk, int64_t Dh, int64_t Dv, T scale,
                        int64_t Bc, T* s, T* m, T* l) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  T* o = os + i0 * Dv;  // [rows, Dv], used as the accumulator
  for (int64_t e = 0; e < rows * Dv; ++e) o[e] = T(0);
  for (int64_t r = 0; r < rows; ++r) {
    m[r] = kNegInf;
    l[r] = T(0);
  }
  const Span keys = visible_keys(mask, i0, i0 + rows, Tq, Tk);
  for (int64_t j0 = keys.begin; j0 < keys.end; j0 += Bc) {
    const int64_t cols = std::min(Bc, keys.end - j0);
    score_tile(s, Bc, qs, ks, mask, b, h, i0, rows, j0, cols, Tq, Tk, Dh, scale);  // [rows, cols]
    for (int64_t r = 0; r < rows; ++r) {
      T* row = s + r * Bc;
      T mx = m[r];
      for (int64_t c = 0; c < cols; ++c) mx = row[c] > mx ? row[c] : mx;
      if (mx == kNegInf) {  // nothing visible yet in this row: P = 0, state unchanged
        for (int64_t c = 0; c < cols; ++c) row[c] = T(0);
        continue;
      }
      T sum = 0;
      for (int64_t c = 0; c < cols; ++c) {
        row[c] = std::exp(row[c] - mx);  // exp(-inf - mx) = 0 for masked entries
        sum += row[c];
      }
      const T alpha = std::exp(m[r] - mx);  // 0 when m = -inf; 1 when the max did not move
      l[r] = alpha * l[r] + sum;
      m[r] = mx;
      if (alpha != T(1)) {
        T* orow = o + r * Dv;
        for (int64_t c = 0; c < Dv; ++c) orow[c] *= alpha;
      }
    }
    // O += P V_j
    gemm<T>(false, false, rows, Dv, cols, T(1), s, Bc, vs + j0 * Dv, Dv, T(1), o, Dv);
  }
  for (int64_t r = 0; r < rows; ++r) {
    T* orow = o + r * Dv;
    if (l[r] > T(0)) {  // l >= 1 once any key was seen: the maximum contributes exp(0)
      const T inv = T(1) / l[r];
      for (int64_t c = 0; c < Dv; ++c) orow[c] *= inv;
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
void backward_key_tile(T* dq_s, T* dk_s, T* dv_s, const T* dos, const T* ls, const T* dd,
                       const T* qs, const T* ks, const T* vs, const AttentionMask<T>& mask,
                       int64_t b, int64_t h, int64_t j0, int64_t cols, int64_t Tq, int64_t Tk,
                       int64_t Dh, int64_t Dv, T scale, int64_t Br, int64_t Bc, T* p, T* dp) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const Span queries = visible_queries(mask, j0, j0 + cols, Tq, Tk);
  for (int64_t i0 = queries.begin; i0 < queries.end; i0 += Br) {
    const int64_t rows = std::min(Br, queries.end - i0);
    score_tile(p, Bc, qs, ks, mask, b, h, i0, rows, j0, cols, Tq, Tk, Dh, scale);  // [rows, cols]
    for (int64_t r = 0; r < rows; ++r) {
      T* row = p + r * Bc;
      const T L = ls[i0 + r];
      if (L == kNegInf) {
        for (int64_t c = 0; c < cols; ++c) row[c] = T(0);
      } else {
        for (int64_t c = 0; c < cols; ++c) row[c] = std::exp(row[c] - L);
      }
    }
    // dV_j += P^T dO_i
    gemm<T>(true, false, cols, Dv, rows, T(1), p, Bc, dos + i0 * Dv, Dv, T(1), dv_s + j0 * Dv, Dv);
    // dP = dO_i V_j^T, then dS = P ∘ (dP - D) in place
    gemm<T>(false, true, rows, cols, Dv, T(1), dos + i0 * Dv, Dv, vs + j0 * Dv, Dv, T(0), dp, Bc);
    for (int64_t r = 0; r < rows; ++r) {
      const T* prow = p + r * Bc;
      T* drow = dp + r * Bc;
      const T di = dd[i0 + r];
      for (int64_t c = 0; c < cols; ++c) drow[c] = prow[c] * (drow[c] - di);
    }
    // dQ_i += scale dS K_j,  dK_j += scale dS^T Q_i
    gemm<T>(false, false, rows, Dh, cols, scale, dp, Bc, ks + j0 * Dh, Dh, T(1), dq_s + i0 * Dh, Dh);
    gemm<T>(true, false, cols, Dh, rows, scale, dp, Bc, qs + i0 * Dh, Dh, T(1), dk_s + j0 * Dh, Dh);
  }
}

// D_i = sum_c dO_ic O_ic for every row of one slice; it equals sum_j P_ij dP_ij (see the
// derivation), which the backward cannot form without P.
template <class T>
void row_dots(T* dd, const T* dos, const T* os, int64_t Tq, int64_t Dv) {
  for (int64_t i = 0; i < Tq; ++i) {
    T acc = 0;
    for (int64_t c = 0; c < Dv; ++c) acc += dos[i * Dv + c] * os[i * Dv + c];
    dd[i] = acc;
  }
}

}  // namespace

template <class T>
void attention_flash_forward(T* out, T* lse, const T* q, const T* k, const T* v,
                             const AttentionMask<T>& mask, int64_t B, int64_t H, int64_t Hkv,
                             int64_t Tq, int64_t Tk, int64_t Dh, int64_t Dv, T scale,
                             FlashTiles tiles) {
  const int64_t BH = B * H, Br = tiles.q, Bc = tiles.k, group = H / Hkv;
  const int64_t n_qt = (Tq + Br - 1) / Br;  // query tiles per slice
  const int64_t items = BH * n_qt;          // (slice, query tile) work items
  const bool parallel = items > 1 && BH * Tq * Tk * (Dh + Dv) >= kParallelWork;
  const int n_threads = parallel ? omp_get_max_threads() : 1;
  // Per-thread scratch, allocated once per call: S/P [Br, Bc], m [Br], l [Br].
  const int64_t per_thread = Br * Bc + 2 * Br;
  std::vector<T> scratch(static_cast<size_t>(n_threads * per_thread));  // [threads, per_thread]
  // Work is uneven under causal masks (late query tiles see more keys): dynamic schedule.
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads) if (parallel)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t bh = item / n_qt, i0 = (item % n_qt) * Br;
    const int64_t bkv = (bh / H) * Hkv + (bh % H) / group;  // the K/V head query head h reads
    T* s = scratch.data() + omp_get_thread_num() * per_thread;
    forward_query_tile(out + bh * Tq * Dv, lse + bh * Tq, q + bh * Tq * Dh, k + bkv * Tk * Dh,
                       v + bkv * Tk * Dv, mask, bh / H, bh % H, i0, std::min(Br, Tq - i0), Tq, Tk,
                       Dh, Dv, scale, Bc, s, s + Br * Bc, s + Br * Bc + Br);
  }
}

// Backward of, per slice, S = scale Q K^T (+ mask), P = softmax_rows(S), O = P V, given
// L = logsumexp_rows(S) from the forward. Local derivatives as in the naive kernel
// (dS = P ∘ (dP - rowsum(dP ∘ P))), with rowsum(dP ∘ P) = rowsum(dO ∘ O) and P = exp(S - L).
// Two ways to share the work, both deterministic for a given thread count:
//   B*Hkv >= threads: one K/V head per iteration, its query heads in order; each thread owns
//                     that K/V head's dk, dv and its query heads' dq;
//   B*Hkv <  threads: slice by slice, key tiles split round-robin across threads, each thread
//                     owns its key tiles' dk, dv rows and a private dq [Tq, Dh], summed after.
template <class T>
void attention_flash_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse,
                              const T* q, const T* k, const T* v, const AttentionMask<T>& mask,
                              int64_t B, int64_t H, int64_t Hkv, int64_t Tq, int64_t Tk, int64_t Dh,
                              int64_t Dv, T scale, FlashTiles tiles) {
  const int64_t BH = B * H, BHkv = B * Hkv, Br = tiles.q, Bc = tiles.k, group = H / Hkv;
  if (BH == 0 || Tq == 0 || Tk == 0) return;  // no keys: the output was constant 0
  const int64_t n_kt = (Tk + Bc - 1) / Bc;
  const bool big = BH * Tq * Tk * (Dh + Dv) >= kParallelWork;
  const int max_threads = big ? omp_get_max_threads() : 1;
  const bool by_slice = BHkv >= max_threads || n_kt == 1;
  const int n_threads = by_slice ? static_cast<int>(std::min<int64_t>(max_threads, BHkv))
                                 : static_cast<int>(std::min<int64_t>(max_threads, n_kt));
  // Per-thread scratch, allocated once: P [Br, Bc], dP [Br, Bc], D [Tq], and with key-tile
  // splitting a private dQ [Tq, Dh].
  const int64_t per_thread = 2 * Br * Bc + Tq + (by_slice ? 0 : Tq * Dh);
  std::vector<T> scratch(static_cast<size_t>(n_threads * per_thread));  // [threads, per_thread]

  if (by_slice) {
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n_threads > 1)
    for (int64_t bkv = 0; bkv < BHkv; ++bkv) {
      T* p = scratch.data() + omp_get_thread_num() * per_thread;
      T* dp = p + Br * Bc;
      T* dd = dp + Br * Bc;  // [Tq]
      for (int64_t g = 0; g < group; ++g) {
        const int64_t bh = (bkv / Hkv) * H + (bkv % Hkv) * group + g;  // query head of this K/V head
        const T* dos = dout + bh * Tq * Dv;
        row_dots(dd, dos, out + bh * Tq * Dv, Tq, Dv);
        for (int64_t j0 = 0; j0 < Tk; j0 += Bc)
          backward_key_tile(dq + bh * Tq * Dh, dk + bkv * Tk * Dh, dv + bkv * Tk * Dv, dos,
                            lse + bh * Tq, dd, q + bh * Tq * Dh, k + bkv * Tk * Dh, v + bkv * Tk * Dv,
                            mask, bh / H, bh % H, j0, std::min(Bc, Tk - j0), Tq, Tk, Dh, Dv, scale,
                            Br, Bc, p, dp);
      }
    }
    return;
  }

  for (int64_t bh = 0; bh < BH; ++bh) {
    const int64_t bkv = (bh / H) * Hkv + (bh % H) / group;
    const T* dos = dout + bh * Tq * Dv;
    T* dq_s = dq + bh * Tq * Dh;  // [Tq, Dh]
#pragma omp parallel num_threads(n_threads)
    {
      const int t = omp_get_thread_num();
      const int team = omp_get_num_threads();  // may be < n_threads when nested
      T* p = scratch.data() + t * per_thread;
      T* dp = p + Br * Bc;
      T* dd = dp + Br * Bc;   // [Tq], each thread its own copy
      T* dq_t = dd + Tq;      // [Tq, Dh], this thread's share of dQ
      row_dots(dd, dos, out + bh * Tq * Dv, Tq, Dv);
      std::fill(dq_t, dq_t + Tq * Dh, T(0));
      // Round-robin over key tiles balances the triangle a causal mask leaves.
#pragma omp for schedule(static, 1)
      for (int64_t kt = 0; kt < n_kt; ++kt) {
        const int64_t j0 = kt * Bc;
        backward_key_tile(dq_t, dk + bkv * Tk * Dh, dv + bkv * Tk * Dv, dos, lse + bh * Tq, dd,
                          q + bh * Tq * Dh, k + bkv * Tk * Dh, v + bkv * Tk * Dv, mask, bh / H,
                          bh % H, j0, std::min(Bc, Tk - j0), Tq, Tk, Dh, Dv, scale, Br, Bc, p, dp);
      }
      // dQ = sum of the threads' shares, in thread order; rows split across threads.
#pragma omp for schedule(static)
      for (int64_t e = 0; e < Tq * Dh; ++e) {
        T acc = dq_s[e];
        for (int u = 0; u < team; ++u) acc += scratch[static_cast<size_t>(u * per_thread + 2 * Br * Bc + Tq + e)];
        dq_s[e] = acc;
      }
    }
  }
}

template void attention_flash_forward<float>(float*, float*, const float*, const float*,
                                             const float*, const AttentionMask<float>&, int64_t,
                                             int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                             float, FlashTiles);
template void attention_flash_forward<double>(double*, double*, const double*, const double*,
                                              const double*, const AttentionMask<double>&, int64_t,
                                              int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                              double, FlashTiles);
template void attention_flash_backward<float>(float*, float*, float*, const float*, const float*,
                                              const float*, const float*, const float*,
                                              const float*, const AttentionMask<float>&, int64_t,
                                              int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                              float, FlashTiles);
template void attention_flash_backward<double>(double*, double*, double*, const double*,
                                               const double*, const double*, const double*,
                                               const double*, const double*,
                                               const AttentionMask<double>&, int64_t, int64_t,
                                               int64_t, int64_t, int64_t, int64_t, int64_t, double,
                                               FlashTiles);

}  // namespace attn::kernels
