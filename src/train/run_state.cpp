// The run state of a training run (run_state.h): state.json (written with every checkpoint,
// read by --resume), the run files (train_config.json, vocab.json, the first model.safetensors,
// metrics.jsonl), checkpoints with every rank's dropout generators, and Trainer::resume, which
// checks the stored config, vocabulary and model before restoring weights, Adam moments, batch
// position and generators. Not here: the training loop, validation, the replicas (trainer.cpp,
// replicas.cpp), or the checkpoint folder format (checkpointing.cpp).
#include "run_state.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/io/run_files.h"
#include "attn/io/safetensors.h"
#include "attn/io/vocab.h"
#include "attn/models/checkpoint.h"
#include "attn/train/checkpointing.h"

namespace attn::train {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
constexpr const char* kOp = "train";
constexpr const char* kStateFormat = "attn-train-state";
constexpr int64_t kStateVersion = 1;
// Keys of train_config.json that --resume may change: they do not alter any loss.
const std::set<std::string> kResumeChangeable = {"epochs", "keep", "threads", "parallel", "checkpoint_every"};

// Doubles that must survive a checkpoint exactly travel as C99 hex floats ("0x1.8p+1").
std::string exact_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

double parse_exact_double(const json& j, const char* key) {
  ATTN_CHECK(j.contains(key) && j[key].is_string(), kOp, "state.json: missing hex-float string \"", key, "\"");
  const std::string text = j[key].get<std::string>();
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  ATTN_CHECK(end && *end == '\0' && !text.empty(), kOp, "state.json: \"", key, "\" is not a number: '", text, "'");
  return v;
}

}  // namespace

std::string run_file(const std::string& dir, const char* name) { return (fs::path(dir) / name).string(); }

void write_metrics_file(const std::string& path, const std::vector<EpochMetrics>& metrics) {
  std::string text;
  for (const EpochMetrics& m : metrics) text += m.to_json().dump() + "\n";
  io::write_file_atomic(path, text);
}

json fork_rng_states(const json& states, int rank) {
  json out = json::object();
  for (const auto& [key, words] : states.items()) {
    uint64_t seed = 0x72616e6b00000000ull + static_cast<uint64_t>(rank);
    for (const json& w : words) seed = stream_seed(seed, std::stoull(w.get<std::string>()));
    const Rng::State st = Rng(seed).state();
    json forked = json::array();
    for (uint64_t v : st.s) forked.push_back(std::to_string(v));
    out[key] = forked;
  }
  return out;
}

void Trainer::restore_rank_rngs(const json& state) {
  if (comm_.rank() == 0) return;  // rank 0's generators are the state's "rng"
  const auto it = state.find("rng_by_rank");
  const size_t r = static_cast<size_t>(comm_.rank());
  if (it != state.end() && it->is_array() && r < it->size())
    set_model_rng_states(*model_, (*it)[r]);
  else  // a rank the checkpointed run did not have
    set_model_rng_states(*model_, fork_rng_states(model_rng_states(*model_), comm_.rank()));
}

std::unique_ptr<Trainer> Trainer::resume(const std::string& out_dir, const json& overrides,
                                         const dist::Communicator& comm) {
  const std::string tc_path = run_file(out_dir, io::kTrainConfigFileName);
  std::error_code ec;
  ATTN_CHECK(fs::is_regular_file(tc_path, ec), kOp, "cannot resume: '", out_dir, "' has no ", io::kTrainConfigFileName,
             " (not a run folder of attn train)");
  const TrainConfig stored = TrainConfig::load(tc_path);
  TrainConfig config = stored;
  config.update_from_json(overrides);
  const json a = stored.to_json(), b = config.to_json();
  std::string changed;
  for (const auto& [key, value] : b.items())
    if (a[key] != value && kResumeChangeable.count(key) == 0) changed += (changed.empty() ? "" : ", ") + key;
  ATTN_CHECK(changed.empty(), kOp, "cannot resume with a different ", changed, " (", tc_path,
             " holds the run's values; only epochs, keep, threads, parallel and checkpoint_every may change)");

  const auto latest = latest_checkpoint(out_dir);
  if (!latest.has_value()) {
    std::string skipped;
    for (const SkippedCheckpoint& s : skipped_checkpoints(out_dir))
      skipped += str_cat(skipped.empty() ? "; skipped: " : ", ", "'", s.path, "' (", s.reason, ")");
    fail(kOp, "cannot resume: '", out_dir, "' has no complete checkpoint in ", io::kCheckpointsDirName, "/", skipped);
  }
  std::unique_ptr<Trainer> t(new Trainer(config, out_dir, false, comm));
  const io::Vocab stored_vocab =
      t->from_gpt2() ? t->data_.vocab : io::Vocab::load(run_file(out_dir, io::kVocabFileName));  // GPT-2: its BPE
  ATTN_CHECK(stored_vocab == t->data_.vocab, kOp, "cannot resume: the data's vocabulary (", t->data_.vocab.size(),
             " tokens) differs from the run's ", io::kVocabFileName, " (", stored_vocab.size(), " tokens)");

  std::shared_ptr<models::Model> saved = models::load_model(latest->path);
  ATTN_CHECK(saved->config().to_json() == t->model_->config().to_json(), kOp, "cannot resume: '", latest->path,
             "' holds a model of another configuration than ", io::kTrainConfigFileName, " describes");
  t->model_->load_state_dict(saved->named_parameters());
  const io::SafetensorsFile opt = io::SafetensorsFile::open(run_file(latest->path, io::kOptimizerFileName));
  io::NamedTensors opt_state;
  for (const std::string& name : opt.names()) opt_state.emplace_back(name, opt.get(name));
  t->adam_->load_state(opt_state);
  json state;
  try {
    state = json::parse(io::read_file(run_file(latest->path, io::kStateFileName)));
  } catch (const json::exception& e) {
    fail(kOp, "'", run_file(latest->path, io::kStateFileName), "' is not valid JSON: ", e.what());
  }
  t->restore_state(state);
  t->restore_rank_rngs(state);
  t->folder_ready_ = false;  // run() rewrites train_config.json and metrics.jsonl first
  comm.barrier();            // every rank has read the checkpoint before rank 0 writes again
  return t;
}

// ---- state --------------------------------------------------------------------------------

json Trainer::state_json() const {
  json s;
  s["format"] = kStateFormat;
  s["version"] = kStateVersion;
  s["step"] = adam_->steps();
  s["position"] = source_->position_json();
  s["epoch_progress"] = {{"loss_sum", exact_double(epoch_loss_sum_)},
                         {"tokens", epoch_tokens_},
                         {"seconds", exact_double(epoch_seconds_)},
                         {"last_lr", exact_double(last_lr_)}};
  s["rng"] = model_rng_states(*model_);
  json m = json::array();
  for (const EpochMetrics& e : metrics_) m.push_back(json::parse(e.to_json().dump()));
  s["metrics"] = m;
  s["train_config"] = config_.to_json();
  return s;
}

void Trainer::restore_state(const json& s) {
  ATTN_CHECK(s.is_object() && s.value("format", "") == kStateFormat, kOp, "state.json: not an ", kStateFormat,
             " file");
  ATTN_CHECK(s.value("version", int64_t{0}) == kStateVersion, kOp, "state.json: unsupported version ",
             s.value("version", json()).dump());
  ATTN_CHECK(s.contains("step") && s["step"].is_number_integer() && s["step"].get<int64_t>() == adam_->steps(), kOp,
             "state.json: step ", s.value("step", json()).dump(), " does not match the optimizer's ", adam_->steps(),
             " steps");
  ATTN_CHECK(s.contains("position") && s.contains("epoch_progress") && s.contains("rng") && s.contains("metrics"),
             kOp, "state.json: missing position, epoch_progress, rng or metrics");
  const json& p = s["epoch_progress"];
  const double loss_sum = parse_exact_double(p, "loss_sum");
  const double seconds = parse_exact_double(p, "seconds");
  const double last_lr = parse_exact_double(p, "last_lr");
  ATTN_CHECK(p.contains("tokens") && p["tokens"].is_number_integer(), kOp, "state.json: missing epoch tokens");
  ATTN_CHECK(s["metrics"].is_array(), kOp, "state.json: metrics must be an array");
  std::vector<EpochMetrics> metrics;
  for (const json& m : s["metrics"]) metrics.push_back(EpochMetrics::from_json(m));
  set_model_rng_states(*model_, s["rng"]);
  source_->set_position_json(s["position"]);
  epoch_loss_sum_ = loss_sum;
  epoch_tokens_ = p["tokens"].get<int64_t>();
  epoch_seconds_ = seconds;
  last_lr_ = last_lr;
  metrics_ = std::move(metrics);
}

// ---- run files and checkpoints ------------------------------------------------------------

void Trainer::write_run_files() {
  std::error_code ec;
  fs::create_directories(out_dir_, ec);
  ATTN_CHECK(!ec, kOp, "cannot create '", out_dir_, "': ", ec.message());
  io::write_file_atomic(run_file(out_dir_, io::kTrainConfigFileName), config_.to_json().dump(2) + "\n");
  if (fresh_) {
    if (!from_gpt2()) data_.vocab.save(run_file(out_dir_, io::kVocabFileName));
    save_model_folders();
  }
  write_metrics_file(run_file(out_dir_, io::kMetricsFileName), metrics_);
  prune_checkpoints(out_dir_, config_.keep);
  folder_ready_ = true;
}

std::string Trainer::save_checkpoint() {
  CheckpointContents c;
  c.state = state_json();
  if (comm_.size() > 1) {
    // Every rank's dropout generators, so that a resume with as many ranks continues exactly:
    // the states as words in the (sorted) order of model_rng_states' keys, gathered by rank.
    const json mine = model_rng_states(*model_);
    std::vector<int64_t> words;
    for (const auto& [key, state] : mine.items())
      for (const json& w : state) words.push_back(static_cast<int64_t>(std::stoull(w.get<std::string>())));
    const std::vector<int64_t> all = comm_.all_gather(words);
    json by_rank = json::array();
    for (int r = 0; r < comm_.size(); ++r) {
      json states = json::object();
      size_t at = static_cast<size_t>(r) * words.size();
      for (const auto& [key, state] : mine.items()) {
        json ws = json::array();
        for (size_t k = 0; k < state.size(); ++k) ws.push_back(std::to_string(static_cast<uint64_t>(all[at++])));
        states[key] = ws;
      }
      by_rank.push_back(states);
    }
    c.state["rng_by_rank"] = by_rank;
  }
  if (!comm_.is_root()) return "";
  c.step = adam_->steps();
  c.vocab = from_gpt2() ? nullptr : &data_.vocab;  // a GPT-2 start's vocabulary is its BPE (OUT/hf)
  c.optimizer_state = adam_->state();
  return write_checkpoint(out_dir_, *model_, c, config_.keep);
}

}  // namespace attn::train
