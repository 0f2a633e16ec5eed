// Optimizer arithmetic (attn/ops/optim.h): Adam's update and the in-place gradient sum, handed
// to the kernels unchanged (kernels/adam.h, the vector kernels' add), so train/ gets them
// without including src/kernels/. Not here: optimizer state or parameter lists (train/adam.cpp).
#include "attn/ops/optim.h"

#include "attn/core/error.h"
#include "kernels/adam.h"
#include "kernels/simd/vector_kernels.h"

namespace attn {

namespace {

template <class T>
void adam_update_impl(T* p, T* m, T* v, const T* g, int64_t n, const AdamUpdate& u) {
  kernels::adam_update<T>(p, m, v, g, n,
                          kernels::adam_step_scalars<T>(u.lr, u.step, u.beta1, u.beta2, u.eps,
                                                        u.weight_decay, u.decoupled_weight_decay));
}

}  // namespace

void adam_update(float* p, float* m, float* v, const float* g, int64_t n, const AdamUpdate& u) {
  adam_update_impl<float>(p, m, v, g, n, u);
}

void adam_update(double* p, double* m, double* v, const double* g, int64_t n, const AdamUpdate& u) {
  adam_update_impl<double>(p, m, v, g, n, u);
}

void add_into(const Tensor& dst, const Tensor& src) {
  const char* op = "add_into";
  ATTN_CHECK(dst.defined() && src.defined(), op, "undefined tensor");
  ATTN_CHECK(is_floating(dst.dtype()) && src.dtype() == dst.dtype(), op,
             "expected two tensors of one floating dtype, got ", dst.str(), " and ", src.str());
  ATTN_CHECK(src.shape() == dst.shape(), op, "shapes differ: ", dst.str(), " and ", src.str());
  ATTN_CHECK(dst.is_contiguous() && src.is_contiguous(), op, "expected contiguous tensors, got ", dst.str(),
             " and ", src.str());
  const int64_t n = dst.numel();
  if (dst.dtype() == DType::F32) {
    float* d = dst.data<float>();
    kernels::simd::vector_kernels().add(d, d, src.data<float>(), n);
  } else {
    double* d = dst.data<double>();
    const double* s = src.data<double>();
    for (int64_t i = 0; i < n; ++i) d[i] += s[i];
  }
}

}  // namespace attn
