// kernels/attention_rows.cpp — the naive attention pair with its row-wise work on the vector
// kernels (attention_rows.h). Slice for slice the same products as attention_naive.cpp (the
// same gemm calls, so the same sums) and the same operations around them; the softmax rows,
// the dropout product and the softmax backward run on the vector kernels, whose exp and sums
// round differently from the scalar loops (within float rounding). Parallel over B*H (forward)
// and B*Hkv (backward) like the naive pair. Derivation: docs/derivations/attention.md.
#include "kernels/attention_rows.h"

#include "kernels/gemm.h"
#include "kernels/parallel_for.h"
#include "kernels/simd/vector_kernels.h"

namespace attn::kernels {

namespace {

// Below this much work (B*H*Tq*Tk*(Dh+Dv)) a call stays on one thread, as the naive pair's.
constexpr int64_t kParallelMin = 32768;

}  // namespace

void attention_rows_forward(float* out, float* probs, float* work, const float* q, const float* k, const float* v,
                            const AttentionMask<float>& mask, const float* dropout_scale, const AttentionDims& d,
                            float scale, const AttentionLayout& layout) {
  const int64_t B = d.B, H = d.H, Hkv = d.Hkv, Tq = d.Tq, Tk = d.Tk, Dh = d.Dh, Dv = d.Dv;
  const auto& vk = simd::vector_kernels();  // fetched outside the region
  const int64_t BH = B * H, group = H / Hkv;
  const int64_t lq = layout.q.row, lk = layout.k.row, lv = layout.v.row, lo = layout.out.row;
  parallel_for(BH, BH > 1 && BH * Tq * Tk * (Dh + Dv) >= kParallelMin, [&](int64_t bh) {
    const int64_t b = bh / H, h = bh % H, hkv = h / group;
    const float* qs = layout.q.at(q, b, h);    // [Tq, Dh], rows lq apart
    const float* ks = layout.k.at(k, b, hkv);  // [Tk, Dh], rows lk apart
    const float* vs = layout.v.at(v, b, hkv);  // [Tk, Dv], rows lv apart
    float* os = layout.out.at(out, b, h);      // [Tq, Dv], rows lo apart
    float* ps = probs + bh * Tq * Tk;          // [Tq, Tk]
    if (Tk == 0) {  // no keys: every row is fully masked
      for (int64_t i = 0; i < Tq; ++i)
        for (int64_t c = 0; c < Dv; ++c) os[i * lo + c] = 0.0f;
      return;
    }
    // S = scale * q k^T, then the mask, then P = softmax(S) in place (the vector kernel reads
    // each entry before it writes it) and, with dropout, P ∘ D into work.
    gemm<float>(false, true, Tq, Tk, Dh, scale, qs, lq, ks, lk, 0.0f, ps, Tk);
    for (int64_t i = 0; i < Tq; ++i) apply_attention_mask_row(ps + i * Tk, mask, b, h, i, 0, Tk, Tq, Tk);
    float* ws = dropout_scale ? work + bh * Tq * Tk : nullptr;  // [Tq, Tk]
    vk.softmax_rows(ps, Tk, ps, Tk, ws, dropout_scale ? dropout_scale + bh * Tq * Tk : nullptr, Tq, Tk);
    // out = (P ∘ D) v, with D the dropout keep-scale (absent: D = 1).
    gemm<float>(false, false, Tq, Dv, Tk, 1.0f, ws ? ws : ps, Tk, vs, lv, 0.0f, os, lo);
  });
}

// The naive backward's products and order (attention_naive.cpp), per K/V head and its query
// heads: dV = (P ∘ D)^T dO, dP = (dO V^T) ∘ D, dS = P ∘ (dP - rowsum(dP ∘ P)), dQ = scale dS K,
// dK = scale dS^T Q; dK and dV summed over the group's query heads.
void attention_rows_backward(float* dq, float* dk, float* dv, float* work, const float* dout, const float* probs,
                             const float* dropout_scale, const float* q, const float* k, const float* v,
                             const AttentionDims& d, float scale, const AttentionLayout& x, const AttentionLayout& dx) {
  const int64_t B = d.B, H = d.H, Hkv = d.Hkv, Tq = d.Tq, Tk = d.Tk, Dh = d.Dh, Dv = d.Dv;
  if (Tk == 0 || Tq == 0) {  // the output was constant 0 (or empty): every gradient is 0
    zero_heads(dq, dx.q, B, H, Tq, Dh);
    zero_heads(dk, dx.k, B, Hkv, Tk, Dh);
    zero_heads(dv, dx.v, B, Hkv, Tk, Dv);
    return;
  }
  const auto& vk = simd::vector_kernels();
  const int64_t BHkv = B * Hkv, group = H / Hkv;
  const int64_t lq = x.q.row, lk = x.k.row, lv = x.v.row;
  const int64_t ldq = dx.q.row, ldk = dx.k.row, ldv = dx.v.row, ldo = dx.out.row;
  parallel_for(BHkv, BHkv > 1 && B * H * Tq * Tk * (Dh + Dv) >= kParallelMin, [&](int64_t bkv) {
    const int64_t b = bkv / Hkv, hkv = bkv % Hkv;
    const float* ks = x.k.at(k, b, hkv);  // [Tk, Dh]
    const float* vs = x.v.at(v, b, hkv);  // [Tk, Dv]
    float* dks = dx.k.at(dk, b, hkv);     // [Tk, Dh]
    float* dvs = dx.v.at(dv, b, hkv);     // [Tk, Dv]
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = hkv * group + g, bh = b * H + h;
      const float beta = g == 0 ? 0.0f : 1.0f;  // dK, dV: written for the first query head, then added
      const float* qs = x.q.at(q, b, h);         // [Tq, Dh]
      const float* dos = dx.out.at(dout, b, h);  // [Tq, Dv]
      const float* ps = probs + bh * Tq * Tk;    // [Tq, Tk]
      const float* ds = dropout_scale ? dropout_scale + bh * Tq * Tk : nullptr;  // [Tq, Tk]
      float* ws = work + bh * Tq * Tk;           // [Tq, Tk]
      float* dqs = dx.q.at(dq, b, h);            // [Tq, Dh]
      // dV (+)= (P ∘ D)^T dO
      const float* pd = ps;
      if (ds) {
        vk.mul(ws, ps, ds, Tq * Tk);
        pd = ws;
      }
      gemm<float>(true, false, Tk, Dv, Tq, 1.0f, pd, Tk, dos, ldo, beta, dvs, ldv);
      // dP = dO V^T into work, then dS = P ∘ (dP ∘ D - rowsum(dP ∘ D ∘ P)) in place
      gemm<float>(false, true, Tq, Tk, Dv, 1.0f, dos, ldo, vs, lv, 0.0f, ws, Tk);
      vk.softmax_grad_rows(ws, Tk, ps, ds, Tq, Tk);
      // dQ = scale dS K,  dK (+)= scale dS^T Q
      gemm<float>(false, false, Tq, Dh, Tk, scale, ws, Tk, ks, lk, 0.0f, dqs, ldq);
      gemm<float>(true, false, Tk, Dh, Tq, scale, ws, Tk, qs, lq, beta, dks, ldk);
    }
  });
}

}  // namespace attn::kernels
