// `attn train --init GPT2_FOLDER` end to end on the torch fixtures' small Hugging Face GPT-2
// (make_fixtures.py): SFT through its BPE tokenizer lowers the response loss, writes OUT (an attn
// folder, token ids only) and OUT/hf (the Hugging Face layout with the tokenizer) holding the
// same weights, which attn generate and attn info load, and --resume continues; DPO against the
// fixtures' second GPT-2 folder as --ref reports its preference metrics; a reference that is not
// a GPT-2 folder is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "attn/io/atomic_file.h"
#include "attn/io/metrics_log.h"
#include "attn/models/checkpoint.h"
#include "attn/models/gpt2.h"
#include "support/cli_run.h"
#include "torch/fixture.h"
#include "unit/models/broken_checkpoints.h"

namespace attn::test {
namespace {

namespace fs = std::filesystem;
using models::test_util::TempDir;

const std::string kRun = "--batch-size 4 --schedule constant --lr 0.003 --warmup 0 --label-smoothing 0 --threads 1 "
                         "--no-report";

TEST(FinetuneGpt2Cli, SftWritesBothLayoutsAndDpoAgainstAGpt2Reference) {
  const std::string gpt2 = TorchCase::fixture_dir() + "/gpt2_small";
  const std::string ref = TorchCase::fixture_dir() + "/gpt2_small_ref";
  ASSERT_TRUE(fs::exists(gpt2)) << "run the torch_fixtures test first";
  TempDir tmp("attn_finetune_gpt2");
  io::write_file_atomic(tmp.file("p.tsv"), "the cat\tis on the hill\nthe dog\tis in the sun\na cat\tsat on a hat\n"
                                           "the hill\tis here\n");
  io::write_file_atomic(tmp.file("pv.tsv"), "the cat\tis on the hill\n");
  const Outcome sft = run_attn(tmp, "train --out g --init '" + gpt2 + "' --objective sft --pairs p.tsv "
                                    "--valid-pairs pv.tsv --epochs 4 --samples 1 " + kRun);
  ASSERT_EQ(sft.exit_code, 0) << sft.err;
  EXPECT_NE(sft.err.find("Hugging Face GPT-2"), std::string::npos) << sft.err;
  const auto m = io::read_metrics_log(tmp.file("g/metrics.jsonl"), "test").records;
  ASSERT_EQ(m.size(), 4u);
  EXPECT_LT(m.back()["loss"].get<double>(), m.front()["loss"].get<double>());
  for (const char* f : {"config.json", "model.safetensors", "vocab.json", "merges.txt"})
    EXPECT_TRUE(fs::exists(tmp.file(std::string("g/hf/") + f))) << f;
  EXPECT_FALSE(fs::exists(tmp.file("g/vocab.json")));
  // Both layouts hold the same weights.
  const auto ours = models::load_model(tmp.file("g"));
  const auto hf = models::load_gpt2_model(tmp.file("g/hf"));
  for (const auto& [name, p] : ours->named_parameters())
    EXPECT_EQ(p.to_vector<float>(), hf->parameter(name).to_vector<float>()) << name;
  EXPECT_EQ(run_attn(tmp, "generate --model g/hf --prompt 'the cat\n' --max-tokens 4").exit_code, 0);
  EXPECT_EQ(run_attn(tmp, "info --model g").exit_code, 0);
  const Outcome resumed = run_attn(tmp, "train --out g --resume --epochs 5 --no-report --samples 0");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(io::read_metrics_log(tmp.file("g/metrics.jsonl"), "test").records.size(), 5u);

  io::write_file_atomic(tmp.file("d.tsv"), "the cat\tis on the hill\tis the sun\nthe dog\tis in the sun\tsat\n");
  io::write_file_atomic(tmp.file("dv.tsv"), "a cat\tsat on a hat\tis a hill\n");
  const Outcome dpo = run_attn(tmp, "train --out d --init '" + gpt2 + "' --ref '" + ref + "' --objective dpo "
                                    "--pairs d.tsv --valid-pairs dv.tsv --epochs 2 " + kRun);
  ASSERT_EQ(dpo.exit_code, 0) << dpo.err;
  const auto d = io::read_metrics_log(tmp.file("d/metrics.jsonl"), "test").records;
  ASSERT_EQ(d.size(), 2u);
  EXPECT_TRUE(d.back()["val_pref_acc"].is_number());
  EXPECT_TRUE(fs::exists(tmp.file("d/hf/config.json")));

  const Outcome bad = run_attn(tmp, "train --out x --init '" + gpt2 + "' --ref g --objective dpo --pairs d.tsv " + kRun);
  expect_clean_failure(bad, "is not a GPT-2 folder");
  EXPECT_FALSE(fs::exists(tmp.file("x")));
}

}  // namespace
}  // namespace attn::test
