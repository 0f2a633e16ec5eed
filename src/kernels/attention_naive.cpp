// kernels/attention_naive.cpp — the reference attention kernel pair (paper §3.2.1, Eq. 1).
// Each (b, h) slice is independent: scores by one GEMM, a max-subtracted softmax per row,
// the output by a second GEMM; the backward is four GEMMs around the softmax Jacobian.
// Parallel over B*H with OpenMP (BLAS runs single-threaded inside the region); the backward
// over B*Hkv key/value heads, each summing its query heads in order (grouped-query attention).
// Operands go through their HeadLayout (the GEMMs' leading dimensions), so split heads are
// never copied; the backward writes dq, dk, dv (beta = 0 on the first product) instead of
// accumulating into zeroed buffers. No tiling, no SIMD: this is the slow, obvious version the
// tiled kernel is tested against. The slice loops are attention_naive_impl.h's, which
// attention_rows.cpp runs with the vector kernels instead of the scalar row loops here.
// Derivation: docs/derivations/attention.md.
#include "kernels/attention_naive.h"

#include <cmath>
#include <limits>

#include "kernels/attention_naive_impl.h"

namespace attn::kernels {

namespace {

// Row-wise masked softmax in place over one [Tq, Tk] block of scores:
//   p_ij = exp(s_ij - m_i) / sum_j' exp(s_ij' - m_i),  m_i = max_j s_ij.
// Masked scores are -inf, so exp(-inf - m_i) is exactly 0. A row with every score -inf has
// no finite maximum; instead of 0/0 = NaN it gets all-zero probabilities (PyTorch's
// _safe_softmax, FlashAttention's "fully masked rows output zero").
template <class T>
void masked_softmax_rows(T* s, int64_t Tq, int64_t Tk) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < Tq; ++i) {
    T* row = s + i * Tk;
    T m = kNegInf;
    for (int64_t j = 0; j < Tk; ++j) m = row[j] > m ? row[j] : m;
    if (m == kNegInf) {  // fully masked (or Tk == 0)
      for (int64_t j = 0; j < Tk; ++j) row[j] = T(0);
      continue;
    }
    T sum = 0;
    for (int64_t j = 0; j < Tk; ++j) {
      row[j] = std::exp(row[j] - m);
      sum += row[j];
    }
    const T inv = T(1) / sum;  // sum >= 1: the maximum contributes exp(0)
    for (int64_t j = 0; j < Tk; ++j) row[j] *= inv;
  }
}

// The reference's row-wise work (attention_naive_impl.h's RowOps): plain scalar loops.
template <class T>
struct ScalarRows {
  void softmax(T* p, int64_t Tq, int64_t Tk, T* pd, const T* d) const {
    masked_softmax_rows(p, Tq, Tk);
    if (d) mul(pd, p, d, Tq * Tk);
  }
  void mul(T* out, const T* a, const T* b, int64_t n) const {
    for (int64_t e = 0; e < n; ++e) out[e] = a[e] * b[e];
  }
  // dS = P ∘ (dP' - rowsum(dP' ∘ P)) in place, dP' = dP ∘ D.
  void softmax_grad(T* g, const T* p, const T* d, int64_t Tq, int64_t Tk) const {
    if (d) mul(g, g, d, Tq * Tk);
    for (int64_t i = 0; i < Tq; ++i) {
      T* grow = g + i * Tk;
      const T* prow = p + i * Tk;
      T dot = 0;
      for (int64_t j = 0; j < Tk; ++j) dot += grow[j] * prow[j];
      for (int64_t j = 0; j < Tk; ++j) grow[j] = prow[j] * (grow[j] - dot);
    }
  }
};

}  // namespace

template <class T>
void attention_naive_forward(T* out, T* probs, T* work, const T* q, const T* k, const T* v,
                             const AttentionMask<T>& mask, const T* dropout_scale, const AttentionDims& d,
                             T scale, const AttentionLayout& layout) {
  naive_impl::forward(out, probs, work, q, k, v, mask, dropout_scale, d, scale, layout, ScalarRows<T>{});
}

template <class T>
void attention_naive_backward(T* dq, T* dk, T* dv, T* work, const T* dout, const T* probs,
                              const T* dropout_scale, const T* q, const T* k, const T* v,
                              const AttentionDims& d, T scale, const AttentionLayout& x,
                              const AttentionLayout& dx) {
  naive_impl::backward(dq, dk, dv, work, dout, probs, dropout_scale, q, k, v, d, scale, x, dx, ScalarRows<T>{});
}

template void attention_naive_forward<float>(float*, float*, float*, const float*, const float*,
                                             const float*, const AttentionMask<float>&, const float*,
                                             const AttentionDims&, float, const AttentionLayout&);
template void attention_naive_forward<double>(double*, double*, double*, const double*, const double*,
                                              const double*, const AttentionMask<double>&, const double*,
                                              const AttentionDims&, double, const AttentionLayout&);
template void attention_naive_backward<float>(float*, float*, float*, float*, const float*, const float*,
                                              const float*, const float*, const float*, const float*,
                                              const AttentionDims&, float, const AttentionLayout&,
                                              const AttentionLayout&);
template void attention_naive_backward<double>(double*, double*, double*, double*, const double*,
                                               const double*, const double*, const double*, const double*,
                                               const double*, const AttentionDims&, double,
                                               const AttentionLayout&, const AttentionLayout&);

}  // namespace attn::kernels
