// LayerNorm, RMSNorm and the NormKind helpers: thin layers over the fused ops.
#include "attn/nn/norm.h"

#include "attn/nn/layer_norm.h"
#include "attn/nn/rms_norm.h"
#include "attn/ops/ops.h"

namespace attn::nn {

const char* norm_kind_name(NormKind kind) { return kind == NormKind::Layer ? "layer" : "rms"; }

NormKind parse_norm_kind(const std::string& name) {
  if (name == "layer") return NormKind::Layer;
  if (name == "rms") return NormKind::RMS;
  fail("norm", "unknown norm '", name, "' (expected layer or rms)");
}

std::shared_ptr<Norm> make_norm(NormKind kind, int64_t dim, double eps, DType dtype) {
  if (kind == NormKind::Layer) return std::make_shared<LayerNorm>(dim, eps, dtype);
  return std::make_shared<RMSNorm>(dim, eps, dtype);
}

namespace {
void check_norm_args(const char* op, int64_t dim, double eps, DType dtype) {
  ATTN_CHECK(dim > 0, op, "dim must be positive, got ", dim);
  ATTN_CHECK(eps > 0, op, "eps must be positive, got ", eps);
  ATTN_CHECK(is_floating(dtype), op, "dtype must be f32 or f64, got ", dtype_name(dtype));
}
void check_input(const char* op, const Tensor& x, int64_t dim) {
  ATTN_CHECK(x.dim() >= 1 && x.size(-1) == dim, op, "expected input [..., ", dim, "], got ", x.str());
}
}  // namespace

Tensor Norm::forward_residual(const Tensor& residual, const Tensor& x, Dropout& dropout) const {
  if (dropout.active()) return forward(dropout.add_to(residual, x));  // [..., D]
  return forward_add(residual, x);                                    // [..., D]
}

Tensor Norm::forward_add(const Tensor& residual, const Tensor& x) const { return forward(add(residual, x)); }

LayerNorm::LayerNorm(int64_t dim, double eps, DType dtype) : dim_(dim), eps_(eps) {
  check_norm_args("LayerNorm", dim, eps, dtype);
  weight_ = register_parameter("weight", Tensor::ones({dim_}, dtype));  // [D]
  bias_ = register_parameter("bias", Tensor::zeros({dim_}, dtype));    // [D]
}

Tensor LayerNorm::forward(const Tensor& x) const {
  check_input("LayerNorm", x, dim_);
  return layer_norm(x, weight_, bias_, eps_);  // [..., D]
}

Tensor LayerNorm::forward_add(const Tensor& residual, const Tensor& x) const {
  check_input("LayerNorm", x, dim_);
  return add_layer_norm(residual, x, weight_, bias_, eps_);  // [..., D]
}

RMSNorm::RMSNorm(int64_t dim, double eps, DType dtype) : dim_(dim), eps_(eps) {
  check_norm_args("RMSNorm", dim, eps, dtype);
  weight_ = register_parameter("weight", Tensor::ones({dim_}, dtype));  // [D]
}

Tensor RMSNorm::forward(const Tensor& x) const {
  check_input("RMSNorm", x, dim_);
  return rms_norm(x, weight_, eps_);  // [..., D]
}

}  // namespace attn::nn
