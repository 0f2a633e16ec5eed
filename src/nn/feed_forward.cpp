// FeedForward (paper §3.3): two linear maps with a non-linearity and dropout between them.
#include "attn/nn/feed_forward.h"

#include "attn/ops/ops.h"

namespace attn::nn {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::ReLU: return "relu";
    case Activation::GELU: return "gelu";
    case Activation::GELUTanh: return "gelu_tanh";
  }
  return "?";
}

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::ReLU;
  if (name == "gelu") return Activation::GELU;
  if (name == "gelu_tanh") return Activation::GELUTanh;
  fail("activation", "unknown activation '", name, "' (expected relu, gelu or gelu_tanh)");
}

Tensor apply_activation(Activation a, const Tensor& x) {
  switch (a) {
    case Activation::ReLU: return relu(x);
    case Activation::GELU: return gelu(x, GeluApprox::None);
    case Activation::GELUTanh: return gelu(x, GeluApprox::Tanh);
  }
  return x;
}

FeedForward::FeedForward(int64_t d_model, int64_t d_ff, Activation activation, double dropout,
                         DType dtype, Rng& rng)
    : activation_(activation) {
  linear1_ = register_module("linear1", std::make_shared<Linear>(d_model, d_ff, true, dtype, rng));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(dropout, rng.next_u64()));
  linear2_ = register_module("linear2", std::make_shared<Linear>(d_ff, d_model, true, dtype, rng));
}

Tensor FeedForward::forward(const Tensor& x) {
  Tensor hidden = linear1_->forward(x);              // [..., F]  x W_1^T + b_1
  hidden = apply_activation(activation_, hidden);    // [..., F]  phi(.)
  hidden = dropout_->forward(hidden);                // [..., F]
  return linear2_->forward(hidden);                  // [..., D]  . W_2^T + b_2
}

}  // namespace attn::nn
