// attn/nn/dropout.h — dropout (paper §5.4, P_drop = 0.1 on sublayer outputs, on the
// embedding sums and, here as in PyTorch, inside the FFN). Each Dropout owns its own
// attn::Rng, seeded at construction, so runs are reproducible; identity in eval mode. The fused
// forms add_to and forward_relu draw the same masks as forward and give the same bits.
#pragma once

#include <cstdint>

#include "attn/core/rng.h"
#include "attn/nn/module.h"

namespace attn::nn {

class Dropout : public Module {
 public:
  explicit Dropout(double p, uint64_t seed = 0);

  // x [...] -> [...]: survivors scaled by 1/(1-p) in training; x itself in eval or at p = 0.
  Tensor forward(const Tensor& x);
  // residual + forward(x) [...] (a residual connection around a sub-layer output, §3.1) in one
  // pass through dropout_add: the same mask and bits as add(residual, forward(x)).
  Tensor add_to(const Tensor& residual, const Tensor& x);
  // forward(relu(x)) [...] in one pass through relu_dropout (the FFN's activation and its
  // dropout): the same mask and bits; relu(x) in eval or at p = 0.
  Tensor forward_relu(const Tensor& x);

  double p() const { return p_; }
  // Whether forward drops anything: training mode and p > 0.
  bool active() const { return is_training() && p_ > 0.0; }
  Rng& rng() { return rng_; }

 private:
  double p_;
  Rng rng_;
};

}  // namespace attn::nn
