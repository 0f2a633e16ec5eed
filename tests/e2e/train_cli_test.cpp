// `attn train` and `attn average` end to end (ATTN_BINARY through the shell, in a temporary
// folder): a tiny run writes the whole run folder and its report, --resume continues exactly,
// --help lists the hyper-parameters, and bad options, configs and corpora exit non-zero with a
// message naming the problem and leave no output folder behind.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
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

// A run of about a second: copy 4 symbols, D=16, 1+1 layers, 2 epochs of 16 steps.
const std::string kTiny =
    "--task copy --length 4 --symbols 4 --train-size 256 --valid-size 32 --d-model 16 --heads 2 "
    "--encoder-layers 1 --decoder-layers 1 --d-ff 32 --batch-size 16 --schedule constant --lr 0.01 --warmup 10 "
    "--threads 1";

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(ATTN_BINARY)) << "build the attn executable first: " << ATTN_BINARY;
  }
};

TEST_F(TrainCli, HelpListsTheHyperParameters) {
  TempDir tmp("attn_train_cli");
  const Outcome r = run_attn(tmp, "train --help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* flag : {"--epochs", "--batch-size", "--max-tokens", "--lr-scale", "--warmup", "--label-smoothing",
                           "--clip", "--threads", "--parallel", "--seed", "--config", "--resume", "--force", "--task", "--data",
                           "--valid", "--tokens", "--keep", "--quiet", "--arch", "--text", "--valid-text", "--layers",
                           "--mask-prob"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  const Outcome a = run_attn(tmp, "average --help");
  EXPECT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.out.find("--last"), std::string::npos);
  const Outcome top = run_attn(tmp, "--help");
  EXPECT_NE(top.out.find("train"), std::string::npos);
  EXPECT_NE(top.out.find("average"), std::string::npos);
}

TEST_F(TrainCli, TinyRunWritesTheRunFolderAndPrintsWhereThingsAre) {
  TempDir tmp("attn_train_cli");
  const Outcome r = run_attn(tmp, "train --out run --epochs 2 --samples 3 " + kTiny);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const fs::path run = fs::path(tmp.path) / "run";
  for (const char* f : {"config.json", "model.safetensors", "vocab.json", "train_config.json", "metrics.jsonl",
                        "report.html"})
    EXPECT_TRUE(fs::is_regular_file(run / f)) << f << "\n" << r.out;
  EXPECT_TRUE(fs::is_directory(run / "checkpoints" / "step_00000032"));
  const auto metrics = io::read_metrics_log((run / "metrics.jsonl").string(), "test").records;
  ASSERT_EQ(metrics.size(), 2u);
  for (const char* k : {"epoch", "loss", "val_loss", "val_token_acc", "val_exact_acc", "lr", "tokens_per_s", "seconds"})
    EXPECT_TRUE(metrics[1].contains(k)) << k;
  EXPECT_NE(r.out.find("metrics.jsonl"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("report.html"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("->"), std::string::npos) << r.out;  // sample translations
  // Not a terminal: plain log lines, no carriage returns.
  EXPECT_NE(r.err.find("epoch 2/2"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);
  // The run folder is a model folder for the other commands.
  const Outcome info = run_attn(tmp, "info --model run");
  EXPECT_EQ(info.exit_code, 0) << info.err;
  // Averaging the last two checkpoints writes a loadable model folder.
  const Outcome avg = run_attn(tmp, "average --model run --last 2 --out avg");
  EXPECT_EQ(avg.exit_code, 0) << avg.err;
  EXPECT_TRUE(fs::is_regular_file(fs::path(tmp.path) / "avg" / "model.safetensors"));
  EXPECT_EQ(run_attn(tmp, "info --model avg").exit_code, 0);
}

TEST_F(TrainCli, StoppedAndResumedRunPrintsTheSameLossesAsAnUninterruptedOne) {
  TempDir tmp("attn_train_cli");
  const Outcome whole = run_attn(tmp, "train --out whole --epochs 3 --no-report --samples 0 " + kTiny);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const Outcome part = run_attn(tmp, "train --out part --epochs 2 --no-report --samples 0 " + kTiny);
  ASSERT_EQ(part.exit_code, 0) << part.err;
  const Outcome refused = run_attn(tmp, "train --out part --epochs 3 " + kTiny);
  expect_clean_failure(refused, "--resume");
  const Outcome changed = run_attn(tmp, "train --out part --resume --lr 0.02");
  expect_clean_failure(changed, "lr");
  const Outcome resumed = run_attn(tmp, "train --out part --resume --epochs 3 --no-report --samples 0");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto a = io::read_metrics_log(tmp.file("whole/metrics.jsonl"), "test").records;
  const auto b = io::read_metrics_log(tmp.file("part/metrics.jsonl"), "test").records;
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    for (const char* k : {"loss", "val_loss", "val_token_acc", "val_exact_acc", "lr"})
      EXPECT_EQ(a[i][k], b[i][k]) << "epoch " << i + 1 << " " << k;
  EXPECT_EQ(io::read_file(tmp.file("whole/model.safetensors")), io::read_file(tmp.file("part/model.safetensors")));
}

TEST_F(TrainCli, ForceReplacesARunButNotAnUnrelatedFolder) {
  TempDir tmp("attn_train_cli");
  ASSERT_EQ(run_attn(tmp, "train --out run --epochs 1 --no-report --samples 0 " + kTiny).exit_code, 0);
  const Outcome again = run_attn(tmp, "train --out run --epochs 1 --force --no-report --samples 0 " + kTiny);
  EXPECT_EQ(again.exit_code, 0) << again.err;
  fs::create_directories(tmp.file("mine"));
  io::write_file_atomic(tmp.file("mine/notes.txt"), "keep me");
  const Outcome refused = run_attn(tmp, "train --out mine --force --epochs 1 " + kTiny);
  expect_clean_failure(refused, "not a run folder");
  EXPECT_EQ(io::read_file(tmp.file("mine/notes.txt")), "keep me");
}

TEST_F(TrainCli, BadInputExitsNonZeroNamingTheProblemAndLeavesNoFolder) {
  TempDir tmp("attn_train_cli");
  io::write_file_atomic(tmp.file("wrong_type.json"), "{\"epochs\": \"ten\"}");
  io::write_file_atomic(tmp.file("unknown_key.json"), "{\"epoch\": 3}");
  io::write_file_atomic(tmp.file("heads.json"), "{\"model\": {\"d_model\": 16, \"n_heads\": 3}}");
  io::write_file_atomic(tmp.file("not_json.json"), "{epochs: 3");
  io::write_file_atomic(tmp.file("malformed.tsv"), "ab\tba\nabc\n");
  io::write_file_atomic(tmp.file("empty_line.tsv"), "ab\tba\n\nbc\tcb\n");
  io::write_file_atomic(tmp.file("good.tsv"), "ab\tba\nbc\tcb\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train --out run --bogus 3", "--bogus"},
      {"train --out run --epochs", "--epochs"},
      {"train --out run --epochs x", "--epochs"},
      {"train --out run --task shuffle", "shuffle"},
      {"train --out run --arch decoder-only", "trains on a text file"},
      {"train --out run --heads 3", "not divisible"},
      {"train --out run --encoder-layers 0", "encoder layer"},
      {"train --out run --epochs 0", "epochs"},
      {"train --out run --label-smoothing 1.5", "label_smoothing"},
      {"train --out run --config wrong_type.json", "'epochs' must be an integer"},
      {"train --out run --config unknown_key.json", "unknown key 'epoch'"},
      {"train --out run --config heads.json", "not divisible"},
      {"train --out run --config not_json.json", "not valid JSON"},
      {"train --out run --config missing.json", "missing.json"},
      {"train --out run --data malformed.tsv", "line 2"},
      {"train --out run --data empty_line.tsv", "line 2 is empty"},
      {"train --out run --data good.tsv --valid empty_line.tsv", "line 2 is empty"},
      {"train --out run --data missing.tsv", "missing.tsv"},
      {"train --out run --task copy --data good.tsv", "not both"},
      {"train --out run --tokens bytes --data good.tsv", "--tokens"},
      {"train", "--out"},
      {"train --out run --resume", "train_config.json"},
      {"average --model run", "run"},
  };
  for (const auto& [args, needle] : cases) {
    SCOPED_TRACE(args);
    const Outcome r = run_attn(tmp, args);
    expect_clean_failure(r, needle);
    EXPECT_FALSE(fs::exists(tmp.file("run"))) << "partial output left by: " << args;
  }
}

TEST_F(TrainCli, TrainsOnATsvCorpusWithWordTokens) {
  TempDir tmp("attn_train_cli");
  std::string train, valid;
  const std::vector<std::string> words = {"red", "green", "blue", "cyan"};
  for (size_t i = 0; i < 64; ++i) {
    const std::string a = words[i % 4], b = words[(i / 4) % 4];
    (i < 48 ? train : valid) += a + " " + b + "\t" + b + " " + a + "\n";
  }
  io::write_file_atomic(tmp.file("train.tsv"), train);
  io::write_file_atomic(tmp.file("valid.tsv"), valid);
  const Outcome r = run_attn(tmp,
                         "train --out run --data train.tsv --valid valid.tsv --tokens words --epochs 2 --d-model 16 "
                         "--heads 2 --encoder-layers 1 --decoder-layers 1 --d-ff 32 --batch-size 16 --threads 1 "
                         "--no-report --samples 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json vocab = nlohmann::json::parse(io::read_file(tmp.file("run/vocab.json")));
  EXPECT_EQ(vocab["tokenization"], "whitespace");
  EXPECT_EQ(vocab["tokens"].size(), 8u);  // 4 specials + 4 words
  EXPECT_EQ(io::read_metrics_log(tmp.file("run/metrics.jsonl"), "test").records.size(), 2u);
}

}  // namespace
}  // namespace attn::cli
