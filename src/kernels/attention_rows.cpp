// kernels/attention_rows.cpp — the naive attention pair with its row-wise work on the vector
// kernels (attention_rows.h): attention_naive_impl.h's slice loops, the same products (the
// same gemm calls, so the same sums) and buffers as the reference, with the softmax rows (in
// place), the dropout product and the softmax backward on the vector kernels, whose exp and
// sums round differently from the scalar loops (within float rounding).
#include "kernels/attention_rows.h"

#include "kernels/attention_naive_impl.h"
#include "kernels/simd/vector_kernels.h"

namespace attn::kernels {

namespace {

// attention_naive_impl.h's RowOps on the vector kernels of the active ISA (fetched by the
// caller, outside the OpenMP region).
struct VectorRows {
  const simd::VectorKernels& vk;

  // The vector kernel reads each entry of a row before it writes it, so p is s itself here.
  void softmax(float* p, int64_t Tq, int64_t Tk, float* pd, const float* d) const {
    vk.softmax_rows(p, Tk, p, Tk, pd, d, Tq, Tk);
  }
  void mul(float* out, const float* a, const float* b, int64_t n) const { vk.mul(out, a, b, n); }
  void softmax_grad(float* g, const float* p, const float* d, int64_t Tq, int64_t Tk) const {
    vk.softmax_grad_rows(g, Tk, p, d, Tq, Tk);
  }
};

}  // namespace

void attention_rows_forward(float* out, float* probs, float* work, const float* q, const float* k, const float* v,
                            const AttentionMask<float>& mask, const float* dropout_scale, const AttentionDims& d,
                            float scale, const AttentionLayout& layout) {
  naive_impl::forward(out, probs, work, q, k, v, mask, dropout_scale, d, scale, layout,
                      VectorRows{simd::vector_kernels()});
}

void attention_rows_backward(float* dq, float* dk, float* dv, float* work, const float* dout, const float* probs,
                             const float* dropout_scale, const float* q, const float* k, const float* v,
                             const AttentionDims& d, float scale, const AttentionLayout& x, const AttentionLayout& dx) {
  naive_impl::backward(dq, dk, dv, work, dout, probs, dropout_scale, q, k, v, d, scale, x, dx,
                       VectorRows{simd::vector_kernels()});
}

}  // namespace attn::kernels
