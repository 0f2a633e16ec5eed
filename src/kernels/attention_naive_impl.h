// kernels/attention_naive_impl.h — private to kernels/: the naive attention pair's slice loops
// (attention_naive.h's contract), with the row-wise work between the products given by a
// policy, so that the reference (attention_naive.cpp: scalar loops, float and double) and the
// vector-row pair (attention_rows.cpp: the vector kernels, float) share every product, buffer
// and order of operations. Derivation: docs/derivations/attention.md.
// A RowOps policy has, for one slice (rows of Tk entries, Tk apart):
//   softmax(p, Tq, Tk, pd, d): P = softmax(S) in place in p (masked entries are -inf, a fully
//     masked row becomes zeros); with d (not null) also pd = P ∘ d;
//   mul(out, a, b, n): out = a ∘ b;
//   softmax_grad(g, p, d, Tq, Tk): g holds dP on entry and dS = P ∘ (dP' - rowsum(dP' ∘ P)) on
//     return, dP' = dP ∘ d (d null: dP' = dP).
#pragma once

#include "kernels/attention_naive.h"
#include "kernels/gemm.h"
#include "kernels/parallel_for.h"

namespace attn::kernels::naive_impl {

template <class T, class RowOps>
void forward(T* out, T* probs, T* work, const T* q, const T* k, const T* v, const AttentionMask<T>& mask,
             const T* dropout_scale, const AttentionDims& d, T scale, const AttentionLayout& layout,
             const RowOps& rows) {
  const int64_t B = d.B, H = d.H, Tq = d.Tq, Tk = d.Tk, Dh = d.Dh, Dv = d.Dv;
  const int64_t BH = B * H;
  const int64_t lq = layout.q.row, lk = layout.k.row, lv = layout.v.row, lo = layout.out.row;
  parallel_for(BH, BH > 1 && BH * Tq * Tk * (Dh + Dv) >= 32768, [&](int64_t bh) {
    // Operands [Tq, Dh], [Tk, Dh], [Tk, Dv] and [Tq, Dv], rows lq, lk, lv and lo apart.
    const auto [b, h, qs, ks, vs, os] = forward_slice(bh, d, layout, out, q, k, v);
    T* ps = probs + bh * Tq * Tk;                   // [Tq, Tk]
    if (Tk == 0) return zero_rows(os, Tq, Dv, lo);  // no keys: every row is fully masked
    // S = scale * q k^T, then the mask: S_ij += bias_ij, masked S_ij = -inf.
    gemm<T>(false, true, Tq, Tk, Dh, scale, qs, lq, ks, lk, T(0), ps, Tk);
    for (int64_t i = 0; i < Tq; ++i) apply_attention_mask_row(ps + i * Tk, mask, b, h, i, 0, Tk, Tq, Tk);
    // P = softmax(S) row by row (fully masked rows become 0), and with dropout P ∘ D into work.
    const T* ds = dropout_scale ? dropout_scale + bh * Tq * Tk : nullptr;  // [Tq, Tk]
    T* ws = ds ? work + bh * Tq * Tk : nullptr;                             // [Tq, Tk]
    rows.softmax(ps, Tq, Tk, ws, ds);
    // out = (P ∘ D) v, with D the dropout scale (absent: D = 1).
    gemm<T>(false, false, Tq, Dv, Tk, T(1), ws ? ws : ps, Tk, vs, lv, T(0), os, lo);
  });
}

// Backward of, per slice,
//   S = scale * Q K^T (+ mask),  P = softmax_rows(S),  O = (P ∘ D) V.
// Local derivatives (D = 1 without dropout):
//   dV  = (P ∘ D)^T dO                         [Tk, Dv]
//   dP  = (dO V^T) ∘ D                         [Tq, Tk]
//   dS  = P ∘ (dP - rowsum(dP ∘ P))            softmax Jacobian: dP_ij/dS_ik = P_ij (δ_jk - P_ik)
//   dQ  = scale * dS K                          [Tq, Dh]
//   dK  = scale * dS^T Q                        [Tk, Dh]
// Masked and fully-masked entries have P = 0, hence dS = 0: no gradient reaches them and a
// fully masked row contributes nothing (and no NaN) anywhere. With grouped-query attention a
// K/V head is used by H / Hkv query heads, so its dK and dV are the sums of theirs: one thread
// owns one K/V head and adds its query heads one after the other. Each product writes its
// block (beta = 0) the first time and adds to it (beta = 1) after that, so every element is
// written without the buffers being zeroed first, in the same order of additions as before.
template <class T, class RowOps>
void backward(T* dq, T* dk, T* dv, T* work, const T* dout, const T* probs, const T* dropout_scale, const T* q,
              const T* k, const T* v, const AttentionDims& d, T scale, const AttentionLayout& x,
              const AttentionLayout& dx, const RowOps& rows) {
  const int64_t B = d.B, H = d.H, Hkv = d.Hkv, Tq = d.Tq, Tk = d.Tk, Dh = d.Dh, Dv = d.Dv;
  const int64_t BHkv = B * Hkv, group = H / Hkv;
  if (Tk == 0 || Tq == 0) {  // the output was constant 0 (or empty): every gradient is 0
    zero_heads(dq, dx.q, B, H, Tq, Dh);
    zero_heads(dk, dx.k, B, Hkv, Tk, Dh);
    zero_heads(dv, dx.v, B, Hkv, Tk, Dv);
    return;
  }
  const int64_t lq = x.q.row, lk = x.k.row, lv = x.v.row;
  const int64_t ldq = dx.q.row, ldk = dx.k.row, ldv = dx.v.row, ldo = dx.out.row;
  parallel_for(BHkv, BHkv > 1 && B * H * Tq * Tk * (Dh + Dv) >= 32768, [&](int64_t bkv) {
    const int64_t b = bkv / Hkv, hkv = bkv % Hkv;
    const T* ks = x.k.at(k, b, hkv);   // [Tk, Dh]
    const T* vs = x.v.at(v, b, hkv);   // [Tk, Dv]
    T* dks = dx.k.at(dk, b, hkv);      // [Tk, Dh]
    T* dvs = dx.v.at(dv, b, hkv);      // [Tk, Dv]
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = hkv * group + g, bh = b * H + h;  // query head of this K/V head
      const T beta = g == 0 ? T(0) : T(1);  // dK, dV: write for the first query head, then add
      const T* qs = x.q.at(q, b, h);          // [Tq, Dh]
      const T* dos = dx.out.at(dout, b, h);   // [Tq, Dv]
      const T* ps = probs + bh * Tq * Tk;  // [Tq, Tk]
      const T* ds = dropout_scale ? dropout_scale + bh * Tq * Tk : nullptr;  // [Tq, Tk]
      T* ws = work + bh * Tq * Tk;         // [Tq, Tk]
      T* dqs = dx.q.at(dq, b, h);          // [Tq, Dh]
      // dV += (P ∘ D)^T dO
      if (ds) rows.mul(ws, ps, ds, Tq * Tk);
      gemm<T>(true, false, Tk, Dv, Tq, T(1), ds ? ws : ps, Tk, dos, ldo, beta, dvs, ldv);
      // dP = dO V^T into work, then dS = P ∘ (dP ∘ D - rowsum(dP ∘ D ∘ P)) in place
      gemm<T>(false, true, Tq, Tk, Dv, T(1), dos, ldo, vs, lv, T(0), ws, Tk);
      rows.softmax_grad(ws, ps, ds, Tq, Tk);
      // dQ = scale * dS K (each query head once),  dK += scale * dS^T Q
      gemm<T>(false, false, Tq, Dh, Tk, scale, ws, Tk, ks, lk, T(0), dqs, ldq);
      gemm<T>(true, false, Tk, Dh, Tq, scale, ws, Tk, qs, lq, beta, dks, ldk);
    }
  });
}

}  // namespace attn::kernels::naive_impl
