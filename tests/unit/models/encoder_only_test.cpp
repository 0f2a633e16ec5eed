// EncoderOnlyModel (BERT style): names with the masked-LM head, bidirectional context,
// PAD keys masked, a float64 gradient check and non-zero gradients for every parameter.
#include <gtest/gtest.h>

#include "attn/models/encoder_only.h"
#include "model_test_util.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"

namespace attn::models {
namespace {

using test_util::ids;
using test_util::names_of;
using test_util::tiny;

TEST(EncoderOnlyModel, NamesEndWithTheMaskedLmHead) {
  EncoderOnlyModel model(tiny(Arch::EncoderOnly));
  const auto names = names_of(model);
  ASSERT_EQ(names.size(), 1u + 12u + 2u + 5u);
  EXPECT_EQ(names[0], "embedding.weight");
  EXPECT_EQ(names[1], "layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(names[13], "norm.weight");
  EXPECT_EQ(std::vector<std::string>(names.end() - 5, names.end()),
            (std::vector<std::string>{"mlm_head.dense.weight", "mlm_head.dense.bias", "mlm_head.norm.weight",
                                      "mlm_head.norm.bias", "mlm_head.decoder.bias"}));
  EXPECT_TRUE(model.mlm_head().decoder().weight().same(model.embedding().weight()));
  EXPECT_EQ(model.tied_parameters()[0].first, "mlm_head.decoder.weight");
}

TEST(EncoderOnlyModel, EveryPositionSeesTheWholeSequenceButNotPad) {
  EncoderOnlyModel model(tiny(Arch::EncoderOnly));
  Tensor a = model.forward(ids({3, 4, 5, 6}, 1, 4));
  ASSERT_EQ(a.shape(), (Shape{1, 4, 7}));
  Tensor b = model.forward(ids({3, 4, 5, 3}, 1, 4));
  EXPECT_FALSE(test::all_close(b.slice(1, 0, 1), a.slice(1, 0, 1), 1e-6));  // bidirectional
  Tensor padded = model.forward(ids({3, 4, 0, 0}, 1, 4));
  Tensor alone = model.forward(ids({3, 4}, 1, 2));
  EXPECT_TRUE(test::all_close(padded.slice(1, 0, 2), alone, 1e-12));
}

TEST(EncoderOnlyModel, TinyModelGradientsMatchFiniteDifferences) {
  ModelConfig c = test_util::gradcheck_sized(Arch::EncoderOnly);
  c.norm = nn::NormKind::RMS;
  EncoderOnlyModel model(c);
  Tensor x = ids({3, 4, 2, 0, 1, 2, 4, 3}, 2, 4);
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>&) { return model.forward(x); }, model.parameters()));
}

TEST(EncoderOnlyModel, EveryParameterGetsANonZeroGradient) {
  ModelConfig c = tiny(Arch::EncoderOnly);
  c.dtype = DType::F32;
  c.tie_output = false;
  EncoderOnlyModel model(c);
  Tensor logits = model.forward(ids({3, 4, 5, 6, 6, 5, 4, 3}, 2, 4));
  // Masked-LM: only some positions carry a target; the rest are ignored (-100).
  cross_entropy(reshape(logits, {8, 7}), Tensor::from_vector<int64_t>({-100, 4, -100, 6, 6, -100, -100, 3}, {8}))
      .backward();
  EXPECT_EQ(test_util::params_without_gradient(model), std::vector<std::string>{});
}

}  // namespace
}  // namespace attn::models
