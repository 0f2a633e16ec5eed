// kernels/attention_naive.h — scaled dot-product attention (paper §3.2.1, Eq. 1), the naive
// reference: one (batch, head) slice at a time, the full [Tq, Tk] probability matrix
// materialised and saved for the backward pass, products through kernels::gemm.
// It does not check shapes, allocate, or draw random numbers: src/ops/attention.cpp resolves
// the masks into AttentionMask, draws the dropout mask, and owns every buffer.
// The tiled online-softmax twin (attention_flash) must match it for every mask kind.
// Grouped-query attention: k and v hold Hkv heads (Hkv divides H) and query head h reads K/V
// head h / (H / Hkv); Hkv = H is multi-head attention. Every attention kernel takes the call's
// sizes as one AttentionDims and its operands' layouts as AttentionLayout (packed() for
// contiguous operands): any layout with packed feature rows (HeadLayout), so the split heads
// of a projection are read where they lie, and out and the gradients are written in the caller's.
#pragma once

#include <cstdint>
#include <limits>

namespace attn::kernels {

// Where one operand of shape [B, Hs, T, D] lies (q, k, v, out, or the gradient of one):
// element (b, h, t, d) at b * batch + h * head + t * row + d, in elements. Features are packed
// and one head's rows do not overlap (row >= D), so a head is a [T, D] matrix with leading
// dimension `row` for gemm. packed(): contiguous [B, Hs, T, D]. split(): the memory of
// [B, T, Hs, D] (a projection [B, T, Hs*D] split into heads) seen as [B, Hs, T, D], which is
// what nn/attention hands in and takes back.
struct HeadLayout {
  int64_t batch = 0, head = 0, row = 0;

  static constexpr HeadLayout packed(int64_t Hs, int64_t T, int64_t D) { return {Hs * T * D, T * D, D}; }
  static constexpr HeadLayout split(int64_t Hs, int64_t T, int64_t D) { return {T * Hs * D, D, Hs * D}; }
  // Row 0 of head h of batch entry b. A null base (an empty tensor: no keys or no queries)
  // stays null: an offset from a null pointer is undefined behaviour even when never read.
  template <class E>
  E* at(E* base, int64_t b, int64_t h) const { return base == nullptr ? base : base + b * batch + h * head; }
};

// The sizes of one call: q [B, H, Tq, Dh], k [B, Hkv, Tk, Dh], v [B, Hkv, Tk, Dv] and out
// [B, H, Tq, Dv]; Hkv divides H.
struct AttentionDims {
  int64_t B = 0, H = 0, Hkv = 0, Tq = 0, Tk = 0, Dh = 0, Dv = 0;
};

// The layouts of one call's four operands: q [B, H, Tq, Dh], k [B, Hkv, Tk, Dh], v [B, Hkv, Tk, Dv]
// and out [B, H, Tq, Dv]. A backward kernel takes two: one for q, k, v and the forward's out, and
// one for their gradients dq, dk, dv and dout (the out field).
struct AttentionLayout {
  HeadLayout q, k, v, out;

  // All four contiguous.
  static constexpr AttentionLayout packed(const AttentionDims& d) {
    return {HeadLayout::packed(d.H, d.Tq, d.Dh), HeadLayout::packed(d.Hkv, d.Tk, d.Dh),
            HeadLayout::packed(d.Hkv, d.Tk, d.Dv), HeadLayout::packed(d.H, d.Tq, d.Dv)};
  }
};

// One (batch entry, query head) slice of a forward call, slice bh = b * H + h: where its operands
// lie, with the K/V head that query head h reads (h / (H / Hkv)).
template <class E>
struct ForwardSlice {
  int64_t b = 0, h = 0;
  const E* q = nullptr;  // [Tq, Dh], rows layout.q.row apart
  const E* k = nullptr;  // [Tk, Dh], rows layout.k.row apart
  const E* v = nullptr;  // [Tk, Dv], rows layout.v.row apart
  E* out = nullptr;      // [Tq, Dv], rows layout.out.row apart
};

template <class E>
inline ForwardSlice<E> forward_slice(int64_t bh, const AttentionDims& d, const AttentionLayout& l, E* out, const E* q,
                                     const E* k, const E* v) {
  const int64_t b = bh / d.H, h = bh % d.H, hkv = h / (d.H / d.Hkv);
  return {b, h, l.q.at(q, b, h), l.k.at(k, b, hkv), l.v.at(v, b, hkv), l.out.at(out, b, h)};
}

// Writes zeros into T rows of D elements, `row` apart, from x.
template <class E>
inline void zero_rows(E* x, int64_t T, int64_t D, int64_t row) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < D; ++c) x[t * row + c] = E(0);
}

// Writes zeros into the [B, Hs, T, D] operand at x laid out as `l`.
template <class E>
inline void zero_heads(E* x, const HeadLayout& l, int64_t B, int64_t Hs, int64_t T, int64_t D) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hs; ++h) zero_rows(l.at(x, b, h), T, D, l.row);
}

// The masks of one call in resolved form. An entry (b, h, i, j) is masked out when any of:
//   bias[b*bias_stride_b + h*bias_stride_h + i*Tk + j] == -inf     (additive, may be null)
//   key_padding[b*Tk + j] != 0                                     (may be null)
//   causal && j > i + (Tk - Tq)                                    (bottom-right alignment)
//   window > 0 && j <= i + (Tk - Tq) - window                      (sliding window, left edge)
// Finite bias values are added to the scores. Bias rows are contiguous [Tq, Tk] blocks; a
// stride of 0 broadcasts the block over that dimension. With causal and a window W, query i
// sees exactly the keys i' - W < j <= i', i' = i + (Tk - Tq) (the op always sets both).
// ALiBi adds -alibi[h] * |i' - j| to every score of head h, computed on the fly.
template <class T>
struct AttentionMask {
  const T* bias = nullptr;  // [B or 1, H or 1, Tq, Tk]
  int64_t bias_stride_b = 0;
  int64_t bias_stride_h = 0;
  const uint8_t* key_padding = nullptr;  // [B, Tk], nonzero = padding
  bool causal = false;
  int64_t window = 0;       // 0 = no sliding window
  const T* alibi = nullptr;  // [H] ALiBi slopes; null = none
};

// Adds the bias to columns [j0, j1) of score row i of slice (b, h) and writes -inf into the
// masked ones. `row` points at column j0. Shared with the tiled kernel.
template <class T>
inline void apply_attention_mask_row(T* row, const AttentionMask<T>& m, int64_t b, int64_t h,
                                     int64_t i, int64_t j0, int64_t j1, int64_t Tq, int64_t Tk) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  if (m.bias) {
    const T* brow = m.bias + b * m.bias_stride_b + h * m.bias_stride_h + i * Tk;
    for (int64_t j = j0; j < j1; ++j) row[j - j0] += brow[j];
  }
  if (m.alibi) {
    // Distance to the query's own (bottom-right aligned) position, i' = i + (Tk - Tq).
    const T slope = m.alibi[h];
    const int64_t self = i + (Tk - Tq);
    for (int64_t j = j0; j < j1; ++j) row[j - j0] -= slope * static_cast<T>(j > self ? j - self : self - j);
  }
  if (m.key_padding) {
    const uint8_t* pad = m.key_padding + b * Tk;
    for (int64_t j = j0; j < j1; ++j)
      if (pad[j]) row[j - j0] = kNegInf;
  }
  if (m.causal) {
    // Query i sees keys j <= i + (Tk - Tq); with Tq > Tk the first Tq - Tk rows see none.
    const int64_t last = i + (Tk - Tq);
    for (int64_t j = (last + 1 > j0 ? last + 1 : j0); j < j1; ++j) row[j - j0] = kNegInf;
  }
  if (m.window > 0) {
    // Keys j <= i + (Tk - Tq) - window have slid out of the window.
    const int64_t first = i + (Tk - Tq) - m.window + 1;
    for (int64_t j = j0; j < j1 && j < first; ++j) row[j - j0] = kNegInf;
  }
}

// out [B, H, Tq, Dv] = (softmax(q k^T * scale + mask) ∘ D) v, and probs [B, H, Tq, Tk] = the
// softmax itself (before dropout; also what need_weights returns). Masked entries get
// probability exactly 0; a row whose keys are all masked gets probabilities 0 and output 0.
// dropout_scale [B, H, Tq, Tk] (null = no dropout) holds D = keep / (1 - p), 0 or 1/(1-p);
// work [B, H, Tq, Tk] is scratch, needed only with dropout (may be null otherwise).
// q [B, H, Tq, Dh], k [B, Hkv, Tk, Dh], v [B, Hkv, Tk, Dv] and out (sizes d) lie as `layout`
// says; probs, dropout_scale and work are packed.
template <class T>
void attention_naive_forward(T* out, T* probs, T* work, const T* q, const T* k, const T* v,
                             const AttentionMask<T>& mask, const T* dropout_scale, const AttentionDims& d,
                             T scale, const AttentionLayout& layout);

// Given dout = dL/dout, writes dq, dk, dv: every element, once (no zeroing needed, nothing
// accumulated into what the buffers held). probs and dropout_scale are what the forward
// saved; work [B, H, Tq, Tk] is scratch (always needed). With Hkv < H each K/V head gathers
// the gradients of its H / Hkv query heads. q, k, v lie as x says (x.out is unused), dq, dk,
// dv and dout as dx says.
template <class T>
void attention_naive_backward(T* dq, T* dk, T* dv, T* work, const T* dout, const T* probs,
                              const T* dropout_scale, const T* q, const T* k, const T* v,
                              const AttentionDims& d, T scale, const AttentionLayout& x,
                              const AttentionLayout& dx);

}  // namespace attn::kernels
