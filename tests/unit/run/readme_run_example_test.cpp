// The model-folder example of README.md, compiled and run, so the README cannot drift from the
// run layer's API. Keep the two in sync: the body of the test is the README's second code
// block. The folder here holds an untrained model with the demo's vocabulary, so only the form
// of the output is checked, not the reversal.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "attn/io/run_files.h"
#include "attn/models/checkpoint.h"
#include "attn/models/factory.h"
#include "attn/run/token_codec.h"
#include "attn/run/translate.h"
#include "attn/train/tasks.h"
#include "unit/models/broken_checkpoints.h"

namespace {

// Runs the test body in `dir` and returns to the previous working directory however it ends.
struct WorkingDirectory {
  std::filesystem::path before = std::filesystem::current_path();
  explicit WorkingDirectory(const std::string& dir) { std::filesystem::current_path(dir); }
  ~WorkingDirectory() { std::filesystem::current_path(before); }
};

TEST(ReadmeExample, OpensAModelFolderAndTranslatesALine) {
  using namespace attn;
  models::test_util::TempDir tmp("attn_readme_run");
  models::ModelConfig c;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_encoder_layers = 1;
  c.n_decoder_layers = 1;
  c.d_ff = 16;
  c.src_vocab_size = c.tgt_vocab_size = 14;  // the reverse task's 4 specials and 10 digits
  const io::Vocab digits = train::task_vocab(train::TaskConfig{});
  models::save_model(tmp.path + "/runs/reverse", *models::make_model(c),
                     {{io::kVocabFileName, digits.to_json().dump()}});
  WorkingDirectory cwd(tmp.path);

  // --- README example begins ---
  run::ModelFolder folder = run::open_model_folder("runs/reverse", "translate", /*need_vocab=*/true);
  run::TokenCodec codec{&*folder.vocab, folder.src_vocab_size, folder.pad, "translate"};
  std::vector<int64_t> src = codec.read("3 7 1 4 9 2 8 5", /*line_no=*/1, "source");
  decode::Hypothesis best = run::search_batch(folder, {src}, run::SearchSettings{}).front().front();
  std::string text = codec.write(best.tokens);  // greedy: "58294173" once trained
  // --- README example ends ---

  EXPECT_EQ(src, (std::vector<int64_t>{7, 11, 5, 8, 13, 6, 12, 9}));  // digit d has id 4 + d
  EXPECT_LE(best.tokens.size(), src.size() + 50);  // the default limit: source length + 50
  EXPECT_EQ(text, digits.decode(best.tokens));
  EXPECT_EQ(text.find(' '), std::string::npos) << text;  // characters, written without spaces
}

}  // namespace
