// attn quantize end to end: a reverse model trained in about a second (as infer_cli_test.cpp's)
// quantized to int8 and to bf16 keeps its exact-match accuracy under attn eval and still
// reverses under attn translate (greedy and beam); attn generate runs on a quantized
// decoder-only folder; attn info lists the I8/BF16 tensors; bad uses exit non-zero naming
// the problem (unknown --to, a quantized source, an existing --out without --force).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "attn/io/atomic_file.h"
#include "attn/models/checkpoint.h"
#include "attn/models/factory.h"
#include "attn/train/tasks.h"
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

// Reverse 5 symbols of 6, D=32, 1+1 layers, trained until it reverses (one thread: the same
// folder on every run of one build). 12 epochs: at 5 the float model got 74% of 200 sequences
// right on one path of the float products and over 80% on another; at 8, its int8 copy got 4
// fewer right than it on one of them.
void train_reverse(const std::string& dir) {
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
  c.epochs = 12;
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

class QuantizeCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    trained_ = new TempDir("attn_quantize_run");
    train_reverse(trained_->file("run"));
  }
  static void TearDownTestSuite() {
    delete trained_;
    trained_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(fs::exists(ATTN_BINARY)) << "build the attn executable first: " << ATTN_BINARY;
    fs::copy(trained_->file("run"), tmp_.file("run"), fs::copy_options::recursive);
  }
  static TempDir* trained_;
  TempDir tmp_{"attn_quantize"};
};
TempDir* QuantizeCli::trained_ = nullptr;

double exact_acc(const TempDir& tmp, const std::string& model) {
  const Outcome r = run_attn(tmp, "eval --task reverse --count 200 --json --model " + model);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out)["exact_acc"].get<double>();
}

TEST_F(QuantizeCli, QuantizedReverseModelKeepsItsExactMatchAccuracy) {
  const double float_acc = exact_acc(tmp_, "run");
  EXPECT_GE(float_acc, 0.8);
  for (const char* to : {"int8", "bf16"}) {
    const Outcome q = run_attn(tmp_, std::string("quantize --model run --to ") + to);
    ASSERT_EQ(q.exit_code, 0) << q.err;
    const std::string out = std::string("run-") + to;
    EXPECT_NE(q.out.find("quantized run to " + std::string(to) + ": " + out), std::string::npos) << q.out;
    EXPECT_TRUE(fs::is_regular_file(tmp_.file(out + "/vocab.json")));
    EXPECT_TRUE(fs::is_regular_file(tmp_.file(out + "/train_config.json")));
    // Within two examples of 200 of the float model, counted in examples so that the rounding
    // of 0.99 - 0.01 does not decide.
    EXPECT_GE(std::lround(exact_acc(tmp_, out) * 200), std::lround(float_acc * 200) - 2) << to;
    const Outcome t = run_attn(tmp_, "translate --model " + out, "3 1 4 0 2\n01234\n");
    ASSERT_EQ(t.exit_code, 0) << t.err;
    EXPECT_EQ(t.out, "20413\n43210\n") << to;
    const Outcome b = run_attn(tmp_, "translate --beam 3 --model " + out, "01234\n");
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_EQ(b.out, "43210\n") << to;
    const Outcome info = run_attn(tmp_, "info --model " + out);
    ASSERT_EQ(info.exit_code, 0) << info.err;
    EXPECT_NE(info.out.find(std::string(to) == "int8" ? "I8" : "BF16"), std::string::npos) << info.out;
  }
  // int8 weights take about a quarter of the float bytes (plus F32 biases, norms and scales).
  EXPECT_LT(fs::file_size(tmp_.file("run-int8/model.safetensors")), fs::file_size(tmp_.file("run/model.safetensors")) / 2);
}

TEST_F(QuantizeCli, GenerateRunsOnAQuantizedDecoderOnlyFolder) {
  models::ModelConfig c;
  c.arch = models::Arch::DecoderOnly;
  c.d_model = 16;
  c.n_heads = 2;
  c.n_decoder_layers = 1;
  c.d_ff = 32;
  c.src_vocab_size = 10;
  c.tgt_vocab_size = 0;
  train::TaskConfig t;
  t.n_symbols = 6;
  models::save_model(tmp_.file("lm"), *models::make_model(c), {{"vocab.json", train::task_vocab(t).to_json().dump()}});
  for (const char* to : {"int8", "bf16"}) {
    ASSERT_EQ(run_attn(tmp_, std::string("quantize --model lm --to ") + to).exit_code, 0);
    const Outcome g = run_attn(tmp_, std::string("generate --model lm-") + to + " --prompt 012 --greedy --max-tokens 4");
    ASSERT_EQ(g.exit_code, 0) << g.err;
    EXPECT_FALSE(g.out.empty());
  }
}

TEST_F(QuantizeCli, BadUsesExitNonZeroNamingTheProblem) {
  expect_clean_failure(run_attn(tmp_, "quantize --model run --to int4"), "unknown quantization 'int4'");
  expect_clean_failure(run_attn(tmp_, "quantize --model run --to none"), "--to takes int8 or bf16");
  expect_clean_failure(run_attn(tmp_, "quantize --model missing --to int8"), "missing");
  ASSERT_EQ(run_attn(tmp_, "quantize --model run --to int8 --out q").exit_code, 0);
  expect_clean_failure(run_attn(tmp_, "quantize --model run --to int8 --out q"), "pass --force");
  EXPECT_EQ(run_attn(tmp_, "quantize --model run --to bf16 --out q --force").exit_code, 0);
  expect_clean_failure(run_attn(tmp_, "quantize --model q --to int8 --out q2"), "is quantized already");
}

}  // namespace
}  // namespace attn::cli
