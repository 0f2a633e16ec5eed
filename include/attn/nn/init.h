// attn/nn/init.h — parameter initialisers (torch.nn.init), drawing from an attn::Rng.
// Each one overwrites a tensor in place (taken as a handle by value) and records nothing on the tape. They follow
// PyTorch's formulas; the random streams differ from PyTorch's (a different generator).
// SkipInitGuard turns the random ones off while a model is built only to be loaded.
#pragma once

#include "attn/core/rng.h"
#include "attn/core/tensor.h"

namespace attn::nn {

// U(lo, hi) in place.
void uniform_(Tensor t, double lo, double hi, Rng& rng);
// N(mean, std^2) in place.
void normal_(Tensor t, double mean, double std, Rng& rng);
// Constant fill.
void constant_(Tensor t, double value);
// xavier_uniform_: U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)); t is [out, in, ...].
void xavier_uniform_(Tensor t, Rng& rng, double gain = 1.0);
// nn.Linear's default: kaiming_uniform_(a = sqrt(5)), which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
void linear_weight_uniform_(Tensor t, Rng& rng);

// While a guard is alive on this thread, uniform_, normal_, xavier_uniform_ and
// linear_weight_uniform_ leave their tensor as it is (freshly allocated parameters stay zero)
// and draw nothing from the generator; constant_ still fills. For building a model whose every
// parameter a checkpoint overwrites next (models/factory.h: ModelInit::None). Nests.
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;

 private:
  bool previous_;
};
// True while a SkipInitGuard is alive on this thread.
bool init_skipped();

}  // namespace attn::nn
