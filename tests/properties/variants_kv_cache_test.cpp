// Property: cached decoding equals the full forward for every descendant of the paper (issue 5):
// RoPE (both pairings), ALiBi, grouped-query and multi-query attention, a sliding window, and a
// LLaMA-style block (RoPE + GQA + SwiGLU + RMSNorm + pre-norm + final norm). Decoder-only: a
// padded batch run through the cache left-aligned and continued step by step, every position within 1e-5
// (f32) / 1e-10 (f64) of forward(); the window's cache holds only W positions; the same prompt
// alone or in a batch gives the same logits. Encoder-decoder (RoPE, ALiBi, GQA):
// forward_cached equals forward() at every target position. A control breaks the RoPE positions.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "attn/core/autograd.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "property_util.h"
#include "support/expect_close.h"

namespace attn {
namespace {

using models::DecoderOnlyModel;
using models::ModelConfig;

using Edit = std::function<void(ModelConfig&)>;

std::vector<std::pair<std::string, Edit>> variants() {
  return {
      {"rope interleaved", [](ModelConfig& c) { c.positional = nn::PositionalKind::Rope; }},
      {"rope half theta 500", [](ModelConfig& c) {
         c.positional = nn::PositionalKind::Rope;
         c.rope_pairing = RopePairing::Half;
         c.rope_theta = 500.0;
       }},
      {"alibi", [](ModelConfig& c) { c.positional = nn::PositionalKind::Alibi; }},
      {"gqa", [](ModelConfig& c) { c.n_kv_heads = 2; }},
      {"mqa learned", [](ModelConfig& c) { c.n_kv_heads = 1; c.positional = nn::PositionalKind::Learned; }},
      {"window 3", [](ModelConfig& c) { c.sliding_window = 3; }},
      {"window 2 alibi", [](ModelConfig& c) { c.sliding_window = 2; c.positional = nn::PositionalKind::Alibi; }},
      {"llama-style", [](ModelConfig& c) {
         c.positional = nn::PositionalKind::Rope;
         c.rope_pairing = RopePairing::Half;
         c.n_kv_heads = 2;
         c.activation = nn::Activation::SwiGLU;
         c.norm = nn::NormKind::RMS;
         c.norm_first = true;
         c.final_norm = true;
       }},
  };
}

// Matrices N(0, 1/fan_in), embeddings N(0, 0.5^2): the logits depend on tokens and positions.
void randomize(nn::Module& model, uint64_t seed) {
  Rng rng(seed);
  for (auto& [name, p] : model.named_parameters()) {
    if (name.find("norm") != std::string::npos) continue;
    const double sd = name.find("embedding") != std::string::npos ? 0.5 : 1.0 / std::sqrt(static_cast<double>(p.size(-1)));
    p.copy_from(Tensor::randn(p.shape(), rng, p.dtype(), 0.0, sd));
  }
  model.eval();
}

const std::vector<std::vector<int64_t>> kSeqs = {{1, 5, 9, 4, 11, 3, 7, 8}, {1, 8, 3, 12, 6}, {1, 6, 6, 10, 4, 9}};
constexpr int64_t kGen = 4;

// Max |cached - full| over every decoded position; also reports the cache's held positions.
double cached_vs_full(DecoderOnlyModel& model, int64_t* held) {
  NoGradGuard no_grad;
  const int64_t B = static_cast<int64_t>(kSeqs.size());
  size_t width = 0, pwidth = 0;
  for (const auto& s : kSeqs) {
    width = std::max(width, s.size());
    pwidth = std::max(pwidth, s.size() - kGen);
  }
  std::vector<int64_t> right, left;
  for (const auto& s : kSeqs) {
    right.insert(right.end(), s.begin(), s.end());
    right.insert(right.end(), width - s.size(), props::kPad);
    left.insert(left.end(), pwidth - (s.size() - kGen), props::kPad);
    left.insert(left.end(), s.begin(), s.end() - kGen);
  }
  const Tensor full = model.forward(props::ids(right, B, static_cast<int64_t>(width)));  // [B, T, V]
  nn::KVCache cache = model.init_cache(B);
  Tensor logits = model.forward_cached(props::ids(left, B, static_cast<int64_t>(pwidth)), cache);  // [B, V]
  double worst = 0;
  for (int64_t g = 0; g < kGen; ++g) {
    if (g > 0) {
      std::vector<int64_t> tok;
      for (const auto& s : kSeqs) tok.push_back(s[s.size() - static_cast<size_t>(kGen - g + 1)]);
      logits = model.forward_cached(Tensor::from_vector<int64_t>(tok, {B, 1}), cache);
    }
    for (int64_t b = 0; b < B; ++b) {
      const int64_t pos = static_cast<int64_t>(kSeqs[static_cast<size_t>(b)].size()) - kGen - 1 + g;
      const Tensor want = full.slice(0, b, b + 1).slice(1, pos, pos + 1).reshape({1, props::kVocab});
      worst = std::max(worst, test::max_abs_diff(logits.slice(0, b, b + 1), want));
    }
  }
  *held = cache.layer(0).self.k.size(2);
  return worst;
}

ModelConfig lm(DType dtype, const Edit& edit) {
  ModelConfig c = props::small_config(models::Arch::DecoderOnly, dtype, false);
  c.max_len = 16;
  edit(c);
  return c;
}

class VariantsKVCache : public ::testing::TestWithParam<DType> {};

TEST_P(VariantsKVCache, DecoderOnlyCachedLogitsEqualTheFullForwardForEachVariant) {
  const DType dtype = GetParam();
  const double tol = dtype == DType::F32 ? 1e-5 : 1e-10;
  for (const auto& [name, edit] : variants()) {
    const ModelConfig c = lm(dtype, edit);
    DecoderOnlyModel model(c);
    randomize(model, 51);
    int64_t held = 0;
    EXPECT_LE(cached_vs_full(model, &held), tol) << name;
    // The prompts fill 4 columns and 3 steps follow: 7 positions, or the last W with a window.
    EXPECT_EQ(held, c.sliding_window > 0 ? c.sliding_window : 7) << name;
  }
}

TEST_P(VariantsKVCache, APromptGivesTheSameLogitsAloneOrInAPaddedBatchForEachVariant) {
  const DType dtype = GetParam();
  const double tol = dtype == DType::F32 ? 1e-5 : 1e-10;
  for (const auto& [name, edit] : variants()) {
    DecoderOnlyModel model(lm(dtype, edit));
    randomize(model, 53);
    NoGradGuard no_grad;
    nn::KVCache batch = model.init_cache(2), alone = model.init_cache(1);
    Tensor in_batch = model.forward_cached(props::ids({1, 5, 9, 4, 11, props::kPad, props::kPad, 1, 8, 3}, 2, 5), batch);
    Tensor by_itself = model.forward_cached(props::ids({1, 8, 3}, 1, 3), alone);
    EXPECT_TRUE(test::all_close(in_batch.slice(0, 1, 2), by_itself, tol, 0, name + " prompt"));
    for (int64_t tok : {4, 12, 6, 7}) {
      in_batch = model.forward_cached(Tensor::from_vector<int64_t>({7, tok}, {2, 1}), batch);
      by_itself = model.forward_cached(Tensor::from_vector<int64_t>({tok}, {1, 1}), alone);
      EXPECT_TRUE(test::all_close(in_batch.slice(0, 1, 2), by_itself, tol, 0, name + " step"));
    }
  }
}

TEST_P(VariantsKVCache, EncoderDecoderStepsEqualTheFullForwardWithRelativePositionsAndGroupedHeads) {
  const DType dtype = GetParam();
  const double tol = dtype == DType::F32 ? 1e-5 : 1e-10;
  const std::vector<std::pair<std::string, Edit>> ed_variants = {
      {"rope", [](ModelConfig& c) { c.positional = nn::PositionalKind::Rope; c.rope_pairing = RopePairing::Half; }},
      {"alibi", [](ModelConfig& c) { c.positional = nn::PositionalKind::Alibi; }},
      {"gqa swiglu", [](ModelConfig& c) { c.n_kv_heads = 1; c.activation = nn::Activation::SwiGLU; }}};
  for (const auto& [name, edit] : ed_variants) {
    ModelConfig c = props::small_config(models::Arch::EncoderDecoder, dtype, true);
    edit(c);
    models::EncoderDecoderModel model(c);
    randomize(model, 57);
    NoGradGuard no_grad;
    const Tensor src = props::ids({3, 4, 5, 6, 7, 8, 9, 10, props::kPad, props::kPad}, 2, 5);
    const Tensor tgt = props::ids({1, 9, 8, 7, 6, 1, 4, 3, props::kPad, props::kPad}, 2, 5);
    const Tensor full = model.forward(src, tgt);  // [2, 5, V]
    nn::KVCache cache = model.init_cache(model.encode(src), model.padding_mask(src));
    double worst = 0;
    for (int64_t t = 0; t < 5; ++t) {
      const Tensor tok = tgt.slice(1, t, t + 1).contiguous();  // [2, 1]
      const Tensor step = model.forward_cached(tok, cache);   // [2, V]
      worst = std::max(worst, test::max_abs_diff(step, full.slice(1, t, t + 1).reshape({2, props::kVocab})));
    }
    EXPECT_LE(worst, tol) << name;
  }
}

TEST(VariantsKVCacheControl, RotatingCachedKeysByTheWrongPositionsIsCaught) {
  // Decoding with RoPE where every step claims position 0 (as a cache that forgot its length
  // would) must differ from the full forward.
  DecoderOnlyModel model(lm(DType::F64, [](ModelConfig& c) { c.positional = nn::PositionalKind::Rope; }));
  randomize(model, 59);
  NoGradGuard no_grad;
  const Tensor full = model.forward(props::ids({1, 5, 9, 4}, 1, 4));  // [1, 4, V]
  // The stack directly, every position told it is position 0.
  nn::KVCache cache = model.init_cache(1);
  double worst = 0;
  for (int64_t t = 0; t < 4; ++t) {
    const int64_t tok = std::vector<int64_t>{1, 5, 9, 4}[static_cast<size_t>(t)];
    cache.append_self_padding({0});
    Tensor x = scale(model.embedding().forward(props::ids({tok}, 1, 1)), std::sqrt(16.0));
    nn::AttentionMasks masks;
    masks.positions = props::ids({0}, 1, 1);
    const Tensor h = model.blocks().forward_cached(x, cache, masks);
    worst = std::max(worst, test::max_abs_diff(model.logits(h), full.slice(1, t, t + 1)));
  }
  EXPECT_GT(worst, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, VariantsKVCache, ::testing::Values(DType::F32, DType::F64),
                         [](const ::testing::TestParamInfo<DType>& info) { return props::dtype_label(info.param); });

}  // namespace
}  // namespace attn
