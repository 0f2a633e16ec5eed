// Parameter initialisers (torch.nn.init formulas) writing in place.
#include "attn/nn/init.h"

#include <cmath>

#include "attn/core/autograd.h"

namespace attn::nn {

namespace {

// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field (torch's rule).
void fans(const Tensor& t, const char* op, double& fan_in, double& fan_out) {
  ATTN_CHECK(t.dim() >= 2, op, "needs a tensor with at least 2 dimensions, got ", t.str());
  double receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= static_cast<double>(t.size(d));
  fan_in = static_cast<double>(t.size(1)) * receptive;
  fan_out = static_cast<double>(t.size(0)) * receptive;
}

thread_local bool skip_init = false;

}  // namespace

SkipInitGuard::SkipInitGuard() : previous_(skip_init) { skip_init = true; }
SkipInitGuard::~SkipInitGuard() { skip_init = previous_; }
bool init_skipped() { return skip_init; }

void uniform_(Tensor t, double lo, double hi, Rng& rng) {
  if (skip_init) return;
  NoGradGuard no_grad;
  t.copy_from(Tensor::uniform(t.shape(), rng, lo, hi, t.dtype()));
}

void normal_(Tensor t, double mean, double std, Rng& rng) {
  if (skip_init) return;
  NoGradGuard no_grad;
  t.copy_from(Tensor::randn(t.shape(), rng, t.dtype(), mean, std));
}

void constant_(Tensor t, double value) { t.fill(value); }

void xavier_uniform_(Tensor t, Rng& rng, double gain) {
  double fan_in = 0, fan_out = 0;
  fans(t, "xavier_uniform_", fan_in, fan_out);
  if (skip_init) return;
  const double a = gain * std::sqrt(6.0 / (fan_in + fan_out));
  uniform_(t, -a, a, rng);
}

void linear_weight_uniform_(Tensor t, Rng& rng) {
  double fan_in = 0, fan_out = 0;
  fans(t, "linear_weight_uniform_", fan_in, fan_out);
  if (skip_init) return;
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(fan_in) : 0.0;
  uniform_(t, -bound, bound, rng);
}

}  // namespace attn::nn
