// SentencePiece vocabularies through the command line (ATTN_BINARY through the shell, in a
// temporary folder): `attn vocab train` then `attn train --vocab` on a TSV corpus (an
// encoder-decoder) and on a text file (decoder-only, encoder-only with --mask); the run, its
// checkpoints and `attn average`'s folder carry sentencepiece.model; translate / generate /
// fill-mask print detokenized text; a sentencepiece.model of another vocabulary is refused naming
// both files; --resume keeps working; `attn eval` maps unseen characters to <unk> and counts them,
// and evaluates single-stack models on a text file.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attn/io/atomic_file.h"
#include "support/cli_run.h"
#include "unit/models/broken_checkpoints.h"

namespace attn::cli {
namespace {

namespace fs = std::filesystem;
using models::test_util::TempDir;
using test::expect_clean_failure;
using test::Outcome;
using test::run_attn;

const char* kWords[] = {"the", "cat", "sat", "on", "mat", "dog", "ran", "far", "big", "house", "small", "bird"};

// `n` lines of 2-3 words, deterministic.
std::vector<std::string> phrases(int n, uint32_t seed) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string line;
    for (int k = 0; k < 2 + i % 2; ++k) {
      seed = seed * 1103515245u + 12345u;
      line += (k ? " " : "") + std::string(kWords[(seed >> 16) % 12]);
    }
    out.push_back(line);
  }
  return out;
}

const std::string kSmall =
    "--d-model 32 --heads 2 --d-ff 64 --layers 1 --batch-size 16 --schedule constant --lr 0.01 --warmup 10 "
    "--label-smoothing 0 --threads 1 --no-report";

class SubwordCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(ATTN_BINARY)) << "build the attn executable first: " << ATTN_BINARY;
    std::string tsv, text;
    const auto lines = phrases(48, 5);
    for (const std::string& p : lines) {
      tsv += p + "\t" + p + "\n";  // copying phrases: learnable in seconds
      text += p + "\n";
    }
    io::write_file_atomic(tmp_.file("train.tsv"), tsv);
    io::write_file_atomic(tmp_.file("valid.tsv"), tsv.substr(0, tsv.find('\n', 200) + 1));
    io::write_file_atomic(tmp_.file("train.txt"), text);
    io::write_file_atomic(tmp_.file("valid.txt"), text.substr(0, text.find('\n', 100) + 1));
  }
  TempDir tmp_{"attn_subword_cli"};
};

TEST_F(SubwordCli, EncoderDecoderTrainsWithASharedSentencePieceVocabularyAndTranslatesToText) {
  const Outcome v = run_attn(tmp_, "vocab train --input train.txt --size 30 --type bpe --output spm");
  ASSERT_EQ(v.exit_code, 0) << v.err;
  const Outcome r = run_attn(tmp_, "train --data train.tsv --valid valid.tsv --vocab spm --out mt --epochs 3 "
                                   "--samples 2 --keep 0 " + kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.err.find("SentencePiece vocabulary"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("shared by source and target"), std::string::npos) << r.err;
  const std::string model = io::read_file(tmp_.file("spm/sentencepiece.model"));
  EXPECT_EQ(io::read_file(tmp_.file("mt/sentencepiece.model")), model);
  EXPECT_EQ(io::read_file(tmp_.file("mt/checkpoints/step_00000009/sentencepiece.model")), model);
  const nlohmann::json vocab = nlohmann::json::parse(io::read_file(tmp_.file("mt/vocab.json")));
  EXPECT_EQ(vocab["tokenization"], "sentencepiece");
  EXPECT_EQ(vocab["sentencepiece"]["pieces"], 30);
  const nlohmann::json tc = nlohmann::json::parse(io::read_file(tmp_.file("mt/train_config.json")));
  EXPECT_EQ(tc["tokens"], "sentencepiece");
  EXPECT_TRUE(fs::path(tc["vocab"].get<std::string>()).is_absolute());

  // Detokenized output: words separated by spaces, no "▁" markers or piece boundaries.
  const Outcome t = run_attn(tmp_, "translate --model mt", "the cat sat\ndog ran\n");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(t.out.find("\xE2\x96\x81"), std::string::npos) << t.out;
  EXPECT_EQ(std::count(t.out.begin(), t.out.end(), '\n'), 2) << t.out;
  const Outcome ids = run_attn(tmp_, "translate --model mt --ids", "5 6 7\n");
  EXPECT_EQ(ids.exit_code, 0) << ids.err;

  // Resume and checkpoint averaging keep the vocabulary.
  const Outcome res = run_attn(tmp_, "train --out mt --resume --epochs 4 --samples 0");
  ASSERT_EQ(res.exit_code, 0) << res.err;
  const Outcome avg = run_attn(tmp_, "average --model mt --last 2 --out avg");
  ASSERT_EQ(avg.exit_code, 0) << avg.err;
  EXPECT_EQ(io::read_file(tmp_.file("avg/sentencepiece.model")), model);
  EXPECT_EQ(run_attn(tmp_, "translate --model avg", "the cat\n").exit_code, 0);
  // eval and score read the SentencePiece text too.
  const Outcome e = run_attn(tmp_, "eval --model mt --data valid.tsv --metric bleu,chrf");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NE(e.out.find("chrF2 = "), std::string::npos) << e.out;
  EXPECT_EQ(run_attn(tmp_, "score --model mt", "the cat\tthe cat\n").exit_code, 0);

  // A sentencepiece.model of another vocabulary in the folder is an error naming both files.
  ASSERT_EQ(run_attn(tmp_, "vocab train --input train.txt --size 28 --output other").exit_code, 0);
  fs::copy_file(tmp_.file("other/sentencepiece.model"), tmp_.file("avg/sentencepiece.model"),
                fs::copy_options::overwrite_existing);
  const Outcome bad = run_attn(tmp_, "translate --model avg", "the cat\n");
  expect_clean_failure(bad, "a vocabulary file from another model");
  EXPECT_NE(bad.err.find("vocab.json"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("sentencepiece.model"), std::string::npos) << bad.err;
  fs::remove(tmp_.file("avg/sentencepiece.model"));
  expect_clean_failure(run_attn(tmp_, "translate --model avg", "the cat\n"), "missing");
  // --vocab that is not a SentencePiece model, or with another tokenization.
  expect_clean_failure(run_attn(tmp_, "train --data train.tsv --vocab train.txt --out x " + kSmall), "train.txt");
  expect_clean_failure(run_attn(tmp_, "train --data train.tsv --vocab spm --tokens words --out x " + kSmall),
                       "sentencepiece");
  expect_clean_failure(run_attn(tmp_, "train --task copy --vocab spm --out x " + kSmall), "synthetic task");
}

TEST_F(SubwordCli, LanguageModelsTrainOnSubwordsAndEvalReportsPerplexityAndMaskedAccuracy) {
  ASSERT_EQ(run_attn(tmp_, "vocab train --input train.txt --size 30 --output spm").exit_code, 0);
  const Outcome r = run_attn(tmp_, "train --arch decoder-only --text train.txt --valid-text valid.txt --vocab "
                                   "spm/sentencepiece.model --out lm --epochs 2 --samples 2 " + kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_TRUE(fs::is_regular_file(tmp_.file("lm/sentencepiece.model")));
  const Outcome g = run_attn(tmp_, "generate --model lm --prompt \"the cat\" --with-prompt --max-tokens 4");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out.rfind("the cat", 0), 0u) << g.out;
  EXPECT_EQ(g.out.find("\xE2\x96\x81"), std::string::npos) << g.out;
  const Outcome e = run_attn(tmp_, "eval --model lm --text valid.txt --json");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const nlohmann::json j = nlohmann::json::parse(e.out);
  EXPECT_EQ(j["arch"], "decoder_only");
  EXPECT_GT(j["perplexity"].get<double>(), 1.0);
  EXPECT_LT(j["perplexity"].get<double>(), 30.0);  // better than uniform over the 30 pieces
  EXPECT_GT(j["characters"].get<int64_t>(), j["tokens"].get<int64_t>());  // subwords span characters
  EXPECT_NEAR(j["loss_per_char"].get<double>() * j["characters"].get<double>(),
              j["loss"].get<double>() * j["tokens"].get<double>(), 1e-6);
  const Outcome plain = run_attn(tmp_, "eval --model lm");  // the run's validation text
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("perplexity_char:"), std::string::npos) << plain.out;
  expect_clean_failure(run_attn(tmp_, "eval --model lm --data train.tsv"), "--text");

  // Encoder-only: the vocabulary must reserve [MASK] (vocab train --mask).
  expect_clean_failure(run_attn(tmp_, "train --arch encoder-only --text train.txt --vocab spm --out bad " + kSmall),
                       "--mask");
  ASSERT_EQ(run_attn(tmp_, "vocab train --input train.txt --size 30 --mask --output spm_mask").exit_code, 0);
  const Outcome m = run_attn(tmp_, "train --arch encoder-only --text train.txt --valid-text valid.txt --vocab "
                                   "spm_mask --out mlm --epochs 2 --samples 1 " + kSmall);
  ASSERT_EQ(m.exit_code, 0) << m.err << m.out;
  EXPECT_NE(m.err.find("[MASK] = id 4"), std::string::npos) << m.err;
  const Outcome f = run_attn(tmp_, "fill-mask --model mlm --text \"the [MASK] sat\" --top-k 2");
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_NE(f.out.find("the [MASK] sat -> "), std::string::npos) << f.out;
  EXPECT_NE(f.out.find("mask 1 (token "), std::string::npos) << f.out;
  const std::string filled = f.out.substr(0, f.out.find('\n'));
  EXPECT_EQ(filled.find("  "), std::string::npos) << f.out;  // no doubled space where the mask was
  const Outcome a = run_attn(tmp_, "eval --model mlm --text valid.txt --seed 3");
  const Outcome b = run_attn(tmp_, "eval --model mlm --text valid.txt --seed 3");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.out.find("masked_token_acc:"), std::string::npos) << a.out;
  EXPECT_EQ(a.out, b.out);  // the masks come from the seed
}

TEST_F(SubwordCli, EvalReadsCharactersUnseenInTrainingAsUnkAndCountsThem) {
  ASSERT_EQ(run_attn(tmp_, "train --data train.tsv --out chars --epochs 1 --samples 0 " + kSmall).exit_code, 0);
  io::write_file_atomic(tmp_.file("unseen.tsv"), "the Cat\tthe cat\nbig dog\tbig Dog!\n");
  const Outcome e = run_attn(tmp_, "eval --model chars --data unseen.tsv");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NE(e.out.find("unknown:          1 source, 2 target tokens"), std::string::npos) << e.out;
  const Outcome j = run_attn(tmp_, "eval --model chars --data unseen.tsv --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(nlohmann::json::parse(j.out)["unknown_source_tokens"], 1);
  // translate still refuses them: it has no reference to score, so an unknown input is a mistake.
  expect_clean_failure(run_attn(tmp_, "translate --model chars", "the Cat\n"), "not in the model's vocabulary");
}

}  // namespace
}  // namespace attn::cli
