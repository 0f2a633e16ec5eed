// attn/train/checkpointing.h — the run folder of `attn train` and its checkpoints.
// A run folder is a model folder (models/checkpoint.h) plus the training record:
//   OUT/config.json, OUT/model.safetensors      the latest model (save_model), so that
//                                               `attn info/translate --model OUT` work
//   OUT/vocab.json, OUT/train_config.json       vocabulary, every training hyper-parameter
//   OUT/sentencepiece.model                     with a subword vocabulary (--vocab): its model,
//                                               matched to vocab.json by a fingerprint
//   OUT/metrics.jsonl                           one JSON object per finished epoch
//   OUT/checkpoints/step_NNNNNNNN/              config.json, model.safetensors, vocab.json (and
//                                               sentencepiece.model; a
//                                               model folder too), optimizer.safetensors
//                                               (Adam::state()), state.json (step, batch
//                                               position, every dropout generator, metrics)
// A checkpoint is written into a hidden temporary folder and renamed into place, so it is
// either complete or absent; the newest `keep` are kept. Paper §6.1: `attn average` averages
// the last k checkpoints. Not here: sharded weights or checkpoints of several processes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn/io/run_files.h"
#include "attn/io/safetensors.h"
#include "attn/models/model.h"
#include "attn/io/vocab.h"

namespace attn::train {

// "step_00001234": zero-padded to 8 digits so that names sort by step.
std::string checkpoint_name(int64_t step);

struct CheckpointInfo {
  std::string path;  // OUT/checkpoints/step_NNNNNNNN
  int64_t step = 0;
};

// The complete checkpoints of a run folder (each holding state.json, optimizer.safetensors,
// config.json and model.safetensors), oldest first. None (or no checkpoints folder): empty.
std::vector<CheckpointInfo> list_checkpoints(const std::string& run_dir);
std::optional<CheckpointInfo> latest_checkpoint(const std::string& run_dir);
// The step folders newer than latest_checkpoint (all of them when there is none) that are
// not complete, newest first, each with what it lacks ("model.safetensors missing"): what
// --resume skips, for it to say so instead of silently redoing their steps.
struct SkippedCheckpoint {
  std::string path;
  int64_t step = 0;
  std::string reason;
};
std::vector<SkippedCheckpoint> skipped_checkpoints(const std::string& run_dir);

// What one checkpoint holds besides the model.
struct CheckpointContents {
  int64_t step = 0;
  const io::Vocab* vocab = nullptr;          // written as vocab.json when given
  io::NamedTensors optimizer_state;      // optimizer.safetensors
  nlohmann::json state;                  // state.json
};

// Writes OUT/checkpoints/step_NNNNNNNN atomically (a temporary folder renamed into place; an
// existing folder of that step is replaced), then removes all but the newest `keep` complete
// checkpoints (keep 0: none removed) and any temporary folder left by an interrupted write.
// Returns the checkpoint's path.
std::string write_checkpoint(const std::string& run_dir, const models::Model& model,
                             const CheckpointContents& contents, int64_t keep);
// Removes all but the newest `keep` checkpoints (keep 0: nothing) and stale temporary folders.
void prune_checkpoints(const std::string& run_dir, int64_t keep);

// The generators of a model's dropout (nn::Dropout) and attention (nn::MultiHeadAttention)
// modules, each once, by module name, in module order.
std::vector<std::pair<std::string, Rng*>> model_rngs(models::Model& model);
// The generator of every dropout (nn::Dropout) and attention (nn::MultiHeadAttention) module,
// by module name: {"encoder.layers.0.dropout1": ["<u64>", "<u64>", "<u64>", "<u64>"], ...}
// (decimal strings: exact in any JSON reader).
nlohmann::json model_rng_states(models::Model& model);
// Restores model_rng_states() output; a missing or unknown module, or a malformed state, is
// an error naming it (and nothing is changed).
void set_model_rng_states(models::Model& model, const nlohmann::json& states);

// Paper §6.1: the element-wise mean of the parameters of the models in `checkpoint_dirs`
// (model folders of one configuration), computed in double and stored in the model's dtype.
// Returns the first folder's model holding the mean. Differing configs are an error.
std::shared_ptr<models::Model> average_models(const std::vector<std::string>& checkpoint_dirs);

// Averages the newest `last` checkpoints of `run_dir` (all when fewer exist; none is an error)
// and writes a model folder to `out_dir` (config.json, model.safetensors, and the run's
// vocab.json when present). Returns the averaged checkpoints' paths, oldest first.
std::vector<std::string> average_last_checkpoints(const std::string& run_dir, int64_t last,
                                                  const std::string& out_dir);

// Whether `dir` may receive a fresh run: absent or empty is fine; a non-empty folder is an
// error unless `force`, and with `force` it must be a run folder (it holds train_config.json or
// a checkpoints folder), so that --force cannot wipe an unrelated folder. Changes nothing.
void check_fresh_run_dir(const std::string& dir, bool force);
// Removes the contents of a folder that check_fresh_run_dir(dir, true) accepted, the entries
// that mark it as a run's last, so that a clearing interrupted part-way (a kill) leaves a
// folder check_fresh_run_dir(dir, true) still accepts. `max_removals` stops after that many
// entries, to stand for such an interruption in tests.
void clear_run_dir(const std::string& dir, size_t max_removals = SIZE_MAX);

}  // namespace attn::train
