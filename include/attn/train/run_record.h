// attn/train/run_record.h — what a training run's train_config.json (as a model folder keeps it,
// run::ModelFolder::train_config) says about the data it trained on: the configuration itself,
// the synthetic task with its validation seed and size, or the validation corpus's path. The
// commands that evaluate or draw a run folder use it to find the run's own validation examples.
// Not here: writing train_config.json (the trainer's), or opening model folders (run/).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "attn/train/tasks.h"
#include "attn/train/train_config.h"

namespace attn::train {

// train_config.json as `attn train` writes it; std::nullopt when the folder has none (null
// JSON) or it does not parse as a TrainConfig.
std::optional<TrainConfig> run_train_config(const nlohmann::json& train_config);

// The synthetic task a training run used, with the seed and size of its validation set
// (validation examples are make_task_dataset(task, 0, valid_size, data_seed).valid).
struct RunTask {
  TaskConfig task{};
  uint64_t data_seed = kTaskSeed;
  int64_t valid_size = kTaskValidSize;
};
// std::nullopt when the run trained on a corpus, or its train_config.json is absent or unreadable.
std::optional<RunTask> task_from_train_config(const nlohmann::json& train_config);
// The validation corpus of a corpus run ("valid"), resolved against the run folder when
// relative and not found as given; empty when none is recorded or the file is gone.
std::string valid_path_from_train_config(const nlohmann::json& train_config, const std::string& run_dir);

}  // namespace attn::train
