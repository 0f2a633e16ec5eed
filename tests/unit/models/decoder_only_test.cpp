// DecoderOnlyModel (GPT style): names tied and untied, logits shape, causality with a
// control, a float64 gradient check, non-zero gradients for every parameter, and padding.
#include <gtest/gtest.h>

#include "attn/models/decoder_only.h"
#include "model_test_util.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"

namespace attn::models {
namespace {

using test_util::ids;
using test_util::names_of;
using test_util::tiny;

const std::vector<std::string> kBlock = {
    "layers.0.self_attn.in_proj_weight", "layers.0.self_attn.in_proj_bias", "layers.0.self_attn.out_proj.weight",
    "layers.0.self_attn.out_proj.bias", "layers.0.linear1.weight", "layers.0.linear1.bias", "layers.0.linear2.weight",
    "layers.0.linear2.bias", "layers.0.norm1.weight", "layers.0.norm1.bias", "layers.0.norm2.weight",
    "layers.0.norm2.bias"};

TEST(DecoderOnlyModel, NamesTiedAndUntied) {
  ModelConfig c = tiny(Arch::DecoderOnly);
  c.norm_first = true;
  DecoderOnlyModel tied(c);
  std::vector<std::string> expected = {"embedding.weight"};
  expected.insert(expected.end(), kBlock.begin(), kBlock.end());
  expected.insert(expected.end(), {"norm.weight", "norm.bias"});
  EXPECT_EQ(names_of(tied), expected);
  EXPECT_TRUE(tied.lm_head().weight().same(tied.embedding().weight()));
  EXPECT_FALSE(tied.lm_head().bias().defined());

  c.tie_output = false;
  c.positional = nn::PositionalKind::Learned;
  c.final_norm = false;
  DecoderOnlyModel untied(c);
  expected = {"embedding.weight", "pos_embedding.weight"};
  expected.insert(expected.end(), kBlock.begin(), kBlock.end());
  expected.push_back("lm_head.weight");
  EXPECT_EQ(names_of(untied), expected);
}

TEST(DecoderOnlyModel, ChangingTokenTOnlyChangesLogitsFromT) {
  DecoderOnlyModel model(tiny(Arch::DecoderOnly));
  Tensor a = model.forward(ids({1, 3, 4, 5, 6}, 1, 5));
  ASSERT_EQ(a.shape(), (Shape{1, 5, 7}));
  Tensor b = model.forward(ids({1, 3, 4, 3, 6}, 1, 5));
  EXPECT_TRUE(test::all_close(b.slice(1, 0, 3), a.slice(1, 0, 3), 1e-12));
  EXPECT_FALSE(test::all_close(b.slice(1, 3, 4), a.slice(1, 3, 4), 1e-6));
}

TEST(DecoderOnlyModel, TinyModelGradientsMatchFiniteDifferences) {
  ModelConfig c = test_util::gradcheck_sized(Arch::DecoderOnly);
  c.norm_first = true;
  c.activation = nn::Activation::GELU;
  DecoderOnlyModel model(c);
  Tensor x = ids({1, 3, 4, 2, 1, 4, 0, 0}, 2, 4);
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>&) { return model.forward(x); }, model.parameters()));
}

TEST(DecoderOnlyModel, EveryParameterGetsANonZeroGradient) {
  ModelConfig c = tiny(Arch::DecoderOnly);
  c.dtype = DType::F32;
  c.tie_output = false;
  c.positional = nn::PositionalKind::Learned;
  c.max_len = 4;
  DecoderOnlyModel model(c);
  Tensor logits = model.forward(ids({1, 3, 4, 5, 1, 6, 5, 4}, 2, 4));
  cross_entropy(reshape(logits, {8, 7}), Tensor::from_vector<int64_t>({3, 4, 5, 2, 6, 5, 4, 2}, {8})).backward();
  EXPECT_EQ(test_util::params_without_gradient(model), std::vector<std::string>{});
}

TEST(DecoderOnlyModel, RightPaddingDoesNotChangeRealPositions) {
  DecoderOnlyModel model(tiny(Arch::DecoderOnly));
  Tensor batch = model.forward(ids({1, 3, 4, 5, 1, 6, 0, 0}, 2, 4));
  Tensor alone = model.forward(ids({1, 6}, 1, 2));
  EXPECT_TRUE(test::all_close(batch.slice(0, 1, 2).slice(1, 0, 2), alone, 1e-12));
}

}  // namespace
}  // namespace attn::models
