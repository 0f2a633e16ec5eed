// train/run_record: what a run folder's train_config.json says about the data it trained on
// (the synthetic task with its validation seed and size, or the validation corpus's path),
// read back as `attn train` writes it.
#include "attn/train/run_record.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "attn/io/atomic_file.h"
#include "unit/models/broken_checkpoints.h"

namespace attn::train {
namespace {

using models::test_util::TempDir;

TEST(TrainConfigFile, ReadsTheTaskAsAttnTrainWritesIt) {
  TrainConfig c;
  c.task = "sort";
  c.length = 6;
  c.min_length = 2;
  c.symbols = 7;
  c.data_seed = 99;
  c.valid_size = 40;
  const auto run = task_from_train_config(c.to_json());
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->task.kind, TaskKind::Sort);
  EXPECT_EQ(run->task.length, 6);
  EXPECT_EQ(run->task.min_length, 2);
  EXPECT_EQ(run->task.n_symbols, 7);
  EXPECT_EQ(run->data_seed, 99u);
  EXPECT_EQ(run->valid_size, 40);

  // A corpus run has no task; its validation file is found next to the run when relative.
  TempDir tmp("attn_run_record");
  io::write_file_atomic(tmp.file("valid.tsv"), "1\t1\n");
  TrainConfig tsv;
  tsv.task = "";
  tsv.train_path = "train.tsv";
  tsv.valid_path = "valid.tsv";
  EXPECT_FALSE(task_from_train_config(tsv.to_json()).has_value());
  EXPECT_EQ(valid_path_from_train_config(tsv.to_json(), tmp.path), tmp.file("valid.tsv"));
  tsv.valid_path = "gone.tsv";
  EXPECT_EQ(valid_path_from_train_config(tsv.to_json(), tmp.path), "");
  // Absent or foreign files give no task.
  EXPECT_FALSE(task_from_train_config(nlohmann::json()).has_value());
  EXPECT_FALSE(task_from_train_config(nlohmann::json{{"no_such_key", 1}}).has_value());
}

}  // namespace
}  // namespace attn::train
