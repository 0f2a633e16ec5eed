// float64 central-difference gradient check (ggml's GRAD mode, PyTorch's gradcheck).
// f maps the inputs to a tensor; the check reduces it with fixed random weights w to the
// scalar L = sum(f(x) * w), compares dL/dx from backward() with (L(x+h) - L(x-h)) / 2h
// for every element of every input that requires grad, and also checks that every such
// input received a gradient.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "attn/ops/ops.h"

namespace attn::test {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-5;
  uint64_t seed = 1234;
};

inline ::testing::AssertionResult gradcheck(
    const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
    GradcheckOptions opt = {}) {
  for (auto& x : inputs)
    if (x.defined() && x.requires_grad() && x.dtype() != DType::F64)
      return ::testing::AssertionFailure() << "gradcheck needs f64 inputs, got " << x.str();
  // Fixed random projection so that every output element matters.
  Tensor probe;
  {
    NoGradGuard ng;
    probe = f(inputs);
  }
  Rng rng(opt.seed);
  Tensor w = Tensor::randn(probe.shape(), rng, DType::F64);
  auto loss_value = [&]() {
    NoGradGuard ng;
    Tensor y = f(inputs);
    const auto vy = y.to_vector<double>();
    const auto vw = w.to_vector<double>();
    double s = 0;
    for (size_t i = 0; i < vy.size(); ++i) s += vy[i] * vw[i];
    return s;
  };
  for (auto& x : inputs)
    if (x.defined() && x.requires_grad()) x.zero_grad();
  Tensor y = f(inputs);
  if (!y.requires_grad()) return ::testing::AssertionFailure() << "output does not require grad";
  sum(mul(y, w)).backward();
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    Tensor g = x.grad();
    if (!g.defined()) return ::testing::AssertionFailure() << "input " << k << " got no gradient";
    if (!x.is_contiguous())
      return ::testing::AssertionFailure() << "gradcheck inputs must be contiguous";
    double* px = x.data<double>();
    const auto analytic = g.to_vector<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double orig = px[i];
      px[i] = orig + opt.eps;
      const double lp = loss_value();
      px[i] = orig - opt.eps;
      const double lm = loss_value();
      px[i] = orig;
      const double numeric = (lp - lm) / (2 * opt.eps);
      const double a = analytic[static_cast<size_t>(i)];
      if (!(std::fabs(a - numeric) <= opt.atol + opt.rtol * std::fabs(numeric)))
        return ::testing::AssertionFailure()
               << "input " << k << " element " << i << ": analytic " << a << " vs numeric " << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace attn::test
