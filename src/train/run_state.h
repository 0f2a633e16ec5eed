// train/run_state.h — private to attn_train: the run folder's state as the trainer writes and
// reads it (run_state.cpp also defines Trainer's state_json, restore_state, restore_rank_rngs,
// write_run_files, save_checkpoint and resume). state.json records everything a resumed run
// needs beyond weights and Adam moments: batch position, the epoch's running sums (as exact hex
// floats), every dropout generator (per rank), the metrics so far and the config.
// Not here: the checkpoint folders themselves (attn/train/checkpointing.h), the training loop.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn/train/trainer.h"

namespace attn::train {

// The path of the run file `name` (io::k*FileName) in the run folder `dir`.
std::string run_file(const std::string& dir, const char* name);
// Writes metrics.jsonl at `path` atomically: one EpochMetrics::to_json line per epoch.
void write_metrics_file(const std::string& path, const std::vector<EpochMetrics>& metrics);
// Rank `rank`'s dropout generators, derived from rank 0's states (model_rng_states' JSON): each
// state is hashed with the rank into a fresh seed, so ranks draw different masks.
nlohmann::json fork_rng_states(const nlohmann::json& states, int rank);

}  // namespace attn::train
