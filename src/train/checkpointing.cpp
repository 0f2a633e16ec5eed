// Run folders and checkpoints (see checkpointing.h): atomic checkpoint folders, pruning to
// the newest k, the dropout generators of a model as JSON, and checkpoint averaging (§6.1).
// Deliberately no file locking: one trainer writes a run folder at a time.
#include "attn/train/checkpointing.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/models/checkpoint.h"
#include "attn/nn/attention.h"
#include "attn/nn/dropout.h"

namespace attn::train {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
constexpr const char* kOp = "checkpoint";
constexpr const char* kStepPrefix = "step_";
constexpr const char* kTmpPrefix = ".tmp-";

// The step of a folder named "step_<digits>", or -1.
int64_t parse_step_name(const std::string& name) {
  if (name.rfind(kStepPrefix, 0) != 0) return -1;
  const std::string digits = name.substr(std::char_traits<char>::length(kStepPrefix));
  if (digits.empty() || digits.size() > 18) return -1;
  for (char c : digits)
    if (c < '0' || c > '9') return -1;
  return std::stoll(digits);
}

bool is_complete(const fs::path& dir) {
  std::error_code ec;
  for (const char* f : {io::kStateFileName, io::kOptimizerFileName, io::kConfigFileName, io::kWeightsFileName})
    if (!fs::is_regular_file(dir / f, ec)) return false;
  return true;
}

void remove_all_or_fail(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  ATTN_CHECK(!ec, kOp, "cannot remove '", p.string(), "': ", ec.message());
}

}  // namespace

std::vector<std::pair<std::string, Rng*>> model_rngs(models::Model& model) {
  std::vector<std::pair<std::string, Rng*>> out;
  std::set<const Rng*> seen;
  for (auto& [name, module] : model.named_modules()) {
    Rng* rng = nullptr;
    if (auto* d = dynamic_cast<nn::Dropout*>(module)) rng = &d->rng();
    else if (auto* a = dynamic_cast<nn::MultiHeadAttention*>(module)) rng = &a->rng();
    if (rng && seen.insert(rng).second) out.emplace_back(name, rng);
  }
  return out;
}

std::string checkpoint_name(int64_t step) {
  ATTN_CHECK(step >= 0, kOp, "a checkpoint step must not be negative, got ", step);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%08lld", kStepPrefix, static_cast<long long>(step));
  return buf;
}

std::vector<CheckpointInfo> list_checkpoints(const std::string& run_dir) {
  std::vector<CheckpointInfo> out;
  const fs::path root = fs::path(run_dir) / io::kCheckpointsDirName;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const int64_t step = parse_step_name(entry.path().filename().string());
    if (step < 0 || !entry.is_directory() || !is_complete(entry.path())) continue;
    out.push_back({entry.path().string(), step});
  }
  std::sort(out.begin(), out.end(), [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step < b.step; });
  return out;
}

std::optional<CheckpointInfo> latest_checkpoint(const std::string& run_dir) {
  auto all = list_checkpoints(run_dir);
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::vector<SkippedCheckpoint> skipped_checkpoints(const std::string& run_dir) {
  std::vector<SkippedCheckpoint> out;
  const auto latest = latest_checkpoint(run_dir);
  const fs::path root = fs::path(run_dir) / io::kCheckpointsDirName;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const int64_t step = parse_step_name(entry.path().filename().string());
    if (step < 0 || !entry.is_directory() || (latest && step <= latest->step) || is_complete(entry.path())) continue;
    std::string missing;
    for (const char* f : {io::kWeightsFileName, io::kConfigFileName, io::kOptimizerFileName, io::kStateFileName})
      if (!fs::is_regular_file(entry.path() / f, ec)) missing += (missing.empty() ? "" : ", ") + std::string(f);
    out.push_back({entry.path().string(), step, missing + " missing"});
  }
  std::sort(out.begin(), out.end(),
            [](const SkippedCheckpoint& a, const SkippedCheckpoint& b) { return a.step > b.step; });
  return out;
}

void prune_checkpoints(const std::string& run_dir, int64_t keep) {
  ATTN_CHECK(keep >= 0, kOp, "keep must not be negative, got ", keep);
  const fs::path root = fs::path(run_dir) / io::kCheckpointsDirName;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  // Temporary folders of interrupted writes (ours are renamed away before this runs).
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(root, ec))
    if (entry.path().filename().string().rfind(kTmpPrefix, 0) == 0) stale.push_back(entry.path());
  for (const auto& p : stale) remove_all_or_fail(p);
  if (keep == 0) return;
  const auto all = list_checkpoints(run_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) remove_all_or_fail(all[i].path);
}

std::string write_checkpoint(const std::string& run_dir, const models::Model& model,
                             const CheckpointContents& contents, int64_t keep) {
  const fs::path root = fs::path(run_dir) / io::kCheckpointsDirName;
  const fs::path final_dir = root / checkpoint_name(contents.step);
  static std::atomic<int> counter{0};
  const fs::path tmp = root / (std::string(kTmpPrefix) + checkpoint_name(contents.step) + "-" +
                               std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::error_code ec;
  fs::create_directories(root, ec);
  ATTN_CHECK(!ec, kOp, "cannot create '", root.string(), "': ", ec.message());
  try {
    models::ExtraFiles extra;
    if (contents.vocab) {
      extra.emplace_back(io::kVocabFileName, contents.vocab->to_json().dump(1) + "\n");
      for (auto& file : contents.vocab->companion_files()) extra.push_back(std::move(file));  // sentencepiece.model
    }
    models::save_model(tmp.string(), model, extra);
    io::save_safetensors((tmp / io::kOptimizerFileName).string(), contents.optimizer_state, {{"format", "attn-adam"}});
    io::write_file_atomic((tmp / io::kStateFileName).string(), contents.state.dump(1) + "\n");
    if (fs::exists(final_dir, ec)) remove_all_or_fail(final_dir);
    fs::rename(tmp, final_dir, ec);
    ATTN_CHECK(!ec, kOp, "cannot rename '", tmp.string(), "' to '", final_dir.string(), "': ", ec.message());
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
  prune_checkpoints(run_dir, keep);
  return final_dir.string();
}

json model_rng_states(models::Model& model) {
  json out = json::object();
  for (const auto& [name, rng] : model_rngs(model)) {
    const Rng::State s = rng->state();
    json words = json::array();
    for (uint64_t w : s.s) words.push_back(std::to_string(w));
    out[name.empty() ? std::string(".") : name] = words;
  }
  return out;
}

void set_model_rng_states(models::Model& model, const json& states) {
  ATTN_CHECK(states.is_object(), kOp, "the generator states must be a JSON object, got ", states.type_name());
  const auto rngs = model_rngs(model);
  std::vector<Rng::State> parsed;
  std::set<std::string> used;
  for (const auto& [name, rng] : rngs) {
    const std::string key = name.empty() ? std::string(".") : name;
    auto it = states.find(key);
    ATTN_CHECK(it != states.end(), kOp, "no generator state for module '", key, "'");
    ATTN_CHECK(it->is_array() && it->size() == 4, kOp, "the generator state of '", key,
               "' must be 4 decimal strings, got ", it->dump());
    Rng::State s{};
    for (size_t i = 0; i < 4; ++i) {
      const json& w = (*it)[i];
      ATTN_CHECK(w.is_string(), kOp, "the generator state of '", key, "' must be 4 decimal strings, got ", it->dump());
      const std::string text = w.get<std::string>();
      size_t used_chars = 0;
      unsigned long long v = 0;
      try {
        v = std::stoull(text, &used_chars);
      } catch (const std::exception&) {
        used_chars = 0;
      }
      ATTN_CHECK(!text.empty() && used_chars == text.size() && text[0] != '-', kOp, "the generator state of '", key,
                 "' holds '", text, "', not an unsigned 64-bit number");
      s.s[i] = static_cast<uint64_t>(v);
    }
    parsed.push_back(s);
    used.insert(key);
  }
  for (const auto& [key, value] : states.items())
    ATTN_CHECK(used.count(key) != 0, kOp, "a generator state for '", key, "', which this model does not have");
  for (size_t i = 0; i < rngs.size(); ++i) rngs[i].second->set_state(parsed[i]);
}

std::shared_ptr<models::Model> average_models(const std::vector<std::string>& checkpoint_dirs) {
  ATTN_CHECK(!checkpoint_dirs.empty(), "average", "no checkpoints to average");
  std::shared_ptr<models::Model> first = models::load_model(checkpoint_dirs.front());
  const json config = first->config().to_json();
  const nn::NamedTensors params = first->named_parameters();
  // Running sums in double, one per parameter.
  std::vector<std::vector<double>> sums;
  for (const auto& [name, t] : params) sums.push_back(t.to_vector<double>());
  for (size_t k = 1; k < checkpoint_dirs.size(); ++k) {
    std::shared_ptr<models::Model> other = models::load_model(checkpoint_dirs[k]);
    ATTN_CHECK(other->config().to_json() == config, "average", "'", checkpoint_dirs[k],
               "' has another model configuration than '", checkpoint_dirs.front(), "'");
    const nn::NamedTensors theirs = other->named_parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const std::vector<double> v = theirs[i].second.to_vector<double>();
      for (size_t e = 0; e < v.size(); ++e) sums[i][e] += v[e];
    }
  }
  const double n = static_cast<double>(checkpoint_dirs.size());
  NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i].second;
    for (double& s : sums[i]) s /= n;
    p.copy_from(Tensor::from_vector<double>(sums[i], p.shape()).to(p.dtype()));
  }
  return first;
}

std::vector<std::string> average_last_checkpoints(const std::string& run_dir, int64_t last, const std::string& out_dir) {
  ATTN_CHECK(last >= 1, "average", "--last must be at least 1, got ", last);
  const auto all = list_checkpoints(run_dir);
  ATTN_CHECK(!all.empty(), "average", "'", run_dir, "' holds no checkpoints (expected ", io::kCheckpointsDirName,
             "/step_NNNNNNNN folders written by attn train)");
  std::vector<std::string> dirs;
  const size_t n = std::min(all.size(), static_cast<size_t>(last));
  for (size_t i = all.size() - n; i < all.size(); ++i) dirs.push_back(all[i].path);
  std::shared_ptr<models::Model> avg = average_models(dirs);
  models::ExtraFiles extra;
  const fs::path vocab = fs::path(run_dir) / io::kVocabFileName;
  std::error_code ec;
  if (fs::is_regular_file(vocab, ec)) extra.emplace_back(io::kVocabFileName, io::read_file(vocab.string()));
  const fs::path subwords = fs::path(run_dir) / io::kSentencePieceFileName;  // a SentencePiece vocabulary's model
  if (fs::is_regular_file(subwords, ec)) extra.emplace_back(io::kSentencePieceFileName, io::read_file(subwords.string()));
  models::save_model_folder(out_dir, *avg, extra);  // complete or absent, even after a kill
  return dirs;
}

void check_fresh_run_dir(const std::string& dir, bool force) {
  std::error_code ec;
  const fs::path p(dir);
  if (!fs::exists(p, ec)) return;
  ATTN_CHECK(fs::is_directory(p, ec), "train", "'", dir, "' exists and is not a folder");
  if (fs::is_empty(p, ec)) return;
  // A run killed during its first write (train_config.json's) leaves only the temporary of
  // write_file_atomic (".NAME.tmp-PID-N"): that folder is a run's too, and --force clears it.
  bool only_temporaries = true;
  for (const auto& entry : fs::directory_iterator(p, ec)) {
    const std::string name = entry.path().filename().string();
    only_temporaries = only_temporaries && name.size() > 1 && name[0] == '.' && name.find(".tmp-") != std::string::npos;
  }
  const bool run_folder = fs::exists(p / io::kTrainConfigFileName, ec) ||
                          fs::is_directory(p / io::kCheckpointsDirName, ec) || only_temporaries;
  if (!force) {
    fail("train", "'", dir, "' is not empty; pass --resume to continue ",
         run_folder ? "that run" : "a run there", " or --force to start over");
  }
  ATTN_CHECK(run_folder, "train", "'", dir, "' is not empty and is not a run folder (no ", io::kTrainConfigFileName,
             " or ", io::kCheckpointsDirName, "/); refusing to delete it even with --force");
}

void clear_run_dir(const std::string& dir, size_t max_removals) {
  check_fresh_run_dir(dir, true);
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  // What marks the folder as a run's goes last, checkpoints/ then train_config.json, so that
  // a clearing killed part-way leaves a folder that --force still recognises and clears.
  const auto rank = [](const fs::path& p) {
    const std::string name = p.filename().string();
    return name == io::kTrainConfigFileName ? 2 : name == io::kCheckpointsDirName ? 1 : 0;
  };
  std::vector<fs::path> entries;
  for (const auto& entry : fs::directory_iterator(dir, ec)) entries.push_back(entry.path());
  std::stable_sort(entries.begin(), entries.end(),
                   [&](const fs::path& a, const fs::path& b) { return rank(a) < rank(b); });
  for (size_t i = 0; i < entries.size() && i < max_removals; ++i) remove_all_or_fail(entries[i]);
}

}  // namespace attn::train
