// train/run_record.cpp — see attn/train/run_record.h. A train_config.json that does not parse
// is no error here: the folder may come from another tool or version, and then simply
// records no task.
#include "attn/train/run_record.h"

#include <filesystem>

namespace attn::train {

namespace fs = std::filesystem;

std::optional<TrainConfig> run_train_config(const nlohmann::json& tc) {
  if (!tc.is_object()) return std::nullopt;
  try {
    return TrainConfig::from_json(tc);
  } catch (const std::exception&) {
    return std::nullopt;  // not written by attn train (or by another version): no task known
  }
}

std::optional<RunTask> task_from_train_config(const nlohmann::json& tc) {
  const auto c = run_train_config(tc);
  if (!c || c->task.empty() || c->uses_tsv()) return std::nullopt;
  RunTask r;
  r.task.kind = parse_task_kind(c->task);
  r.task.length = c->length;
  r.task.min_length = c->min_length;
  r.task.n_symbols = c->symbols;
  validate(r.task);
  r.data_seed = c->data_seed;
  r.valid_size = c->valid_size;
  return r;
}

std::string valid_path_from_train_config(const nlohmann::json& tc, const std::string& run_dir) {
  const auto c = run_train_config(tc);
  if (!c || c->valid_path.empty()) return {};
  const fs::path p = c->valid_path;
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return p.string();
  if (p.is_relative() && fs::is_regular_file(fs::path(run_dir) / p, ec)) return (fs::path(run_dir) / p).string();
  return {};
}

}  // namespace attn::train
