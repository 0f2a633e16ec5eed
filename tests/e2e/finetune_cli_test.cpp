// `attn train --objective sft|dpo --pairs FILE [--init DIR]` end to end (ATTN_BINARY through the
// shell, in a temporary folder): a tiny decoder-only model instruction-tuned from scratch on
// "rev WORD" / "up WORD" pairs answers the held-in prompts (the response-token loss falls); a
// second run --init from its folder starts where it ended; DPO from that folder raises the
// preference accuracy and reward margin of its pairs over the epochs; and bad input (a pair
// missing a field, an empty response, a reference of another vocabulary, model flags with
// --init) exits non-zero naming the file and line or folder, leaving no run folder behind.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attn/io/atomic_file.h"
#include "attn/io/metrics_log.h"
#include "support/cli_run.h"
#include "unit/models/broken_checkpoints.h"

namespace attn::cli {
namespace {

namespace fs = std::filesystem;
using models::test_util::TempDir;
using test::expect_clean_failure;
using test::Outcome;
using test::run_attn;

const std::vector<std::string> kWords = {"cat", "dog", "sun", "tree", "book", "fish", "bird", "rain"};

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(c - 'a' + 'A');
  return s;
}
std::string reversed(std::string s) { return std::string(s.rbegin(), s.rend()); }

// "rev WORD" -> the word reversed, "up WORD" -> the word in capitals.
std::string sft_pairs() {
  std::string text;
  for (const std::string& w : kWords) text += "rev " + w + "\t" + reversed(w) + "\nup " + w + "\t" + upper(w) + "\n";
  return text;
}

// Preferences the SFT model does not hold: for "rev WORD" the reversed word over the capitals,
// for "up WORD" the word itself over its reversal.
std::string dpo_pairs() {
  std::string text;
  for (const std::string& w : kWords)
    text += "rev " + w + "\t" + reversed(w) + "\t" + upper(w) + "\nup " + w + "\t" + w + "\t" + reversed(w) + "\n";
  return text;
}

std::vector<nlohmann::ordered_json> metrics_of(const std::string& dir) {
  return io::read_metrics_log((fs::path(dir) / "metrics.jsonl").string(), "test").records;
}

const std::string kSmall =
    "--d-model 32 --heads 2 --layers 2 --d-ff 64 --batch-size 8 --schedule constant --lr 0.004 --warmup 0 "
    "--label-smoothing 0 --dropout 0 --attention-dropout 0 --threads 1 --no-report";

class FinetuneCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(ATTN_BINARY)) << "build the attn executable first: " << ATTN_BINARY;
    io::write_file_atomic(tmp_.file("sft.tsv"), sft_pairs());
    io::write_file_atomic(tmp_.file("sft_valid.tsv"), sft_pairs());  // held-in prompts
    io::write_file_atomic(tmp_.file("dpo.tsv"), dpo_pairs());
    io::write_file_atomic(tmp_.file("dpo_valid.tsv"), dpo_pairs());
  }
  TempDir tmp_{"attn_finetune_cli"};
};

TEST_F(FinetuneCli, SftAnswersHeldInPromptsInitContinuesAndDpoRaisesPreferences) {
  const Outcome sft = run_attn(tmp_, "train --out sft --arch decoder-only --objective sft --pairs sft.tsv "
                                     "--valid-pairs sft_valid.tsv --epochs 40 --samples 6 " + kSmall);
  ASSERT_EQ(sft.exit_code, 0) << sft.err;
  EXPECT_NE(sft.err.find("the loss counts the response and <eos> only"), std::string::npos) << sft.err;
  const auto m = metrics_of(tmp_.file("sft"));
  ASSERT_EQ(m.size(), 40u);
  const double first = m.front()["loss"].get<double>(), last = m.back()["loss"].get<double>();
  EXPECT_LT(last, first / 4) << first << " -> " << last;
  EXPECT_GE(m.back()["val_token_acc"].get<double>(), 0.9);
  EXPECT_FALSE(m.back().contains("val_pref_acc"));  // the DPO keys are DPO's only
  EXPECT_FALSE(m.back().contains("val_kl_ref"));
  // The held-in prompts answered by `attn generate` on the saved folder.
  EXPECT_NE(sft.out.find("responses to validation prompts"), std::string::npos) << sft.out;
  EXPECT_TRUE(sft.out.find("6 of 6 right") != std::string::npos || sft.out.find("5 of 6 right") != std::string::npos)
      << sft.out;
  const Outcome gen = run_attn(tmp_, "generate --model sft --prompt 'rev dog\n' --max-tokens 5");
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_EQ(gen.out, "god\n");

  // --init from the folder: the run starts from its weights (a first epoch far below the
  // fresh run's), with its architecture and vocabulary.
  const Outcome again = run_attn(tmp_, "train --out again --init sft --objective sft --pairs sft.tsv --epochs 1 "
                                       "--batch-size 8 --schedule constant --lr 0.001 --warmup 0 --label-smoothing 0 "
                                       "--threads 1 --no-report --samples 0");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_LT(metrics_of(tmp_.file("again")).front()["loss"].get<double>(), first / 4);
  EXPECT_NE(again.err.find("starting from"), std::string::npos) << again.err;

  // DPO from the SFT folder (the reference): accuracy and margin on the pairs rise over the epochs.
  const Outcome dpo = run_attn(tmp_, "train --out dpo --init sft --objective dpo --pairs dpo.tsv "
                                     "--valid-pairs dpo_valid.tsv --beta 0.5 --epochs 6 --batch-size 8 "
                                     "--schedule constant --lr 0.002 --warmup 0 --threads 1 --no-report");
  ASSERT_EQ(dpo.exit_code, 0) << dpo.err;
  const auto d = metrics_of(tmp_.file("dpo"));
  ASSERT_EQ(d.size(), 6u);
  for (const char* key : {"val_pref_acc", "val_reward_margin", "val_chosen_reward", "val_rejected_reward"})
    EXPECT_TRUE(d.back().contains(key)) << key;
  // The KL to the reference: positive once the policy has moved, growing as it moves further.
  ASSERT_TRUE(d.back()["val_kl_ref"].is_number());
  EXPECT_GT(d.front()["val_kl_ref"].get<double>(), 0.0);
  EXPECT_GT(d.back()["val_kl_ref"].get<double>(), d.front()["val_kl_ref"].get<double>());
  EXPECT_NE(dpo.err.find("val_kl_ref"), std::string::npos) << dpo.err;   // the epoch lines
  EXPECT_NE(dpo.out.find("KL to the reference"), std::string::npos) << dpo.out;  // the summary
  // Before any step every margin is 0 (policy = reference): accuracy 50% with ties counted half.
  EXPECT_GT(d.back()["val_pref_acc"].get<double>(), 0.9);
  EXPECT_GE(d.back()["val_pref_acc"].get<double>(), d.front()["val_pref_acc"].get<double>());
  EXPECT_GT(d.back()["val_reward_margin"].get<double>(), d.front()["val_reward_margin"].get<double>());
  EXPECT_GT(d.front()["val_reward_margin"].get<double>(), 0.0);
  EXPECT_LT(d.back()["val_loss"].get<double>(), std::log(2.0));
  EXPECT_NE(dpo.out.find("preference accuracy"), std::string::npos) << dpo.out;
}

TEST_F(FinetuneCli, BadPairsAndReferencesExitNamingTheProblem) {
  io::write_file_atomic(tmp_.file("missing.jsonl"),
                        "{\"prompt\": \"rev cat\", \"response\": \"tac\"}\n{\"prompt\": \"rev dog\"}\n");
  Outcome r = run_attn(tmp_, "train --out x --arch decoder-only --objective sft --pairs missing.jsonl --epochs 1 " + kSmall);
  expect_clean_failure(r, "missing.jsonl' line 2: missing field \"response\"");
  EXPECT_FALSE(fs::exists(tmp_.file("x")));
  io::write_file_atomic(tmp_.file("empty.tsv"), "rev cat\ttac\nrev dog\t\n");
  r = run_attn(tmp_, "train --out x --arch decoder-only --objective dpo --pairs empty.tsv --epochs 1 " + kSmall);
  expect_clean_failure(r, "empty.tsv' line 1: expected 3 tab-separated fields");
  r = run_attn(tmp_, "train --out x --arch decoder-only --objective sft --pairs empty.tsv --epochs 1 " + kSmall);
  expect_clean_failure(r, "empty.tsv' line 2: the response is empty");
  r = run_attn(tmp_, "train --out x --arch decoder-only --objective sft --epochs 1 " + kSmall);
  expect_clean_failure(r, "trains on a pairs file");
  EXPECT_FALSE(fs::exists(tmp_.file("x")));

  // A reference model of another vocabulary, and model flags with --init.
  io::write_file_atomic(tmp_.file("other.tsv"), "xy\tyx\n");
  ASSERT_EQ(run_attn(tmp_, "train --out a --arch decoder-only --objective sft --pairs sft.tsv --epochs 1 --samples 0 " +
                               kSmall).exit_code, 0);
  ASSERT_EQ(run_attn(tmp_, "train --out b --arch decoder-only --objective sft --pairs other.tsv --epochs 1 --samples 0 " +
                               kSmall).exit_code, 0);
  r = run_attn(tmp_, "train --out x --init a --ref b --objective dpo --pairs dpo.tsv --epochs 1 --no-report");
  expect_clean_failure(r, "the reference model '" + fs::absolute(tmp_.file("b")).string() + "' has another vocabulary");
  EXPECT_FALSE(fs::exists(tmp_.file("x")));
  r = run_attn(tmp_, "train --out x --init a --objective sft --pairs sft.tsv --d-model 64 --no-report");
  expect_clean_failure(r, "--init takes the model from");
  r = run_attn(tmp_, "train --out x --init nowhere --objective sft --pairs sft.tsv --no-report");
  expect_clean_failure(r, "nowhere' is not a folder");
}

}  // namespace
}  // namespace attn::cli
