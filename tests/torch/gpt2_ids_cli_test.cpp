// `attn generate --ids` on a Hugging Face GPT-2 folder (make_fixtures.py's random small GPT-2):
// the prompt given as ids of the BPE vocabulary continues with PyTorch's greedy tokens, printed
// as ids, cut at the first <|endoftext|>; the same prompt as text prints the decoding of those
// ids; an id outside the BPE vocabulary is an error naming it. `attn quantize` on the GPT-2
// folder writes one of our folders with the tokenizer under OpenAI's names, which generates as
// the GPT-2 model quantized in memory does.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn/io/atomic_file.h"
#include "attn/models/gpt2.h"
#include "attn/ops/quantize.h"
#include "attn/run/generate.h"
#include "attn/run/model_folder.h"
#include "torch/fixture.h"

namespace attn::test {
namespace {

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

CliRun run_attn(const std::string& args) {
  const auto out = std::filesystem::temp_directory_path() / "attn_gpt2_ids_generate.txt";
  const std::string cmd = std::string("'") + ATTN_BINARY + "' " + args + " >'" + out.string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  CliRun r;
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  std::ifstream f(out);
  std::stringstream text;
  text << f.rdbuf();
  r.out = text.str();
  std::filesystem::remove(out);
  return r;
}

std::string joined(const std::vector<int64_t>& ids) {
  std::string s;
  for (int64_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

TEST(Gpt2IdsCli, IdsPromptContinuesWithPyTorchsGreedyIds) {
  TorchCase io("gpt2_small_f32");
  const std::string folder = TorchCase::fixture_dir() + "/" + io.text("folder");
  const models::Gpt2 g = models::load_gpt2(folder);
  const std::vector<int64_t> prompt = io.get("in.prompt").to_vector<int64_t>();
  const std::vector<int64_t> all = io.get("out.greedy").to_vector<int64_t>();
  std::vector<int64_t> expected;
  for (size_t i = prompt.size(); i < all.size() && all[i] != g.tokenizer.eos_id(); ++i) expected.push_back(all[i]);
  ASSERT_FALSE(expected.empty()) << "the fixture's continuation starts with <|endoftext|>: nothing to compare";

  const std::string common = "generate --model '" + folder + "' --max-tokens " + std::to_string(io.integer("steps"));
  const CliRun ids = run_attn(common + " --ids --prompt '" + joined(prompt) + "'");
  ASSERT_EQ(ids.exit_code, 0) << ids.out;
  EXPECT_EQ(ids.out, joined(expected) + "\n");
  const CliRun text = run_attn(common + " --prompt '" + io.text("prompt_text") + "'");
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_EQ(text.out, g.tokenizer.decode(expected) + "\n");

  const CliRun bad = run_attn(common + " --ids --prompt '1 " + std::to_string(g.tokenizer.vocab_size()) + "'");
  EXPECT_GE(bad.exit_code, 1);
  EXPECT_LE(bad.exit_code, 125);
  EXPECT_NE(bad.out.find("out of range"), std::string::npos) << bad.out;
}

// "<log-probability>\t<text>" (generate --scores) -> the log-probability.
double score_of(const std::string& line) { return std::stod(line.substr(0, line.find('\t'))); }

TEST(Gpt2IdsCli, QuantizedFolderGeneratesAsTheGpt2ModelQuantizedInMemory) {
  namespace fs = std::filesystem;
  TorchCase io("gpt2_small_f32");
  const std::string folder = TorchCase::fixture_dir() + "/" + io.text("folder");
  const std::string prompt = io.text("prompt_text");
  const int64_t steps = io.integer("steps");
  const std::string args = " --greedy --scores --threads 1 --max-tokens " + std::to_string(steps) + " --prompt '" + prompt + "'";
  const CliRun f32 = run_attn("generate --model '" + folder + "'" + args);
  ASSERT_EQ(f32.exit_code, 0) << f32.out;

  for (const Quantization q : {Quantization::Int8, Quantization::BF16}) {
    SCOPED_TRACE(quantization_name(q));
    const fs::path out = fs::temp_directory_path() / (std::string("attn_gpt2_quantized_") + quantization_name(q));
    fs::remove_all(out);
    const CliRun made = run_attn("quantize --model '" + folder + "' --to " + quantization_name(q) + " --out '" + out.string() + "'");
    ASSERT_EQ(made.exit_code, 0) << made.out;
    // One of our folders: our config.json, the tokenizer under OpenAI's names, no vocab.json.
    const nlohmann::json config = nlohmann::json::parse(io::read_file((out / "config.json").string()));
    EXPECT_EQ(config.value("arch", ""), "decoder_only");
    EXPECT_EQ(config.value("quantization", ""), quantization_name(q));
    EXPECT_TRUE(fs::is_regular_file(out / io::kBpeEncoderFileName));
    EXPECT_TRUE(fs::is_regular_file(out / io::kBpeMergesFileName));
    EXPECT_FALSE(fs::exists(out / "vocab.json"));
    EXPECT_FALSE(models::is_gpt2_folder(out.string()));

    // The reference: the GPT-2 folder opened as generate opens it, its model quantized in memory.
    run::GenerationFolder ref = run::open_generation_folder(folder, "test", true);
    ref.folder.base->quantize(q);
    run::GenerateSettings settings;
    settings.max_tokens = steps;
    settings.prepend_bos = ref.prepend_bos;
    const decode::Hypothesis h = run::generate_batch(ref.folder, {ref.bpe->encode(prompt)}, settings).at(0).at(0);

    const CliRun got = run_attn("generate --model '" + out.string() + "'" + args);
    ASSERT_EQ(got.exit_code, 0) << got.out;
    EXPECT_EQ(got.out.substr(got.out.find('\t') + 1), ref.bpe->decode(h.tokens) + "\n");
    EXPECT_NEAR(score_of(got.out), h.logprob, 2e-6);
    // Control: the float32 folder's log-probability is not the quantized one's, so the check
    // above tells the two models apart.
    EXPECT_GT(std::abs(score_of(f32.out) - h.logprob), 1e-4) << f32.out << got.out;

    // Quantizing the result again is refused, naming the quantization.
    const CliRun again = run_attn("quantize --model '" + out.string() + "' --to int8 --out '" + out.string() + "-again'");
    EXPECT_NE(again.exit_code, 0);
    EXPECT_NE(again.out.find("quantized already"), std::string::npos) << again.out;
    fs::remove_all(out);
  }
}

}  // namespace
}  // namespace attn::test
