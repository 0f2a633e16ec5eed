// kernels/attention_short.cpp — the short-sequence attention pair (attention_short.h): per
// (batch, head) slice, S = scale q k^T and the products with P by the vector kernels' tile
// products, the mask by the naive kernel's row helper, the softmax rows and their backward by
// the vector kernels. Same order of operations as attention_naive.cpp, slice for slice, so
// the two differ only by the rounding of the products' sums. Parallel over B*H (forward) and
// B*Hkv (backward) like the naive pair; inside an OpenMP region (batch-split training) each
// call runs on the calling thread. Derivation: docs/derivations/attention.md.
#include "kernels/attention_short.h"

#include "attn/core/error.h"
#include "kernels/parallel_for.h"
#include "kernels/simd/vector_kernels.h"

namespace attn::kernels {

namespace {

// Below this much work (B*H*Tq*Tk*(Dh+Dv)) a call stays on one thread.
constexpr int64_t kParallelMin = 32768;

// Scores and their gradients go through a per-slice scratch block whose rows are padded to a
// multiple of 16 floats: no two rows share a 64-byte span, so loading a row never waits for
// the (masked) store of the previous one. kShortAttentionMaxT rows of at most 32 entries.
constexpr int64_t kPad = 16;
constexpr int64_t padded(int64_t n) { return (n + kPad - 1) / kPad * kPad; }
constexpr int64_t kScratch = kShortAttentionMaxT * padded(kShortAttentionMaxT);

bool has_mask(const AttentionMask<float>& m) {
  return m.bias || m.alibi || m.key_padding || m.causal || m.window > 0;
}

}  // namespace

void attention_short_forward(float* out, float* probs, float* work, const float* q, const float* k,
                             const float* v, const AttentionMask<float>& mask, const float* dropout_scale,
                             const AttentionDims& d, float scale, const AttentionLayout& layout) {
  const int64_t B = d.B, H = d.H, Tq = d.Tq, Tk = d.Tk, Dh = d.Dh, Dv = d.Dv;
  ATTN_CHECK(use_short_attention(Tq, Tk), "attention_short_forward", "Tq ", Tq, " and Tk ", Tk,
             " must be at most ", kShortAttentionMaxT);
  const auto& vk = simd::vector_kernels();  // fetched outside the region
  const int64_t BH = B * H, ls = padded(Tk);
  const int64_t lq = layout.q.row, lk = layout.k.row, lv = layout.v.row, lo = layout.out.row;
  const bool masked = has_mask(mask);
  parallel_for(BH, BH > 1 && BH * Tq * Tk * (Dh + Dv) >= kParallelMin, [&](int64_t bh) {
    // Operands [Tq, Dh], [Tk, Dh], [Tk, Dv] and [Tq, Dv], rows lq, lk, lv and lo apart.
    const auto [b, h, qs, ks, vs, os] = forward_slice(bh, d, layout, out, q, k, v);
    float* ps = probs + bh * Tq * Tk;               // [Tq, Tk]
    if (Tk == 0) return zero_rows(os, Tq, Dv, lo);  // no keys: every row is fully masked
    float sc[kScratch];  // [Tq, ls]
    // S = scale * q k^T, then the mask (bias added, masked entries -inf), then P = softmax(S)
    // and, with dropout, P ∘ D into work.
    vk.tile_nt(sc, ls, qs, lq, ks, lk, Tq, Tk, Dh, scale);
    if (masked)
      for (int64_t i = 0; i < Tq; ++i) apply_attention_mask_row(sc + i * ls, mask, b, h, i, 0, Tk, Tq, Tk);
    float* ws = dropout_scale ? work + bh * Tq * Tk : nullptr;  // [Tq, Tk]
    vk.softmax_rows(ps, Tk, sc, ls, ws, dropout_scale ? dropout_scale + bh * Tq * Tk : nullptr, Tq, Tk);
    // out = (P ∘ D) v, with D the dropout keep-scale (absent: D = 1).
    vk.tile_nn(os, lo, ws ? ws : ps, Tk, false, vs, lv, Tq, Dv, Tk, 1.0f, false);
  });
}

// The naive backward's products (attention_naive.cpp), per K/V head and its query heads:
//   dV = (P ∘ D)^T dO,  dP = (dO V^T) ∘ D,  dS = P ∘ (dP - rowsum(dP ∘ P)),
//   dQ = scale dS K,    dK = scale dS^T Q;  dK and dV summed over the group's query heads.
void attention_short_backward(float* dq, float* dk, float* dv, float* work, const float* dout,
                              const float* probs, const float* dropout_scale, const float* q,
                              const float* k, const float* v, const AttentionDims& d, float scale,
                              const AttentionLayout& x, const AttentionLayout& dx) {
  const int64_t B = d.B, H = d.H, Hkv = d.Hkv, Tq = d.Tq, Tk = d.Tk, Dh = d.Dh, Dv = d.Dv;
  ATTN_CHECK(use_short_attention(Tq, Tk), "attention_short_backward", "Tq ", Tq, " and Tk ", Tk,
             " must be at most ", kShortAttentionMaxT);
  if (Tk == 0 || Tq == 0) {  // the output was constant 0 (or empty): every gradient is 0
    zero_heads(dq, dx.q, B, H, Tq, Dh);
    zero_heads(dk, dx.k, B, Hkv, Tk, Dh);
    zero_heads(dv, dx.v, B, Hkv, Tk, Dv);
    return;
  }
  const auto& vk = simd::vector_kernels();
  const int64_t BHkv = B * Hkv, group = H / Hkv, ls = padded(Tk);
  const int64_t lq = x.q.row, lk = x.k.row, lv = x.v.row;
  const int64_t ldq = dx.q.row, ldk = dx.k.row, ldv = dx.v.row, ldo = dx.out.row;
  parallel_for(BHkv, BHkv > 1 && B * H * Tq * Tk * (Dh + Dv) >= kParallelMin, [&](int64_t bkv) {
    const int64_t b = bkv / Hkv, hkv = bkv % Hkv;
    const float* ks = x.k.at(k, b, hkv);  // [Tk, Dh]
    const float* vs = x.v.at(v, b, hkv);  // [Tk, Dv]
    float* dks = dx.k.at(dk, b, hkv);     // [Tk, Dh]
    float* dvs = dx.v.at(dv, b, hkv);     // [Tk, Dv]
    float sc[kScratch];                   // [Tq, ls]: dP, then dS
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = hkv * group + g, bh = b * H + h;
      const bool add = g > 0;  // dK, dV: written for the first query head, then added to
      const float* qs = x.q.at(q, b, h);         // [Tq, Dh]
      const float* dos = dx.out.at(dout, b, h);  // [Tq, Dv]
      const float* ps = probs + bh * Tq * Tk;    // [Tq, Tk]
      const float* ds = dropout_scale ? dropout_scale + bh * Tq * Tk : nullptr;  // [Tq, Tk]
      float* dqs = dx.q.at(dq, b, h);            // [Tq, Dh]
      // dV (+)= (P ∘ D)^T dO
      const float* pd = ps;
      if (ds) {
        float* ws = work + bh * Tq * Tk;  // [Tq, Tk]
        vk.mul(ws, ps, ds, Tq * Tk);
        pd = ws;
      }
      vk.tile_nn(dvs, ldv, pd, Tk, true, dos, ldo, Tk, Dv, Tq, 1.0f, add);
      // dP = dO V^T, then dS = P ∘ (dP ∘ D - rowsum(dP ∘ D ∘ P)) in place
      vk.tile_nt(sc, ls, dos, ldo, vs, lv, Tq, Tk, Dv, 1.0f);
      vk.softmax_grad_rows(sc, ls, ps, ds, Tq, Tk);
      // dQ = scale dS K,  dK (+)= scale dS^T Q
      vk.tile_nn(dqs, ldq, sc, ls, false, ks, lk, Tq, Dh, Tk, scale, false);
      vk.tile_nn(dks, ldk, sc, ls, true, qs, lq, Tk, Dh, Tq, scale, add);
    }
  });
}

}  // namespace attn::kernels
