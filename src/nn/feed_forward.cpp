// FeedForward (paper §3.3): two linear maps with a non-linearity (or SwiGLU's gate) and dropout
// between them; ReLU and its dropout run as one fused op (relu_dropout, the same bits).
#include "attn/nn/feed_forward.h"

#include "attn/ops/ops.h"
#include "attn/ops/quantize.h"

namespace attn::nn {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::ReLU: return "relu";
    case Activation::GELU: return "gelu";
    case Activation::GELUTanh: return "gelu_tanh";
    case Activation::SwiGLU: return "swiglu";
  }
  return "?";
}

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::ReLU;
  if (name == "gelu") return Activation::GELU;
  if (name == "gelu_tanh") return Activation::GELUTanh;
  if (name == "swiglu") return Activation::SwiGLU;
  fail("activation", "unknown activation '", name, "' (expected relu, gelu, gelu_tanh or swiglu)");
}

Tensor apply_activation(Activation a, const Tensor& x) {
  switch (a) {
    case Activation::ReLU: return relu(x);
    case Activation::GELU: return gelu(x, GeluApprox::None);
    case Activation::GELUTanh: return gelu(x, GeluApprox::Tanh);
    case Activation::SwiGLU: break;
  }
  fail("activation", "swiglu is a gated feed-forward, not an element-wise activation (x ", x.str(), ")");
}

Tensor swiglu(const Tensor& x) {
  ATTN_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) % 2 == 0, "swiglu",
             "x must be [..., 2F] (gate and up halves), got ", x.defined() ? x.str() : "undefined");
  const int64_t F = x.size(-1) / 2;
  const std::vector<Tensor> halves = split(x, {F, F}, x.dim() - 1);  // gate [..., F], up [..., F]
  return mul(silu(halves[0]), halves[1]);                            // [..., F]
}

FeedForward::FeedForward(int64_t d_model, int64_t d_ff, Activation activation, double dropout,
                         DType dtype, Rng& rng)
    : activation_(activation) {
  const int64_t hidden = is_gated(activation) ? 2 * d_ff : d_ff;  // SwiGLU: gate and up halves
  linear1_ = register_module("linear1", std::make_shared<Linear>(d_model, hidden, true, dtype, rng));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(dropout, rng.next_u64()));
  linear2_ = register_module("linear2", std::make_shared<Linear>(d_ff, d_model, true, dtype, rng));
}

Tensor FeedForward::forward(const Tensor& x) {
  if (activation_ == Activation::ReLU && linear1_->quantized() && (!dropout_->is_training() || dropout_->p() == 0.0)) {
    // No dropout: the ReLU in the first product's stores; with bf16 weights the hidden rows
    // pass to the second product in bf16.
    if (!linear2_->quantized() || x.dim() < 1 || x.size(-1) != linear1_->in_features())
      return linear2_->forward(linear1_->forward_relu(x));  // (its errors name a wrong input)
    return quantized_feed_forward(x, linear1_->weight(), linear1_->weight_scale(), linear1_->bias(),
                                  linear2_->weight(), linear2_->weight_scale(), linear2_->bias());
  }
  Tensor hidden = linear1_->forward(x);              // [..., F] ([..., 2F] gated)  x W_1^T + b_1
  if (activation_ == Activation::ReLU) {
    hidden = dropout_->forward_relu(hidden);         // [..., F]  dropout(max(0, .)) in one pass
  } else {
    hidden = is_gated(activation_) ? swiglu(hidden)  // [..., F]  silu(gate) * up
                                   : apply_activation(activation_, hidden);  // [..., F]  phi(.)
    hidden = dropout_->forward(hidden);              // [..., F]
  }
  return linear2_->forward(hidden);                  // [..., D]  . W_2^T + b_2
}

}  // namespace attn::nn
