// `attn train --arch decoder-only --pack N` and `attn generate --ids` end to end (ATTN_BINARY
// through the shell, in a temporary folder): a tiny GPT-style model trains on a text packed into
// blocks whose boundaries fall inside lines, the command reports the block counts and the model
// continues a prompt; `generate --ids` reads and writes token ids, and its output decodes through
// vocab.json to the text output of the same prompt; bad ids and invalid --pack settings exit
// non-zero with a message naming the problem.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "attn/io/atomic_file.h"
#include "attn/io/metrics_log.h"
#include "attn/io/vocab.h"
#include "support/cli_run.h"
#include "unit/models/broken_checkpoints.h"

namespace attn::cli {
namespace {

namespace fs = std::filesystem;
using models::test_util::TempDir;
using test::expect_clean_failure;
using test::Outcome;
using test::run_attn;

// Lines of 8 letters following a..p cyclically ("abcdefgh", "bcdefghi", ...), `copies` times.
std::string alphabet_text(int copies) {
  const std::string letters = "abcdefghijklmnop";
  std::string text;
  for (int c = 0; c < copies; ++c)
    for (size_t start = 0; start < letters.size(); ++start) {
      for (size_t k = 0; k < 8; ++k) text += letters[(start + k) % letters.size()];
      text += "\n";
    }
  return text;
}

// 64 training lines of 8 letters + <eos> = 576 ids; --pack 13 makes blocks of 12 ids, so block
// boundaries fall inside lines: 48 blocks. Validation: 16 lines = 144 ids = 12 blocks.
const std::string kTrain =
    "train --arch decoder-only --text train.txt --valid-text valid.txt --out lm --pack 13 --layers 2 --epochs 12 "
    "--samples 0 --d-model 32 --heads 2 --d-ff 64 --batch-size 8 --schedule constant --lr 0.01 --warmup 10 "
    "--label-smoothing 0 --threads 1";

class LmPackCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    run_ = new TempDir("attn_lm_pack_run");
    io::write_file_atomic(run_->file("train.txt"), alphabet_text(4));
    io::write_file_atomic(run_->file("valid.txt"), alphabet_text(1));
    train_ = new Outcome(run_attn(*run_, kTrain));
  }
  static void TearDownTestSuite() {
    delete train_;
    delete run_;
    train_ = nullptr;
    run_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(fs::exists(ATTN_BINARY)) << "build the attn executable first: " << ATTN_BINARY;
    ASSERT_EQ(train_->exit_code, 0) << train_->err << train_->out;
  }
  // The trained folder, as an argument.
  static std::string model() { return "--model '" + run_->file("lm") + "'"; }
  static io::Vocab vocab() {
    return io::Vocab::from_json(nlohmann::json::parse(io::read_file(run_->file("lm/vocab.json"))));
  }

  static TempDir* run_;
  static Outcome* train_;
  TempDir tmp_{"attn_lm_pack"};
};
TempDir* LmPackCli::run_ = nullptr;
Outcome* LmPackCli::train_ = nullptr;

TEST_F(LmPackCli, PackedRunReportsItsBlocksTrainsAndGenerates) {
  EXPECT_NE(train_->err.find("48 training / 12 validation blocks"), std::string::npos) << train_->err;
  EXPECT_NE(train_->err.find("packed: 48 training / 12 validation blocks of 13 tokens"), std::string::npos)
      << train_->err;
  const auto metrics = io::read_metrics_log(run_->file("lm/metrics.jsonl"), "test").records;
  ASSERT_EQ(metrics.size(), 12u);
  EXPECT_LT(metrics.back()["loss"].get<double>(), 0.5 * metrics.front()["loss"].get<double>());
  EXPECT_LT(metrics.back()["val_ppl"].get<double>(), metrics.front()["val_ppl"].get<double>());
  const nlohmann::json config = nlohmann::json::parse(io::read_file(run_->file("lm/train_config.json")));
  EXPECT_EQ(config["pack"], 13);

  // The letter after d is e in 7 of the 8 places d appears.
  const Outcome g = run_attn(tmp_, "generate " + model() + " --prompt abcd --max-tokens 3");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  ASSERT_FALSE(g.out.empty());
  EXPECT_EQ(g.out[0], 'e') << g.out;
}

TEST_F(LmPackCli, GenerateIdsOutputDecodesToTheTextOutput) {
  const io::Vocab v = vocab();
  std::string prompt_ids;
  for (char ch : std::string("cdef")) prompt_ids += (prompt_ids.empty() ? "" : " ") + std::to_string(v.id(std::string(1, ch)));
  const std::string opts = " --max-tokens 6 --beam 2";
  const Outcome text = run_attn(tmp_, "generate " + model() + opts, "cdef\nhij\n");
  const std::string hij = std::to_string(v.id("h")) + " " + std::to_string(v.id("i")) + " " + std::to_string(v.id("j"));
  const Outcome ids = run_attn(tmp_, "generate --ids " + model() + opts, prompt_ids + "\n" + hij + "\n");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  std::istringstream lines(ids.out);
  std::string decoded, line;
  while (std::getline(lines, line)) {
    std::vector<int64_t> out;
    std::istringstream tokens(line);
    for (int64_t id; tokens >> id;) out.push_back(id);
    decoded += v.decode(out) + "\n";
  }
  EXPECT_EQ(decoded, text.out) << ids.out;
  EXPECT_EQ(std::count(ids.out.begin(), ids.out.end(), '\n'), 2);

  // --with-prompt prints the prompt's ids before the continuation's.
  const Outcome with = run_attn(tmp_, "generate --ids --with-prompt " + model() + opts, hij + "\n");
  ASSERT_EQ(with.exit_code, 0) << with.err;
  const std::string second = ids.out.substr(ids.out.find('\n') + 1);
  EXPECT_EQ(with.out, hij + (second == "\n" ? "" : " ") + second);
}

TEST_F(LmPackCli, BadIdsAreErrorsNamingTheLine) {
  const std::string g = "generate --ids " + model();
  const int64_t size = vocab().size();
  expect_clean_failure(run_attn(tmp_, g, "5 6\n" + std::to_string(size) + "\n"), "line 2");
  expect_clean_failure(run_attn(tmp_, g, std::to_string(size + 3) + "\n"), "out of range");
  expect_clean_failure(run_attn(tmp_, g, "5 x 6\n"), "not a token id");
  expect_clean_failure(run_attn(tmp_, g, "5 -1\n"), "not a token id");
  expect_clean_failure(run_attn(tmp_, g, "5 0 6\n"), "padding token");
  expect_clean_failure(run_attn(tmp_, g, "5 6\n\n"), "line 2: the prompt is empty");
  expect_clean_failure(run_attn(tmp_, g + " --prompt a"), "not a token id");
}

TEST_F(LmPackCli, InvalidPackSettingsAreErrors) {
  io::write_file_atomic(tmp_.file("t.txt"), "abc\n");
  const std::string base = "train --text t.txt --out x --epochs 1 --d-model 16 --heads 2 --d-ff 16 --layers 1 ";
  expect_clean_failure(run_attn(tmp_, base + "--arch decoder-only --pack 1"), "pack must be");
  expect_clean_failure(run_attn(tmp_, base + "--arch encoder-only --pack 8"), "decoder_only");
  expect_clean_failure(run_attn(tmp_, base + "--arch decoder-only --pack 8 --stream"), "stream");
  expect_clean_failure(run_attn(tmp_, base + "--arch decoder-only --pack 8 --positional learned --max-len 4"),
                       "learned positions");
}

}  // namespace
}  // namespace attn::cli
