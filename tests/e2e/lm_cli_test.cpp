// `attn train --arch decoder-only|encoder-only`, `attn generate` and `attn fill-mask` end to end
// (ATTN_BINARY through the shell, in a temporary folder): a tiny GPT-style model learns a text in
// about two seconds and greedy generation continues its lines; a stopped and resumed run repeats
// the uninterrupted one; a tiny BERT-style model fills masks; and bad input (empty files and
// prompts, unknown tokens, prompts too long for learned positions, contradictory sampling
// options, models of the wrong family) exits non-zero with a message naming the problem.
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

// Lines of 8 letters following a..p cyclically ("abcdefgh", "bcdefghi", ...), `copies` times.
std::string alphabet_text(int copies) {
  const std::string letters = "abcdefghijklmnop";
  std::string text;
  for (int c = 0; c < copies; ++c)
    for (size_t start = 0; start < letters.size(); ++start) {
      for (size_t k = 0; k < 8; ++k) text += letters[(start + k) % letters.size()];
      text += "\n";
    }
  return text;
}

// Lines of one letter repeated 4 to 8 times: a masked letter is any other letter of its line.
std::string letter_text(int copies) {
  const std::string letters = "abcdefghijklmnop";
  std::string text;
  for (int c = 0; c < copies; ++c)
    for (size_t k = 0; k < letters.size(); ++k) text += std::string(4 + (k + static_cast<size_t>(c)) % 5, letters[k]) + "\n";
  return text;
}

const std::string kSmall =
    "--d-model 32 --heads 2 --d-ff 64 --batch-size 16 --schedule constant --lr 0.01 --warmup 10 "
    "--label-smoothing 0 --threads 1";

class LmCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(ATTN_BINARY)) << "build the attn executable first: " << ATTN_BINARY;
    io::write_file_atomic(tmp_.file("train.txt"), alphabet_text(4));
    io::write_file_atomic(tmp_.file("valid.txt"), alphabet_text(1));
    io::write_file_atomic(tmp_.file("letters.txt"), letter_text(4));
  }
  TempDir tmp_{"attn_lm_cli"};
};

TEST_F(LmCli, DecoderOnlyModelLearnsATextAndGenerateContinuesItsLines) {
  const Outcome r = run_attn(tmp_, "train --arch decoder-only --text train.txt --valid-text valid.txt --out lm "
                                   "--layers 2 --epochs 20 --dropout 0 --attention-dropout 0 --samples 16 " + kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const auto metrics = io::read_metrics_log(tmp_.file("lm/metrics.jsonl"), "test").records;
  ASSERT_EQ(metrics.size(), 20u);
  EXPECT_LT(metrics.back()["loss"].get<double>(), 0.5 * metrics.front()["loss"].get<double>());
  EXPECT_LT(metrics.back()["val_ppl"].get<double>(), metrics.front()["val_ppl"].get<double>());
  EXPECT_TRUE(metrics.back()["val_exact_acc"].is_null());
  EXPECT_NE(r.out.find("16 of 16 right"), std::string::npos) << r.out;  // greedy halves of every validation line
  EXPECT_TRUE(fs::is_regular_file(tmp_.file("lm/report.html")));
  EXPECT_NE(r.err.find("val_ppl"), std::string::npos) << r.err;

  // The memorised lines continue; several prompts are one batch, each on its own line.
  const Outcome g = run_attn(tmp_, "generate --model lm --prompt abcd --prompt jklm --prompt nopab --greedy");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out, "efgh\nnopa\ncde\n");
  const Outcome w = run_attn(tmp_, "generate --model lm --prompt fgh --with-prompt --max-tokens 3");
  EXPECT_EQ(w.out, "fghijk\n");  // cut after 3 tokens
  // Prompts from stdin or a file, read in batches.
  io::write_file_atomic(tmp_.file("prompts.txt"), "abcd\ncdef\n");
  EXPECT_EQ(run_attn(tmp_, "generate --model lm --batch-size 1", "abcd\ncdef\n").out, "efgh\nghij\n");
  EXPECT_EQ(run_attn(tmp_, "generate --model lm --input prompts.txt").out, "efgh\nghij\n");
  // Beam search with an n-best list; sampling reproducible from its seed.
  const Outcome b = run_attn(tmp_, "generate --model lm --prompt abcd --beam 3 --n-best 2");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(b.out.rfind("1\t1\t", 0), 0u) << b.out;
  EXPECT_NE(b.out.find("\tefgh\n"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("1\t2\t"), std::string::npos) << b.out;
  const std::string sample = "generate --model lm --prompt ab --prompt ij --temperature 1.5 --top-k 5 --top-p 0.9 --seed 4";
  const Outcome s1 = run_attn(tmp_, sample), s2 = run_attn(tmp_, sample);
  ASSERT_EQ(s1.exit_code, 0) << s1.err;
  EXPECT_EQ(s1.out, s2.out);
  // The report's example is a continuation, and inspect draws it.
  const Outcome i = run_attn(tmp_, "inspect --model lm --src bcd --out insp");
  ASSERT_EQ(i.exit_code, 0) << i.err;
  EXPECT_NE(i.out.find("output:  efghi"), std::string::npos) << i.out;
  EXPECT_TRUE(fs::is_regular_file(tmp_.file("insp/figures/02_causal_mask.svg")));
}

TEST_F(LmCli, StoppedAndResumedDecoderOnlyRunRepeatsTheUninterruptedOne) {
  const std::string args = "--arch decoder-only --text train.txt --valid-text valid.txt --layers 1 --no-report "
                           "--samples 0 " + kSmall;
  ASSERT_EQ(run_attn(tmp_, "train --out whole --epochs 3 " + args).exit_code, 0);
  ASSERT_EQ(run_attn(tmp_, "train --out part --epochs 2 " + args).exit_code, 0);
  expect_clean_failure(run_attn(tmp_, "train --out part --resume --mask-prob 0.2"), "mask_prob");
  const Outcome resumed = run_attn(tmp_, "train --out part --resume --epochs 3 --no-report --samples 0");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resuming at step 8"), std::string::npos) << resumed.err;
  const auto a = io::read_metrics_log(tmp_.file("whole/metrics.jsonl"), "test").records;
  const auto b = io::read_metrics_log(tmp_.file("part/metrics.jsonl"), "test").records;
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t e = 0; e < 3; ++e)
    for (const char* k : {"loss", "val_loss", "val_ppl", "val_token_acc", "lr"})
      EXPECT_EQ(a[e][k], b[e][k]) << "epoch " << e + 1 << " " << k;
  EXPECT_EQ(io::read_file(tmp_.file("whole/model.safetensors")), io::read_file(tmp_.file("part/model.safetensors")));
}

TEST_F(LmCli, EncoderOnlyModelLearnsAndFillMaskRanksTheCandidates) {
  const Outcome r = run_attn(tmp_, "train --arch encoder-only --text letters.txt --out mlm --layers 1 --epochs 10 "
                                   "--samples 3 " + kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.err.find("[MASK] = id 4"), std::string::npos) << r.err;
  const nlohmann::json vocab = nlohmann::json::parse(io::read_file(tmp_.file("mlm/vocab.json")));
  EXPECT_EQ(vocab["tokens"][4], "[MASK]");
  EXPECT_EQ(vocab["mask"], true);
  const auto metrics = io::read_metrics_log(tmp_.file("mlm/metrics.jsonl"), "test").records;
  ASSERT_EQ(metrics.size(), 10u);
  EXPECT_LT(metrics.back()["loss"].get<double>(), 0.5 * metrics.front()["loss"].get<double>());
  EXPECT_NE(r.out.find("3 of 3 right"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_regular_file(tmp_.file("mlm/figures/02_self_attention.svg")));
  EXPECT_NE(io::read_file(tmp_.file("mlm/report.html")).find("[MASK]"), std::string::npos);

  const Outcome f = run_attn(tmp_, "fill-mask --model mlm --text \"ccc[MASK]cc\" --text \"[MASK]kk[MASK]\" --top-k 2");
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_NE(f.out.find("ccc[MASK]cc -> cccccc\n  mask 1 (token 4): 'c' 0."), std::string::npos) << f.out;
  EXPECT_NE(f.out.find("[MASK]kk[MASK] -> kkkk\n  mask 1 (token 1): 'k' 0."), std::string::npos) << f.out;
  EXPECT_NE(f.out.find("  mask 2 (token 4): 'k' 0."), std::string::npos) << f.out;
  // Texts from stdin, one per line.
  const Outcome in = run_attn(tmp_, "fill-mask --model mlm --top-k 1", "aa[MASK]a\n");
  EXPECT_NE(in.out.find("aa[MASK]a -> aaaa"), std::string::npos) << in.out << in.err;
}

TEST_F(LmCli, BadInputExitsNonZeroNamingTheProblem) {
  io::write_file_atomic(tmp_.file("empty.txt"), "");
  io::write_file_atomic(tmp_.file("blank.txt"), "\n \n");
  // Models of each family, trained for one epoch: a decoder-only one with 9 learned positions
  // (<bos> + 8 letters), an encoder-only one and an encoder-decoder one.
  ASSERT_EQ(run_attn(tmp_, "train --arch decoder-only --text train.txt --out lm --layers 1 --epochs 1 --positional "
                           "learned --max-len 9 --no-report --samples 0 " + kSmall).exit_code, 0);
  ASSERT_EQ(run_attn(tmp_, "train --arch encoder-only --text letters.txt --out mlm --layers 1 --epochs 1 --no-report "
                           "--samples 0 " + kSmall).exit_code, 0);
  ASSERT_EQ(run_attn(tmp_, "train --task copy --length 3 --symbols 3 --train-size 32 --valid-size 0 --out seq2seq "
                           "--layers 1 --epochs 1 --no-report --samples 0 " + kSmall).exit_code, 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train --arch decoder-only --text empty.txt --out run", "no text"},
      {"train --arch decoder-only --text blank.txt --out run", "no text"},
      {"train --arch decoder-only --text missing.txt --out run", "missing.txt"},
      {"train --arch decoder-only --text train.txt --valid-text empty.txt --out run", "empty.txt"},
      {"train --arch decoder-only --out run", "text file"},
      {"train --text train.txt --out run", "decoder_only or encoder_only"},
      {"train --arch encoder-only --text train.txt --mask-prob 1.5 --out run", "mask_prob"},
      {"train --arch decoder-only --text train.txt --task copy --out run", "not both"},
      {"train --arch gpt --text train.txt --out run", "--arch"},
      {"train --arch decoder-only --text train.txt --positional learned --max-len 8 --out run", "max_len"},
      {"generate --model lm --prompt \"\"", "--prompt 1: the prompt is empty"},
      {"generate --model lm --prompt ab --prompt a7", "token '7' of the prompt is not in the model's vocabulary"},
      {"generate --model lm --prompt abcdefghi", "max_len"},
      {"generate --model lm", "stdin holds no prompt"},
      {"generate --model lm --input missing.txt", "missing.txt"},
      {"generate --model lm --prompt ab --greedy --temperature 0.7", "--greedy"},
      {"generate --model lm --prompt ab --greedy --beam 2", "--greedy and --beam"},
      {"generate --model lm --prompt ab --beam 2 --top-k 3", "--top-k"},
      {"generate --model lm --prompt ab --top-p 1.5", "--top-p must be in (0, 1]"},
      {"generate --model lm --prompt ab --top-p 0", "--top-p must be in (0, 1]"},
      {"generate --model lm --prompt ab --temperature 0", "--temperature"},
      {"generate --model lm --prompt ab --n-best 2", "need --beam"},
      {"generate --model lm --prompt ab --max-tokens 0", "--max-tokens"},
      {"generate --model seq2seq --prompt 0", "attn translate"},
      {"generate --model mlm --prompt ab", "attn fill-mask"},
      {"generate --model missing --prompt ab", "does not exist"},
      {"translate --model lm", "attn generate"},
      {"eval --model mlm --task copy", "attn fill-mask"},
      {"fill-mask --model mlm --text abc", "no [MASK]"},
      {"fill-mask --model mlm --text \"\"", "empty"},
      {"fill-mask --model mlm --text \"a[MASK]z\"", "token 'z'"},
      {"fill-mask --model mlm --text \"[MASK]\" --top-k 0", "--top-k"},
      {"fill-mask --model lm --text \"a[MASK]\"", "attn generate"},
  };
  for (const auto& [args, needle] : cases) {
    SCOPED_TRACE(args);
    expect_clean_failure(run_attn(tmp_, args), needle);
    EXPECT_FALSE(fs::exists(tmp_.file("run"))) << "partial output left by: " << args;
  }
}

}  // namespace
}  // namespace attn::cli
