// `attn train --precision bf16` end to end: the run records its precision (train_config.json;
// --resume refuses another), two runs with the same seed and threads write the same model bits
// (one thread, and two threads each training a batch shard on a replica), a run cut after a
// mid-epoch checkpoint and resumed ends with the uninterrupted run's model, and the bf16 model
// differs from the float32 one (a control: the products really ran in bf16). metrics.jsonl
// records train_seconds beside seconds.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

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

// A run of a few seconds: reverse 5 symbols, D=32, 1+1 layers, 2 epochs of 16 steps.
const std::string kSmall =
    "--task reverse --length 5 --symbols 6 --train-size 512 --valid-size 32 --d-model 32 --heads 2 "
    "--encoder-layers 1 --decoder-layers 1 --d-ff 64 --batch-size 32 --schedule constant --lr 0.005 --warmup 5 "
    "--no-report --samples 0 --seed 3";

class Bf16TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(ATTN_BINARY)) << "build the attn executable first: " << ATTN_BINARY;
  }
};

std::string model_bytes(const TempDir& tmp, const std::string& run) {
  return io::read_file(tmp.file(run + "/model.safetensors"));
}

TEST_F(Bf16TrainCli, SameSeedAndThreadsGiveTheSameBitsAndDifferFromFloat32) {
  TempDir tmp("attn_bf16_cli");
  for (const char* run : {"a", "b"}) {
    const Outcome r = run_attn(tmp, std::string("train --out ") + run + " --epochs 2 --precision bf16 --threads 1 " + kSmall);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("bf16 matrix products"), std::string::npos) << r.err;
  }
  EXPECT_EQ(model_bytes(tmp, "a"), model_bytes(tmp, "b"));
  const nlohmann::json tc = nlohmann::json::parse(io::read_file(tmp.file("a/train_config.json")));
  EXPECT_EQ(tc.at("precision"), "bf16");
  // Two threads, one batch shard each (replicas on their own threads enter the precision too).
  for (const char* run : {"c", "d"}) {
    const Outcome r = run_attn(
        tmp, std::string("train --out ") + run + " --epochs 2 --precision bf16 --threads 2 --parallel batch " + kSmall);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  EXPECT_EQ(model_bytes(tmp, "c"), model_bytes(tmp, "d"));
  // Control: float32 (the default) trains other bits, with one thread and with two. (That each
  // replica's thread enters bf16 is tested in tests/unit/train/batch_split_test.cpp.)
  const Outcome f = run_attn(tmp, "train --out f --epochs 2 --threads 1 " + kSmall);
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_NE(model_bytes(tmp, "a"), model_bytes(tmp, "f"));
  EXPECT_EQ(nlohmann::json::parse(io::read_file(tmp.file("f/train_config.json"))).at("precision"), "f32");
  const Outcome f2 = run_attn(tmp, "train --out f2 --epochs 2 --threads 2 --parallel batch " + kSmall);
  ASSERT_EQ(f2.exit_code, 0) << f2.err;
  EXPECT_NE(model_bytes(tmp, "c"), model_bytes(tmp, "f2"));
}

TEST_F(Bf16TrainCli, AResumeFromAMidEpochCheckpointEndsWithTheUninterruptedModel) {
  TempDir tmp("attn_bf16_cli");
  const Outcome whole = run_attn(tmp, "train --out whole --epochs 3 --precision bf16 --threads 2 " + kSmall);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  // The same run, its checkpoints after step 20 (of 48) lost as if it had been killed there.
  const Outcome part =
      run_attn(tmp, "train --out part --epochs 3 --precision bf16 --threads 2 --checkpoint-every 5 --keep 0 " + kSmall);
  ASSERT_EQ(part.exit_code, 0) << part.err;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(tmp.file("part/checkpoints"))) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) == 0 && std::stoll(name.substr(5)) > 20) {
      fs::remove_all(e.path());
      ++removed;
    }
  }
  ASSERT_GT(removed, 0);
  fs::remove(tmp.file("part/model.safetensors"));
  const Outcome other = run_attn(tmp, "train --out part --resume --precision f32");
  expect_clean_failure(other, "precision");
  const Outcome resumed = run_attn(tmp, "train --out part --resume --no-report --samples 0");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(model_bytes(tmp, "whole"), model_bytes(tmp, "part"));
  const auto a = io::read_metrics_log(tmp.file("whole/metrics.jsonl"), "test").records;
  const auto b = io::read_metrics_log(tmp.file("part/metrics.jsonl"), "test").records;
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    for (const char* k : {"loss", "val_loss", "val_token_acc", "val_exact_acc", "lr"})
      EXPECT_EQ(a[i][k], b[i][k]) << "epoch " << i + 1 << " " << k;
    // Training time alone, beside the epoch's wall time.
    ASSERT_TRUE(a[i].contains("train_seconds"));
    EXPECT_GT(a[i]["train_seconds"].get<double>(), 0.0);
    EXPECT_LE(a[i]["train_seconds"].get<double>(), a[i]["seconds"].get<double>());
  }
}

}  // namespace
}  // namespace attn::cli
