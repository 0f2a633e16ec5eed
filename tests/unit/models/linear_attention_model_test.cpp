// "attention": "linear" as a ModelConfig option: the key (written only when set, read strictly),
// the options it cannot combine with, the layers holding LinearAttention under the same names,
// float64 gradient checks of tiny models of every family, a decoder-only model whose loss goes
// down in a few SGD steps, and cached decoding (left-padded prompts at once, then steps)
// equal to the full forward.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "attn/core/autograd.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "attn/models/encoder_only.h"
#include "attn/nn/linear_attention.h"
#include "model_test_util.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"

namespace attn::models {
namespace {

using json = nlohmann::json;
using test_util::ids;
using test_util::tiny;

ModelConfig linear_lm() {
  ModelConfig c = tiny(Arch::DecoderOnly);
  c.attention = nn::AttentionKind::Linear;
  return c;
}

TEST(LinearAttentionModel, KeyIsWrittenOnlyWhenSetAndRoundTrips) {
  EXPECT_FALSE(ModelConfig{}.to_json().contains("attention"));
  const json j = linear_lm().to_json();
  EXPECT_EQ(j["attention"], "linear");
  const ModelConfig back = ModelConfig::from_json(json::parse(j.dump()));
  EXPECT_EQ(back.attention, nn::AttentionKind::Linear);
  EXPECT_EQ(back.to_json(), j);
  EXPECT_THROW(ModelConfig::from_json(json{{"attention", "quadratic"}}), Error);
  EXPECT_THROW(ModelConfig::from_json(json{{"attention", 1}}), Error);
}

TEST(LinearAttentionModel, RejectsTheOptionsItCannotCombineWith) {
  for (auto edit : std::vector<std::function<void(ModelConfig&)>>{
           [](ModelConfig& c) { c.positional = nn::PositionalKind::Rope; },
           [](ModelConfig& c) { c.positional = nn::PositionalKind::Alibi; },
           [](ModelConfig& c) { c.sliding_window = 4; },
           [](ModelConfig& c) { c.n_kv_heads = 1; }}) {
    ModelConfig c = linear_lm();
    edit(c);
    EXPECT_THROW(c.validate(), Error);
  }
  ModelConfig learned = linear_lm();
  learned.positional = nn::PositionalKind::Learned;
  learned.n_kv_heads = learned.n_heads;  // = multi-head attention
  EXPECT_NO_THROW(learned.validate());
  // No attention weights to capture in a single-stack linear model.
  DecoderOnlyModel model(linear_lm());
  EXPECT_THROW(model.set_capture_attention(true), Error);
  EXPECT_NO_THROW(model.set_capture_attention(false));
}

TEST(LinearAttentionModel, LayersHoldLinearAttentionUnderTheSameParameterNames) {
  DecoderOnlyModel softmax(tiny(Arch::DecoderOnly));
  DecoderOnlyModel linear(linear_lm());
  EXPECT_EQ(test_util::names_of(linear), test_util::names_of(softmax));
  EXPECT_NE(dynamic_cast<nn::LinearAttention*>(&linear.blocks().layer(0).self_attention()), nullptr);
  EXPECT_THROW(linear.blocks().layer(0).self_attn(), Error);
  EXPECT_NO_THROW(softmax.blocks().layer(0).self_attn());
  ModelConfig ed = tiny(Arch::EncoderDecoder);
  ed.attention = nn::AttentionKind::Linear;
  EncoderDecoderModel seq2seq(ed);
  EXPECT_NE(dynamic_cast<nn::LinearAttention*>(&seq2seq.decoder().layer(0).self_attention()), nullptr);
  EXPECT_NO_THROW(seq2seq.decoder().layer(0).multihead_attn());  // cross-attention stays softmax
  // Same parameters, different attention: different outputs.
  linear.load_state_dict(softmax.state_dict());
  const Tensor x = ids({1, 3, 4, 5}, 1, 4);
  EXPECT_FALSE(test::all_close(linear.forward(x), softmax.forward(x), 1e-6));
}

TEST(LinearAttentionModel, Float64GradientsOfEveryFamilyMatchFiniteDifferences) {
  ModelConfig lm = test_util::gradcheck_sized(Arch::DecoderOnly);
  lm.attention = nn::AttentionKind::Linear;
  DecoderOnlyModel gpt(lm);
  const Tensor x = ids({1, 3, 4, 2, 1, 4, 0, 0}, 2, 4);
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>&) { return gpt.forward(x); }, gpt.parameters()));
  ModelConfig ed = test_util::gradcheck_sized(Arch::EncoderDecoder);
  ed.attention = nn::AttentionKind::Linear;
  EncoderDecoderModel seq2seq(ed);
  const Tensor src = ids({3, 4, 2, 3, 0, 0}, 2, 3), tgt = ids({1, 4, 3, 1, 2, 0}, 2, 3);
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>&) { return seq2seq.forward(src, tgt); },
                              seq2seq.parameters()));
  ModelConfig eo = test_util::gradcheck_sized(Arch::EncoderOnly);
  eo.attention = nn::AttentionKind::Linear;
  EncoderOnlyModel bert(eo);
  const Tensor y = ids({1, 3, 4, 2}, 1, 4);
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>&) { return bert.forward(y); }, bert.parameters()));
}

TEST(LinearAttentionModel, DecoderOnlyLossGoesDownInAFewSteps) {
  ModelConfig c = linear_lm();
  c.d_model = 16;
  c.d_ff = 32;
  c.norm_first = true;
  DecoderOnlyModel model(c);
  // Next-token prediction of a fixed pattern.
  const Tensor input = ids({1, 3, 4, 5, 6, 3, 4, 5, 1, 6, 5, 4, 3, 6, 5, 4}, 2, 8);
  const Tensor target = Tensor::from_vector<int64_t>({3, 4, 5, 6, 3, 4, 5, 6, 6, 5, 4, 3, 6, 5, 4, 3}, {16});
  auto loss_of = [&] { return cross_entropy(reshape(model.forward(input), {16, 7}), target); };
  const double first = loss_of().item();
  for (int step = 0; step < 20; ++step) {
    model.zero_grad();
    loss_of().backward();
    NoGradGuard no_grad;
    for (Tensor p : model.parameters()) p.copy_from(sub(p, scale(p.grad(), 0.1)));
  }
  const double last = loss_of().item();
  EXPECT_LT(last, 0.7 * first) << first << " -> " << last;
}

TEST(LinearAttentionModel, CachedDecodingEqualsTheFullForward) {
  for (nn::PositionalKind pos : {nn::PositionalKind::Sinusoidal, nn::PositionalKind::Learned}) {
    ModelConfig c = linear_lm();
    c.positional = pos;
    c.norm_first = true;
    DecoderOnlyModel model(c);
    model.eval();
    NoGradGuard no_grad;
    // Row 0: 6 tokens; row 1: a 2-token prompt left-padded to 3, then the same steps.
    const std::vector<std::vector<int64_t>> rows = {{1, 3, 4, 5, 6, 3}, {1, 5, 4, 3}};
    nn::KVCache cache = model.init_cache(2);
    Tensor logits = model.forward_cached(ids({1, 3, 4, 0, 1, 5}, 2, 3), cache);  // [2, V]
    for (int64_t t = 3;; ++t) {
      for (size_t r = 0; r < 2; ++r) {
        const int64_t len = static_cast<int64_t>(r == 0 ? t : t - 1);  // row 1 has one PAD in front
        std::vector<int64_t> prefix(rows[r].begin(), rows[r].begin() + len);
        const Tensor full = model.forward(Tensor::from_vector<int64_t>(prefix, {1, len}));  // [1, len, V]
        EXPECT_TRUE(test::all_close(logits.slice(0, static_cast<int64_t>(r), static_cast<int64_t>(r) + 1),
                                    full.slice(1, len - 1, len).reshape({1, 7}), 1e-9))
            << nn::positional_kind_name(pos) << " row " << r << " t " << t;
      }
      if (t == 5) break;
      logits = model.forward_cached(Tensor::from_vector<int64_t>({rows[0][t], rows[1][t - 1]}, {2, 1}), cache);
    }
  }
}

}  // namespace
}  // namespace attn::models
