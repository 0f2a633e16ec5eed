// Speculative decoding on the command line (ATTN_BINARY through the shell): `attn generate
// --draft DIR [--draft-tokens K]`, `--prompt-lookup` and `--draft-stats` print the same
// continuations as plain greedy generation for a tiny trained language model with a smaller
// draft trained on the same text, and with itself as the draft (every draft token accepted);
// sampling with a draft runs; `attn translate --draft DIR` and `--prompt-lookup` print plain
// greedy's translations for a reverse model with a smaller draft. Bad input exits non-zero with
// a message: a draft of another vocabulary (naming both sizes) or family, --beam with a draft,
// --draft-tokens 0 or without a draft, --draft with --prompt-lookup.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "attn/io/atomic_file.h"
#include "attn/train/trainer.h"
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
std::string alphabet_text(int copies, const std::string& letters = "abcdefghijklmnop") {
  std::string text;
  for (int c = 0; c < copies; ++c)
    for (size_t start = 0; start < letters.size(); ++start) {
      for (size_t k = 0; k < 8; ++k) text += letters[(start + k) % letters.size()];
      text += "\n";
    }
  return text;
}

const std::string kSmall =
    "--heads 2 --batch-size 16 --schedule constant --lr 0.01 --warmup 10 --label-smoothing 0 --threads 1 "
    "--dropout 0 --attention-dropout 0";

// Reverse 5 symbols of 6 at width d with 1+1 layers (one thread: the same folder every run).
void train_reverse(const std::string& dir, int64_t d) {
  train::TrainConfig c;
  c.task = "reverse";
  c.length = 5;
  c.symbols = 6;
  c.train_size = 1000;
  c.valid_size = 32;
  c.model.d_model = d;
  c.model.n_heads = 2;
  c.model.n_encoder_layers = 1;
  c.model.n_decoder_layers = 1;
  c.model.d_ff = 2 * d;
  c.model.dropout = 0.0;
  c.model.attention_dropout = 0.0;
  c.epochs = 5;
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

class SpeculativeCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    trained_ = new TempDir("attn_speculative_models");
    const TempDir& t = *trained_;
    io::write_file_atomic(t.file("train.txt"), alphabet_text(4));
    io::write_file_atomic(t.file("other.txt"), alphabet_text(4, "abcdefgh"));
    const Outcome lm = run_attn(t, "train --arch decoder-only --text train.txt --out lm --layers 2 --d-model 32 "
                                   "--d-ff 64 --epochs 20 --samples 0 " + kSmall);
    ASSERT_EQ(lm.exit_code, 0) << lm.err;
    const Outcome draft = run_attn(t, "train --arch decoder-only --text train.txt --out draft --layers 1 "
                                      "--d-model 16 --d-ff 32 --epochs 10 --samples 0 " + kSmall);
    ASSERT_EQ(draft.exit_code, 0) << draft.err;
    const Outcome other = run_attn(t, "train --arch decoder-only --text other.txt --out other --layers 1 "
                                      "--d-model 16 --d-ff 32 --epochs 1 --samples 0 " + kSmall);
    ASSERT_EQ(other.exit_code, 0) << other.err;
    train_reverse(t.file("mt"), 32);
    train_reverse(t.file("mt_draft"), 16);
  }
  static void TearDownTestSuite() {
    delete trained_;
    trained_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(fs::exists(ATTN_BINARY)) << "build the attn executable first: " << ATTN_BINARY; }
  static const TempDir& models() { return *trained_; }
  static TempDir* trained_;
};
TempDir* SpeculativeCli::trained_ = nullptr;

const std::string kPrompts = "--prompt abcd --prompt jklm --prompt nopab --prompt hhh --max-tokens 20";

TEST_F(SpeculativeCli, GenerateWithADraftPrintsGreedysContinuations) {
  const Outcome plain = run_attn(models(), "generate --model lm " + kPrompts);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.rfind("efgh\n", 0), 0u) << plain.out;  // it learned the text
  for (const std::string flags : {"--draft draft", "--draft draft --draft-tokens 1", "--draft draft --draft-tokens 8",
                                  "--draft lm --draft-tokens 3", "--prompt-lookup", "--prompt-lookup --draft-tokens 6",
                                  "--draft draft --batch-size 1"}) {
    const Outcome r = run_attn(models(), "generate --model lm " + kPrompts + " --draft-stats " + flags);
    ASSERT_EQ(r.exit_code, 0) << flags << "\n" << r.err;
    EXPECT_EQ(r.out, plain.out) << flags;
    EXPECT_NE(r.err.find("speculative: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("target passes"), std::string::npos) << r.err;
  }
  // The model as its own draft accepts every draft token.
  const Outcome self = run_attn(models(), "generate --model lm --prompt abcd --draft lm --draft-stats");
  ASSERT_EQ(self.exit_code, 0) << self.err;
  EXPECT_NE(self.err.find("(100.0%)"), std::string::npos) << self.err;
  // Without --draft-stats nothing is printed on stderr.
  const Outcome quiet = run_attn(models(), "generate --model lm --prompt abcd --draft draft");
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err.find("speculative: "), std::string::npos) << quiet.err;
}

TEST_F(SpeculativeCli, GenerateSamplesWithADraft) {
  for (const std::string flags : {"--draft draft", "--prompt-lookup"}) {
    const Outcome r = run_attn(models(), "generate --model lm " + kPrompts + " --temperature 0.8 --top-k 5 --seed 4 " +
                                             flags);
    ASSERT_EQ(r.exit_code, 0) << flags << "\n" << r.err;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 4) << r.out;
    // Seeded: the same command prints the same samples.
    const Outcome again = run_attn(models(), "generate --model lm " + kPrompts +
                                                 " --temperature 0.8 --top-k 5 --seed 4 " + flags);
    EXPECT_EQ(again.out, r.out);
  }
}

TEST_F(SpeculativeCli, TranslateWithADraftPrintsGreedysTranslations) {
  const std::string input = "0 1 2 3 4\n5 4 3 2 1\n2 2 5 0 1\n3 1 4 1 5\n";
  const Outcome plain = run_attn(models(), "translate --model mt", input);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  for (const std::string flags : {"--draft mt_draft", "--draft mt_draft --draft-tokens 2", "--draft mt",
                                  "--prompt-lookup", "--draft mt_draft --batch-size 1"}) {
    const Outcome r = run_attn(models(), "translate --model mt --draft-stats " + flags, input);
    ASSERT_EQ(r.exit_code, 0) << flags << "\n" << r.err;
    EXPECT_EQ(r.out, plain.out) << flags;
    EXPECT_NE(r.err.find("speculative: "), std::string::npos) << r.err;
  }
}

TEST_F(SpeculativeCli, BadDraftsAndFlagsAreErrors) {
  const std::string g = "generate --model lm --prompt abcd ";
  // Another vocabulary: both sizes named.
  const Outcome other = run_attn(models(), g + "--draft other");
  expect_clean_failure(other, "vocabulary");
  EXPECT_NE(other.err.find("other"), std::string::npos) << other.err;
  // Another family, in both directions.
  expect_clean_failure(run_attn(models(), g + "--draft mt"), "mt");
  expect_clean_failure(run_attn(models(), "translate --model mt --draft lm", "0 1 2\n"), "lm");
  expect_clean_failure(run_attn(models(), g + "--draft missing"), "missing");
  expect_clean_failure(run_attn(models(), g + "--draft draft --beam 4"), "--beam");
  expect_clean_failure(run_attn(models(), "translate --model mt --draft mt_draft --beam 4", "0 1 2\n"), "--beam");
  expect_clean_failure(run_attn(models(), g + "--draft draft --draft-tokens 0"), "--draft-tokens");
  expect_clean_failure(run_attn(models(), g + "--draft-tokens 3"), "--draft-tokens");
  expect_clean_failure(run_attn(models(), g + "--draft-stats"), "--draft-stats");
  expect_clean_failure(run_attn(models(), g + "--draft draft --prompt-lookup"), "--prompt-lookup");
}

}  // namespace
}  // namespace attn::cli
