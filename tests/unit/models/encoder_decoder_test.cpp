// EncoderDecoderModel (the paper's Transformer): nn.Transformer-subclass state_dict names,
// tied embeddings stored once, the base model's size, a float64 gradient check of a tiny
// model, a non-zero gradient for every parameter from a cross-entropy loss, causality of the
// decoder, a sequence alone equal to the same sequence in a padded batch (with a control),
// train/eval dropout, seeding, load_state_dict round trip, and max_len of learned positions.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "attn/models/encoder_decoder.h"
#include "model_test_util.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"

namespace attn::models {
namespace {

using test_util::ids;
using test_util::names_of;
using test_util::tiny;

std::vector<std::string> layer_names(const std::string& prefix, bool decoder) {
  std::vector<std::string> attn = {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"};
  std::vector<std::string> out;
  for (const char* block : decoder ? std::vector<const char*>{"self_attn", "multihead_attn"} : std::vector<const char*>{"self_attn"})
    for (auto& a : attn) out.push_back(prefix + block + "." + a);
  for (const char* n : {"linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight", "norm1.bias",
                        "norm2.weight", "norm2.bias"})
    out.push_back(prefix + n);
  if (decoder) {
    out.push_back(prefix + "norm3.weight");
    out.push_back(prefix + "norm3.bias");
  }
  return out;
}

TEST(EncoderDecoderModel, StateDictNamesAreThoseOfAnNnTransformerSubclass) {
  ModelConfig c = tiny(Arch::EncoderDecoder);
  c.n_encoder_layers = 2;
  c.positional = nn::PositionalKind::Learned;
  c.share_embeddings = false;
  c.tie_output = false;
  EncoderDecoderModel model(c);
  // Written out in full: what `class M(nn.Transformer)` with these attributes lists.
  const std::vector<std::string> expected = {
      "encoder.layers.0.self_attn.in_proj_weight", "encoder.layers.0.self_attn.in_proj_bias",
      "encoder.layers.0.self_attn.out_proj.weight", "encoder.layers.0.self_attn.out_proj.bias",
      "encoder.layers.0.linear1.weight", "encoder.layers.0.linear1.bias", "encoder.layers.0.linear2.weight",
      "encoder.layers.0.linear2.bias", "encoder.layers.0.norm1.weight", "encoder.layers.0.norm1.bias",
      "encoder.layers.0.norm2.weight", "encoder.layers.0.norm2.bias",
      "encoder.layers.1.self_attn.in_proj_weight", "encoder.layers.1.self_attn.in_proj_bias",
      "encoder.layers.1.self_attn.out_proj.weight", "encoder.layers.1.self_attn.out_proj.bias",
      "encoder.layers.1.linear1.weight", "encoder.layers.1.linear1.bias", "encoder.layers.1.linear2.weight",
      "encoder.layers.1.linear2.bias", "encoder.layers.1.norm1.weight", "encoder.layers.1.norm1.bias",
      "encoder.layers.1.norm2.weight", "encoder.layers.1.norm2.bias",
      "encoder.norm.weight", "encoder.norm.bias",
      "decoder.layers.0.self_attn.in_proj_weight", "decoder.layers.0.self_attn.in_proj_bias",
      "decoder.layers.0.self_attn.out_proj.weight", "decoder.layers.0.self_attn.out_proj.bias",
      "decoder.layers.0.multihead_attn.in_proj_weight", "decoder.layers.0.multihead_attn.in_proj_bias",
      "decoder.layers.0.multihead_attn.out_proj.weight", "decoder.layers.0.multihead_attn.out_proj.bias",
      "decoder.layers.0.linear1.weight", "decoder.layers.0.linear1.bias", "decoder.layers.0.linear2.weight",
      "decoder.layers.0.linear2.bias", "decoder.layers.0.norm1.weight", "decoder.layers.0.norm1.bias",
      "decoder.layers.0.norm2.weight", "decoder.layers.0.norm2.bias", "decoder.layers.0.norm3.weight",
      "decoder.layers.0.norm3.bias",
      "decoder.norm.weight", "decoder.norm.bias",
      "src_embedding.weight", "tgt_embedding.weight", "src_pos_embedding.weight", "tgt_pos_embedding.weight",
      "generator.weight", "generator.bias"};
  EXPECT_EQ(names_of(model), expected);
  // The helper that builds layer names agrees with the list above.
  EXPECT_EQ(std::vector<std::string>(expected.begin() + 26, expected.begin() + 44), layer_names("decoder.layers.0.", true));
  EXPECT_EQ(model.parameter("generator.weight").shape(), (Shape{7, 8}));
  EXPECT_EQ(model.parameter("src_pos_embedding.weight").shape(), (Shape{16, 8}));
}

TEST(EncoderDecoderModel, SharedAndTiedEmbeddingsAreStoredOnceUnderSrcEmbedding) {
  EncoderDecoderModel model(tiny(Arch::EncoderDecoder));  // share + tie, sinusoidal
  const auto names = names_of(model);
  EXPECT_EQ(std::count(names.begin(), names.end(), "tgt_embedding.weight"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "generator.weight"), 0);
  EXPECT_EQ(names[names.size() - 2], "src_embedding.weight");
  EXPECT_EQ(names.back(), "generator.bias");
  EXPECT_TRUE(model.generator().weight().same(model.src_embedding().weight()));
  EXPECT_TRUE(model.tgt_embedding().weight().same(model.src_embedding().weight()));
  const auto tied = model.tied_parameters();
  ASSERT_EQ(tied.size(), 2u);
  EXPECT_EQ(tied[0], (std::pair<std::string, std::string>{"tgt_embedding.weight", "src_embedding.weight"}));
  EXPECT_EQ(tied[1], (std::pair<std::string, std::string>{"generator.weight", "src_embedding.weight"}));
}

TEST(EncoderDecoderModel, PaperBaseHasAboutSixtyFiveMillionParameters) {
  ModelConfig c = ModelConfig::paper_base();
  c.dtype = DType::F32;
  EncoderDecoderModel model(c);
  const int64_t D = 512, F = 2048, V = 37000;
  const int64_t mha = 4 * D * D + 4 * D, ffn = 2 * D * F + F + D;
  const int64_t expected = 6 * (mha + ffn + 4 * D) + 6 * (2 * mha + ffn + 6 * D) + 4 * D + V * D + V;
  EXPECT_EQ(model.num_parameters(), expected);
  EXPECT_GT(model.num_parameters(), 60'000'000);
  EXPECT_LT(model.num_parameters(), 66'000'000);
}

TEST(EncoderDecoderModel, TinyModelGradientsMatchFiniteDifferences) {
  // Post-norm with learned positions here; pre-norm is checked layer by layer in tests/unit/nn.
  ModelConfig c = test_util::gradcheck_sized(Arch::EncoderDecoder);
  c.positional = nn::PositionalKind::Learned;
  c.tie_output = false;
  EncoderDecoderModel model(c);
  Tensor src = ids({3, 4, 2, 0, 4, 3, 4, 1}, 2, 4);
  Tensor tgt = ids({1, 2, 4, 1, 3, 0}, 2, 3);
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>&) { return model.forward(src, tgt); }, model.parameters()));
}

TEST(EncoderDecoderModel, EveryParameterGetsANonZeroGradientFromCrossEntropy) {
  for (auto [share, norm] : {std::pair{true, nn::NormKind::Layer}, std::pair{false, nn::NormKind::RMS}}) {
    ModelConfig c = tiny(Arch::EncoderDecoder);
    c.dtype = DType::F32;
    c.dropout = 0.1;
    c.attention_dropout = 0.1;
    c.share_embeddings = c.tie_output = share;
    c.norm = norm;
    c.positional = nn::PositionalKind::Learned;
    c.max_len = 4;
    EncoderDecoderModel model(c);
    Tensor src = ids({3, 4, 5, 6, 6, 5, 4, 3}, 2, 4);
    Tensor tgt_in = ids({1, 6, 5, 4, 1, 3, 4, 5}, 2, 4);
    Tensor tgt_out = Tensor::from_vector<int64_t>({6, 5, 4, 2, 3, 4, 5, 2}, {8});
    Tensor logits = model.forward(src, tgt_in);  // [2, 4, 7]
    cross_entropy(reshape(logits, {8, 7}), tgt_out, c.pad_id, 0.1).backward();
    EXPECT_EQ(test_util::params_without_gradient(model), std::vector<std::string>{}) << "share " << share;
  }
}

TEST(EncoderDecoderModel, ChangingTargetTokenTOnlyChangesLogitsFromT) {
  EncoderDecoderModel model(tiny(Arch::EncoderDecoder));
  Tensor src = ids({3, 4, 5, 6}, 1, 4);
  Tensor a = model.forward(src, ids({1, 3, 4, 5, 6}, 1, 5));
  Tensor b = model.forward(src, ids({1, 3, 6, 5, 6}, 1, 5));
  EXPECT_TRUE(test::all_close(b.slice(1, 0, 2), a.slice(1, 0, 2), 1e-12));
  EXPECT_FALSE(test::all_close(b.slice(1, 2, 3), a.slice(1, 2, 3), 1e-6));
}

TEST(EncoderDecoderModel, ASequenceAloneEqualsTheSameSequenceInAPaddedBatch) {
  for (int64_t pad_id : {0, -1}) {  // -1: nothing is masked (the control, which must differ)
    ModelConfig c = tiny(Arch::EncoderDecoder);
    c.pad_id = pad_id;
    EncoderDecoderModel model(c);
    Tensor batch = model.forward(ids({3, 4, 5, 6, 5, 6, 0, 0}, 2, 4), ids({1, 3, 4, 1, 6, 0}, 2, 3));
    Tensor alone = model.forward(ids({5, 6}, 1, 2), ids({1, 6}, 1, 2));
    const bool same = test::all_close(batch.slice(0, 1, 2).slice(1, 0, 2), alone, 1e-12);
    EXPECT_EQ(same, pad_id == 0) << "pad_id " << pad_id;
  }
}

TEST(EncoderDecoderModel, EncodeThenDecodeEqualsForward) {
  EncoderDecoderModel model(tiny(Arch::EncoderDecoder));
  Tensor src = ids({3, 4, 0, 5, 6, 2}, 2, 3);
  Tensor tgt = ids({1, 4, 1, 5}, 2, 2);
  Tensor memory = model.encode(src);
  ASSERT_EQ(memory.shape(), (Shape{2, 3, 8}));
  Tensor logits = model.decode(tgt, memory, model.padding_mask(src));
  ASSERT_EQ(logits.shape(), (Shape{2, 2, 7}));
  EXPECT_TRUE(test::all_close(logits, model.forward(src, tgt), 0.0));
  Tensor mask = model.padding_mask(src);
  EXPECT_EQ(mask.dtype(), DType::Bool);
  EXPECT_EQ(mask.to_vector<double>(), (std::vector<double>{0, 0, 1, 0, 0, 0}));
}

TEST(EncoderDecoderModel, TrainModeDropsOutEvalEqualsTheDropoutFreeModel) {
  ModelConfig c = tiny(Arch::EncoderDecoder);
  c.dropout = 0.3;
  c.attention_dropout = 0.3;
  EncoderDecoderModel noisy(c);
  EncoderDecoderModel clean(tiny(Arch::EncoderDecoder));  // same seed, so the same weights
  Tensor src = ids({3, 4, 5, 6}, 1, 4), tgt = ids({1, 6, 5}, 1, 3);
  Tensor first = noisy.forward(src, tgt);
  EXPECT_FALSE(test::all_close(noisy.forward(src, tgt), first, 1e-6));
  noisy.eval();
  EXPECT_TRUE(test::all_close(noisy.forward(src, tgt), clean.forward(src, tgt), 1e-12));
}

TEST(EncoderDecoderModel, SeedDecidesTheWeightsAndStateDictRoundTrips) {
  ModelConfig c = tiny(Arch::EncoderDecoder);
  EncoderDecoderModel a(c), same(c);
  c.seed = 43;
  EncoderDecoderModel other(c);
  Tensor src = ids({3, 4, 5}, 1, 3), tgt = ids({1, 5}, 1, 2);
  EXPECT_TRUE(test::all_close(same.forward(src, tgt), a.forward(src, tgt), 0.0));
  EXPECT_FALSE(test::all_close(other.forward(src, tgt), a.forward(src, tgt), 1e-6));
  other.load_state_dict(a.state_dict());
  EXPECT_TRUE(test::all_close(other.forward(src, tgt), a.forward(src, tgt), 0.0));
  // A checkpoint of another shape is refused, naming the tensor.
  ModelConfig wide = tiny(Arch::EncoderDecoder);
  wide.d_ff = 32;
  EncoderDecoderModel w(wide);
  EXPECT_THROW(w.load_state_dict(a.state_dict()), Error);
}

TEST(EncoderDecoderModel, LearnedPositionsBeyondMaxLenAreAnErrorSinusoidsAreNot) {
  ModelConfig c = tiny(Arch::EncoderDecoder);
  c.positional = nn::PositionalKind::Learned;
  c.max_len = 4;
  EncoderDecoderModel learned(c);
  EXPECT_NO_THROW(learned.forward(ids({3, 4, 5, 6}, 1, 4), ids({1, 3}, 1, 2)));
  try {
    learned.forward(ids({3, 4, 5, 6, 3}, 1, 5), ids({1, 3}, 1, 2));
    FAIL() << "a 5-token source exceeds max_len 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("beyond max_len 4"), std::string::npos) << e.what();
  }
  c.positional = nn::PositionalKind::Sinusoidal;
  EncoderDecoderModel sinusoidal(c);
  EXPECT_NO_THROW(sinusoidal.forward(ids(std::vector<int64_t>(40, 3), 1, 40), ids({1, 3}, 1, 2)));
}

TEST(EncoderDecoderModel, CapturesEncoderAndCrossAttentionForInspection) {
  EncoderDecoderModel model(tiny(Arch::EncoderDecoder));
  model.set_capture_attention(true);
  model.forward(ids({3, 4, 5}, 1, 3), ids({1, 5}, 1, 2));
  std::map<std::string, Shape> shapes;
  for (auto& [name, w] : model.captured_attention()) shapes[name] = w.shape();
  EXPECT_EQ(shapes["encoder.layers.0.self_attn"], (Shape{1, 2, 3, 3}));
  EXPECT_EQ(shapes["decoder.layers.0.self_attn"], (Shape{1, 2, 2, 2}));
  EXPECT_EQ(shapes["decoder.layers.0.multihead_attn"], (Shape{1, 2, 2, 3}));
}

TEST(EncoderDecoderModel, RejectsBadIdsAndInvalidConfigs) {
  EncoderDecoderModel model(tiny(Arch::EncoderDecoder));
  EXPECT_THROW(model.forward(ids({3, 9}, 1, 2), ids({1}, 1, 1)), Error);  // id 9 >= V = 7
  EXPECT_THROW(model.forward(Tensor::zeros({1, 2}), ids({1}, 1, 1)), Error);
  EXPECT_THROW(model.forward(ids({3, 4}, 1, 2), ids({1, 2}, 2, 1)), Error);  // batch mismatch
  ModelConfig bad = tiny(Arch::EncoderDecoder);
  bad.n_heads = 3;
  EXPECT_THROW(EncoderDecoderModel m(bad), Error);
}

}  // namespace
}  // namespace attn::models
