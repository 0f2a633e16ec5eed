// The paged KV cache on the command line (ATTN_BINARY through the shell): `attn generate` and
// `attn translate` with --kv-cache paged (and --kv-block) print exactly what the contiguous
// cache prints, greedy, beam search with n-best scores, sampling and speculative decoding;
// a pool too small for the batch exits 1 with an error naming --kv-pool-mb; bad values of the
// flags, and --kv-block / --kv-pool-mb without --kv-cache paged, are errors naming the flag;
// --kv-dtype bf16 runs (selecting the paged cache) and its errors name the flags.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

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

const std::string kSmall =
    "--heads 2 --batch-size 16 --schedule constant --lr 0.01 --warmup 10 --label-smoothing 0 --threads 1 "
    "--dropout 0 --attention-dropout 0";

class PagedKvCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    trained_ = new TempDir("attn_paged_kv_models");
    const TempDir& t = *trained_;
    std::string text;
    const std::string letters = "abcdefghijklmnop";
    for (int c = 0; c < 4; ++c)
      for (size_t s = 0; s < letters.size(); ++s) {
        for (size_t k = 0; k < 8; ++k) text += letters[(s + k) % letters.size()];
        text += "\n";
      }
    io::write_file_atomic(t.file("train.txt"), text);
    const Outcome lm = run_attn(t, "train --arch decoder-only --text train.txt --out lm --layers 2 --d-model 32 "
                                   "--d-ff 64 --epochs 10 --samples 0 --positional rope --kv-heads 1 " + kSmall);
    ASSERT_EQ(lm.exit_code, 0) << lm.err;
    const Outcome mt = run_attn(t, "train --task reverse --length 5 --symbols 6 --train-size 500 --valid-size 16 "
                                   "--epochs 3 --layers 1 --d-model 32 --d-ff 64 --out mt " + kSmall);
    ASSERT_EQ(mt.exit_code, 0) << mt.err;
  }
  static void TearDownTestSuite() {
    delete trained_;
    trained_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(fs::exists(ATTN_BINARY)) << "build the attn executable first: " << ATTN_BINARY; }
  static const TempDir& models() { return *trained_; }
  static TempDir* trained_;
};
TempDir* PagedKvCli::trained_ = nullptr;

TEST_F(PagedKvCli, PagedPrintsWhatContiguousPrints) {
  const std::string prompts = "--prompt abcd --prompt jklmnop --prompt hhh --max-tokens 20 ";
  for (const std::string flags : {"", "--beam 3 --n-best 2 --scores", "--temperature 0.8 --top-k 5 --seed 4",
                                  "--prompt-lookup"}) {
    const Outcome plain = run_attn(models(), "generate --model lm " + prompts + flags);
    ASSERT_EQ(plain.exit_code, 0) << flags << "\n" << plain.err;
    for (const std::string kv : {"--kv-cache paged", "--kv-cache paged --kv-block 3", "--kv-cache paged --kv-block 1"}) {
      const Outcome paged = run_attn(models(), "generate --model lm " + prompts + flags + " " + kv);
      ASSERT_EQ(paged.exit_code, 0) << flags << " " << kv << "\n" << paged.err;
      EXPECT_EQ(paged.out, plain.out) << flags << " " << kv;
    }
  }
  const std::string input = "0 1 2 3 4\n5 4 3 2 1\n2 2 5 0 1\n3 1 4 1 5\n";
  for (const std::string flags : {"", "--beam 4 --n-best 2 --scores"}) {
    const Outcome plain = run_attn(models(), "translate --model mt " + flags, input);
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    const Outcome paged = run_attn(models(), "translate --model mt --kv-cache paged --kv-block 2 " + flags, input);
    ASSERT_EQ(paged.exit_code, 0) << paged.err;
    EXPECT_EQ(paged.out, plain.out) << flags;
  }
}

TEST_F(PagedKvCli, ATooSmallPoolAndBadFlagsAreErrors) {
  std::string input;
  for (int i = 0; i < 300; ++i) input += "0 1 2 3 4 5 4 3 2 1 0 1 2 3 4 5 4 3 2 1\n";
  expect_clean_failure(run_attn(models(), "translate --model mt --kv-cache paged --kv-pool-mb 1 --beam 8 "
                                          "--batch-size 300 --max-len 200", input),
                       "--kv-pool-mb");
  expect_clean_failure(run_attn(models(), "translate --model mt --kv-pool-mb 8", "0 1\n"), "--kv-pool-mb");
  expect_clean_failure(run_attn(models(), "translate --model mt --kv-block 8", "0 1\n"), "--kv-block");
  expect_clean_failure(run_attn(models(), "translate --model mt --kv-cache pages", "0 1\n"), "--kv-cache");
  expect_clean_failure(run_attn(models(), "generate --model lm --prompt ab --kv-cache paged --kv-block 0"),
                       "--kv-block");
  expect_clean_failure(run_attn(models(), "generate --model lm --prompt ab --kv-cache paged --kv-pool-mb 0"),
                       "--kv-pool-mb");
}

// --kv-dtype bf16 (the blocks rounded to bf16): generate and translate run with it, alone (it
// selects the paged cache) or with --kv-cache paged, and --kv-dtype f32 prints what the default
// prints. Whether bf16's tokens equal f32's is not asserted (rounding may move a near tie; the
// exact property is tested in tests/unit/decode/paged_kv_cache_test.cpp). Errors name the flags:
// bf16 with an explicit --kv-cache contiguous, an unknown dtype (with the allowed values).
TEST_F(PagedKvCli, Bf16KvCacheRunsAndItsErrorsNameTheFlags) {
  const std::string gen = "generate --model lm --prompt abcd --prompt hhh --max-tokens 12 ";
  const Outcome plain = run_attn(models(), gen);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const Outcome f32 = run_attn(models(), gen + "--kv-dtype f32");
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  EXPECT_EQ(f32.out, plain.out);
  for (const std::string kv : {"--kv-dtype bf16", "--kv-dtype bf16 --kv-cache paged --kv-block 3",
                               "--kv-dtype bf16 --beam 3 --n-best 2 --scores"}) {
    const Outcome bf16 = run_attn(models(), gen + kv);
    ASSERT_EQ(bf16.exit_code, 0) << kv << "\n" << bf16.err;
    EXPECT_FALSE(bf16.out.empty()) << kv;
  }
  const std::string input = "0 1 2 3 4\n5 4 3 2 1\n";
  const Outcome mt = run_attn(models(), "translate --model mt --kv-dtype bf16 --kv-pool-mb 1", input);
  ASSERT_EQ(mt.exit_code, 0) << mt.err;
  EXPECT_FALSE(mt.out.empty());

  // attn eval decodes an encoder-decoder (accuracy, corpus metrics) and takes the flags; a
  // decoder-only model's perplexity does not decode, and refuses them.
  const Outcome ev = run_attn(models(), "eval --model mt --count 8 --kv-dtype bf16 --metric chrf");
  ASSERT_EQ(ev.exit_code, 0) << ev.err;
  io::write_file_atomic(models().file("text.txt"), "abcdefgh\n");
  expect_clean_failure(run_attn(models(), "eval --model lm --text text.txt --kv-dtype bf16"), "--kv-dtype");

  const Outcome both = run_attn(models(), "translate --model mt --kv-dtype bf16 --kv-cache contiguous", input);
  expect_clean_failure(both, "--kv-dtype bf16");
  expect_clean_failure(both, "--kv-cache contiguous");
  const Outcome unknown = run_attn(models(), gen + "--kv-dtype f16");
  expect_clean_failure(unknown, "--kv-dtype");
  expect_clean_failure(unknown, "bf16");
}

}  // namespace
}  // namespace attn::cli
