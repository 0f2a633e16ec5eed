// The training loop (see trainer.h), paper §5: the model family's objective (objective.h),
// optional global-norm clipping, Adam at the schedule's rate; per epoch validation, a
// checkpoint, the latest model and metrics.jsonl. Everything that influences a later loss
// (weights, Adam moments, batch order, every dropout generator, the epoch's running sums) is in
// the checkpoint, and the masked LM's masks are a function of (seed, epoch, example), so a
// resumed run repeats the uninterrupted one bit for bit. Over several ranks (attn/dist/): each
// trains on its share of the global batch, the loss is token-weighted so that the summed
// gradients are those of the whole batch, and rank 0 alone validates and writes. Batches come
// from a BatchSource: the in-memory dataset's iterator, or a corpus streamed in chunks.
// Not here: the command line, progress drawing (callbacks), the HTML report.
#include "attn/train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <limits>
#include <set>
#include <thread>

#include "attn/autograd/tape.h"
#include "attn/core/error.h"
#include "attn/dist/sharding.h"
#include "attn/io/atomic_file.h"
#include "attn/models/checkpoint.h"
#include "attn/models/factory.h"
#include "attn/ops/ops.h"
#include "attn/train/checkpointing.h"
#include "attn/train/text_data.h"
#include "kernels/simd/vector_kernels.h"

// OpenBLAS's own thread setting (declared by its cblas.h, which only the ops layer includes).
extern "C" void openblas_set_num_threads(int num_threads);

namespace attn::train {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr const char* kOp = "train";
constexpr const char* kStateFormat = "attn-train-state";
constexpr int64_t kStateVersion = 1;
// Keys of train_config.json that --resume may change: they do not alter any loss.
const std::set<std::string> kResumeChangeable = {"epochs", "keep", "threads", "parallel", "checkpoint_every"};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

const double kNaN = std::numeric_limits<double>::quiet_NaN();

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

double number_or_nan(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return kNaN;
  ATTN_CHECK(it->is_number(), kOp, "metrics: \"", key, "\" must be a number or null, got ", it->dump());
  return it->get<double>();
}

// The model configuration a dataset needs: vocabulary sizes and special ids from its vocab.
// A single-stack model records 0 layers for the stack it does not have.
models::ModelConfig model_config_for(const TrainConfig& c, const io::Vocab& vocab) {
  models::ModelConfig m = c.model;
  m.src_vocab_size = vocab.size();
  m.tgt_vocab_size = vocab.size();
  if (m.arch == models::Arch::DecoderOnly) m.n_encoder_layers = 0;
  if (m.arch == models::Arch::EncoderOnly) m.n_decoder_layers = 0;
  m.pad_id = io::Vocab::kPad;
  m.bos_id = io::Vocab::kBos;
  m.eos_id = io::Vocab::kEos;
  m.seed = c.seed;
  return m;
}

// The longest row the model will see (source, or target + 1), over both sets.
int64_t longest_row(const Dataset& d) {
  int64_t n = 0;
  for (const auto* set : {&d.train, &d.valid})
    for (const io::Example& e : *set) n = std::max(n, example_tokens(e));
  return n;
}

void write_metrics_file(const std::string& path, const std::vector<EpochMetrics>& metrics) {
  std::string text;
  for (const EpochMetrics& m : metrics) text += m.to_json().dump() + "\n";
  io::write_file_atomic(path, text);
}

std::string join(const std::string& dir, const char* name) { return (fs::path(dir) / name).string(); }

// FNV-1a, for the fingerprint that ranks compare before training together.
void fnv_mix(uint64_t& h, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
}

// The config (but the thread count, which may differ per rank) and the data.
uint64_t run_fingerprint(const TrainConfig& config, const Dataset& data) {
  uint64_t h = 1469598103934665603ull;
  json c = config.to_json();
  c.erase("threads");
  c.erase("parallel");
  const std::string text = c.dump() + data.vocab.to_json().dump();
  fnv_mix(h, text.data(), text.size());
  for (const auto* set : {&data.train, &data.valid})
    for (const io::Example& e : *set) {
      const int64_t sizes[2] = {static_cast<int64_t>(e.src.size()), static_cast<int64_t>(e.tgt.size())};
      fnv_mix(h, sizes, sizeof sizes);
      fnv_mix(h, e.src.data(), e.src.size() * sizeof(int64_t));
      fnv_mix(h, e.tgt.data(), e.tgt.size() * sizeof(int64_t));
    }
  return h;
}

// Rank r's dropout generators, derived from rank 0's states (model_rng_states' JSON): each
// state is hashed with r into a fresh seed, so ranks draw different masks.
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

}  // namespace

void set_num_threads(int64_t n) {
  ATTN_CHECK(n >= 0, kOp, "the thread count must not be negative, got ", n);
  if (n == 0) return;
  omp_set_num_threads(static_cast<int>(n));
  openblas_set_num_threads(static_cast<int>(n));
}

ThreadSplit training_thread_split(const TrainConfig& config, int ranks) {
  if (config.parallel == "batch") return ThreadSplit::Batch;
  if (config.parallel == "ops") return ThreadSplit::Ops;
  return ranks <= 1 && config.model.d_model <= 128 ? ThreadSplit::Batch : ThreadSplit::Ops;
}

int64_t training_threads(const TrainConfig& config, int ranks) {
  if (config.threads > 0) return config.threads;
  if (training_thread_split(config, ranks) == ThreadSplit::Batch && ranks <= 1) return omp_get_num_procs();
  if (config.model.d_model <= 128) return 1;
  // Several ranks on this machine share its cores: those this rank is bound to, when the
  // launcher bound it to some, else an equal part of all.
  const int local = dist::launcher_local_size();
  if (local <= 1) return 0;
  const int available = omp_get_num_procs();
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  return available < all ? available : std::max(1, available / local);
}

namespace {

// Replica k's generators (k >= 1) for the coming step, derived from the model's current states:
// each state is hashed with k into a fresh seed, so every shard draws its own masks, and the
// replicas need no state of their own in checkpoints (resuming reproduces them).
void fork_replica_rngs(models::Model& model, models::Model& replica, int64_t k) {
  const auto from = model_rngs(model);
  const auto to = model_rngs(replica);
  ATTN_CHECK(from.size() == to.size(), kOp, "a replica has ", to.size(), " generators, the model ", from.size());
  for (size_t i = 0; i < from.size(); ++i) {
    uint64_t seed = 0x7368617264000000ull + static_cast<uint64_t>(k);  // "shard"
    for (uint64_t w : from[i].second->state().s) seed = stream_seed(seed, w);
    to[i].second->seed_with(seed);
  }
}

// dst += src, element by element: two contiguous gradients of one shape and floating dtype
// (the caller checks; this runs inside parallel loops, so it must not throw). float runs the
// vector kernel's add in place (dst = dst + src, one IEEE addition per element, as the loop).
void add_into(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  if (dst.dtype() == DType::F32) {
    float* d = dst.data<float>();
    kernels::simd::vector_kernels().add(d, d, src.data<float>(), n);
  } else {
    double* d = dst.data<double>();
    const double* g = src.data<double>();
    for (int64_t i = 0; i < n; ++i) d[i] += g[i];
  }
}

}  // namespace

// ---- metrics ------------------------------------------------------------------------------

nlohmann::ordered_json EpochMetrics::to_json() const {
  nlohmann::ordered_json j;
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(); };
  j["epoch"] = epoch;
  j["loss"] = num(loss);
  j["val_loss"] = num(val_loss);
  j["val_token_acc"] = num(val_token_acc);
  j["val_exact_acc"] = num(val_exact_acc);
  j["lr"] = num(lr);
  j["tokens_per_s"] = num(tokens_per_s);
  j["seconds"] = num(seconds);
  j["step"] = step;
  j["val_nll"] = num(val_nll);
  j["val_ppl"] = num(val_ppl);
  return j;
}

EpochMetrics EpochMetrics::from_json(const json& j) {
  ATTN_CHECK(j.is_object(), kOp, "a metrics record must be a JSON object, got ", j.dump());
  ATTN_CHECK(j.contains("epoch") && j["epoch"].is_number_integer(), kOp, "a metrics record needs an integer epoch");
  EpochMetrics m;
  m.epoch = j["epoch"].get<int64_t>();
  m.step = j.contains("step") && j["step"].is_number_integer() ? j["step"].get<int64_t>() : 0;
  m.loss = number_or_nan(j, "loss");
  m.val_loss = number_or_nan(j, "val_loss");
  m.val_nll = number_or_nan(j, "val_nll");
  m.val_ppl = number_or_nan(j, "val_ppl");
  m.val_token_acc = number_or_nan(j, "val_token_acc");
  m.val_exact_acc = number_or_nan(j, "val_exact_acc");
  m.lr = number_or_nan(j, "lr");
  m.tokens_per_s = number_or_nan(j, "tokens_per_s");
  m.seconds = number_or_nan(j, "seconds");
  return m;
}

// ---- construction ---------------------------------------------------------------------------

Trainer::Trainer(TrainConfig config, std::string out_dir, const dist::Communicator& comm)
    : Trainer(std::move(config), std::move(out_dir), true, comm) {}

Trainer::Trainer(TrainConfig config, std::string out_dir, bool fresh, const dist::Communicator& comm)
    : config_(std::move(config)), out_dir_(std::move(out_dir)), comm_(comm), fresh_(fresh) {
  ATTN_CHECK(!out_dir_.empty(), kOp, "no output folder given");
  config_.validate();
  build();
  setup_ranks();
}

// With several ranks: the same run on every rank (checked), rank 0's initial weights
// everywhere, the gradient reducer, and dropout generators of their own on ranks > 0.
void Trainer::setup_ranks() {
  if (comm_.size() == 1) return;
  uint64_t fingerprint = run_fingerprint(config_, data_);
  if (stream_) fnv_mix(fingerprint, &stream_->stats().fingerprint, sizeof(uint64_t));  // the streamed file
  dist::check_same_on_all_ranks(fingerprint, "the training configuration or data", comm_);
  dist::broadcast_parameters(adam_->params(), comm_);
  reducer_ = std::make_unique<dist::GradientReducer>(adam_->params(), comm_);
  if (comm_.rank() > 0) set_model_rng_states(*model_, fork_rng_states(model_rng_states(*model_), comm_.rank()));
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

bool Trainer::stop_agreed() {
  const bool mine = stop_requested_.exchange(false);
  if (comm_.size() == 1) return mine;
  return comm_.all_reduce_value(int64_t{mine ? 1 : 0}, dist::ReduceOp::Max) > 0;
}

namespace {

// An empty line of a TSV corpus is refused (read_tsv would skip it): in a parallel corpus it is
// far more often a lost sentence, which shifts every later pair, than intended spacing.
void check_no_empty_tsv_lines(const std::string& path, io::Tokenization tokens) {
  const TsvFile f = read_tsv(path, tokens);
  int64_t expected = 1;
  for (int64_t line : f.line_numbers) {
    ATTN_CHECK(line == expected, kOp, "'", path, "' line ", expected, " is empty (every line must be source<TAB>target)");
    ++expected;
  }
  ATTN_CHECK(f.empty_lines == 0, kOp, "'", path, "' line ", expected, " is empty (every line must be source<TAB>target)");
}

BatchingOptions batching_options(const TrainConfig& c) {
  BatchingOptions b;
  b.batch_size = c.batch_size;
  b.max_tokens = c.max_tokens;
  b.shuffle = true;
  b.group_by_length = c.group_by_length;
  b.bucket_size = c.bucket_size;
  b.seed = stream_seed(c.seed, 2);  // streams 0 and 1 are the synthetic data's
  return b;
}

// A streamed run's data: the stream over the training file (its counting pass builds or checks
// the vocabulary) and the validation set, in memory, encoded with the stream's vocabulary.
std::unique_ptr<CorpusStream> open_stream(const TrainConfig& c, Dataset& data) {
  StreamOptions so;
  so.path = c.uses_tsv() ? c.train_path : c.text_path;
  so.format = c.uses_tsv() ? CorpusFormat::Tsv : CorpusFormat::Text;
  so.arch = c.model.arch;
  so.tokenization = c.tokens;
  so.chunk_lines = c.chunk_lines;
  so.chunk_bytes = c.chunk_bytes;
  so.max_length = c.max_length;
  so.max_cost = c.model.positional == nn::PositionalKind::Learned ? c.model.max_len : 0;
  so.batching = batching_options(c);
  std::optional<io::Vocab> given;
  if (c.tokens == io::Tokenization::SentencePiece || !c.vocab.empty()) given = load_given_vocab(c.tokens, c.vocab);
  auto stream = std::make_unique<CorpusStream>(so, std::move(given));
  data = Dataset{};
  data.vocab = stream->vocab();
  data.empty_lines = stream->stats().blank_lines;
  data.train_unknown_tokens = stream->stats().unknown_tokens;
  if (c.uses_tsv() && !c.valid_path.empty()) {
    check_no_empty_tsv_lines(c.valid_path, c.tokens);
    data.valid = encode_tsv(read_tsv(c.valid_path, c.tokens), data.vocab, true, &data.valid_unknown_tokens);
  } else if (c.uses_text() && !c.valid_text_path.empty()) {
    const TextFile valid = read_text(c.valid_text_path, c.tokens);
    ATTN_CHECK(!valid.lines.empty(), "text", "'", c.valid_text_path, "' holds no text (every line is empty or blank)");
    for (auto& ids : encode_text(valid, data.vocab, true, &data.valid_unknown_tokens))
      data.valid.push_back(text_example(c.model.arch, std::move(ids)));
    data.empty_lines += valid.blank_lines;
  }
  return stream;
}

}  // namespace

void Trainer::build() {
  const TrainConfig& c = config_;
  std::unique_ptr<CorpusStream> stream;
  if (c.stream) {
    stream = open_stream(c, data_);
    skipped_long_ = stream->stats().skipped_long;
  } else if (c.uses_tsv()) {
    for (const std::string& path : {c.train_path, c.valid_path})
      if (!path.empty()) check_no_empty_tsv_lines(path, c.tokens);
    data_ = load_tsv_dataset(c.train_path, c.valid_path, c.tokens, c.vocab);
  } else if (c.uses_text()) {
    data_ = load_text_dataset(c.text_path, c.valid_text_path, c.tokens, c.model.arch, c.vocab, c.pack);
  } else {
    TaskConfig t;
    t.kind = parse_task_kind(c.task);
    t.length = c.length;
    t.min_length = c.min_length;
    t.n_symbols = c.symbols;
    data_ = make_task_dataset(t, c.train_size, c.valid_size, c.data_seed);
  }
  if (c.max_length > 0 && !c.stream) {  // in memory: the same skipping as the stream's
    std::vector<io::Example> kept;
    for (io::Example& e : data_.train) {
      if (static_cast<int64_t>(std::max(e.src.size(), e.tgt.size())) > c.max_length) ++skipped_long_;
      else kept.push_back(std::move(e));
    }
    ATTN_CHECK(!kept.empty(), kOp, "every training example has a side longer than max_length ", c.max_length);
    data_.train = std::move(kept);
  }
  config_.model = model_config_for(c, data_.vocab);
  config_.model.validate();
  if (config_.model.positional == nn::PositionalKind::Learned) {
    const int64_t longest = longest_row(data_);
    ATTN_CHECK(longest <= config_.model.max_len, kOp, "the data has a row of ", longest,
               " tokens, longer than the learned positions' max_len ", config_.model.max_len);
  }
  model_ = models::make_model(config_.model);
  model_->train();
  ObjectiveOptions objective;
  objective.label_smoothing = c.label_smoothing;
  objective.seed = c.seed;
  objective.masking.prob = c.mask_prob;
  objective.masking.mask_id = data_.vocab.mask_id();
  objective.masking.first_symbol = data_.vocab.num_special();
  objective.masking.vocab_size = data_.vocab.size();
  objective_ = make_objective(*model_, objective);
  objective_options_ = objective;

  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (const auto& [name, p] : model_->named_parameters()) {
    names.push_back(name);
    params.push_back(p);
  }
  AdamOptions adam;
  adam.beta1 = c.beta1;
  adam.beta2 = c.beta2;
  adam.eps = c.eps;
  adam.weight_decay = c.weight_decay;
  adam.decoupled_weight_decay = c.decoupled_weight_decay;
  adam_ = std::make_unique<Adam>(std::move(params), adam, std::move(names));

  if (stream) {
    stream_ = stream.get();
    source_ = std::move(stream);
  } else {
    source_ = std::make_unique<DatasetBatches>(data_.train, batching_options(c));
  }
  const ScheduleConfig sc = schedule_config(config_, source_->num_batches());
  if (sc.kind == ScheduleKind::Cosine)
    ATTN_CHECK(sc.total_steps > sc.warmup_steps, kOp, "the cosine schedule needs more steps (", sc.total_steps,
               " = epochs x batches per epoch) than warmup steps (", sc.warmup_steps, ")");
  schedule_ = make_schedule(sc);
  schedule_text_ = schedule_->describe();
}

std::unique_ptr<Trainer> Trainer::resume(const std::string& out_dir, const json& overrides,
                                         const dist::Communicator& comm) {
  const std::string tc_path = join(out_dir, io::kTrainConfigFileName);
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
  ATTN_CHECK(latest.has_value(), kOp, "cannot resume: '", out_dir, "' has no complete checkpoint in ",
             io::kCheckpointsDirName, "/");
  std::unique_ptr<Trainer> t(new Trainer(config, out_dir, false, comm));
  const io::Vocab stored_vocab = io::Vocab::load(join(out_dir, io::kVocabFileName));
  ATTN_CHECK(stored_vocab == t->data_.vocab, kOp, "cannot resume: the data's vocabulary (", t->data_.vocab.size(),
             " tokens) differs from the run's ", io::kVocabFileName, " (", stored_vocab.size(), " tokens)");

  std::shared_ptr<models::Model> saved = models::load_model(latest->path);
  ATTN_CHECK(saved->config().to_json() == t->model_->config().to_json(), kOp, "cannot resume: '", latest->path,
             "' holds a model of another configuration than ", io::kTrainConfigFileName, " describes");
  t->model_->load_state_dict(saved->named_parameters());
  const io::SafetensorsFile opt = io::SafetensorsFile::open(join(latest->path, io::kOptimizerFileName));
  io::NamedTensors opt_state;
  for (const std::string& name : opt.names()) opt_state.emplace_back(name, opt.get(name));
  t->adam_->load_state(opt_state);
  json state;
  try {
    state = json::parse(io::read_file(join(latest->path, io::kStateFileName)));
  } catch (const json::exception& e) {
    fail(kOp, "'", join(latest->path, io::kStateFileName), "' is not valid JSON: ", e.what());
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

// ---- the loop -------------------------------------------------------------------------------

void Trainer::write_run_files() {
  std::error_code ec;
  fs::create_directories(out_dir_, ec);
  ATTN_CHECK(!ec, kOp, "cannot create '", out_dir_, "': ", ec.message());
  io::write_file_atomic(join(out_dir_, io::kTrainConfigFileName), config_.to_json().dump(2) + "\n");
  if (fresh_) {
    data_.vocab.save(join(out_dir_, io::kVocabFileName));
    models::save_model(out_dir_, *model_, {{io::kVocabFileName, data_.vocab.to_json().dump(1) + "\n"}});
  }
  write_metrics_file(join(out_dir_, io::kMetricsFileName), metrics_);
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
  c.vocab = &data_.vocab;
  c.optimizer_state = adam_->state();
  return write_checkpoint(out_dir_, *model_, c, config_.keep);
}

void Trainer::make_replicas(int64_t shards) {
  const nn::NamedTensors mine = model_->named_parameters();
  while (static_cast<int64_t>(replicas_.size()) + 1 < shards) {
    // Its own initial weights are dropped at once: its parameters become views of the model's.
    std::shared_ptr<models::Model> replica = models::make_model(config_.model);
    const nn::NamedTensors theirs = replica->named_parameters();
    ATTN_CHECK(theirs.size() == mine.size(), kOp, "a replica has ", theirs.size(), " parameters, the model ",
               mine.size());
    std::vector<Tensor> params;
    for (size_t i = 0; i < mine.size(); ++i) {
      const Tensor& p = mine[i].second;
      const Tensor& r = theirs[i].second;
      ATTN_CHECK(theirs[i].first == mine[i].first && r.shape() == p.shape() && r.dtype() == p.dtype(), kOp,
                 "replica parameter ", theirs[i].first, " does not match the model's ", mine[i].first);
      // The same memory under a leaf of its own: the replica's layers read the model's weights
      // (which Adam updates in place) while its gradients accumulate apart.
      TensorImpl& ri = r.impl();
      ri.storage = p.impl().storage;
      ri.offset = p.impl().offset;
      ri.strides = p.impl().strides;
      ri.grad.reset();
      params.push_back(r);
    }
    replica->train();
    replica_objectives_.push_back(make_objective(*replica, objective_options_));
    replica_params_.push_back(std::move(params));
    replicas_.push_back(std::move(replica));
  }
}

double Trainer::batch_split_backward(const std::vector<int64_t>& indices, int64_t* tokens, int64_t step,
                                     double lr) {
  const int S = static_cast<int>(shards_);
  std::vector<std::vector<int64_t>> parts(static_cast<size_t>(S));
  for (int k = 0; k < S; ++k) parts[static_cast<size_t>(k)] = dist::shard(indices, k, S);
  for (int k = 1; k < S; ++k) fork_replica_rngs(*model_, *replicas_[static_cast<size_t>(k - 1)], k);
  std::vector<BatchLoss> losses(static_cast<size_t>(S));
  std::vector<double> values(static_cast<size_t>(S), 0.0);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(S));
  int64_t total = 0;
  bool finite = true;
  // Thread t runs shards t, t + team, ...: shard k always on replica k, whatever the team size.
  // The ops inside run single-threaded (a nested region is inactive; BLAS, built for OpenMP,
  // runs in the calling thread inside a parallel region).
#pragma omp parallel num_threads(S)
  {
    omp_set_num_threads(1);
    const int team = omp_get_num_threads(), t = omp_get_thread_num();
    for (int k = t; k < S; k += team) {
      const size_t i = static_cast<size_t>(k);
      try {
        Objective& objective = k == 0 ? *objective_ : *replica_objectives_[i - 1];
        if (!parts[i].empty()) {
          losses[i] = objective.loss(source_->examples(), parts[i], source_->objective_epoch());
          values[i] = losses[i].tokens > 0 ? losses[i].loss.item() : 0.0;
        }
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
#pragma omp barrier
#pragma omp single
    {
      for (int k = 0; k < S; ++k) {
        total += losses[static_cast<size_t>(k)].tokens;
        if (!std::isfinite(values[static_cast<size_t>(k)])) finite = false;
      }
    }  // implicit barrier: every thread sees total and finite
    bool failed = false;
    for (const std::exception_ptr& e : errors) failed = failed || static_cast<bool>(e);
    if (!failed && finite && total > 0)
      for (int k = t; k < S; k += team) {
        const size_t i = static_cast<size_t>(k);
        if (losses[i].tokens == 0) continue;
        try {
          // Each shard's mean weighted by its share of the tokens: the gradients sum to the
          // whole batch's mean loss's (as over ranks, dist::TokenShare).
          const double w = static_cast<double>(losses[i].tokens) / static_cast<double>(total);
          scale(losses[i].loss, w).backward();
        } catch (...) {
          errors[i] = std::current_exception();
        }
      }
    // Each shard's graph (the activations its nodes still reference) is freed by the thread
    // that made it, so the storage cache hands those blocks back to the same thread next step.
    for (int k = t; k < S; k += team) losses[static_cast<size_t>(k)].loss = Tensor();
  }
  // Through the parameter lists: Module::zero_grad names every parameter first, which costs more.
  auto drop_replica_grads = [&] {
    for (const std::vector<Tensor>& replica : replica_params_)
      for (const Tensor& p : replica) p.zero_grad();
  };
  for (const std::exception_ptr& e : errors)
    if (e) {
      adam_->zero_grad();
      drop_replica_grads();
      std::rethrow_exception(e);
    }
  double value = 0;
  for (int k = 0; k < S; ++k)
    if (total > 0)
      value += values[static_cast<size_t>(k)] * static_cast<double>(losses[static_cast<size_t>(k)].tokens) /
               static_cast<double>(total);
  *tokens = total;
  if (!finite || !std::isfinite(value)) {
    adam_->zero_grad();
    drop_replica_grads();
    fail(kOp, "the loss is ", value, " at step ", step, " (lr ", lr, "); lower the learning rate or set --clip");
  }
  // The model's gradients += every replica's, in shard order (deterministic). Gradients are
  // contiguous, of the parameter's shape and dtype (the sweep's leaf gradients); anything else
  // is summed into a fresh tensor, serially, first.
  const std::vector<Tensor>& params = adam_->params();
  const size_t used = std::min(replicas_.size(), static_cast<size_t>(S - 1));
  std::vector<uint8_t> plain(params.size(), 1);
  for (size_t j = 0; j < params.size(); ++j) {
    const Tensor mine = params[j].grad();
    bool ok = mine.defined() && mine.is_contiguous();
    for (size_t r = 0; r < used && ok; ++r) {
      const Tensor g = replica_params_[r][j].grad();
      ok = !g.defined() || (g.is_contiguous() && g.dtype() == mine.dtype() && g.shape() == mine.shape());
    }
    if (ok) continue;
    plain[j] = 0;
    for (size_t r = 0; r < used; ++r) {
      const Tensor g = replica_params_[r][j].grad();
      if (!g.defined()) continue;
      const Tensor now = params[j].grad();
      params[j].set_grad(now.defined() ? add(now, g) : g.clone());
    }
  }
  // Without clipping, each parameter's Adam update follows its sum on the same thread, in one
  // parallel region (train_step then skips its own Adam step); with clipping, which needs every
  // gradient summed first, train_step's Adam step splits the parameters the same way. Either
  // way Adam's thread plan (balanced by element count, the same every step) decides which
  // thread handles a parameter, so one core touches its gradient, weights and moments step
  // after step; fused, the sum and the update take one fork-join instead of two.
  const bool fuse_adam = !(config_.clip > 0);
  if (fuse_adam) {
    try {
      adam_->begin_step(lr);  // every check before any update (the plain gradients are taken as is)
    } catch (...) {
      adam_->zero_grad();
      drop_replica_grads();
      throw;
    }
  }
  const std::vector<std::vector<int64_t>>& plan = adam_->thread_plan(S);
#pragma omp parallel num_threads(S)
  {
    const int team = omp_get_num_threads();
    for (int part = omp_get_thread_num(); part < S; part += team) {
      try {
        for (int64_t j : plan[static_cast<size_t>(part)]) {
          const size_t i = static_cast<size_t>(j);
          if (plain[i]) {
            const Tensor mine = params[i].grad();
            for (size_t r = 0; r < used; ++r) {
              const Tensor g = replica_params_[r][i].grad();
              if (g.defined()) add_into(mine, g);
            }
          }
          if (fuse_adam) adam_->update_param(i);
        }
      } catch (...) {
        errors[static_cast<size_t>(part)] = std::current_exception();
      }
    }
    // Once every sum is done, the thread that ran shard k frees replica k's gradients, so the
    // storage cache hands those blocks back to it for the next step's sweep.
#pragma omp barrier
    for (int k = omp_get_thread_num(); k < S; k += team)
      if (k >= 1 && static_cast<size_t>(k - 1) < used)
        for (const Tensor& p : replica_params_[static_cast<size_t>(k - 1)]) p.zero_grad();
  }
  drop_replica_grads();  // any left (none, unless a shard count changed)
  if (fuse_adam) adam_->end_step();
  for (const std::exception_ptr& e : errors)
    if (e) {
      adam_->zero_grad();
      std::rethrow_exception(e);
    }
  return value;
}

double Trainer::train_step(const std::vector<int64_t>& indices, int64_t* tokens) {
  const int64_t step = adam_->steps() + 1;
  const double lr = schedule_->lr(step);
  double value = 0;
  if (!reducer_ && shards_ > 1) {
    value = batch_split_backward(indices, tokens, step, lr);
  } else if (!reducer_) {
    const BatchLoss batch = objective_->loss(source_->examples(), indices, source_->objective_epoch());
    const Tensor& loss = batch.loss;  // [] mean over the batch's predicted tokens
    *tokens = batch.tokens;
    value = loss.item();
    if (!std::isfinite(value)) {
      adam_->zero_grad();
      fail(kOp, "the loss is ", value, " at step ", step, " (lr ", lr, "); lower the learning rate or set --clip");
    }
    loss.backward();
  } else {
    // This rank's share of the global batch. Its mean loss, weighted by its share of all
    // ranks' tokens, has gradients that sum over ranks to the whole batch's mean loss's.
    const std::vector<int64_t> mine = dist::shard(indices, comm_.rank(), comm_.size());
    BatchLoss batch;
    if (!mine.empty()) batch = objective_->loss(source_->examples(), mine, source_->objective_epoch());
    const dist::TokenShare share = dist::share_tokens(batch.tokens, comm_);
    const bool contributes = share.local > 0;
    value = dist::global_mean(contributes ? batch.loss.item() : 0.0, share, comm_);  // the same on every rank
    *tokens = share.global;
    if (!std::isfinite(value)) {
      adam_->zero_grad();
      fail(kOp, "the loss is ", value, " at step ", step, " (lr ", lr, "); lower the learning rate or set --clip");
    }
    if (contributes) reducer_->backward(scale(batch.loss, share.weight()));
    reducer_->wait_all();  // every rank now holds the summed gradients
  }
  // Batch split without clipping has run Adam already, fused with the gradient sum.
  if (reducer_ || shards_ == 1 || config_.clip > 0) {
    if (config_.clip > 0) clip_grad_norm(adam_->params(), config_.clip, step);
    adam_->step(lr, static_cast<int>(shards_));
  }
  adam_->zero_grad();
  last_lr_ = lr;
  return value;
}

void Trainer::finish_epoch(double train_seconds) {
  const Clock::time_point start = Clock::now();
  EpochMetrics m;
  m.epoch = source_->epoch() + 1;
  m.step = adam_->steps();
  m.loss = epoch_tokens_ > 0 ? epoch_loss_sum_ / static_cast<double>(epoch_tokens_) : kNaN;
  m.lr = last_lr_;
  m.tokens_per_s = train_seconds > 0 ? static_cast<double>(epoch_tokens_) / train_seconds : kNaN;
  if (!data_.valid.empty() && comm_.is_root()) {  // rank 0 validates for all
    if (progress_) {
      TrainProgress p;
      p.phase = TrainProgress::Phase::Validate;
      p.epoch = m.epoch;
      p.epochs = config_.epochs;
      p.batch = p.batches = source_->index();
      p.step = m.step;
      p.epoch_loss = m.loss;
      p.lr = m.lr;
      p.tokens_per_s = m.tokens_per_s;
      progress_(p);
    }
    const int64_t vb = config_.batch_size > 0 ? config_.batch_size : 64;
    const ValidationResult v = objective_->validate(data_.valid, vb);
    m.val_loss = v.loss;
    m.val_nll = v.nll;
    m.val_ppl = std::exp(v.nll);
    m.val_token_acc = v.token_acc;
    m.val_exact_acc = v.exact_acc;
  } else {
    m.val_loss = m.val_nll = m.val_ppl = m.val_token_acc = m.val_exact_acc = kNaN;
  }
  m.seconds = train_seconds + seconds_since(start);
  metrics_.push_back(m);
  epoch_loss_sum_ = 0;
  epoch_tokens_ = 0;
  epoch_seconds_ = 0;
  save_checkpoint();
  if (comm_.is_root()) {
    models::save_model(out_dir_, *model_, {{io::kVocabFileName, data_.vocab.to_json().dump(1) + "\n"}});
    write_metrics_file(join(out_dir_, io::kMetricsFileName), metrics_);
  }
  if (epoch_cb_) epoch_cb_(m);
}

const std::vector<EpochMetrics>& Trainer::run(std::optional<int64_t> max_steps) {
  ATTN_CHECK(!max_steps || *max_steps >= 0, kOp, "max_steps must not be negative, got ", *max_steps);
  const int64_t threads = training_threads(config_, comm_.size());
  shards_ = comm_.size() == 1 && training_thread_split(config_, comm_.size()) == ThreadSplit::Batch
                ? std::max<int64_t>(threads, 1)
                : 1;
  if (shards_ > 1) {
    make_replicas(shards_);
    set_num_threads(1);  // outside the shards (validation, the optimizer) ops run on one thread
  } else {
    set_num_threads(threads);
  }
  stopped_ = false;
  // A new run that fails before its first checkpoint leaves the folder as it found it
  // (absent or empty), so a bad corpus or config never leaves partial output behind.
  bool created = false, was_empty = false;
  auto cleanup = [&] {
    if (!(created || was_empty) || latest_checkpoint(out_dir_)) return;
    std::error_code ec;
    if (created) fs::remove_all(out_dir_, ec);
    else
      for (const auto& entry : fs::directory_iterator(out_dir_, ec)) fs::remove_all(entry.path(), ec);
    folder_ready_ = false;
  };
  if (!folder_ready_ && !comm_.is_root()) folder_ready_ = true;  // rank 0 alone writes the folder
  if (!folder_ready_) {
    if (fresh_) {
      check_fresh_run_dir(out_dir_, false);
      std::error_code ec;
      created = !fs::exists(out_dir_, ec);
      was_empty = !created;
    }
    try {
      write_run_files();
    } catch (...) {
      cleanup();
      throw;
    }
  }
  const Clock::time_point session_start = Clock::now();
  const int64_t session_first_step = adam_->steps();
  double validation_seconds = 0;  // the last validation's duration, for the ETA
  try {
    model_->train();
    for (;;) {
      // A run restored at an epoch's end starts by moving to the next epoch.
      if (!source_->has_next()) source_->next_epoch();
      if (source_->epoch() >= config_.epochs) break;
      const Clock::time_point epoch_clock = Clock::now();
      const double seconds_before = epoch_seconds_;
      auto epoch_seconds_now = [&] { return seconds_before + seconds_since(epoch_clock); };
      while (source_->has_next()) {
        if (max_steps && adam_->steps() - session_first_step >= *max_steps) {
          epoch_seconds_ = epoch_seconds_now();
          return metrics_;
        }
        const std::vector<int64_t> indices = source_->next();
        int64_t tokens = 0;
        const double loss = train_step(indices, &tokens);
        step_losses_.push_back(loss);
        epoch_loss_sum_ += loss * static_cast<double>(tokens);
        epoch_tokens_ += tokens;
        if (progress_) {
          const double elapsed = seconds_since(session_start);
          const int64_t done = adam_->steps() - session_first_step;
          // A stream's batch count is its counting pass's: never below what it handed out.
          const int64_t batches = std::max(source_->num_batches(), source_->index());
          const int64_t left_in_epoch = batches - source_->index();
          const int64_t epochs_left = config_.epochs - source_->epoch() - 1;
          const double per_step = elapsed / static_cast<double>(std::max<int64_t>(done, 1));
          TrainProgress p;
          p.epoch = source_->epoch() + 1;
          p.epochs = config_.epochs;
          p.batch = source_->index();
          p.batches = batches;
          p.step = adam_->steps();
          p.loss = loss;
          p.epoch_loss = epoch_loss_sum_ / static_cast<double>(std::max<int64_t>(epoch_tokens_, 1));
          p.lr = last_lr_;
          const double secs = epoch_seconds_now();
          p.tokens_per_s = secs > 0 ? static_cast<double>(epoch_tokens_) / secs : 0;
          p.eta_seconds = per_step * static_cast<double>(left_in_epoch + epochs_left * source_->num_batches()) +
                          validation_seconds * static_cast<double>(epochs_left + 1);
          progress_(p);
        }
        if (source_->has_next() && stop_agreed()) {
          epoch_seconds_ = epoch_seconds_now();
          save_checkpoint();
          stopped_ = true;
          return metrics_;
        }
        if (config_.checkpoint_every > 0 && adam_->steps() % config_.checkpoint_every == 0 &&
            source_->has_next()) {
          epoch_seconds_ = epoch_seconds_now();
          save_checkpoint();
        }
      }
      const double train_seconds = epoch_seconds_now();
      const Clock::time_point v0 = Clock::now();
      finish_epoch(train_seconds);
      validation_seconds = seconds_since(v0);
      if (stop_agreed()) {  // the epoch's checkpoint is the place to resume
        stopped_ = true;
        return metrics_;
      }
    }
  } catch (...) {
    cleanup();
    throw;
  }
  return metrics_;
}

}  // namespace attn::train
