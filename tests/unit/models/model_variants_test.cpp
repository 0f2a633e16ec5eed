// The descendants as ModelConfig options (issue 5): the JSON keys (written only when set, read
// strictly), validation of each, the LayerOptions they become, the parameter shapes they give
// (grouped-query in_proj, SwiGLU's [2F, D] linear1, no position table for RoPE/ALiBi), float64
// gradient checks of a tiny decoder-only model per variant, non-zero gradients everywhere, and
// the encoder-decoder and encoder-only families with RoPE, ALiBi and grouped-query attention.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "attn/core/autograd.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "attn/models/encoder_only.h"
#include "model_test_util.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"
#include "support/error_of.h"

namespace attn::models {
namespace {

using json = nlohmann::json;
using test_util::ids;
using test_util::tiny;

using attn::test::error_of;

TEST(ModelConfigVariants, KeysAreWrittenOnlyWhenSetAndRoundTrip) {
  EXPECT_FALSE(ModelConfig{}.to_json().contains("n_kv_heads"));
  EXPECT_FALSE(ModelConfig{}.to_json().contains("rope_theta"));
  ModelConfig c = tiny(Arch::DecoderOnly);
  c.positional = nn::PositionalKind::Rope;
  c.rope_theta = 500000.0;
  c.rope_pairing = RopePairing::Half;
  c.n_kv_heads = 1;
  c.sliding_window = 8;
  c.activation = nn::Activation::SwiGLU;
  c.norm = nn::NormKind::RMS;
  c.norm_first = true;
  const json j = c.to_json();
  EXPECT_EQ(j["positional"], "rope");
  EXPECT_EQ(j["rope_theta"], 500000.0);
  EXPECT_EQ(j["rope_pairing"], "half");
  EXPECT_EQ(j["n_kv_heads"], 1);
  EXPECT_EQ(j["sliding_window"], 8);
  EXPECT_EQ(j["activation"], "swiglu");
  const ModelConfig back = ModelConfig::from_json(json::parse(j.dump()));
  EXPECT_EQ(back.to_json(), j);
  EXPECT_EQ(back.rope_pairing, RopePairing::Half);
  EXPECT_NO_THROW(back.validate());
  EXPECT_EQ(ModelConfig::from_json(json{{"positional", "alibi"}}).positional, nn::PositionalKind::Alibi);
}

TEST(ModelConfigVariants, WrongTypesAndValuesAreErrorsNamingTheKey) {
  auto read = [](const json& j) { return error_of([&] { ModelConfig::from_json(j); }); };
  EXPECT_NE(read(json{{"n_kv_heads", 1.5}}).find("key 'n_kv_heads'"), std::string::npos);
  EXPECT_NE(read(json{{"rope_theta", "1e4"}}).find("key 'rope_theta'"), std::string::npos);
  EXPECT_NE(read(json{{"rope_pairing", "neox"}}).find("key 'rope_pairing'"), std::string::npos);
  EXPECT_NE(read(json{{"sliding_window", true}}).find("key 'sliding_window'"), std::string::npos);
  struct Case {
    std::function<void(ModelConfig&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](ModelConfig& c) { c.n_kv_heads = 3; }, "n_kv_heads 3 must divide n_heads 8"},
      {[](ModelConfig& c) { c.n_kv_heads = 16; }, "n_kv_heads 16 must divide n_heads 8"},
      {[](ModelConfig& c) { c.n_kv_heads = -1; }, "n_kv_heads -1"},
      {[](ModelConfig& c) { c.rope_theta = 0; }, "rope_theta must be positive"},
      {[](ModelConfig& c) { c.positional = nn::PositionalKind::Rope; c.d_model = 24; }, "rope needs an even head dimension"},
      {[](ModelConfig& c) { c.sliding_window = -1; }, "sliding_window must be >= 0"},
      {[](ModelConfig& c) { c.sliding_window = 4; }, "sliding_window is causal self-attention and needs arch decoder_only"},
      {[](ModelConfig& c) { c.arch = Arch::EncoderOnly; c.activation = nn::Activation::SwiGLU; }, "activation swiglu"},
  };
  for (const auto& k : cases) {
    ModelConfig c;
    k.edit(c);
    const std::string err = error_of([&] { c.validate(); });
    EXPECT_NE(err.find(k.message), std::string::npos) << "expected '" << k.message << "', got '" << err << "'";
  }
}

TEST(ModelConfigVariants, LayerOptionsCarryTheAttentionVariants) {
  ModelConfig c = tiny(Arch::DecoderOnly);
  c.positional = nn::PositionalKind::Rope;
  c.rope_theta = 1000;
  c.rope_pairing = RopePairing::Half;
  c.n_kv_heads = 1;
  c.sliding_window = 5;
  nn::LayerOptions o = c.layer_options();
  EXPECT_TRUE(o.attention.rope);
  EXPECT_FALSE(o.attention.alibi);
  EXPECT_EQ(o.attention.rope_options.theta, 1000);
  EXPECT_EQ(o.attention.rope_options.pairing, RopePairing::Half);
  EXPECT_EQ(o.attention.n_kv_heads, 1);
  EXPECT_EQ(o.attention.window, 5);
  c.positional = nn::PositionalKind::Alibi;
  o = c.layer_options();
  EXPECT_TRUE(o.attention.alibi);
  EXPECT_FALSE(o.attention.rope);
  c.positional = nn::PositionalKind::Learned;
  EXPECT_FALSE(c.layer_options().attention.rope || c.layer_options().attention.alibi);
}

TEST(ModelVariants, ParameterShapesFollowTheOptions) {
  ModelConfig c = tiny(Arch::DecoderOnly);  // D = 8, 2 heads, d_ff 16
  c.positional = nn::PositionalKind::Rope;
  c.n_kv_heads = 1;
  c.activation = nn::Activation::SwiGLU;
  DecoderOnlyModel model(c);
  EXPECT_EQ(model.parameter("layers.0.self_attn.in_proj_weight").shape(), (Shape{8 + 2 * 4, 8}));
  EXPECT_EQ(model.parameter("layers.0.linear1.weight").shape(), (Shape{32, 8}));
  EXPECT_EQ(model.parameter("layers.0.linear2.weight").shape(), (Shape{8, 16}));
  for (const auto& [name, p] : model.named_parameters()) EXPECT_EQ(name.find("pos_embedding"), std::string::npos) << name;
  // Encoder-decoder: both attentions grouped; only self-attention carries the positions.
  ModelConfig ed = tiny(Arch::EncoderDecoder);
  ed.positional = nn::PositionalKind::Alibi;
  ed.n_kv_heads = 1;
  EncoderDecoderModel seq2seq(ed);
  EXPECT_EQ(seq2seq.parameter("decoder.layers.0.multihead_attn.in_proj_weight").shape(), (Shape{16, 8}));
  EXPECT_TRUE(seq2seq.decoder().layer(0).self_attn().options().alibi);
  EXPECT_FALSE(seq2seq.decoder().layer(0).multihead_attn().options().alibi);
  EXPECT_EQ(seq2seq.decoder().layer(0).multihead_attn().n_kv_heads(), 1);
}

// The variants the gradient checks and the other tests below run through.
std::vector<std::pair<std::string, std::function<void(ModelConfig&)>>> variants() {
  return {
      {"rope interleaved", [](ModelConfig& c) { c.positional = nn::PositionalKind::Rope; }},
      {"rope half", [](ModelConfig& c) { c.positional = nn::PositionalKind::Rope; c.rope_pairing = RopePairing::Half; }},
      {"alibi", [](ModelConfig& c) { c.positional = nn::PositionalKind::Alibi; }},
      {"mqa", [](ModelConfig& c) { c.n_kv_heads = 1; }},
      {"window", [](ModelConfig& c) { c.sliding_window = 2; }},
      {"swiglu rms pre-norm", [](ModelConfig& c) {
         c.activation = nn::Activation::SwiGLU;
         c.norm = nn::NormKind::RMS;
         c.norm_first = true;
       }},
  };
}

TEST(ModelVariants, TinyDecoderOnlyGradientsMatchFiniteDifferencesForEachVariant) {
  for (const auto& [name, edit] : variants()) {
    ModelConfig c = test_util::gradcheck_sized(Arch::DecoderOnly);
    edit(c);
    DecoderOnlyModel model(c);
    const Tensor x = ids({1, 3, 4, 2, 1, 4, 0, 0}, 2, 4);
    EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>&) { return model.forward(x); }, model.parameters())) << name;
  }
}

TEST(ModelVariants, EveryParameterGetsANonZeroGradientForEachVariant) {
  for (const auto& [name, edit] : variants()) {
    ModelConfig c = tiny(Arch::DecoderOnly);
    c.tie_output = false;
    edit(c);
    DecoderOnlyModel model(c);
    Tensor logits = model.forward(ids({1, 3, 4, 5, 1, 6, 5, 4}, 2, 4));
    cross_entropy(reshape(logits, {8, 7}), Tensor::from_vector<int64_t>({3, 4, 5, 2, 6, 5, 4, 2}, {8})).backward();
    EXPECT_EQ(test_util::params_without_gradient(model), std::vector<std::string>{}) << name;
  }
}

TEST(ModelVariants, CausalityHoldsForEachVariant) {
  for (const auto& [name, edit] : variants()) {
    ModelConfig c = tiny(Arch::DecoderOnly);
    edit(c);
    DecoderOnlyModel model(c);
    const Tensor a = model.forward(ids({1, 3, 4, 5, 6}, 1, 5));
    const Tensor b = model.forward(ids({1, 3, 4, 3, 6}, 1, 5));
    EXPECT_TRUE(test::all_close(b.slice(1, 0, 3), a.slice(1, 0, 3), 1e-12)) << name;
    EXPECT_FALSE(test::all_close(b.slice(1, 3, 4), a.slice(1, 3, 4), 1e-6)) << name;
  }
}

TEST(ModelVariants, EncoderDecoderAndEncoderOnlyTrainWithRelativePositionsAndGroupedHeads) {
  for (nn::PositionalKind pos : {nn::PositionalKind::Rope, nn::PositionalKind::Alibi}) {
    ModelConfig ed = test_util::gradcheck_sized(Arch::EncoderDecoder);
    ed.positional = pos;
    ed.n_kv_heads = 1;
    EncoderDecoderModel seq2seq(ed);
    const Tensor src = ids({3, 4, 2, 3, 0, 0}, 2, 3), tgt = ids({1, 4, 3, 1, 2, 0}, 2, 3);
    EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>&) { return seq2seq.forward(src, tgt); },
                                seq2seq.parameters()))
        << nn::positional_kind_name(pos);
    ModelConfig eo = test_util::gradcheck_sized(Arch::EncoderOnly);
    eo.positional = pos;
    eo.n_kv_heads = 1;
    EncoderOnlyModel bert(eo);
    const Tensor a = bert.forward(ids({1, 3, 4, 2}, 1, 4)), b = bert.forward(ids({1, 3, 4, 3}, 1, 4));
    // Bidirectional: a change at the last position reaches the first.
    EXPECT_FALSE(test::all_close(a.slice(1, 0, 1), b.slice(1, 0, 1), 1e-9)) << nn::positional_kind_name(pos);
    // Relative positions see order: a permuted input is not a permuted output.
    const Tensor p = bert.forward(ids({1, 3, 2, 4}, 1, 4));
    EXPECT_FALSE(test::all_close(p.slice(1, 1, 2), a.slice(1, 1, 2), 1e-9)) << nn::positional_kind_name(pos);
  }
}

}  // namespace
}  // namespace attn::models
