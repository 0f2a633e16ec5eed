// attn/nn/norm.h — the normalisation interface shared by LayerNorm (the paper's §3.1
// "LayerNorm(x + Sublayer(x))") and RMSNorm (the common modern variant), so that encoder
// and decoder layers can hold either. make_norm() builds the one a config names.
#pragma once

#include <memory>
#include <string>

#include "attn/nn/dropout.h"
#include "attn/nn/module.h"

namespace attn::nn {

enum class NormKind { Layer, RMS };

// "layer" / "rms", and back (an unknown name is an error listing the valid ones).
const char* norm_kind_name(NormKind kind);
NormKind parse_norm_kind(const std::string& name);

class Norm : public Module {
 public:
  // x [..., D] -> [..., D], normalised over the last dimension.
  virtual Tensor forward(const Tensor& x) const = 0;
  // forward(residual + dropout(x)): the post-norm sub-layer connection "LayerNorm(x +
  // Sublayer(x))" (§3.1), with the sub-layer's output x and its dropout. The same bits as
  // forward(dropout.add_to(residual, x)); with the dropout inactive (eval, or p = 0) a
  // LayerNorm takes the sum and the norm in one pass (add_layer_norm).
  Tensor forward_residual(const Tensor& residual, const Tensor& x, Dropout& dropout) const;

 protected:
  // forward(add(residual, x)), the same bits; LayerNorm fuses the two.
  virtual Tensor forward_add(const Tensor& residual, const Tensor& x) const;
};

// LayerNorm (weight, bias) or RMSNorm (weight) over D features.
std::shared_ptr<Norm> make_norm(NormKind kind, int64_t dim, double eps, DType dtype);

}  // namespace attn::nn
