// attn translate / score / eval / inspect run as the user runs them (ATTN_BINARY through the
// shell) on a run folder that train::Trainer writes in about a second (reverse 5 symbols of 6,
// D=32, 1+1 layers): one output line per input, --ids round trips, beam and n-best output,
// scores that agree with the decoder's own log-probabilities, eval reproducing the run's own
// validation metrics, the figures and report.html with an anti-diagonal cross-attention, and
// every bad input of the issue as a non-zero exit with a message.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "attn/io/atomic_file.h"
#include "attn/models/checkpoint.h"
#include "attn/models/factory.h"
#include "attn/train/tasks.h"
#include "attn/train/trainer.h"
#include "attn/io/vocab.h"
#include "support/cli_run.h"
#include "unit/models/broken_checkpoints.h"

namespace attn::cli {
namespace {

namespace fs = std::filesystem;
using models::test_util::TempDir;
using Result = test::Outcome;
using test::run_attn;

// A failure the program reported itself (not a crash), with the given parts in its message.
void expect_error(const Result& r, const std::vector<std::string>& parts) {
  EXPECT_GE(r.exit_code, 1) << r.out << r.err;
  EXPECT_LE(r.exit_code, 125) << "killed by a signal or not run: " << r.exit_code << "\n" << r.err;
  EXPECT_NE(r.err.find("error"), std::string::npos) << r.err;
  for (const std::string& p : parts)
    EXPECT_NE(r.err.find(p), std::string::npos) << "missing '" << p << "' in: " << r.err;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

// The run's task: reverse 5 symbols drawn from 0..5; vocabulary <pad> <bos> <eos> <unk> 0..5.
train::TaskConfig run_task() {
  train::TaskConfig t;
  t.kind = train::TaskKind::Reverse;
  t.length = 5;
  t.n_symbols = 6;
  return t;
}

// A run folder as `attn train` leaves it, trained until it reverses (constant rate, no
// dropout or smoothing, one thread: the same folder on every run of one build). 8 epochs: at 5
// its validation token accuracy was 0.896 on one path of the float products, over 0.9 on another.
void train_run_folder(const std::string& dir) {
  train::TrainConfig c;
  c.task = "reverse";
  c.length = 5;
  c.symbols = 6;
  c.train_size = 1000;
  c.valid_size = 32;
  c.model.d_model = 32;
  c.model.n_heads = 2;
  c.model.n_encoder_layers = 1;
  c.model.n_decoder_layers = 1;
  c.model.d_ff = 64;
  c.model.dropout = 0.0;
  c.model.attention_dropout = 0.0;
  c.epochs = 8;
  c.batch_size = 32;
  c.schedule = train::ScheduleKind::Constant;
  c.lr = 0.01;
  c.warmup = 20;
  c.label_smoothing = 0.0;
  c.keep = 1;
  c.threads = 1;
  train::Trainer trainer(c, dir);
  trainer.run();
}

// An untrained decoder-only model folder (translate must refuse it).
void make_decoder_only_folder(const std::string& dir) {
  models::ModelConfig c;
  c.arch = models::Arch::DecoderOnly;
  c.d_model = 16;
  c.n_heads = 2;
  c.n_decoder_layers = 1;
  c.d_ff = 32;
  c.src_vocab_size = 10;
  c.tgt_vocab_size = 0;
  models::save_model(dir, *models::make_model(c), {{"vocab.json", train::task_vocab(run_task()).to_json().dump()}});
}

class InferCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    trained_ = new TempDir("attn_infer_run");
    train_run_folder(trained_->file("run"));
  }
  static void TearDownTestSuite() {
    delete trained_;
    trained_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(fs::exists(ATTN_BINARY)) << "build the attn executable first: " << ATTN_BINARY;
    model_ = tmp_.file("run");  // each test gets its own copy, free to change
    fs::copy(trained_->file("run"), model_, fs::copy_options::recursive);
  }
  std::string m() const { return "--model '" + model_ + "'"; }

  static TempDir* trained_;
  TempDir tmp_{"attn_infer"};
  std::string model_;
};
TempDir* InferCli::trained_ = nullptr;

const char* kSources = "3 1 4 0 2\n01234\n5 5 0 1 3\n";

TEST_F(InferCli, TranslateGreedyPrintsOneLinePerInputAndTheTrainedModelReverses) {
  const Result r = run_attn(tmp_, "translate " + m(), kSources);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  // Characters in, characters out: the run's validation exact accuracy is about 97%.
  const std::vector<std::string> reversed = {"20413", "43210", "31055"};
  int right = 0;
  for (size_t i = 0; i < 3; ++i) right += lines[i] == reversed[i] ? 1 : 0;
  EXPECT_GE(right, 2) << r.out;
  for (const std::string& l : lines)
    for (char c : l) EXPECT_TRUE(c >= '0' && c <= '5') << l;
  // Deterministic: the same input gives the same bytes.
  EXPECT_EQ(run_attn(tmp_, "translate " + m(), kSources).out, r.out);
}

TEST_F(InferCli, TranslateOutputDoesNotDependOnTheBatchSize) {
  const Result a = run_attn(tmp_, "translate --batch-size 1 " + m(), kSources);
  const Result b = run_attn(tmp_, "translate --batch-size 32 " + m(), kSources);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
}

TEST_F(InferCli, TranslateBeamPrintsOneLinePerInputAndNBestPrintsRankedLines) {
  const Result r = run_attn(tmp_, "translate --beam 4 --alpha 0.6 " + m(), kSources);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines_of(r.out).size(), 3u) << r.out;

  const Result n = run_attn(tmp_, "translate --beam 4 --n-best 3 " + m(), kSources);
  ASSERT_EQ(n.exit_code, 0) << n.err;
  const auto lines = lines_of(n.out);
  ASSERT_EQ(lines.size(), 9u) << n.out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto f = split(lines[i], '\t');
    ASSERT_EQ(f.size(), 4u) << lines[i];
    EXPECT_EQ(f[0], std::to_string(i / 3 + 1));
    EXPECT_EQ(f[1], std::to_string(i % 3 + 1));
    EXPECT_TRUE(std::isfinite(std::stod(f[2])));
  }
  // The best of the n-best list is the 1-best translation.
  const auto best = lines_of(r.out);
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(split(lines[3 * k], '\t')[3], best[k]);
}

TEST_F(InferCli, IdsRoundTripMatchesTextMode) {
  const io::Vocab vocab = train::task_vocab(run_task());
  const Result text = run_attn(tmp_, "translate " + m(), kSources);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  std::string id_input;
  for (const std::string& l : lines_of(kSources)) {
    std::string row;
    for (char c : l)
      if (c != ' ') row += (row.empty() ? "" : " ") + std::to_string(vocab.id(std::string(1, c)));
    id_input += row + "\n";
  }
  const Result ids = run_attn(tmp_, "translate --ids " + m(), id_input);
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  const auto text_lines = lines_of(text.out), id_lines = lines_of(ids.out);
  ASSERT_EQ(id_lines.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    std::vector<int64_t> out;
    std::istringstream in(id_lines[i]);
    for (int64_t v; in >> v;) {
      EXPECT_GE(v, 0);
      EXPECT_LT(v, vocab.size());
      out.push_back(v);
    }
    EXPECT_EQ(vocab.decode(out), text_lines[i]) << id_lines[i];
  }
}

TEST_F(InferCli, ScorePrintsAFiniteNonPositiveLogProbPerLineAndPerTokenSumsToIt) {
  const std::string input = "3 1 4 0\t0 4 1 3\n12\t21\n5\t555\n";
  const Result r = run_attn(tmp_, "score " + m(), input);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto totals = lines_of(r.out);
  ASSERT_EQ(totals.size(), 3u) << r.out;
  const Result p = run_attn(tmp_, "score --per-token " + m(), input);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto rows = lines_of(p.out);
  ASSERT_EQ(rows.size(), 3u);
  const size_t n_tokens[] = {5, 3, 4};  // target tokens + EOS
  for (size_t i = 0; i < 3; ++i) {
    const double total = std::stod(totals[i]);
    EXPECT_TRUE(std::isfinite(total));
    EXPECT_LE(total, 0.0);
    const auto f = split(rows[i], '\t');
    ASSERT_EQ(f.size(), 2u) << rows[i];
    EXPECT_EQ(std::stod(f[0]), total);
    const auto per = split(f[1], ' ');
    ASSERT_EQ(per.size(), n_tokens[i]) << rows[i];
    double sum = 0;
    for (const std::string& v : per) {
      EXPECT_LE(std::stod(v), 0.0);
      sum += std::stod(v);
    }
    EXPECT_NEAR(sum, total, 1e-5 * static_cast<double>(per.size()));
  }
}

TEST_F(InferCli, ScoreOfTheGreedyOutputEqualsTheGreedyLogProb) {
  // Teacher forcing over the whole output and step-by-step decoding must agree.
  // Greedy decoding feeds the decoder one token at a time; score feeds the whole output at once.
  const Result t = run_attn(tmp_, "translate --scores " + m(), kSources);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const auto sources = lines_of(kSources), outputs = lines_of(t.out);
  ASSERT_EQ(outputs.size(), 3u) << t.out;
  std::string pairs;
  for (size_t i = 0; i < 3; ++i) {
    const auto f = split(outputs[i], '\t');
    ASSERT_EQ(f.size(), 2u) << outputs[i];
    ASSERT_FALSE(f[1].empty()) << "an empty translation cannot be scored as a target: " << t.out;
    pairs += sources[i] + "\t" + f[1] + "\n";
  }
  const Result s = run_attn(tmp_, "score " + m(), pairs);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const auto scores = lines_of(s.out);
  ASSERT_EQ(scores.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(std::stod(scores[i]), std::stod(split(outputs[i], '\t')[0]), 1e-4);
}

TEST_F(InferCli, ScoreReadsIdsWithIds) {
  const Result text = run_attn(tmp_, "score " + m(), "35\t53\n");
  const Result ids = run_attn(tmp_, "score --ids " + m(), "7 9\t9 7\n");  // '3' = 4 + 3, '5' = 4 + 5
  ASSERT_EQ(text.exit_code, 0) << text.err;
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  EXPECT_EQ(text.out, ids.out);
}

TEST_F(InferCli, EvalPrintsLossAccuracyAndExactMatch) {
  const Result r = run_attn(tmp_, "eval --task reverse --count 20 " + m());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* key : {"loss:", "token_acc:", "exact_acc:", "examples:         20"})
    EXPECT_NE(r.out.find(key), std::string::npos) << r.out;

  const Result j = run_attn(tmp_, "eval --count 20 --json " + m());  // the run's own task
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json metrics = nlohmann::json::parse(j.out);
  EXPECT_EQ(metrics["examples"], 20);
  EXPECT_EQ(metrics["tokens"], 20 * 6);
  EXPECT_GT(metrics["loss"].get<double>(), 0.0);
  for (const char* k : {"token_acc", "exact_acc", "forced_token_acc"}) {
    EXPECT_GE(metrics[k].get<double>(), 0.0);
    EXPECT_LE(metrics[k].get<double>(), 1.0);
  }
}

TEST_F(InferCli, EvalOnTheRunsValidationSetReproducesItsLastEpochMetrics) {
  const std::vector<std::string> records = lines_of(io::read_file(model_ + "/metrics.jsonl"));
  ASSERT_FALSE(records.empty());
  const nlohmann::json last = nlohmann::json::parse(records.back());
  const Result j = run_attn(tmp_, "eval --count 32 --json " + m());  // valid_size of the run
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json metrics = nlohmann::json::parse(j.out);
  EXPECT_EQ(metrics["token_acc"].get<double>(), last["val_token_acc"].get<double>());
  EXPECT_EQ(metrics["exact_acc"].get<double>(), last["val_exact_acc"].get<double>());
  EXPECT_NEAR(metrics["loss"].get<double>(), last["val_nll"].get<double>(), 1e-4);
  EXPECT_GT(metrics["token_acc"].get<double>(), 0.9);
}

TEST_F(InferCli, EvalOnADataFileHasTheLossThatScoreImplies) {
  const std::string pairs = "3 1 4 0\t0 4 1 3\n12\t21\n\n5\t555\n";
  io::write_file_atomic(tmp_.file("pairs.tsv"), pairs);
  const Result e = run_attn(tmp_, "eval --json --data '" + tmp_.file("pairs.tsv") + "' " + m());
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const nlohmann::json metrics = nlohmann::json::parse(e.out);
  EXPECT_EQ(metrics["examples"], 3);
  EXPECT_EQ(metrics["tokens"], 5 + 3 + 4);
  const Result s = run_attn(tmp_, "score " + m(), "3 1 4 0\t0 4 1 3\n12\t21\n5\t555\n");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  double nll = 0;
  for (const std::string& l : lines_of(s.out)) nll -= std::stod(l);
  EXPECT_NEAR(metrics["loss"].get<double>(), nll / 12.0, 1e-5);
}

TEST_F(InferCli, InspectWritesTheFiguresAndReportAndPrintsTheAntiDiagonalScore) {
  const std::string out = tmp_.file("inspect");
  const Result r = run_attn(tmp_, "inspect " + m() + " --src '3 1 4 0 2' --out '" + out + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The trained model reads source N-1-i while writing target i: far above uniform (1/5).
  const size_t at = r.out.find("anti-diagonal score, decoder layer 1 (head average): ");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_GT(std::stod(r.out.substr(r.out.find(": ", at) + 2)), 0.5) << r.out;
  for (const char* f :
       {"01_training_curve.svg", "02_positional_encoding.svg", "03_causal_mask.svg", "04_attention_example.svg",
        "05_cross_attention_grid.svg", "06_encoder_self_attention_grid.svg", "architecture.svg", "multi_head.svg"}) {
    const std::string path = out + "/figures/" + f;
    ASSERT_TRUE(fs::exists(path)) << path << "\n" << r.out;
    const std::string svg = io::read_file(path);
    EXPECT_EQ(svg.rfind("<svg", 0), 0u) << path;
    EXPECT_NE(svg.find("</svg>"), std::string::npos) << path;
  }
  const std::string html = io::read_file(out + "/report.html");
  for (const char* part : {"<!DOCTYPE html>", "Configuration", "Metrics", "val_token_acc", "Anti-diagonal score",
                           "Sample translations", "figures/04_attention_example.svg", "model.d_model", "train.task",
                           "figures/architecture.svg", "figures/multi_head.svg"})
    EXPECT_NE(html.find(part), std::string::npos) << part;
  // Seed 001's figures 1 and 4 carry this model's numbers (the test model's config) and the
  // example's length (5 source tokens).
  const std::string arch_svg = io::read_file(out + "/figures/architecture.svg");
  const std::string heads_svg = io::read_file(out + "/figures/multi_head.svg");
  const nlohmann::json mc = nlohmann::json::parse(io::read_file(model_ + "/config.json"));
  const int64_t D = mc["d_model"].get<int64_t>(), H = mc["n_heads"].get<int64_t>();
  EXPECT_NE(arch_svg.find(str_cat("D = ", D, ", ", H, " heads, d_ff = ", mc["d_ff"].get<int64_t>())), std::string::npos)
      << arch_svg.substr(0, 600);
  EXPECT_NE(arch_svg.find(str_cat(mc["n_encoder_layers"].get<int64_t>(), " encoder + ",
                                  mc["n_decoder_layers"].get<int64_t>(), " decoder layers")),
            std::string::npos);
  EXPECT_NE(heads_svg.find(str_cat("T = 5, D = ", D, ", H = ", H)), std::string::npos) << heads_svg.substr(0, 600);
  // Token labels of the example on the attention figure's axes.
  const std::string attn_svg = io::read_file(out + "/figures/04_attention_example.svg");
  EXPECT_NE(attn_svg.find(">4</text>"), std::string::npos);
  EXPECT_NE(attn_svg.find("&lt;eos&gt;"), std::string::npos);
  // Nothing written into the model folder; the same input gives the same bytes.
  EXPECT_FALSE(fs::exists(model_ + "/report.html"));
  const Result again = run_attn(tmp_, "inspect " + m() + " --src '3 1 4 0 2' --out '" + tmp_.file("again") + "'");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(io::read_file(tmp_.file("again") + "/report.html"), html);
}

TEST_F(InferCli, InspectWithoutSrcUsesTheRunsValidationExampleAndWritesIntoTheRunFolder) {
  const Result r = run_attn(tmp_, "inspect " + m());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(model_ + "/report.html"));
  EXPECT_TRUE(fs::exists(model_ + "/figures/05_cross_attention_grid.svg"));
  EXPECT_NE(r.out.find("mean over validation examples"), std::string::npos) << r.out;
}

// ---- bad input --------------------------------------------------------------------------

TEST_F(InferCli, MissingModelFolderIsAnErrorNamingIt) {
  const std::string missing = tmp_.file("no_such_model");
  for (const std::string cmd : {"translate", "score", "eval --task reverse", "inspect --src 123"})
    expect_error(run_attn(tmp_, cmd + " --model '" + missing + "'", "1\t1\n"), {missing, "does not exist"});
}

TEST_F(InferCli, UnknownTokenIsAnErrorNamingTokenAndLine) {
  const Result r = run_attn(tmp_, "translate " + m(), "123\n12x4\n");
  expect_error(r, {"line 2", "'x'", "vocabulary"});
  EXPECT_EQ(lines_of(r.out).size(), 1u) << "the line before the bad one is still translated: " << r.out;
  expect_error(run_attn(tmp_, "score " + m(), "12\t21\n3\t3q\n"), {"line 2", "'q'", "target"});
  expect_error(run_attn(tmp_, "inspect " + m() + " --src '1 2 z'"), {"--src", "'z'"});
}

TEST_F(InferCli, EmptyLineIsAnErrorNamingTheLine) {
  expect_error(run_attn(tmp_, "translate " + m(), "123\n\n45\n"), {"line 2", "empty"});
  expect_error(run_attn(tmp_, "translate " + m(), "123\n  \n"), {"line 2", "empty"});
  expect_error(run_attn(tmp_, "score " + m(), "1\t1\n\n"), {"line 2", "empty"});
  expect_error(run_attn(tmp_, "score " + m(), "1\t\n"), {"line 1", "target", "empty"});
}

TEST_F(InferCli, OutOfRangeOrMalformedIdIsAnError) {
  expect_error(run_attn(tmp_, "translate --ids " + m(), "4 5\n4 10\n"), {"line 2", "10", "out of range"});
  expect_error(run_attn(tmp_, "translate --ids " + m(), "4 -1\n"), {"line 1", "'-1'"});
  expect_error(run_attn(tmp_, "translate --ids " + m(), "4 five\n"), {"line 1", "'five'"});
  expect_error(run_attn(tmp_, "translate --ids " + m(), "0 4\n"), {"line 1", "padding"});
  expect_error(run_attn(tmp_, "score --ids " + m(), "4\t99\n"), {"line 1", "99", "out of range"});
}

TEST_F(InferCli, MalformedScoreLineIsAnError) {
  expect_error(run_attn(tmp_, "score " + m(), "123\n"), {"line 1", "tab"});
  expect_error(run_attn(tmp_, "score " + m(), "1\t2\t3\n"), {"line 1", "more than one tab"});
}

TEST_F(InferCli, BadOptionsAndFoldersAreErrors) {
  expect_error(run_attn(tmp_, "translate --beam 2 --n-best 3 " + m(), "1\n"), {"--n-best"});
  expect_error(run_attn(tmp_, "eval --task shuffle " + m()), {"shuffle"});
  expect_error(run_attn(tmp_, "eval --data '" + tmp_.file("none.tsv") + "' " + m()), {"none.tsv"});
  // Text needs vocab.json; a decoder-only model cannot translate.
  fs::remove(model_ + "/vocab.json");
  expect_error(run_attn(tmp_, "translate " + m(), "1\n"), {"vocab.json", "--ids"});
  EXPECT_EQ(run_attn(tmp_, "translate --ids " + m(), "4 5\n").exit_code, 0);
  const std::string lm = tmp_.file("lm");
  make_decoder_only_folder(lm);
  expect_error(run_attn(tmp_, "translate --model '" + lm + "'", "1\n"), {"decoder_only", "encoder_decoder"});
}

}  // namespace
}  // namespace attn::cli
