// GPT-2 checkpoints against PyTorch: make_fixtures.py writes a random small GPT-2 as a
// Hugging Face folder (config.json, model.safetensors under HF's names with Conv1D weights
// and the old mask buffers, vocab.json, merges.txt) and runs GPT2LMHeadModel's forward,
// written there in torch over those tensors. load_gpt2 must give its logits (within 1e-4 in
// float32, 1e-10 in float64) and the same greedy continuation of the same prompt text, both
// through the library (full recomputation) and through `attn generate` (the KV cache).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/models/gpt2.h"
#include "attn/ops/ops.h"
#include "support/expect_close.h"
#include "torch/fixture.h"

namespace attn::test {
namespace {

constexpr double kLogitsF32 = 1e-4;

models::Gpt2 load_case(const TorchCase& io) {
  return models::load_gpt2(TorchCase::fixture_dir() + "/" + io.text("folder"), io.dtype());
}

// Greedy decoding by full recomputation: append the arg-max of the last position's logits.
std::vector<int64_t> greedy(models::DecoderOnlyModel& model, std::vector<int64_t> ids, int64_t steps) {
  NoGradGuard no_grad;
  for (int64_t s = 0; s < steps; ++s) {
    const Tensor logits = model.forward(Tensor::from_vector<int64_t>(ids, {1, static_cast<int64_t>(ids.size())}));
    const int64_t V = logits.size(2);
    const auto last = slice(logits, 1, logits.size(1) - 1, logits.size(1)).reshape({V}).to_vector<double>();
    int64_t best = 0;
    for (int64_t v = 1; v < V; ++v)
      if (last[static_cast<size_t>(v)] > last[static_cast<size_t>(best)]) best = v;
    ids.push_back(best);
  }
  return ids;
}

void check_logits(const std::string& name, double atol) {
  TorchCase io(name);
  models::Gpt2 g = load_case(io);
  NoGradGuard no_grad;
  const Tensor logits = g.model->forward(io.input("ids"));  // [B, T, V]
  const Tensor expected = io.get("out.logits");
  if (logits.shape() == expected.shape()) report_margin(name + " out.logits", max_abs_diff(logits, expected), atol);
  EXPECT_TRUE(all_close(logits, expected, atol, 0.0, name + " out.logits"));
}

void check_greedy(const std::string& name) {
  TorchCase io(name);
  models::Gpt2 g = load_case(io);
  const std::vector<int64_t> prompt = io.get("in.prompt").to_vector<int64_t>();
  // Our tokenizer turns the prompt text into the ids the fixture's Python BPE produced.
  EXPECT_EQ(g.tokenizer.encode(io.text("prompt_text")), prompt);
  const std::vector<int64_t> ours = greedy(*g.model, prompt, io.integer("steps"));
  EXPECT_EQ(ours, io.get("out.greedy").to_vector<int64_t>());
  EXPECT_EQ(g.tokenizer.decode(std::vector<int64_t>(prompt)), io.text("prompt_text"));
}

TEST(Gpt2Torch, LogitsMatchPyTorchInFloat32) { check_logits("gpt2_small_f32", kLogitsF32); }

TEST(Gpt2Torch, LogitsMatchPyTorchInFloat64) { check_logits("gpt2_small_f64", kAbsF64); }

TEST(Gpt2Torch, GreedyContinuationMatchesPyTorchInFloat32) { check_greedy("gpt2_small_f32"); }

TEST(Gpt2Torch, GreedyContinuationMatchesPyTorchInFloat64) { check_greedy("gpt2_small_f64"); }

// `attn generate --model GPT2DIR` tokenizes the prompt with the folder's BPE, decodes through
// the KV-cached LmDecoder and prints the continuation: PyTorch's greedy tokens, cut at the
// first <|endoftext|>, decoded to text.
TEST(Gpt2Torch, GenerateCommandContinuesThePromptAsPyTorchDoes) {
  TorchCase io("gpt2_small_f32");
  models::Gpt2 g = load_case(io);
  const std::vector<int64_t> prompt = io.get("in.prompt").to_vector<int64_t>();
  const std::vector<int64_t> all = io.get("out.greedy").to_vector<int64_t>();
  std::vector<int64_t> expected;
  for (size_t i = prompt.size(); i < all.size() && all[i] != g.tokenizer.eos_id(); ++i) expected.push_back(all[i]);
  ASSERT_FALSE(expected.empty()) << "the fixture's continuation starts with <|endoftext|>: nothing to compare";

  const auto out = std::filesystem::temp_directory_path() / "attn_gpt2_generate.txt";
  const std::string cmd = std::string("'") + ATTN_BINARY + "' generate --model '" + TorchCase::fixture_dir() + "/" +
                          io.text("folder") + "' --prompt '" + io.text("prompt_text") + "' --max-tokens " +
                          std::to_string(io.integer("steps")) + " >'" + out.string() + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out);
  std::stringstream text;
  text << f.rdbuf();
  std::filesystem::remove(out);
  EXPECT_EQ(text.str(), g.tokenizer.decode(expected) + "\n");
}

TEST(Gpt2Torch, FolderConfigBecomesOurDecoderOnlyConfig) {
  TorchCase io("gpt2_small_f32");
  models::Gpt2 g = load_case(io);
  const models::ModelConfig& c = g.model->config();
  EXPECT_EQ(c.arch, models::Arch::DecoderOnly);
  EXPECT_EQ(c.d_model, 32);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_decoder_layers, 2);
  EXPECT_EQ(c.d_ff, 128);
  EXPECT_EQ(c.max_len, 24);
  EXPECT_EQ(c.vocab_size(), g.tokenizer.vocab_size());
  EXPECT_EQ(c.eos_id, g.tokenizer.eos_id());
  EXPECT_EQ(c.bos_id, g.tokenizer.eos_id());
  EXPECT_EQ(c.pad_id, -1);
  EXPECT_FALSE(g.model->is_training());
}

}  // namespace
}  // namespace attn::test
