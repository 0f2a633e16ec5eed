// attn/nn/feed_forward.h — the position-wise feed-forward network (paper §3.3, Eq. 2):
//   FFN(x) = linear2(dropout(phi(linear1(x)))),  phi = ReLU (paper), GELU or GELU-tanh;
// or the gated SwiGLU FFN (Shazeer 2020, "GLU Variants Improve Transformer"), as in LLaMA:
//   [gate, up] = linear1(x),  FFN(x) = linear2(dropout(silu(gate) * up)).
// Children "linear1" [F, D] ([2F, D] for SwiGLU: rows 0..F-1 the gate W, rows F..2F-1 the up
// W, each with its bias), "dropout", "linear2" [D, F]: nn.TransformerEncoderLayer's names,
// which the encoder and decoder layers re-register at their own level. SwiGLU thus has 3*D*F
// weights where the others have 2*D*F (LLaMA shrinks F to 2/3 to compensate; set d_ff so).
#pragma once

#include <memory>
#include <string>

#include "attn/core/rng.h"
#include "attn/nn/dropout.h"
#include "attn/nn/linear.h"
#include "attn/nn/module.h"

namespace attn::nn {

enum class Activation { ReLU, GELU, GELUTanh, SwiGLU };

// "relu" / "gelu" / "gelu_tanh" / "swiglu", and back (an unknown name is an error).
const char* activation_name(Activation a);
Activation parse_activation(const std::string& name);
// True for SwiGLU: not element-wise; linear1 produces twice d_ff features.
inline bool is_gated(Activation a) { return a == Activation::SwiGLU; }
// phi(x), element-wise; SwiGLU is not element-wise and is an error here (see swiglu).
Tensor apply_activation(Activation a, const Tensor& x);
// SwiGLU's gate: x [..., 2F] = [gate, up] -> silu(gate) * up [..., F].
Tensor swiglu(const Tensor& x);

class FeedForward : public Module {
 public:
  // nn.Linear initialisation for both layers; the dropout generator is seeded from rng.
  FeedForward(int64_t d_model, int64_t d_ff, Activation activation, double dropout, DType dtype, Rng& rng);

  // x [B, T, D] (any [..., D]) -> [..., D].
  Tensor forward(const Tensor& x);

  const std::shared_ptr<Linear>& linear1() const { return linear1_; }
  const std::shared_ptr<Dropout>& dropout() const { return dropout_; }
  const std::shared_ptr<Linear>& linear2() const { return linear2_; }
  Activation activation() const { return activation_; }

 private:
  Activation activation_;
  std::shared_ptr<Linear> linear1_;
  std::shared_ptr<Dropout> dropout_;
  std::shared_ptr<Linear> linear2_;
};

}  // namespace attn::nn
