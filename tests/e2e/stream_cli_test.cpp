// `attn train --stream` end to end (ATTN_BINARY through the shell, in a temporary folder): a
// TSV corpus read in chunks much smaller than the file trains, logs its chunks and skipped
// examples, and a run that crashed after a checkpoint inside an epoch (later checkpoints
// removed) resumes to the uninterrupted run's metrics and weights bit for bit; a corpus that
// changed since the checkpoint, or --stream with a synthetic task, exits non-zero naming it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attn/io/atomic_file.h"
#include "attn/io/metrics_log.h"
#include "attn/train/checkpointing.h"
#include "support/cli_run.h"
#include "unit/models/broken_checkpoints.h"

namespace attn::cli {
namespace {

namespace fs = std::filesystem;
using models::test_util::TempDir;
using test::expect_clean_failure;
using test::Outcome;
using test::run_attn;

// n pairs "letters<TAB>LETTERS" of 1..9 and 1..6 characters (CRLF line ends: Windows files work).
std::string corpus(int n, int shift) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    const int len = 1 + (i * 7) % 9;
    for (int k = 0; k < len; ++k) s += static_cast<char>('a' + (i + k + shift) % 8);
    s += '\t';
    for (int k = 0; k < 1 + (i * 5) % 6; ++k) s += static_cast<char>('A' + (i * 3 + k + shift) % 8);
    s += "\r\n";
  }
  return s;
}

// About 14 steps per epoch over 12 chunks of 8 lines.
const std::string kRun =
    "--data train.tsv --valid valid.tsv --stream --chunk-lines 8 --max-length 7 --d-model 16 --heads 2 "
    "--encoder-layers 1 --decoder-layers 1 --d-ff 32 --batch-size 6 --schedule cosine --lr 0.01 --warmup 2 "
    "--threads 1 --epochs 2 --keep 0 --checkpoint-every 5 --no-report --samples 0";

TEST(StreamCli, AStreamedRunResumedInsideAnEpochEndsBitIdenticalToAnUninterruptedOne) {
  TempDir tmp("attn_stream_cli");
  io::write_file_atomic(tmp.file("train.tsv"), "\xEF\xBB\xBF" + corpus(92, 0));
  io::write_file_atomic(tmp.file("valid.tsv"), corpus(10, 3));
  const Outcome whole = run_attn(tmp, "train --out whole " + kRun);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_NE(whole.err.find("streamed: 92 lines in 12 chunks"), std::string::npos) << whole.err;
  EXPECT_NE(whole.err.find("longer than the limits skipped"), std::string::npos) << whole.err;

  // The same run, then "crashed" after its first checkpoint inside epoch 2: later ones removed.
  const Outcome part = run_attn(tmp, "train --out part " + kRun);
  ASSERT_EQ(part.exit_code, 0) << part.err;
  const auto metrics = io::read_metrics_log(tmp.file("whole/metrics.jsonl"), "test").records;
  ASSERT_EQ(metrics.size(), 2u);
  const int64_t epoch1 = metrics[0]["step"].get<int64_t>();
  int64_t resume_at = 0;
  for (const auto& c : train::list_checkpoints(tmp.file("part"))) {
    if (c.step > epoch1 && c.step % 5 == 0 && resume_at == 0) resume_at = c.step;
    else if (c.step > epoch1) fs::remove_all(c.path);
  }
  ASSERT_GT(resume_at, epoch1);
  ASSERT_LT(resume_at, metrics[1]["step"].get<int64_t>());  // inside the second epoch
  const Outcome resumed = run_attn(tmp, "train --out part --resume --no-report --samples 0");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto again = io::read_metrics_log(tmp.file("part/metrics.jsonl"), "test").records;
  ASSERT_EQ(again.size(), 2u);
  for (size_t i = 0; i < 2; ++i)
    for (const char* k : {"step", "loss", "val_loss", "val_token_acc", "lr"})
      EXPECT_EQ(metrics[i][k], again[i][k]) << "epoch " << i + 1 << " " << k;
  EXPECT_EQ(io::read_file(tmp.file("whole/model.safetensors")), io::read_file(tmp.file("part/model.safetensors")));

  // The corpus changed (same size, other pairs): resuming is refused, naming it.
  std::string changed = "\xEF\xBB\xBF" + corpus(92, 0);
  std::swap(changed[3], changed[5]);
  io::write_file_atomic(tmp.file("train.tsv"), changed);
  for (const auto& c : train::list_checkpoints(tmp.file("part")))
    if (c.step > resume_at) fs::remove_all(c.path);
  const Outcome refused = run_attn(tmp, "train --out part --resume --no-report --samples 0");
  expect_clean_failure(refused, "changed");
}

TEST(StreamCli, StreamingASyntheticTaskOrABadCorpusIsRefused) {
  TempDir tmp("attn_stream_cli");
  expect_clean_failure(run_attn(tmp, "train --out run --task copy --stream"), "stream");
  EXPECT_FALSE(fs::exists(tmp.file("run")));
  io::write_file_atomic(tmp.file("bad.tsv"), "a\tb\nno tab\n");
  expect_clean_failure(run_attn(tmp, "train --out run --data bad.tsv --stream --chunk-lines 1"), "line 2: no tab");
  EXPECT_FALSE(fs::exists(tmp.file("run")));
  io::write_file_atomic(tmp.file("ok.tsv"), "a\tb\n");
  expect_clean_failure(run_attn(tmp, "train --out run --data ok.tsv --stream --chunk-lines 0"), "chunk_lines");
}

}  // namespace
}  // namespace attn::cli
