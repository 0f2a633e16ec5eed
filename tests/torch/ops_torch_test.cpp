// The element-wise, normalisation and loss ops against live PyTorch (torch.softmax,
// log_softmax, F.gelu exact and tanh, relu, silu, F.layer_norm, F.cross_entropy with
// label_smoothing and an ignored row, and the gradient of that loss with respect to the
// logits), in float32 and float64. Finite-difference checks of the same ops live in
// tests/unit/ops/; this file only pins our numbers to PyTorch's.
#include <gtest/gtest.h>

#include <string>

#include "attn/ops/ops.h"
#include "torch/fixture.h"

namespace attn::test {
namespace {

class OpsTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(OpsTorch, ActivationsSoftmaxAndLayerNormMatchPytorch) {
  TorchCase c("ops_" + GetParam());
  const Tensor x = c.input("x");  // [4, 9]
  EXPECT_TRUE(c.output_close(softmax(x), "softmax"));
  EXPECT_TRUE(c.output_close(log_softmax(x), "log_softmax"));
  EXPECT_TRUE(c.output_close(gelu(x), "gelu"));
  EXPECT_TRUE(c.output_close(gelu(x, GeluApprox::Tanh), "gelu_tanh"));
  EXPECT_TRUE(c.output_close(relu(x), "relu"));
  EXPECT_TRUE(c.output_close(silu(x), "silu"));
  EXPECT_TRUE(c.output_close(layer_norm(x, c.input("w"), c.input("b"), 1e-5), "layer_norm"));
}

TEST_P(OpsTorch, LabelSmoothedCrossEntropyAndItsGradientMatchPytorch) {
  TorchCase c("ops_" + GetParam());
  Tensor logits = c.input("logits", true);  // [6, 5]
  Tensor loss = cross_entropy(logits, c.input("targets"), /*ignore_index=*/-100, /*label_smoothing=*/0.1);
  loss.backward();
  EXPECT_TRUE(c.output_close(loss, "cross_entropy"));
  EXPECT_TRUE(c.input_grad_close(logits, "logits"));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsTorch, ::testing::Values("f32", "f64"),
                         [](const auto& info) { return info.param; });

// Controls: the two GELUs differ by more than the tolerance, and so does a loss without smoothing.
TEST(OpsTorchControl, TheOtherGeluAndUnsmoothedLossDoNotPass) {
  TorchCase c("ops_f64");
  const Tensor x = c.input("x");
  EXPECT_FALSE(c.output_close(gelu(x, GeluApprox::Tanh), "gelu"));
  EXPECT_FALSE(c.output_close(cross_entropy(c.input("logits"), c.input("targets"), -100, 0.0), "cross_entropy"));
}

}  // namespace
}  // namespace attn::test
