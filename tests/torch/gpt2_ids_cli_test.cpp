// `attn generate --ids` on a Hugging Face GPT-2 folder (make_fixtures.py's random small GPT-2):
// the prompt given as ids of the BPE vocabulary continues with PyTorch's greedy tokens, printed
// as ids, cut at the first <|endoftext|>; the same prompt as text prints the decoding of those
// ids; an id outside the BPE vocabulary is an error naming it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "attn/models/gpt2.h"
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

}  // namespace
}  // namespace attn::test
