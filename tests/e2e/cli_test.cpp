// The attn executable (ATTN_BINARY) run through the shell in a temporary folder: --version,
// --help, `info` on a saved model (parameter count, every tensor's shape, --json), and every
// broken checkpoint of broken_checkpoints.h: a non-zero exit, never a signal, the error on stderr.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "attn/core/shape.h"
#include "attn/io/atomic_file.h"
#include "attn/models/checkpoint.h"
#include "attn/models/factory.h"
#include "unit/models/broken_checkpoints.h"

namespace attn::cli {
namespace {

using models::test_util::TempDir;

struct ProcessResult {
  int exit_code = -1;     // the process's exit status; -1 when it did not exit normally
  std::string out, err;   // its stdout and stderr
};

// Runs `ATTN_BINARY args` with stdout and stderr captured in files of `tmp`.
ProcessResult run_attn(const TempDir& tmp, const std::string& args) {
  const std::string out = tmp.file("stdout.txt"), err = tmp.file("stderr.txt");
  const std::string cmd = std::string("'") + ATTN_BINARY + "' " + args + " >'" + out + "' 2>'" + err + "'";
  const int status = std::system(cmd.c_str());
  ProcessResult r;
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = io::read_file(out);
  r.err = io::read_file(err);
  return r;
}

// A failure the program reported itself: exit 1..125 (the shell reports a death by signal N
// as 128 + N, and a missing binary as 126/127).
void expect_clean_failure(const ProcessResult& r) {
  EXPECT_GE(r.exit_code, 1) << r.err;
  EXPECT_LE(r.exit_code, 125) << "killed by a signal or not run: " << r.exit_code << "\n" << r.err;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(ATTN_BINARY)) << "build the attn executable first: " << ATTN_BINARY;
  }
};

TEST_F(Cli, VersionPrintsTheVersionAndExitsZero) {
  TempDir tmp("attn_cli");
  const ProcessResult r = run_attn(tmp, "--version");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::regex_match(r.out, std::regex("attn [0-9]+\\.[0-9]+\\.[0-9]+\n"))) << r.out;
}

TEST_F(Cli, HelpListsTheInfoSubcommand) {
  TempDir tmp("attn_cli");
  const ProcessResult r = run_attn(tmp, "--help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("info"), std::string::npos) << r.out;
  const ProcessResult sub = run_attn(tmp, "info --help");
  EXPECT_EQ(sub.exit_code, 0) << sub.err;
  EXPECT_NE(sub.out.find("--model"), std::string::npos) << sub.out;
  EXPECT_NE(sub.out.find("--json"), std::string::npos) << sub.out;
}

TEST_F(Cli, InfoPrintsConfigParameterCountAndEveryTensorShape) {
  TempDir tmp("attn_cli");
  const std::string dir = tmp.file("model");
  auto model = models::make_model(models::test_util::broken_base_config());
  models::save_model(dir, *model);
  const ProcessResult r = run_attn(tmp, "info --model '" + dir + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_NE(r.out.find("parameters: " + std::to_string(model->num_parameters()) + " total"), std::string::npos)
      << r.out;
  const nlohmann::json config = model->config().to_json();
  for (const auto& [key, value] : config.items())
    EXPECT_NE(r.out.find("  " + key + " "), std::string::npos) << key << "\n" << r.out;
  for (const auto& [name, t] : model->named_parameters())
    EXPECT_NE(r.out.find(name + "  "), std::string::npos) << name << "\n" << r.out;
  const io::SafetensorsFile file = io::SafetensorsFile::open(dir + "/model.safetensors");
  size_t at = 0;  // tensors appear in file order, each with its dtype and shape
  for (const std::string& name : file.names()) {
    const size_t line = r.out.find("  " + name + " ", at);
    ASSERT_NE(line, std::string::npos) << name << "\n" << r.out;
    const std::string text = r.out.substr(line, r.out.find('\n', line) - line);
    EXPECT_NE(text.find("F32"), std::string::npos) << text;
    EXPECT_NE(text.find(shape_str(file.info(name).shape)), std::string::npos) << text;
    at = line + 1;
  }
  EXPECT_NE(r.out.find("encoder "), std::string::npos) << r.out;  // per top-level module
  EXPECT_NE(r.out.find("tied: generator.weight is src_embedding.weight"), std::string::npos) << r.out;
}

TEST_F(Cli, InfoJsonIsMachineReadable) {
  TempDir tmp("attn_cli");
  const std::string dir = tmp.file("model");
  auto model = models::make_model(models::test_util::broken_base_config());
  models::save_model(dir, *model);
  const ProcessResult r = run_attn(tmp, "info --json --model '" + dir + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["config"], model->config().to_json());
  EXPECT_EQ(j["parameters"]["total"].get<int64_t>(), model->num_parameters());
  int64_t sum = 0;
  for (const auto& m : j["parameters"]["modules"]) sum += m["count"].get<int64_t>();
  EXPECT_EQ(sum, model->num_parameters());
  const auto names = models::test_util::file_tensor_names(dir);
  ASSERT_EQ(j["tensors"].size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(j["tensors"][i]["name"], names[i]);
    EXPECT_EQ(j["tensors"][i]["shape"].get<Shape>(), model->parameter(names[i]).shape());
  }
  EXPECT_EQ(j["metadata"]["format"], "attn");
}

TEST_F(Cli, InfoReportsKvCacheMemoryForABatchAndLength) {
  TempDir tmp("attn_cli");
  const std::string dir = tmp.file("model");
  auto model = models::make_model(models::test_util::broken_base_config());
  models::save_model(dir, *model);
  const models::ModelConfig& c = model->config();
  // 2 (K and V) * layers * batch * heads * (target + source) * head_dim * 4 bytes (f32)
  const int64_t per_token = 2 * c.n_decoder_layers * 3 * c.n_heads * (c.d_model / c.n_heads) * 4;
  const ProcessResult r = run_attn(tmp, "info --json --batch 3 --length 50 --source-length 20 --model '" + dir + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv_cache"]["self_attention_bytes"].get<int64_t>(), per_token * 50);
  EXPECT_EQ(j["kv_cache"]["cross_attention_bytes"].get<int64_t>(), per_token * 20);
  EXPECT_EQ(j["kv_cache"]["total_bytes"].get<int64_t>(), per_token * 70);
  const ProcessResult text = run_attn(tmp, "info --batch 3 --length 50 --model '" + dir + "'");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("KV cache for batch 3, 50 target and 50 source tokens"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find(std::to_string(per_token * 100) + " bytes"), std::string::npos) << text.out;
  expect_clean_failure(run_attn(tmp, "info --batch 3 --model '" + dir + "'"));  // no --length
  expect_clean_failure(run_attn(tmp, "info --batch 0 --length 5 --model '" + dir + "'"));
}

// A decoder-only model caches only its key/value heads (grouped-query attention) and, with a
// sliding window, only the last W positions; it has no cross-attention. An encoder-only model
// has no cache to report.
TEST_F(Cli, InfoKvCacheCountsKeyValueHeadsAndTheWindowOfADecoderOnlyModel) {
  TempDir tmp("attn_cli");
  models::ModelConfig c = models::test_util::broken_base_config();
  c.arch = models::Arch::DecoderOnly;
  c.tgt_vocab_size = c.src_vocab_size;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.sliding_window = 16;
  const std::string dir = tmp.file("model");
  models::save_model(dir, *models::make_model(c));
  const int64_t head_dim = c.d_model / c.n_heads;
  // 2 (K and V) * layers * batch 3 * 2 key/value heads * head_dim * 4 bytes (f32), per position
  const int64_t per_position = 2 * c.n_decoder_layers * 3 * 2 * head_dim * 4;
  ProcessResult r = run_attn(tmp, "info --json --batch 3 --length 10 --model '" + dir + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv_cache"]["self_attention_bytes"].get<int64_t>(), per_position * 10);
  EXPECT_EQ(j["kv_cache"]["cross_attention_bytes"].get<int64_t>(), 0);
  r = run_attn(tmp, "info --json --batch 3 --length 50 --model '" + dir + "'");  // past the window
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv_cache"]["total_bytes"].get<int64_t>(), per_position * 16);
  expect_clean_failure(run_attn(tmp, "info --batch 3 --length 50 --source-length 8 --model '" + dir + "'"));

  models::ModelConfig e = models::test_util::broken_base_config();
  e.arch = models::Arch::EncoderOnly;
  e.tgt_vocab_size = e.src_vocab_size;
  const std::string enc = tmp.file("encoder");
  models::save_model(enc, *models::make_model(e));
  expect_clean_failure(run_attn(tmp, "info --batch 3 --length 50 --model '" + enc + "'"));
}

TEST_F(Cli, InfoOnEachBrokenCheckpointFailsCleanlyNamingTheProblem) {
  for (const auto& bc : models::test_util::broken_cases()) {
    SCOPED_TRACE(bc.name);
    TempDir tmp("attn_cli");
    const std::string dir = tmp.file("model");
    models::save_model(dir, *models::make_model(models::test_util::broken_base_config()));
    const std::string tensor = bc.damage(dir);
    const ProcessResult r = run_attn(tmp, "info --model '" + dir + "'");
    expect_clean_failure(r);
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(r.err.rfind("attn: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(dir + "/" + bc.file), std::string::npos) << r.err;
    if (!tensor.empty()) {
      EXPECT_NE(r.err.find(tensor), std::string::npos) << r.err;
    }
    EXPECT_NE(r.err.find(bc.problem), std::string::npos) << r.err;
  }
}

TEST_F(Cli, InfoOnAMissingFolderFailsCleanly) {
  TempDir tmp("attn_cli");
  const ProcessResult r = run_attn(tmp, "info --model '" + tmp.file("absent") + "'");
  expect_clean_failure(r);
  EXPECT_NE(r.err.find("no such model folder"), std::string::npos) << r.err;
}

TEST_F(Cli, CommandLineMistakesExitNonZero) {
  TempDir tmp("attn_cli");
  for (const std::string args : {"", "--bogus", "frobnicate", "info", "info --model", "info --model x --bogus"}) {
    SCOPED_TRACE(args);
    const ProcessResult r = run_attn(tmp, args);
    expect_clean_failure(r);
    EXPECT_FALSE(r.err.empty());
  }
}

}  // namespace
}  // namespace attn::cli
