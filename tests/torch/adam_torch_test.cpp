// attn::train::Adam (paper §5.3: beta1 0.9, beta2 0.98, eps 1e-9) against live
// torch.optim.Adam (weight decay 0) and torch.optim.AdamW (weight decay 0.01) over six steps
// with given gradients and a learning rate that changes every step, in float32 and float64.
// The parameters are compared after every step. A control shows that L2 decay (Adam's
// weight_decay) in place of AdamW's decoupled decay is told apart.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attn/train/adam.h"
#include "torch/fixture.h"

namespace attn::test {
namespace {

::testing::AssertionResult check_adam(const std::string& name, bool decoupled = true) {
  TorchCase c(name);
  const double atol = c.dtype() == DType::F64 ? 1e-12 : 1e-6;
  std::vector<Tensor> params = {c.input("p1"), c.input("p2")};  // [3, 4], [5]
  train::AdamOptions opt;
  opt.beta1 = c.number("beta1");
  opt.beta2 = c.number("beta2");
  opt.eps = c.number("eps");
  opt.weight_decay = c.number("weight_decay");
  opt.decoupled_weight_decay = decoupled;
  for (auto& p : params) p.set_requires_grad(true);
  train::Adam adam(params, opt, {"p1", "p2"});
  const std::vector<double> lrs = c.numbers("lrs");
  if (static_cast<int64_t>(lrs.size()) != c.integer("steps"))
    return ::testing::AssertionFailure() << name << ": " << lrs.size() << " lrs for " << c.integer("steps") << " steps";
  Checks checks;
  for (size_t k = 0; k < lrs.size(); ++k) {
    const std::string step = "step" + std::to_string(k);
    for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(c.input(step + "." + adam.names()[i]));
    adam.step(lrs[k]);
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string label = "out." + step + "." + adam.names()[i];
      const Tensor expected = c.get(label);
      report_margin(name + " " + label, max_abs_diff(params[i], expected), atol);
      checks.add(all_close(params[i], expected, atol, 0.0, name + " " + label));
    }
  }
  return checks.result();
}

class AdamTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(AdamTorch, ParametersMatchTorchOptimAfterEveryStep) { EXPECT_TRUE(check_adam("adam_" + GetParam())); }

INSTANTIATE_TEST_SUITE_P(Cases, AdamTorch, ::testing::Values("wd0.0_f32", "wd0.0_f64", "wd0.01_f32", "wd0.01_f64"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (ch == '.') ch = '_';
                           return s;
                         });

TEST(AdamTorchControl, L2DecayInsteadOfAdamwsDecoupledDecayFails) {
  EXPECT_FALSE(check_adam("adam_wd0.01_f64", /*decoupled=*/false));
}

}  // namespace
}  // namespace attn::test
