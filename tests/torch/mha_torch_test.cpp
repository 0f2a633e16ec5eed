// MultiHeadAttention (paper §3.2.2) against live nn.MultiheadAttention (batch_first, dropout 0):
// self-attention, cross-attention with Tk != Tq, causal, key padding, and causal + padding, in
// float32 and float64. Compared: the output, the per-head weights [B, H, Tq, Tk], every
// parameter gradient and the input gradients of sum(out * W). The causal cases run twice: with
// PyTorch's Bool attn_mask and with AttentionMasks::causal. Controls drop the mask and show
// that the comparison then fails. Not here: attention dropout (random, not comparable).
#include <gtest/gtest.h>

#include <string>

#include "attn/nn/attention.h"
#include "torch/fixture.h"

namespace attn::test {
namespace {

enum class CausalAs { FileMask, Flag, None };

struct MhaRun {
  Checks checks;
  Tensor out, weights;
};

// Runs the fixture `name` through our MultiHeadAttention and compares everything.
MhaRun run_mha(const std::string& name, CausalAs causal_as, bool use_padding = true) {
  TorchCase c(name);
  Rng rng(7);
  nn::MultiHeadAttention mha(c.integer("d_model"), c.integer("n_heads"), 0.0, c.dtype(), rng);
  c.load_params(mha);
  const bool cross = c.text("kind") == "cross";

  Tensor q = c.input("query", true);              // [B, Tq, D]
  Tensor kv = cross ? c.input("key", true) : q;   // [B, Tk, D]
  nn::AttentionMasks masks;
  if (c.has("in.attn_mask")) {
    if (causal_as == CausalAs::FileMask) masks.attn_mask = c.input("attn_mask");  // Bool [Tq, Tk]
    if (causal_as == CausalAs::Flag) masks.causal = true;
  }
  if (use_padding && c.has("in.key_padding_mask")) masks.key_padding_mask = c.input("key_padding_mask");

  nn::AttentionOutput res = mha.forward_with_weights(q, kv, kv, masks);
  weighted_sum(res.out, c.input("grad_weight")).backward();

  MhaRun run;
  run.out = res.out;
  run.weights = res.weights;
  run.checks.add(c.output_close(res.out, "out"));
  run.checks.add(res.weights.defined() ? c.output_close(res.weights, "weights")
                                        : ::testing::AssertionFailure() << name << ": no weights returned");
  run.checks.add(c.param_grads_close(mha));
  run.checks.add(c.input_grad_close(q, "query"));
  if (cross) run.checks.add(c.input_grad_close(kv, "key"));
  return run;
}

class MhaTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(MhaTorch, OutputWeightsAndGradientsMatchNnMultiheadAttention) {
  const std::string name = "mha_" + GetParam();
  EXPECT_TRUE(run_mha(name, CausalAs::FileMask).checks.result());
}

INSTANTIATE_TEST_SUITE_P(Cases, MhaTorch,
                         ::testing::Values("self_f32", "self_f64", "cross_f32", "cross_f64", "causal_f32",
                                           "causal_f64", "padding_f32", "padding_f64", "both_f32", "both_f64"),
                         [](const auto& info) { return info.param; });

// The cases with PyTorch's Bool causal attn_mask, run with AttentionMasks::causal instead.
class MhaCausalFlagTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(MhaCausalFlagTorch, CausalFlagGivesTheSameResultAsPytorchsBoolMask) {
  EXPECT_TRUE(run_mha("mha_" + GetParam(), CausalAs::Flag).checks.result());
}

INSTANTIATE_TEST_SUITE_P(Cases, MhaCausalFlagTorch,
                         ::testing::Values("causal_f32", "causal_f64", "both_f32", "both_f64"),
                         [](const auto& info) { return info.param; });

// Controls: the comparison is sharp enough to notice a missing mask.
TEST(MhaTorchControl, WithoutTheCausalMaskTheComparisonFails) {
  EXPECT_FALSE(run_mha("mha_causal_f64", CausalAs::None).checks.result());
  EXPECT_FALSE(run_mha("mha_causal_f32", CausalAs::None).checks.result());
}

TEST(MhaTorchControl, WithoutTheKeyPaddingMaskTheComparisonFails) {
  EXPECT_FALSE(run_mha("mha_padding_f64", CausalAs::FileMask, /*use_padding=*/false).checks.result());
  EXPECT_FALSE(run_mha("mha_both_f32", CausalAs::Flag, /*use_padding=*/false).checks.result());
}

TEST(MhaTorchControl, APerturbedParameterMakesTheComparisonFail) {
  // The same case, with one entry of W_V nudged by 1e-6 after loading: float64 must notice.
  TorchCase c("mha_self_f64");
  Rng rng(7);
  nn::MultiHeadAttention mha(c.integer("d_model"), c.integer("n_heads"), 0.0, c.dtype(), rng);
  c.load_params(mha);
  const int64_t D = c.integer("d_model");
  double* w = mha.in_proj_weight().data<double>();
  w[2 * D * D + 3] += 1e-6;  // a W_V entry
  Tensor q = c.input("query");
  EXPECT_FALSE(c.output_close(mha.forward(q, q, q), "out"));
}

TEST(MhaTorchControl, GradientsOfASlightlyDifferentLossFail) {
  // Outputs identical, loss weights scaled by 1.001: the gradient comparison alone must object.
  for (const std::string name : {"mha_cross_f32", "mha_cross_f64"}) {
    TorchCase c(name);
    Rng rng(7);
    nn::MultiHeadAttention mha(c.integer("d_model"), c.integer("n_heads"), 0.0, c.dtype(), rng);
    c.load_params(mha);
    Tensor q = c.input("query", true);
    Tensor kv = c.input("key", true);
    Tensor out = mha.forward(q, kv, kv);
    EXPECT_TRUE(c.output_close(out, "out"));
    weighted_sum(out, scale(c.input("grad_weight"), 1.001)).backward();
    EXPECT_FALSE(c.param_grads_close(mha)) << name;
    EXPECT_FALSE(c.input_grad_close(q, "query")) << name;
    EXPECT_FALSE(c.input_grad_close(kv, "key")) << name;
  }
}

}  // namespace
}  // namespace attn::test
