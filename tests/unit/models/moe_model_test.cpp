// A mixture-of-experts FFN as a ModelConfig option (n_experts, expert_top_k,
// expert_capacity_factor, moe_aux_loss_weight): the keys (written only when set, validated), the
// state_dict names (layers.N.moe.router.weight, layers.N.moe.experts.E.linear1.weight, ...), a
// decoder-only model's logits against a dense reference that runs every expert on every token
// and masks by the router's top-k gates, Model::aux_loss (the layers' summed load-balancing
// loss, differentiable), float64 gradient checks, and cached decoding equal to the full forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>

#include "attn/core/autograd.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "attn/ops/ops.h"
#include "model_test_util.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"

namespace attn::models {
namespace {

using json = nlohmann::json;
using test_util::ids;
using test_util::tiny;

ModelConfig moe_lm(int64_t experts = 3, int64_t k = 2) {
  ModelConfig c = tiny(Arch::DecoderOnly);
  c.n_experts = experts;
  c.expert_top_k = k;
  return c;
}

TEST(MoEModel, KeysAreWrittenOnlyWhenSetValidatedAndRoundTrip) {
  const json plain = ModelConfig{}.to_json();
  for (const char* key : {"n_experts", "expert_top_k", "expert_capacity_factor", "moe_aux_loss_weight"})
    EXPECT_FALSE(plain.contains(key)) << key;
  ModelConfig c = moe_lm(4, 1);
  c.expert_capacity_factor = 1.25;
  c.moe_aux_loss_weight = 0.02;
  const json j = c.to_json();
  EXPECT_EQ(j["n_experts"], 4);
  EXPECT_EQ(j["expert_top_k"], 1);
  EXPECT_EQ(j["expert_capacity_factor"], 1.25);
  EXPECT_EQ(j["moe_aux_loss_weight"], 0.02);
  const ModelConfig back = ModelConfig::from_json(json::parse(j.dump()));
  EXPECT_EQ(back.to_json(), j);
  EXPECT_NO_THROW(back.validate());
  for (auto edit : std::vector<std::function<void(ModelConfig&)>>{
           [](ModelConfig& m) { m.n_experts = -1; }, [](ModelConfig& m) { m.expert_top_k = 0; },
           [](ModelConfig& m) { m.expert_top_k = 4; }, [](ModelConfig& m) { m.expert_capacity_factor = -1.0; },
           [](ModelConfig& m) { m.expert_capacity_factor = std::nan(""); },
           [](ModelConfig& m) { m.moe_aux_loss_weight = -0.1; }}) {
    ModelConfig m = moe_lm();
    edit(m);
    EXPECT_THROW(m.validate(), Error);
  }
  EXPECT_THROW(ModelConfig::from_json(json{{"n_experts", "two"}}), Error);
}

TEST(MoEModel, StateDictNamesTheRouterAndEveryExpert) {
  ModelConfig c = moe_lm(2, 1);
  c.tie_output = false;
  DecoderOnlyModel model(c);
  const auto names = test_util::names_of(model);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  for (const char* n : {"layers.0.moe.router.weight", "layers.0.moe.experts.0.linear1.weight",
                        "layers.0.moe.experts.0.linear1.bias", "layers.0.moe.experts.1.linear2.weight",
                        "layers.0.moe.experts.1.linear2.bias"})
    EXPECT_TRUE(has(n)) << n;
  EXPECT_FALSE(has("layers.0.linear1.weight"));
  EXPECT_FALSE(has("layers.0.moe.router.bias"));
  EXPECT_EQ(model.parameter("layers.0.moe.router.weight").shape(), (Shape{2, 8}));
  EXPECT_THROW(model.blocks().layer(0).feed_forward(), Error);
  EXPECT_NE(model.blocks().layer(0).moe(), nullptr);
}

// The FFN sublayer computed densely: every expert on every token, weighted by the top-k gates
// (the chosen router probabilities renormalised to sum 1), zero for unchosen experts.
Tensor dense_moe(nn::MixtureOfExperts& moe, const Tensor& h) {
  const int64_t D = h.size(-1), N = h.numel() / D, E = moe.n_experts(), k = moe.options().top_k;
  const Tensor flat = reshape(h, {N, D});                                               // [N, D]
  const auto probs = softmax(moe.router().forward(flat)).contiguous().to_vector<double>();  // [N, E]
  std::vector<std::vector<double>> gate(static_cast<size_t>(E), std::vector<double>(static_cast<size_t>(N), 0.0));
  for (int64_t t = 0; t < N; ++t) {
    std::vector<int64_t> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return probs[t * E + a] > probs[t * E + b]; });
    double total = 0;
    for (int64_t c = 0; c < k; ++c) total += probs[t * E + order[c]];
    for (int64_t c = 0; c < k; ++c) gate[order[c]][t] = probs[t * E + order[c]] / total;
  }
  Tensor out = Tensor::zeros({N, D}, h.dtype());  // [N, D]
  for (int64_t e = 0; e < E; ++e)
    out = add(out, mul(moe.expert(e).forward(flat), Tensor::from_vector<double>(gate[e], {N, 1}).to(h.dtype())));
  return reshape(out, h.shape());
}

TEST(MoEModel, LogitsEqualADenseReferenceThatRunsEveryExpert) {
  for (int64_t k : {1, 2}) {
    ModelConfig c = moe_lm(3, k);
    c.norm_first = true;
    c.positional = nn::PositionalKind::None;
    c.scale_embeddings = false;
    c.n_decoder_layers = 2;
    DecoderOnlyModel model(c);
    model.eval();
    NoGradGuard no_grad;
    const Tensor x = ids({1, 3, 4, 5, 1, 6, 5, 0}, 2, 4);
    nn::AttentionMasks masks;
    masks.causal = true;
    masks.key_padding_mask = model.padding_mask(x);
    Tensor h = embedding(model.embedding().weight(), x);  // [2, 4, D]
    for (int64_t l = 0; l < 2; ++l) {
      nn::EncoderLayer& layer = model.blocks().layer(l);
      Tensor a = layer.norm1().forward(h);
      h = add(h, layer.self_attention().forward(a, a, a, masks));
      h = add(h, dense_moe(*layer.moe(), layer.norm2().forward(h)));
    }
    const Tensor expected = model.logits(model.blocks().norm()->forward(h));
    EXPECT_TRUE(test::all_close(model.forward(x), expected, 1e-10)) << "top_k " << k;
  }
}

TEST(MoEModel, AuxLossIsTheLayersSumAndReachesTheRouters) {
  DecoderOnlyModel dense(tiny(Arch::DecoderOnly));
  dense.forward(ids({1, 3, 4}, 1, 3));
  EXPECT_FALSE(dense.aux_loss().defined());
  ModelConfig c = moe_lm(3, 1);
  c.n_decoder_layers = 2;
  DecoderOnlyModel model(c);
  EXPECT_FALSE(model.aux_loss().defined());  // before any forward
  model.forward(ids({1, 3, 4, 5, 1, 6, 5, 4}, 2, 4));
  const Tensor aux = model.aux_loss();
  ASSERT_TRUE(aux.defined());
  EXPECT_EQ(aux.numel(), 1);
  const double expected = model.blocks().layer(0).moe()->aux_loss().item() + model.blocks().layer(1).moe()->aux_loss().item();
  EXPECT_NEAR(aux.item(), expected, 1e-12);
  EXPECT_GE(aux.item(), 2.0 - 1e-9);  // each layer's loss is >= 1 (1 when perfectly balanced)
  aux.backward();
  const Tensor g = model.parameter("layers.1.moe.router.weight").grad();
  ASSERT_TRUE(g.defined());
  double norm = 0;
  for (double v : g.to_vector<double>()) norm += v * v;
  EXPECT_GT(norm, 0.0);
}

TEST(MoEModel, Float64GradientsMatchFiniteDifferences) {
  ModelConfig c = test_util::gradcheck_sized(Arch::DecoderOnly);
  c.n_experts = 3;
  c.expert_top_k = 2;
  DecoderOnlyModel model(c);
  const Tensor x = ids({1, 3, 4, 2, 1, 4, 0, 0}, 2, 4);
  EXPECT_TRUE(test::gradcheck(
      [&](const std::vector<Tensor>&) {
        const Tensor total = sum(model.forward(x));  // before aux_loss(): the forward computes it
        return add(total, model.aux_loss());
      },
      model.parameters()));
  ModelConfig ed = test_util::gradcheck_sized(Arch::EncoderDecoder);
  ed.n_experts = 2;
  ed.expert_top_k = 1;
  EncoderDecoderModel seq2seq(ed);
  const Tensor src = ids({3, 4, 2, 3, 0, 0}, 2, 3), tgt = ids({1, 4, 3, 1, 2, 0}, 2, 3);
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>&) { return seq2seq.forward(src, tgt); },
                              seq2seq.parameters()));
}

TEST(MoEModel, CachedDecodingEqualsTheFullForward) {
  ModelConfig c = moe_lm(4, 2);
  c.norm_first = true;
  c.n_decoder_layers = 2;
  DecoderOnlyModel model(c);
  model.eval();
  NoGradGuard no_grad;
  const std::vector<int64_t> seq = {1, 3, 4, 5, 6, 3};
  nn::KVCache cache = model.init_cache(1);
  Tensor logits = model.forward_cached(ids({1, 3}, 1, 2), cache);  // [1, V]
  for (int64_t t = 2;; ++t) {
    const Tensor full = model.forward(Tensor::from_vector<int64_t>({seq.begin(), seq.begin() + t}, {1, t}));
    EXPECT_TRUE(test::all_close(logits, full.slice(1, t - 1, t).reshape({1, 7}), 1e-9)) << "t " << t;
    if (t == 6) break;
    logits = model.forward_cached(Tensor::from_vector<int64_t>({seq[t]}, {1, 1}), cache);
  }
}

}  // namespace
}  // namespace attn::models
