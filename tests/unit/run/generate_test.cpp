// run/generate.h and run/fill_mask.h: generation with a decoder-only model against a brute-force loop over the full
// (uncached) forward, the same prompt alone or in a batch of other lengths, the learned-position
// limits, reproducible sampling and beam search's n-best; fill-mask's text reading and its
// candidates against a brute-force softmax; and the errors of both.
#include "attn/run/fill_mask.h"
#include "attn/run/generate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "attn/core/autograd.h"
#include "attn/models/factory.h"
#include "attn/ops/ops.h"
#include "unit/models/broken_checkpoints.h"
#include "support/error_of.h"

namespace attn::run {
namespace {

using models::test_util::TempDir;
using Ids = std::vector<int64_t>;

// <pad> <bos> <eos> <unk> [MASK]? then the symbols 0..5.
io::Vocab symbols(bool with_mask) {
  return io::Vocab({"0", "1", "2", "3", "4", "5"}, io::Tokenization::Chars, with_mask);
}

models::ModelConfig tiny(models::Arch arch, int64_t vocab) {
  models::ModelConfig c;
  c.arch = arch;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_encoder_layers = arch == models::Arch::EncoderOnly ? 2 : 0;
  c.n_decoder_layers = arch == models::Arch::DecoderOnly ? 2 : 0;
  c.d_ff = 16;
  c.dropout = 0.2;  // open_model_folder must switch it off
  c.attention_dropout = 0.2;
  c.max_len = 64;
  c.src_vocab_size = vocab;
  c.tgt_vocab_size = 0;
  c.dtype = DType::F64;
  c.seed = 7;
  return c;
}

ModelFolder open(const TempDir& tmp, const std::string& name, const models::ModelConfig& c, bool with_mask) {
  const std::string dir = tmp.file(name);
  models::save_model(dir, *models::make_model(c), {{"vocab.json", symbols(with_mask).to_json().dump()}});
  return open_model_folder(dir, "test", true, c.arch);
}

using attn::test::error_of;

// Greedy continuation by re-running the whole sequence through forward() at every step.
decode::Hypothesis brute_force_greedy(models::DecoderOnlyModel& model, const Ids& prompt, int64_t max_tokens) {
  NoGradGuard no_grad;
  const models::ModelConfig& c = model.config();
  Ids ids{c.bos_id};
  ids.insert(ids.end(), prompt.begin(), prompt.end());
  decode::Hypothesis h;
  for (int64_t k = 0; k < max_tokens; ++k) {
    const Tensor lp = log_softmax(model.forward(Tensor::from_vector<int64_t>(ids, {1, static_cast<int64_t>(ids.size())})));
    const std::vector<double> v = lp.to_vector<double>();
    const int64_t V = lp.size(2);
    const double* row = v.data() + (static_cast<int64_t>(ids.size()) - 1) * V;
    const int64_t best = std::max_element(row, row + V) - row;
    h.logprob += row[best];
    if (best == c.eos_id) {
      h.finished = true;
      break;
    }
    h.tokens.push_back(best);
    ids.push_back(best);
  }
  return h;
}

TEST(Generate, GreedyEqualsTheFullForwardLoopAloneAndInABatch) {
  TempDir tmp("attn_run_generate");
  const ModelFolder f = open(tmp, "lm", tiny(models::Arch::DecoderOnly, 10), false);
  auto& model = dynamic_cast<models::DecoderOnlyModel&>(*f.base);
  EXPECT_FALSE(model.is_training());
  const std::vector<Ids> prompts = {{4, 5, 6}, {9}, {7, 7, 8, 4, 5, 6}};
  GenerateSettings s;
  s.max_tokens = 6;
  const auto batch = generate_batch(f, prompts, s);
  ASSERT_EQ(batch.size(), 3u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(i);
    const decode::Hypothesis want = brute_force_greedy(model, prompts[i], 6);
    ASSERT_EQ(batch[i].size(), 1u);
    EXPECT_EQ(batch[i][0].tokens, want.tokens);
    EXPECT_EQ(batch[i][0].finished, want.finished);
    EXPECT_NEAR(batch[i][0].logprob, want.logprob, 1e-9);
    const auto alone = generate_batch(f, {prompts[i]}, s);
    EXPECT_EQ(alone[0][0].tokens, batch[i][0].tokens);
    EXPECT_NEAR(alone[0][0].logprob, batch[i][0].logprob, 1e-9);
  }
}

TEST(Generate, SamplingIsReproducibleAndBeamSearchGivesRankedNBest) {
  TempDir tmp("attn_run_generate");
  const ModelFolder f = open(tmp, "lm", tiny(models::Arch::DecoderOnly, 10), false);
  GenerateSettings s;
  s.mode = GenerateSettings::Mode::Sample;
  s.seed = 3;
  s.max_tokens = 8;
  s.temperature = 2.0;  // a random model: flatten further so that seeds visibly differ
  const auto a = generate_batch(f, {{4, 5}, {6}}, s);
  const auto b = generate_batch(f, {{4, 5}, {6}}, s);
  EXPECT_EQ(a[0][0].tokens, b[0][0].tokens);
  EXPECT_EQ(a[1][0].tokens, b[1][0].tokens);
  bool differs = false;
  for (uint64_t seed = 4; seed < 12 && !differs; ++seed) {
    s.seed = seed;
    differs = generate_batch(f, {{4, 5}}, s)[0][0].tokens != a[0][0].tokens;
  }
  EXPECT_TRUE(differs) << "eight other seeds all gave the same sample";
  GenerateSettings beam;
  beam.mode = GenerateSettings::Mode::Beam;
  beam.beam = 3;
  beam.n_best = 3;
  beam.max_tokens = 5;
  const auto found = generate_batch(f, {{4, 5}}, beam);
  ASSERT_EQ(found[0].size(), 3u);
  EXPECT_GE(found[0][0].score, found[0][1].score);
  EXPECT_GE(found[0][1].score, found[0][2].score);
}

TEST(Generate, LearnedPositionsCapTheContinuationAndRejectLongerPrompts) {
  TempDir tmp("attn_run_generate");
  models::ModelConfig c = tiny(models::Arch::DecoderOnly, 10);
  c.positional = nn::PositionalKind::Learned;
  c.max_len = 6;
  c.eos_id = -1;  // no EOS: every continuation runs to its limit
  const ModelFolder f = open(tmp, "lm", c, false);
  GenerateSettings s;
  s.max_tokens = 10;
  // <bos> + 2 tokens use positions 0-2; generated tokens 1..3 are fed at positions 3-5; the
  // 4th is predicted at position 5 and never fed: 4 tokens.
  const auto found = generate_batch(f, {{4, 5}, {4, 5, 6, 7, 8}, {4}}, s);
  EXPECT_EQ(found[0][0].tokens.size(), 4u);
  EXPECT_EQ(found[1][0].tokens.size(), 1u);  // the prompt fills every position
  EXPECT_EQ(found[2][0].tokens.size(), 5u);
  EXPECT_FALSE(found[0][0].finished);
  // Each equals its run alone (the batch is split by limit, not cut to the shortest).
  EXPECT_EQ(generate_batch(f, {{4, 5}}, s)[0][0].tokens, found[0][0].tokens);
  const std::string msg = error_of([&] { generate_batch(f, {{4}, {4, 5, 6, 7, 8, 9}}, s); });
  EXPECT_NE(msg.find("prompt 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("max_len"), std::string::npos) << msg;
}

TEST(Generate, BadSettingsAndPromptsAreErrors) {
  TempDir tmp("attn_run_generate");
  const ModelFolder f = open(tmp, "lm", tiny(models::Arch::DecoderOnly, 10), false);
  GenerateSettings s;
  EXPECT_THROW(generate_batch(f, {}, s), Error);
  EXPECT_THROW(generate_batch(f, {{}}, s), Error);
  EXPECT_NE(error_of([&] { generate_batch(f, {{4}, {5, 0}}, s); }).find("prompt 2 holds id 0, the padding token"),
            std::string::npos);
  EXPECT_NE(error_of([&] { generate_batch(f, {{4, 10}}, s); }).find("outside the vocabulary"), std::string::npos);
  s.max_tokens = 0;
  EXPECT_NE(error_of([&] { validate(s); }).find("--max-tokens"), std::string::npos);
  s = {};
  s.mode = GenerateSettings::Mode::Sample;
  s.top_p = 0;
  EXPECT_NE(error_of([&] { validate(s); }).find("--top-p"), std::string::npos);
  s.top_p = 1.01;
  EXPECT_THROW(validate(s), Error);
  s.top_p = 1;
  s.temperature = 0;
  EXPECT_NE(error_of([&] { validate(s); }).find("--temperature"), std::string::npos);
  s = {};
  s.mode = GenerateSettings::Mode::Beam;
  s.n_best = 5;
  EXPECT_NE(error_of([&] { validate(s); }).find("--n-best"), std::string::npos);
}

// ---- fill-mask -------------------------------------------------------------------------------

TEST(FillMask, ReadsTextsWithMasksAndRejectsTextsWithout) {
  const io::Vocab v = symbols(true);
  EXPECT_EQ(read_masked_text("0[MASK]1", v, "fill-mask", "--text 1"), (Ids{5, 4, 6}));
  EXPECT_EQ(read_masked_text("[MASK][MASK] 2", v, "fill-mask", "--text 1"), (Ids{4, 4, 7}));  // no space token: spaces split
  EXPECT_NE(error_of([&] { read_masked_text("012", v, "fill-mask", "--text 1"); }).find("no [MASK]"), std::string::npos);
  EXPECT_NE(error_of([&] { read_masked_text("", v, "fill-mask", "--text 1"); }).find("empty"), std::string::npos);
  const std::string unknown = error_of([&] { read_masked_text("0[MASK]9", v, "fill-mask", "--text 2"); });
  EXPECT_NE(unknown.find("'9'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("--text 2"), std::string::npos) << unknown;
  EXPECT_THROW(read_masked_text("0[MASK]", symbols(false), "fill-mask", "x"), Error);
}

TEST(FillMask, CandidatesAreTheSoftmaxAtTheMaskRankedWithoutSpecials) {
  TempDir tmp("attn_run_generate");
  const ModelFolder f = open(tmp, "mlm", tiny(models::Arch::EncoderOnly, 11), true);
  auto& model = dynamic_cast<models::EncoderOnlyModel&>(*f.base);
  const std::vector<Ids> texts = {{5, 4, 6, 7}, {4, 9}};
  const auto got = fill_masks(f, texts, 3);
  ASSERT_EQ(got.size(), 2u);
  NoGradGuard no_grad;
  for (size_t i = 0; i < texts.size(); ++i) {
    const Ids& ids = texts[i];
    const Tensor p = softmax(model.forward(Tensor::from_vector<int64_t>(ids, {1, static_cast<int64_t>(ids.size())})));
    const std::vector<double> v = p.to_vector<double>();
    ASSERT_EQ(got[i].size(), 1u);
    const MaskPrediction& m = got[i][0];
    EXPECT_EQ(m.position, i == 0 ? 1 : 0);
    // Brute force: the symbols 5..10 by probability, descending.
    const double* row = v.data() + m.position * 11;
    Ids order = {5, 6, 7, 8, 9, 10};
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return row[a] > row[b]; });
    ASSERT_EQ(m.candidates.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(m.candidates[k].first, order[k]);
      EXPECT_NEAR(m.candidates[k].second, row[order[k]], 1e-9);  // batch padding changes nothing
    }
  }
  // top_k above the number of symbols lists every symbol once.
  EXPECT_EQ(fill_masks(f, {{4}}, 50)[0][0].candidates.size(), 6u);
  EXPECT_THROW(fill_masks(f, {{4}}, 0), Error);
}

TEST(FillMask, LearnedPositionsRejectLongerTexts) {
  TempDir tmp("attn_run_generate");
  models::ModelConfig c = tiny(models::Arch::EncoderOnly, 11);
  c.positional = nn::PositionalKind::Learned;
  c.max_len = 4;
  const ModelFolder f = open(tmp, "mlm", c, true);
  EXPECT_NO_THROW(fill_masks(f, {{4, 5, 6, 7}}, 1));
  const std::string msg = error_of([&] { fill_masks(f, {{4}, {4, 5, 6, 7, 8}}, 1); });
  EXPECT_NE(msg.find("text 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("max_len"), std::string::npos) << msg;
}

}  // namespace
}  // namespace attn::run
