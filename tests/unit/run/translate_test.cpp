// run/: tokenization with line-numbered errors, id parsing, padded batches, search settings,
// model folders, and the numbers behind score and eval: teacher-forced log-probabilities
// against a brute-force per-example pass, greedy log-probabilities against teacher forcing of
// the same output, and eval's accuracies.
#include "attn/run/evaluate.h"
#include "attn/run/model_folder.h"
#include "attn/run/token_codec.h"
#include "attn/run/translate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "attn/core/autograd.h"
#include "attn/models/factory.h"
#include "attn/train/tasks.h"
#include "unit/models/broken_checkpoints.h"
#include "support/error_of.h"

namespace attn::run {
namespace {

using models::test_util::TempDir;

// <pad> <bos> <eos> <unk> 0 1 2 3 4 5: the reverse task's vocabulary with six symbols.
io::Vocab digits() {
  train::TaskConfig t;
  t.n_symbols = 6;
  return train::task_vocab(t);
}

models::ModelConfig tiny(models::Arch arch = models::Arch::EncoderDecoder) {
  models::ModelConfig c;
  c.arch = arch;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_encoder_layers = 1;
  c.n_decoder_layers = 2;
  c.d_ff = 16;
  c.dropout = 0.2;  // open_model_folder must switch it off
  c.attention_dropout = 0.2;
  c.max_len = 64;
  c.src_vocab_size = 10;
  c.tgt_vocab_size = arch == models::Arch::EncoderDecoder ? 10 : 0;
  c.dtype = DType::F64;
  c.seed = 5;
  return c;
}

std::string save_folder(const TempDir& tmp, const std::string& name, const models::ModelConfig& c, bool vocab = true) {
  const std::string dir = tmp.file(name);
  models::ExtraFiles extra;
  if (vocab) extra.emplace_back("vocab.json", digits().to_json().dump());
  models::save_model(dir, *models::make_model(c), extra);
  return dir;
}

using attn::test::error_of;

// ---- lines and tokens ---------------------------------------------------------------------

TEST(ParseIds, ReadsSpaceSeparatedDecimalIds) {
  EXPECT_EQ(parse_ids("4 5\t 12  "), (std::vector<int64_t>{4, 5, 12}));
  EXPECT_TRUE(parse_ids("   ").empty());
  for (const char* bad : {"-1", "+3", "5x", "1.5", "99999999999999999999999"})
    EXPECT_THROW(parse_ids(std::string("4 ") + bad), Error) << bad;
}

TEST(SplitTokens, CharacterVocabularyWithoutASpaceIgnoresWhitespace) {
  const io::Vocab v = digits();
  EXPECT_EQ(split_tokens("3 1 4", v), (std::vector<std::string>{"3", "1", "4"}));
  EXPECT_EQ(split_tokens("314", v), (std::vector<std::string>{"3", "1", "4"}));
  // With a space token, spaces are tokens.
  const io::Vocab spaced({"a", " "}, io::Tokenization::Chars);
  EXPECT_EQ(split_tokens("a a", spaced), (std::vector<std::string>{"a", " ", "a"}));
  const io::Vocab words({"hello", "world"}, io::Tokenization::Whitespace);
  EXPECT_EQ(split_tokens(" hello  world ", words), (std::vector<std::string>{"hello", "world"}));
}

TEST(TokenCodec, ReadsTextThroughTheVocabulary) {
  const io::Vocab v = digits();
  TokenCodec c{&v, 10, 0, "translate"};
  EXPECT_EQ(c.read("3 1 4", 1, "source"), (std::vector<int64_t>{7, 5, 8}));
  EXPECT_EQ(c.write({8, 5, 7, 2}), "413");  // stops at EOS
  EXPECT_EQ(c.labels({1, 7, 2}), (std::vector<std::string>{"<bos>", "3", "<eos>"}));
}

TEST(TokenCodec, ErrorsNameTheLineTheSideAndTheToken) {
  const io::Vocab v = digits();
  TokenCodec c{&v, 10, 0, "translate"};
  std::string e = error_of([&] { c.read("3 x", 7, "target"); });
  for (const char* part : {"[translate]", "stdin line 7", "'x'", "target", "vocabulary"})
    EXPECT_NE(e.find(part), std::string::npos) << e;
  e = error_of([&] { c.read("  ", 2, "source"); });
  EXPECT_NE(e.find("stdin line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("empty"), std::string::npos) << e;
  e = error_of([&] { c.read("3\xff", 4, "source"); });  // invalid UTF-8
  EXPECT_NE(e.find("stdin line 4"), std::string::npos) << e;
  const io::Vocab words({"a"}, io::Tokenization::Whitespace);
  const TokenCodec w{&words, 5, 0, "translate"};
  e = error_of([&] { w.read("a <pad>", 1, "source"); });  // a vocabulary token, but PAD
  EXPECT_NE(e.find("padding"), std::string::npos) << e;
  c.source = "--src";
  e = error_of([&] { c.read("9", 0, "source"); });
  EXPECT_NE(e.find("--src: token '9'"), std::string::npos) << e;
}

TEST(TokenCodec, IdsModeChecksTheRange) {
  TokenCodec c{nullptr, 10, 0, "score"};
  EXPECT_EQ(c.read("4 9", 1, "source"), (std::vector<int64_t>{4, 9}));
  EXPECT_EQ(c.write({4, 9}), "4 9");
  std::string e = error_of([&] { c.read("4 10", 3, "target"); });
  for (const char* part : {"stdin line 3", "10", "out of range", "0..9"})
    EXPECT_NE(e.find(part), std::string::npos) << e;
  e = error_of([&] { c.read("4 four", 5, "source"); });
  EXPECT_NE(e.find("stdin line 5"), std::string::npos) << e;
  EXPECT_NE(e.find("'four'"), std::string::npos) << e;
  EXPECT_THROW(c.read("0 4", 1, "source"), Error);  // PAD
}

TEST(PadBatch, PadsToTheLongestSequence) {
  const Tensor t = pad_batch({{4, 5, 6}, {7}}, 0);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{4, 5, 6, 7, 0, 0}));
  EXPECT_THROW(pad_batch({{4}, {}}, 0), Error);
  EXPECT_THROW(pad_batch({}, 0), Error);
}

TEST(SearchSettings, InvalidSettingsAreErrors) {
  SearchSettings s;
  EXPECT_NO_THROW(validate(s));
  s.beam = 0;
  EXPECT_THROW(validate(s), Error);
  s = {};
  s.beam = 2;
  s.n_best = 3;
  EXPECT_THROW(validate(s), Error);
  s = {};
  s.alpha = -0.1;
  EXPECT_THROW(validate(s), Error);
  s = {};
  s.max_len = 0;
  EXPECT_THROW(validate(s), Error);
}

// ---- model folders and train_config.json --------------------------------------------------

TEST(OpenModelFolder, LoadsTheModelInEvaluationModeWithItsVocabulary) {
  TempDir tmp("attn_run_translate");
  const ModelFolder f = open_model_folder(save_folder(tmp, "m", tiny()), "translate", true);
  ASSERT_TRUE(f.model);
  EXPECT_FALSE(f.model->is_training());
  ASSERT_TRUE(f.vocab.has_value());
  EXPECT_EQ(f.vocab->size(), 10);
  EXPECT_EQ(f.pad, 0);
  EXPECT_EQ(f.bos, 1);
  EXPECT_EQ(f.eos, 2);
  EXPECT_TRUE(f.train_config.is_null());
}

TEST(OpenModelFolder, BadFoldersAreErrorsNamingThePath) {
  TempDir tmp("attn_run_translate");
  const std::string missing = tmp.file("missing");
  EXPECT_NE(error_of([&] { open_model_folder(missing, "translate", false); }).find(missing + "' does not exist"),
            std::string::npos);
  io::write_file_atomic(tmp.file("file"), "x");
  EXPECT_NE(error_of([&] { open_model_folder(tmp.file("file"), "translate", false); }).find("not a folder"),
            std::string::npos);
  std::filesystem::create_directories(tmp.file("empty"));
  EXPECT_NE(error_of([&] { open_model_folder(tmp.file("empty"), "translate", false); }).find("config.json"),
            std::string::npos);
  const std::string lm = save_folder(tmp, "lm", tiny(models::Arch::DecoderOnly));
  EXPECT_NE(error_of([&] { open_model_folder(lm, "score", false); }).find("decoder_only"), std::string::npos);
  const std::string no_vocab = save_folder(tmp, "nv", tiny(), false);
  EXPECT_NO_THROW(open_model_folder(no_vocab, "translate", false));
  EXPECT_NE(error_of([&] { open_model_folder(no_vocab, "translate", true); }).find("--ids"), std::string::npos);
  models::ModelConfig small = tiny();
  small.src_vocab_size = small.tgt_vocab_size = 8;  // smaller than vocab.json's 10 tokens
  const std::string mismatch = save_folder(tmp, "mm", small);
  EXPECT_NE(error_of([&] { open_model_folder(mismatch, "translate", false); }).find("does not belong"),
            std::string::npos);
}

// ---- the numbers --------------------------------------------------------------------------

TEST(TeacherForced, BatchedLogProbsEqualAPerExampleBruteForcePass) {
  TempDir tmp("attn_run_translate");
  const ModelFolder f = open_model_folder(save_folder(tmp, "m", tiny()), "score", false);
  const std::vector<std::vector<int64_t>> srcs = {{4, 5, 6, 7}, {8}, {9, 4}};
  const std::vector<std::vector<int64_t>> tgts = {{7, 6}, {8, 8, 8}, {}};
  const std::vector<ForcedScores> got = teacher_forced(f, srcs, tgts);
  ASSERT_EQ(got.size(), 3u);
  NoGradGuard no_grad;
  for (size_t b = 0; b < 3; ++b) {
    // One example alone, no padding: log_softmax of its logits, read at each target (then EOS).
    std::vector<int64_t> in{1};
    in.insert(in.end(), tgts[b].begin(), tgts[b].end());
    const Tensor logits = f.model->forward(pad_batch({srcs[b]}, 0), pad_batch({in}, 0));  // [1, T, V]
    const std::vector<double> l = logits.to_vector<double>();
    const int64_t V = logits.size(2);
    ASSERT_EQ(got[b].logprobs.size(), tgts[b].size() + 1);
    double total = 0;
    for (size_t i = 0; i <= tgts[b].size(); ++i) {
      const int64_t want = i < tgts[b].size() ? tgts[b][i] : 2;
      double mx = -INFINITY;
      int64_t arg = 0;
      for (int64_t v = 0; v < V; ++v)
        if (l[i * V + v] > mx) mx = l[i * V + v], arg = v;
      double z = 0;
      for (int64_t v = 0; v < V; ++v) z += std::exp(l[i * V + v] - mx);
      const double expected = l[i * V + want] - mx - std::log(z);
      EXPECT_NEAR(got[b].logprobs[i], expected, 1e-10) << "example " << b << " position " << i;
      EXPECT_EQ(got[b].argmax[i], arg);
      EXPECT_LE(got[b].logprobs[i], 0.0);
      total += expected;
    }
    EXPECT_NEAR(got[b].total(), total, 1e-10);
  }
}

TEST(SearchBatch, GreedyLogProbEqualsTeacherForcingOfItsOwnOutput) {
  TempDir tmp("attn_run_translate");
  const ModelFolder f = open_model_folder(save_folder(tmp, "m", tiny()), "translate", false);
  const std::vector<std::vector<int64_t>> srcs = {{4, 5, 6, 7}, {8, 9}, {5}};
  SearchSettings s;
  s.max_len = 6;
  const auto found = search_batch(f, srcs, s);
  ASSERT_EQ(found.size(), 3u);
  for (size_t b = 0; b < 3; ++b) {
    ASSERT_EQ(found[b].size(), 1u);
    const decode::Hypothesis& h = found[b][0];
    if (h.tokens.empty()) continue;  // EOS first: nothing to force
    const ForcedScores forced = teacher_forced(f, {srcs[b]}, {h.tokens}).front();
    double sum = 0;  // the output's tokens, plus EOS when it finished
    for (size_t i = 0; i < h.tokens.size() + (h.finished ? 1 : 0); ++i) sum += forced.logprobs[i];
    EXPECT_NEAR(h.logprob, sum, 1e-9) << "source " << b;
    for (size_t i = 0; i < h.tokens.size(); ++i) EXPECT_EQ(forced.argmax[i], h.tokens[i]);
  }
  // Beam search returns n_best hypotheses per source, best first.
  s.beam = 3;
  s.n_best = 2;
  const auto beams = search_batch(f, srcs, s);
  ASSERT_EQ(beams.size(), 3u);
  for (const auto& hs : beams) {
    ASSERT_EQ(hs.size(), 2u);
    EXPECT_GE(hs[0].score, hs[1].score);
  }
}

TEST(Evaluate, ScoresOutputsAgainstReferencesAndAveragesTheTeacherForcedLoss) {
  TempDir tmp("attn_run_translate");
  const ModelFolder f = open_model_folder(save_folder(tmp, "m", tiny()), "eval", false);
  const std::vector<std::vector<int64_t>> srcs = {{4, 5, 6}, {7, 8}, {9}};
  SearchSettings s;
  s.max_len = 4;
  const auto found = search_batch(f, srcs, s);
  // References equal to the model's own finished outputs are all right; a changed one is not.
  std::vector<io::Example> own, changed;
  for (size_t b = 0; b < 3; ++b) {
    own.push_back({srcs[b], found[b][0].tokens});
    std::vector<int64_t> other = found[b][0].tokens;
    other.push_back(other.empty() || other.back() != 4 ? 4 : 5);
    changed.push_back({srcs[b], other});
  }
  const EvalMetrics m_own = evaluate(f, own, 2, {});
  const EvalMetrics m_changed = evaluate(f, changed, 2, {});
  int64_t finished = 0, tokens = 0;
  double nll = 0;
  for (size_t b = 0; b < 3; ++b) {
    finished += found[b][0].finished ? 1 : 0;
    tokens += static_cast<int64_t>(own[b].tgt.size()) + 1;
    nll -= teacher_forced(f, {own[b].src}, {own[b].tgt}).front().total();
  }
  EXPECT_EQ(m_own.examples, 3);
  EXPECT_EQ(m_own.tokens, tokens);
  EXPECT_NEAR(m_own.loss, nll / static_cast<double>(tokens), 1e-10);
  EXPECT_NEAR(m_own.perplexity, std::exp(m_own.loss), 1e-10);
  EXPECT_DOUBLE_EQ(m_own.exact_acc, static_cast<double>(finished) / 3.0);
  EXPECT_DOUBLE_EQ(m_changed.exact_acc, 0.0);
  EXPECT_LT(m_changed.token_acc, 1.0);
  EXPECT_THROW(evaluate(f, {}, 2, {}), Error);
  EXPECT_THROW(evaluate(f, own, 0, {}), Error);
}

}  // namespace
}  // namespace attn::run
