// The training loop (see trainer.h), paper §5: the model family's objective (objective.h),
// optional global-norm clipping, Adam at the schedule's rate; per epoch validation, a
// checkpoint, the latest model and metrics.jsonl. Everything that influences a later loss
// (weights, Adam moments, batch order, every dropout generator, the epoch's running sums) is in
// the checkpoint, and the masked LM's masks are a function of (seed, epoch, example), so a
// resumed run repeats the uninterrupted one bit for bit. Over several ranks (attn/dist/): each
// trains on its share of the global batch, the loss is token-weighted so that the summed
// gradients are those of the whole batch, and rank 0 alone validates and writes. Batches come
// from a BatchSource: the in-memory dataset's iterator, or a corpus streamed in chunks.
// Not here: the replicas of ThreadSplit::Batch (replicas.cpp), state.json, the run files and
// resuming (run_state.cpp), the command line, progress drawing (callbacks), the HTML report.
#include "attn/train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/core/storage.h"
#include "attn/dist/sharding.h"
#include "attn/models/checkpoint.h"
#include "attn/models/factory.h"
#include "attn/ops/ops.h"
#include "attn/ops/threads.h"
#include "attn/train/checkpointing.h"
#include "attn/train/text_data.h"
#include "replicas.h"
#include "run_state.h"

namespace attn::train {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr const char* kOp = "train";

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

const double kNaN = std::numeric_limits<double>::quiet_NaN();

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

}  // namespace

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
  j["train_seconds"] = num(train_seconds);
  j["step"] = step;
  j["val_nll"] = num(val_nll);
  j["val_ppl"] = num(val_ppl);
  if (has_preference) {
    j["val_pref_acc"] = num(val_pref_acc);
    j["val_reward_margin"] = num(val_reward_margin);
    j["val_chosen_reward"] = num(val_chosen_reward);
    j["val_rejected_reward"] = num(val_rejected_reward);
    j["val_kl_ref"] = num(val_kl_ref);
  }
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
  m.train_seconds = number_or_nan(j, "train_seconds");
  m.has_preference = j.contains("val_pref_acc");
  m.val_pref_acc = number_or_nan(j, "val_pref_acc");
  m.val_reward_margin = number_or_nan(j, "val_reward_margin");
  m.val_chosen_reward = number_or_nan(j, "val_chosen_reward");
  m.val_rejected_reward = number_or_nan(j, "val_rejected_reward");
  m.val_kl_ref = number_or_nan(j, "val_kl_ref");
  return m;
}

// ---- construction ---------------------------------------------------------------------------

Trainer::Trainer(TrainConfig config, std::string out_dir, const dist::Communicator& comm)
    : Trainer(std::move(config), std::move(out_dir), true, comm) {}

Trainer::Trainer(TrainConfig config, std::string out_dir, bool fresh, const dist::Communicator& comm)
    : config_(std::move(config)), out_dir_(std::move(out_dir)), comm_(comm), fresh_(fresh) {
  ATTN_CHECK(!out_dir_.empty(), kOp, "no output folder given");
  adopt_init_config();
  config_.validate();
  build();
  setup_ranks();
}

Trainer::~Trainer() = default;

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

// The least memory one training step on an example of `length` tokens needs: its
// activations, at least the attention scores (heads x L x L per self- or cross-attention,
// kept for the backward pass; L x W with a sliding window; none with linear attention) and
// L x d_model values per layer.
double step_bytes_at_least(const models::ModelConfig& m, double length) {
  const double keys = m.sliding_window > 0 ? std::min(length, static_cast<double>(m.sliding_window)) : length;
  const double layers = static_cast<double>(
      (m.arch != models::Arch::DecoderOnly ? m.n_encoder_layers : 0) +
      (m.arch == models::Arch::DecoderOnly ? m.n_decoder_layers : 0) +
      (m.arch == models::Arch::EncoderDecoder ? 2 * m.n_decoder_layers : 0));  // self- and cross-attention
  const double scores = m.attention == nn::AttentionKind::Linear ? 0.0 : static_cast<double>(m.n_heads) * length * keys;
  return layers * (scores + length * static_cast<double>(m.d_model)) * static_cast<double>(dtype_size(m.dtype));
}

[[noreturn]] void fail_too_long(const std::string& what, double tokens, double bytes, uint64_t memory) {
  fail(kOp, what, ": one step on it needs at least ", format_bytes(bytes), " of activations (attention scores of ",
       "n_heads x L x L and L x d_model per layer for L = ", static_cast<int64_t>(tokens), "), more than this ",
       "machine's ", format_bytes(static_cast<double>(memory)), " of memory; skip long examples with --max-length ",
       "(max_length), e.g. --max-length 1024");
}

// Refuses training data whose longest example cannot fit in memory for one step, before the
// model is built: a 10 MB line is one example of 10^7 tokens, whose attention scores alone
// exceed any machine. Without this the first forward pass ends in std::bad_alloc after
// gigabytes, naming nothing.
void check_example_fits(const TrainConfig& c, int64_t longest) {
  const uint64_t memory = physical_memory_bytes();
  if (memory == 0 || longest <= 0) return;
  const double bytes = step_bytes_at_least(c.model, static_cast<double>(longest));
  if (bytes > static_cast<double>(memory))
    fail_too_long(str_cat("the longest training example has ", longest, " tokens"), static_cast<double>(longest), bytes,
                  memory);
}

// The same before the file is read, from each line's bytes and words alone, so that a 10 MB
// line is refused without tokenizing it (tens of millions of tokens, seconds and hundreds of
// MiB). A side of a line holds at least as many tokens as whitespace-separated words (a word is
// one token or more with any tokenization) and, with character tokens, at least bytes / 4
// (UTF-8 characters are 1 to 4 bytes). Only without max_length, which skips such lines.
void check_lines_fit(const TrainConfig& c) {
  const uint64_t memory = physical_memory_bytes();
  if (memory == 0 || c.max_length > 0) return;
  const std::string& path = c.uses_tsv() ? c.train_path : c.text_path;
  if (path.empty()) return;
  std::ifstream in(path, std::ios::binary);
  if (!in) return;  // the reader names the problem
  const bool chars = c.tokens == io::Tokenization::Chars;
  std::vector<char> block(1 << 16);
  int64_t line = 1, bytes = 0, words = 0, longest = 0;
  bool in_word = false;
  auto end_side = [&] {
    longest = std::max(longest, chars ? std::max(words, bytes / 4) : words);
    bytes = words = 0;
    in_word = false;
  };
  auto end_line = [&] {
    end_side();
    const double need = step_bytes_at_least(c.model, static_cast<double>(longest));
    if (need > static_cast<double>(memory))
      fail_too_long(str_cat("'", path, "' line ", line, " holds at least ", longest, " tokens",
                            c.uses_tsv() ? " on one side" : ""),
                    static_cast<double>(longest), need, memory);
    ++line;
    longest = 0;
  };
  while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0) {
    const std::streamsize n = in.gcount();
    for (std::streamsize i = 0; i < n; ++i) {
      const char ch = block[static_cast<size_t>(i)];
      if (ch == '\n') {
        end_line();
      } else if (ch == '\t' && c.uses_tsv()) {
        end_side();
      } else {
        ++bytes;
        const bool space = ch == ' ' || ch == '\t' || ch == '\r' || ch == '\f' || ch == '\v';
        if (!space && !in_word) ++words;
        in_word = !space;
      }
    }
  }
  end_line();
}

}  // namespace

void Trainer::build() {
  const TrainConfig& c = config_;
  check_lines_fit(c);  // before reading: a line too long for memory is refused untokenized
  std::unique_ptr<CorpusStream> stream;
  if (c.stream) {
    stream = open_stream(c, data_);
    skipped_long_ = stream->stats().skipped_long;
  } else if (c.uses_pairs()) {
    load_pairs_data();
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
  if (!c.init.empty() && !c.uses_pairs()) adopt_init_vocab();
  if (c.max_length > 0 && !c.stream) {  // in memory: the same skipping as the stream's
    std::vector<io::Example> kept;
    for (io::Example& e : data_.train) {
      if (static_cast<int64_t>(std::max(e.src.size(), e.tgt.size())) > c.max_length) ++skipped_long_;
      else kept.push_back(std::move(e));
    }
    ATTN_CHECK(!kept.empty(), kOp, "every training example has a side longer than max_length ", c.max_length);
    data_.train = std::move(kept);
  }
  if (c.init.empty()) config_.model = model_config_for(c, data_.vocab);  // else the init folder's (adopt_init_config)
  config_.model.validate();
  int64_t longest = std::max(longest_row(data_), stream ? stream->stats().longest : int64_t{0});
  if (c.uses_pairs() && config_.model.arch == models::Arch::DecoderOnly) {  // rows <bos> prompt response
    longest = 0;
    const size_t lead = from_gpt2() ? 0 : 1;  // make_sft_batch: GPT-2 rows have no <bos>
    for (const auto* set : {&data_.train, &data_.valid})
      for (const io::Example& e : *set) longest = std::max<int64_t>(longest, lead + e.src.size() + e.tgt.size());
    for (const auto* pref : {train_pref_.get(), valid_pref_.get()})
      if (pref) {
        const auto& set = pref == train_pref_.get() ? data_.train : data_.valid;
        for (size_t k = 0; k < set.size(); ++k)
          longest = std::max<int64_t>(longest, lead + set[k].src.size() + pref->rejected[k].size());
      }
  }
  if (config_.model.positional == nn::PositionalKind::Learned) {
    ATTN_CHECK(longest <= config_.model.max_len, kOp, "the data has a row of ", longest,
               " tokens, longer than the learned positions' max_len ", config_.model.max_len,
               "; skip longer examples with --max-length (max_length) or raise max_len");
  }
  check_example_fits(config_, longest);
  model_ = models::make_model(config_.model);
  if (!c.init.empty()) load_init_weights();
  model_->train();
  ObjectiveOptions objective;
  objective.label_smoothing = c.label_smoothing;
  objective.seed = c.seed;
  objective.masking.prob = c.mask_prob;
  objective.masking.mask_id = data_.vocab.mask_id();
  objective.masking.first_symbol = data_.vocab.num_special();
  objective.masking.vocab_size = data_.vocab.size();
  objective.kind = c.objective;
  if (c.uses_pairs()) {
    // GPT-2 reads its text without <bos> (as attn generate and Hugging Face feed it): bos -1.
    objective.ids = SpecialIds{config_.model.pad_id, from_gpt2() ? -1 : config_.model.bos_id, config_.model.eos_id};
    objective.dpo_beta = c.dpo_beta;
    if (c.objective == ObjectiveKind::Sft) {
      ATTN_CHECK(c.pack == 0 || config_.model.arch == models::Arch::DecoderOnly, kOp,
                 "pack packs sft pairs for a decoder_only model, not for the init model's arch '",
                 models::arch_name(config_.model.arch), "'");
      objective.sft_pack = c.pack;
    }
    if (c.objective == ObjectiveKind::Dpo) {
      measure_reference();  // before any step: the init (or --ref) model's log-probabilities
      objective.train_preferences = train_pref_;
      objective.valid_preferences = valid_pref_;
      objective.reference = ref_model_;
    }
  }
  objective_ = make_objective(*model_, objective);
  replicas_ = std::make_unique<ReplicaEngine>(*model_, *objective_, config_.model, objective);

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

// ---- the loop -------------------------------------------------------------------------------

double Trainer::train_step(const std::vector<int64_t>& indices, int64_t* tokens) {
  // The step's matrix products in the run's precision (validation stays float32).
  const PrecisionGuard precision(config_.precision);
  const int64_t step = adam_->steps() + 1;
  const double lr = schedule_->lr(step);
  double value = 0;
  if (!reducer_ && shards_ > 1) {
    value = replicas_->backward(source_->examples(), source_->objective_epoch(), indices, *adam_,
                                !(config_.clip > 0), tokens, step, lr);
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
    if (v.has_preference) {
      m.val_pref_acc = v.preference.accuracy;
      m.val_reward_margin = v.preference.margin;
      m.val_chosen_reward = v.preference.chosen_reward;
      m.val_rejected_reward = v.preference.rejected_reward;
      m.val_kl_ref = v.kl_ref;
    }
  } else {
    m.val_loss = m.val_nll = m.val_ppl = m.val_token_acc = m.val_exact_acc = kNaN;
  }
  if (config_.objective == ObjectiveKind::Dpo) {
    m.has_preference = true;
    if (data_.valid.empty())
      m.val_pref_acc = m.val_reward_margin = m.val_chosen_reward = m.val_rejected_reward = m.val_kl_ref = kNaN;
  }
  m.train_seconds = train_seconds;
  m.seconds = train_seconds + seconds_since(start);
  metrics_.push_back(m);
  epoch_loss_sum_ = 0;
  epoch_tokens_ = 0;
  epoch_seconds_ = 0;
  save_checkpoint();
  if (comm_.is_root()) {
    save_model_folders();
    write_metrics_file(run_file(out_dir_, io::kMetricsFileName), metrics_);
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
    replicas_->make(shards_);
    attn::set_num_threads(1);  // outside the shards (validation, the optimizer) ops run on one thread
  } else {
    attn::set_num_threads(threads);
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
  int64_t epochs_finished_here = 0;  // finish_epoch calls of this session
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
      ++epochs_finished_here;
      validation_seconds = seconds_since(v0);
      if (stop_agreed()) {  // the epoch's checkpoint is the place to resume
        stopped_ = true;
        return metrics_;
      }
    }
    // A resumed run with nothing left to train: the previous session was killed after the last
    // epoch's checkpoint, possibly while it wrote the run folder's model (config.json removed,
    // the weights half replaced). The checkpoint holds the same state, so writing the model
    // and metrics again completes the folder exactly as an uninterrupted run leaves it.
    if (epochs_finished_here == 0 && comm_.is_root()) {
      models::save_model(out_dir_, *model_, {{io::kVocabFileName, data_.vocab.to_json().dump(1) + "\n"}});
      write_metrics_file(run_file(out_dir_, io::kMetricsFileName), metrics_);
    }
  } catch (...) {
    cleanup();
    throw;
  }
  return metrics_;
}

}  // namespace attn::train
