// Property: cached decoding of a decoder-only model equals its full causal forward (paper
// §3.2.3; seed 000's "step by step with a cache equals the full computation"). A batch of
// sequences of different lengths is run once through forward() right-padded; then left-padded
// prompts are run through the cache at once and continued token by token, and every row's logits must equal the
// full forward's at the same (row-relative) position within 1e-5 (f32) / 1e-10 (f64), for each
// positional kind, post- and pre-norm. Also: a prompt in chunks equals the prompt at once, and the
// same prompt gives the same logits alone or inside a padded batch. Controls: a wrong position
// offset is caught.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "attn/core/autograd.h"
#include "attn/models/decoder_only.h"
#include "property_util.h"
#include "support/expect_close.h"

namespace attn {
namespace {

using models::DecoderOnlyModel;

models::ModelConfig lm_config(DType dtype, bool norm_first, nn::PositionalKind positional) {
  models::ModelConfig c = props::small_config(models::Arch::DecoderOnly, dtype, norm_first);
  c.positional = positional;
  c.max_len = 16;
  return c;
}

// Redraws matrices N(0, 1/fan_in) and embeddings N(0, 0.5^2) so that the logits depend clearly
// on the tokens and their positions; eval mode.
void randomize(DecoderOnlyModel& model, uint64_t seed) {
  Rng rng(seed);
  for (auto& [name, p] : model.named_parameters()) {
    if (name.find("norm") != std::string::npos) continue;
    const double sd = name.find("embedding") != std::string::npos ? 0.5 : 1.0 / std::sqrt(static_cast<double>(p.size(-1)));
    p.copy_from(Tensor::randn(p.shape(), rng, p.dtype(), 0.0, sd));
  }
  model.eval();
}

// Sequences of lengths 7, 4 and 6; the last kGen tokens of each are decoded step by step.
const std::vector<std::vector<int64_t>> kSeqs = {{1, 5, 9, 4, 11, 3, 7}, {1, 8, 3, 12}, {1, 6, 6, 10, 4, 9}};
constexpr int64_t kGen = 3;

Tensor right_padded(const std::vector<std::vector<int64_t>>& seqs) {
  size_t width = 0;
  for (const auto& s : seqs) width = std::max(width, s.size());
  std::vector<int64_t> ids;
  for (const auto& s : seqs) {
    ids.insert(ids.end(), s.begin(), s.end());
    ids.insert(ids.end(), width - s.size(), props::kPad);
  }
  return props::ids(ids, static_cast<int64_t>(seqs.size()), static_cast<int64_t>(width));
}

// The prompts (each sequence without its last kGen tokens) left-padded to one width.
Tensor left_padded_prompts(const std::vector<std::vector<int64_t>>& seqs, int64_t gen) {
  size_t width = 0;
  for (const auto& s : seqs) width = std::max(width, s.size() - static_cast<size_t>(gen));
  std::vector<int64_t> ids;
  for (const auto& s : seqs) {
    const size_t n = s.size() - static_cast<size_t>(gen);
    ids.insert(ids.end(), width - n, props::kPad);
    ids.insert(ids.end(), s.begin(), s.begin() + static_cast<long>(n));
  }
  return props::ids(ids, static_cast<int64_t>(seqs.size()), static_cast<int64_t>(width));
}

// Row b's logits [V] at position t of full [B, T, V].
Tensor at(const Tensor& full, int64_t b, int64_t t) {
  return full.slice(0, b, b + 1).slice(1, t, t + 1).reshape({full.size(2)});  // [V]
}

// Largest difference between the cached logits and the full forward over every decoded
// position of every row: the prompts' last column, then kGen - 1 steps (the step that feeds
// the last token predicts beyond the sequences and is only run).
double cached_vs_full(DecoderOnlyModel& model, const std::vector<std::vector<int64_t>>& seqs) {
  NoGradGuard no_grad;
  const Tensor full = model.forward(right_padded(seqs));  // [B, T, V]
  const int64_t B = static_cast<int64_t>(seqs.size());
  nn::KVCache cache = model.init_cache(B);
  Tensor logits = model.forward_cached(left_padded_prompts(seqs, kGen), cache);  // [B, V]
  double worst = 0;
  for (int64_t g = 0; g <= kGen; ++g) {
    if (g > 0) {
      std::vector<int64_t> tok;
      for (const auto& s : seqs) tok.push_back(s[s.size() - static_cast<size_t>(kGen - g + 1)]);
      logits = model.forward_cached(Tensor::from_vector<int64_t>(tok, {B, 1}), cache);  // [B, V]
      if (g == kGen) break;  // the last token's prediction lies beyond the sequences
    }
    for (int64_t b = 0; b < B; ++b) {
      const int64_t pos = static_cast<int64_t>(seqs[static_cast<size_t>(b)].size()) - kGen - 1 + g;
      worst = std::max(worst, test::max_abs_diff(logits.slice(0, b, b + 1).reshape({full.size(2)}), at(full, b, pos)));
    }
  }
  return worst;
}

class DecoderOnlyKVCache : public ::testing::TestWithParam<DType> {};

TEST_P(DecoderOnlyKVCache, CachedLogitsEqualTheFullCausalForwardForEveryPositionalKindAndNormPlacement) {
  const DType dtype = GetParam();
  const double tol = dtype == DType::F32 ? 1e-5 : 1e-10;
  for (nn::PositionalKind pos : {nn::PositionalKind::Sinusoidal, nn::PositionalKind::Learned, nn::PositionalKind::None})
    for (bool norm_first : {false, true}) {
      DecoderOnlyModel model(lm_config(dtype, norm_first, pos));
      randomize(model, 31);
      EXPECT_LE(cached_vs_full(model, kSeqs), tol)
          << nn::positional_kind_name(pos) << (norm_first ? " pre-norm" : " post-norm");
    }
}

TEST_P(DecoderOnlyKVCache, PrefillInChunksEqualsOnePrefillAndSteps) {
  const DType dtype = GetParam();
  const double tol = dtype == DType::F32 ? 1e-5 : 1e-10;
  DecoderOnlyModel model(lm_config(dtype, true, nn::PositionalKind::Learned));
  randomize(model, 37);
  NoGradGuard no_grad;
  const Tensor ids = props::ids({props::kPad, props::kPad, 1, 4, 5, 6, 1, 7, 8, 9, 10, 11}, 2, 6);
  nn::KVCache whole = model.init_cache(2);
  const Tensor h_whole = model.forward_cached_hidden(ids, whole);  // [2, 6, D]
  nn::KVCache chunked = model.init_cache(2);
  const Tensor h1 = model.forward_cached_hidden(ids.slice(1, 0, 4).contiguous(), chunked);  // [2, 4, D]
  const Tensor h2 = model.forward_cached_hidden(ids.slice(1, 4, 6).contiguous(), chunked);  // [2, 2, D]
  EXPECT_TRUE(test::all_close(concat({h1, h2}, 1), h_whole, tol, 0, "two chunks vs the prompt at once"));
  EXPECT_EQ(chunked.length(), 6);
  EXPECT_EQ(chunked.left_pad(), (std::vector<int64_t>{2, 0}));
  // A chunk of one is a step.
  nn::KVCache stepped = model.init_cache(2);
  model.forward_cached_hidden(ids.slice(1, 0, 5).contiguous(), stepped);
  const Tensor last = model.forward_cached(ids.slice(1, 5, 6).contiguous(), stepped);  // [2, V]
  const Tensor want = model.logits(h_whole.slice(1, 5, 6)).reshape({2, props::kVocab});
  EXPECT_TRUE(test::all_close(last, want, tol, 0, "a prompt then a step"));
}

TEST_P(DecoderOnlyKVCache, APromptGivesTheSameLogitsAloneOrInAPaddedBatch) {
  const DType dtype = GetParam();
  const double tol = dtype == DType::F32 ? 1e-5 : 1e-10;
  for (nn::PositionalKind pos : {nn::PositionalKind::Sinusoidal, nn::PositionalKind::Learned}) {
    DecoderOnlyModel model(lm_config(dtype, false, pos));
    randomize(model, 41);
    NoGradGuard no_grad;
    // Row 1 is the short prompt {1, 8, 3}, left-padded by three.
    nn::KVCache batch = model.init_cache(2);
    Tensor in_batch = model.forward_cached(props::ids({1, 5, 9, 4, 11, 3, props::kPad, props::kPad, props::kPad, 1, 8, 3}, 2, 6), batch);
    nn::KVCache alone = model.init_cache(1);
    Tensor by_itself = model.forward_cached(props::ids({1, 8, 3}, 1, 3), alone);
    EXPECT_TRUE(test::all_close(in_batch.slice(0, 1, 2), by_itself, tol, 0, "prompt"));
    for (int64_t tok : {4, 12, 6}) {
      in_batch = model.forward_cached(Tensor::from_vector<int64_t>({7, tok}, {2, 1}), batch);
      by_itself = model.forward_cached(Tensor::from_vector<int64_t>({tok}, {1, 1}), alone);
      EXPECT_TRUE(test::all_close(in_batch.slice(0, 1, 2), by_itself, tol, 0, "step"));
    }
  }
}

TEST(DecoderOnlyKVCacheControl, AWrongPositionOffsetIsCaught) {
  // The left-padded prompt "PAD PAD 1 8 3" must use positions 0..2. A model whose learned
  // position table is shifted by two rows gives, on the same cached path, exactly what
  // positions 2..4 (the padding not subtracted) would give: the comparison must fail clearly.
  DecoderOnlyModel model(lm_config(DType::F64, false, nn::PositionalKind::Learned));
  randomize(model, 43);
  DecoderOnlyModel shifted(lm_config(DType::F64, false, nn::PositionalKind::Learned));
  shifted.load_state_dict(model.state_dict());
  shifted.eval();
  const Tensor table = model.parameter("pos_embedding.weight");  // [16, D]
  shifted.parameter("pos_embedding.weight").slice(0, 0, 14).copy_from(table.slice(0, 2, 16));
  NoGradGuard no_grad;
  const Tensor want = at(model.forward(right_padded({{1, 8, 3}})), 0, 2).reshape({1, props::kVocab});
  const Tensor prompt = props::ids({props::kPad, props::kPad, 1, 8, 3}, 1, 5);
  nn::KVCache a = model.init_cache(1), b = shifted.init_cache(1);
  EXPECT_LE(test::max_abs_diff(model.forward_cached(prompt, a), want), 1e-10);
  EXPECT_GT(test::max_abs_diff(shifted.forward_cached(prompt, b), want), 1e-3);
}

TEST(DecoderOnlyKVCacheErrors, LearnedPositionsBeyondMaxLenAreAnError) {
  DecoderOnlyModel model(lm_config(DType::F32, false, nn::PositionalKind::Learned));  // max_len 16
  model.eval();
  NoGradGuard no_grad;
  nn::KVCache cache = model.init_cache(1);
  // Left padding does not use up positions: 4 PAD + 12 tokens fill positions 0..11 only.
  std::vector<int64_t> prompt(4, props::kPad);
  for (int i = 0; i < 12; ++i) prompt.push_back(3 + i % 10);
  model.forward_cached(props::ids(prompt, 1, 16), cache);
  for (int64_t t = 0; t < 4; ++t) model.forward_cached(Tensor::from_vector<int64_t>({5}, {1, 1}), cache);
  EXPECT_THROW(model.forward_cached(Tensor::from_vector<int64_t>({5}, {1, 1}), cache), Error);
  nn::KVCache fresh = model.init_cache(1);
  EXPECT_THROW(model.forward_cached(props::ids(std::vector<int64_t>(17, 4), 1, 17), fresh), Error);
  try {
    nn::KVCache again = model.init_cache(1);
    model.forward_cached(props::ids(std::vector<int64_t>(17, 4), 1, 17), again);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_len 16"), std::string::npos) << e.what();
  }
}

TEST(DecoderOnlyKVCacheErrors, MisuseIsAnError) {
  DecoderOnlyModel model(lm_config(DType::F32, false, nn::PositionalKind::Sinusoidal));
  EXPECT_THROW(model.init_cache(1), Error);  // training mode, grad on
  model.eval();
  {
    NoGradGuard no_grad;
    nn::KVCache cache = model.init_cache(2);
    EXPECT_THROW(model.forward_cached(props::ids({1, 2, 3}, 1, 3), cache), Error);  // 1 row for a 2-row cache
    EXPECT_THROW(model.forward_cached(Tensor::zeros({2, 3}), cache), Error);         // not i64
    EXPECT_THROW(model.forward_cached(Tensor::from_vector<int64_t>({1, 1}, {2}), cache), Error);  // [N], not [N, T]
    EXPECT_THROW(model.forward_cached(Tensor::from_vector<int64_t>({1, 99}, {2, 1}), cache), Error);  // id outside V
    EXPECT_THROW(model.init_cache(0), Error);
  }
  nn::KVCache cache;
  EXPECT_THROW(model.forward_cached(props::ids({1, 2, 3}, 1, 3), cache), Error);  // grad mode on
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DecoderOnlyKVCache, ::testing::Values(DType::F32, DType::F64),
                         [](const ::testing::TestParamInfo<DType>& info) { return props::dtype_label(info.param); });

}  // namespace
}  // namespace attn
