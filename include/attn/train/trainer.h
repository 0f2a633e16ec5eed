// attn/train/trainer.h — the training loop (paper §5) of all three model families: the
// family's objective (objective.h: teacher forcing for the encoder-decoder, next-token
// prediction for decoder-only, BERT's masked LM for encoder-only), global-norm clipping, Adam
// at the schedule's rate, per-epoch validation, metrics.jsonl, and checkpoints that make
// --resume exact (checkpointing.h). Deterministic: the same config, seed and thread count give
// the same losses bit for bit (with ThreadSplit::Batch the thread count is the shard count, so
// it decides the dropout masks, as the rank count does). Data parallel under an MPI launcher
// (docs/distributed.md): every rank trains on its share of each global batch, gradients are
// summed in buckets overlapping the backward sweep, and rank 0 alone writes the run folder.
// With config.stream the training file is read in chunks (corpus_stream.h) instead of held in
// memory; its position is checkpointed the same way. Not here: gradient accumulation, mixed
// precision, model or pipeline parallelism.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn/dist/communicator.h"
#include "attn/dist/gradient_reducer.h"
#include "attn/io/bpe.h"
#include "attn/models/model.h"
#include "attn/train/adam.h"
#include "attn/train/batching.h"
#include "attn/train/corpus_stream.h"
#include "attn/train/objective.h"
#include "attn/train/schedule.h"
#include "attn/train/tasks.h"
#include "attn/train/train_config.h"

namespace attn::train {

// How a run's threads share a training step (config.parallel):
//   Ops    every op divides its work among the threads (OpenMP, BLAS); the other work of the
//          step runs on one. Pays for large models, whose ops are big enough to share.
//   Batch  each batch is split into one shard per thread (dist::shard, as ranks split a global
//          batch); thread k runs the forward and backward pass of shard k on a replica of the
//          model that shares the weights but keeps its own gradients and dropout generators,
//          each op single-threaded; the gradients are then summed in shard order into the
//          model's. Pays for small models, whose ops are too small to share: the seed's model
//          has ~1,000 ops of a few microseconds per step, and one fork-join each costs as much.
// "auto" is Batch for d_model <= 128 in a single process, Ops otherwise; over several ranks it
// is always Ops (each rank's share is already a shard).
enum class ThreadSplit { Ops, Batch };
ThreadSplit training_thread_split(const TrainConfig& config, int ranks = 1);
// The thread count a training run uses: config.threads when set; otherwise ("auto") all cores
// (those this process may run on) when the threads split batches; under Ops, 1 for models of
// d_model <= 128, whose per-op work is too small to share (on a busy 2-core machine the seed's
// model trained ~15x slower on 2 threads than on 1), and 0 (the runtime's default, all cores)
// for larger ones; under an MPI launcher with several ranks on this machine, the cores this rank
// is bound to, or (unbound) the machine's cores divided among its ranks.
int64_t training_threads(const TrainConfig& config, int ranks = 1);

// One line of metrics.jsonl: the epoch's training loss (the objective, label smoothing
// included, averaged over predicted tokens), the validation loss (same criterion, teacher
// forcing, no dropout), val_nll (the same without smoothing), val_ppl = exp(val_nll), and the
// accuracies of ValidationResult (objective.h: greedy decoding for the encoder-decoder, the
// argmax at predicted tokens for the single-stack models). Validation values are NaN (null in
// JSON) without a validation set, and val_exact_acc is NaN for the single-stack models.
struct EpochMetrics {
  int64_t epoch = 0;          // 1-based
  int64_t step = 0;           // optimizer steps after this epoch
  double loss = 0;
  double val_loss = 0;
  double val_nll = 0;
  double val_ppl = 0;         // exp(val_nll)
  double val_token_acc = 0;   // in [0, 1]
  double val_exact_acc = 0;   // in [0, 1]
  // DPO runs (has_preference): the validation pairs' implicit-reward statistics (finetune.h,
  // PreferenceStats); written to metrics.jsonl only then, so other runs' lines are unchanged.
  bool has_preference = false;
  double val_pref_acc = 0, val_reward_margin = 0, val_chosen_reward = 0, val_rejected_reward = 0;
  double val_kl_ref = 0;      // the chosen responses' mean per-token KL(policy || reference)
  double lr = 0;              // the rate of the epoch's last step
  double tokens_per_s = 0;    // predicted tokens (EOS included, PAD excluded) per second of training
  double seconds = 0;         // wall time of the epoch, validation included
  double train_seconds = 0;   // the epoch's training steps alone (no validation, no end-of-epoch
                              // checkpoint): what tokens_per_s divides by
  nlohmann::ordered_json to_json() const;
  static EpochMetrics from_json(const nlohmann::json& j);
};

// What the progress callback is told: after every optimizer step (phase Train) and when
// validation starts (phase Validate).
struct TrainProgress {
  enum class Phase { Train, Validate };
  Phase phase = Phase::Train;
  int64_t epoch = 0, epochs = 0;      // 1-based epoch
  int64_t batch = 0, batches = 0;     // 1-based batch within the epoch
  int64_t step = 0;                   // optimizer steps so far
  double loss = 0;                    // this batch
  double epoch_loss = 0;              // this epoch so far (per token)
  double lr = 0;
  double tokens_per_s = 0;            // this epoch so far
  double eta_seconds = 0;             // to the end of the run, from this session's speed
};

class ReplicaEngine;  // ThreadSplit::Batch's replicas (src/train/replicas.h)

class Trainer {
 public:
  using ProgressCallback = std::function<void(const TrainProgress&)>;
  using EpochCallback = std::function<void(const EpochMetrics&)>;

  // A new run into `out_dir`: validates the config, builds the data (task, TSV pairs or a
  // text file), the vocabulary, the model of config.model.arch, its objective and the
  // optimizer. Writes nothing (run() creates the folder).
  // Over a communicator of N > 1 ranks (every rank constructs its Trainer with the same config;
  // this is checked, with the data, and rank 0's initial weights are broadcast):
  // config.batch_size and max_tokens cap the *global* batch, of which rank r trains on its
  // share (dist::shard), so the run does not depend on N: N ranks compute what one process
  // computes (to float32 summation order; dropout draws its masks per rank). The loss is the
  // mean over all ranks' tokens, gradients are summed with dist::GradientReducer, every rank
  // takes the same step, and rank 0 alone validates and writes files.
  Trainer(TrainConfig config, std::string out_dir,
          const dist::Communicator& comm = dist::Communicator::world());
  ~Trainer();
  // Continues the run in `out_dir` from its latest checkpoint: the stored train_config.json
  // with `overrides` applied (only "epochs", "keep", "threads", "parallel" and
  // "checkpoint_every" may differ), the data rebuilt (its vocabulary must equal vocab.json), then model weights,
  // Adam moments, batch position, every dropout generator and the metrics so far restored.
  // Every rank reads the run folder (it must be visible to all), and the number of ranks may
  // differ from the run's so far: the batches are global, and the dropout generators of ranks
  // the checkpoint did not have are derived from rank 0's.
  static std::unique_ptr<Trainer> resume(const std::string& out_dir,
                                         const nlohmann::json& overrides = nlohmann::json::object(),
                                         const dist::Communicator& comm = dist::Communicator::world());

  void on_progress(ProgressCallback cb) { progress_ = std::move(cb); }
  void on_epoch(EpochCallback cb) { epoch_cb_ = std::move(cb); }

  // Trains until config.epochs epochs are done (or `max_steps` optimizer steps more, when
  // given: a way to stop early, used by tests). A fresh run first creates the folder
  // (config.json, vocab.json, train_config.json). After every epoch: validation, a checkpoint,
  // OUT/model.safetensors and metrics.jsonl. Returns the metrics of all epochs so far.
  const std::vector<EpochMetrics>& run(std::optional<int64_t> max_steps = std::nullopt);

  // Asks run() to stop after the current step and write a checkpoint there, so that --resume
  // continues exactly (async-signal-safe: a SIGINT handler may call it). stopped() tells
  // whether the last run() ended that way. With several ranks, all stop at the first step
  // after any of them was asked.
  void request_stop() { stop_requested_.store(true); }
  bool stopped() const { return stopped_; }

  // Writes a checkpoint of the current state now (run() does this on its own schedule) and
  // returns its folder. With several ranks every rank must call it (it gathers each rank's
  // dropout generators); rank 0 writes, the others return "".
  std::string save_checkpoint();

  const TrainConfig& config() const { return config_; }
  const dist::Communicator& communicator() const { return comm_; }
  // The gradient reducer of a run over several ranks (null with one).
  const dist::GradientReducer* reducer() const { return reducer_.get(); }
  const std::string& out_dir() const { return out_dir_; }
  // The vocabulary, the validation set and (in memory) the training examples; a streamed run's
  // training examples are not here (data().train is empty) but in stream().
  const Dataset& data() const { return data_; }
  // The streamed training corpus (config.stream), else null.
  const CorpusStream* stream() const { return stream_; }
  // Training examples skipped per epoch for max_length (and, streamed, max_tokens / max_len).
  int64_t skipped_long() const { return skipped_long_; }
  // Where the batches come from (the in-memory dataset's iterator or the stream).
  const BatchSource& batches() const { return *source_; }
  models::Model& model() { return *model_; }
  const std::shared_ptr<models::Model>& model_ptr() const { return model_; }
  Objective& objective() { return *objective_; }
  const Adam& optimizer() const { return *adam_; }
  int64_t step() const { return adam_->steps(); }
  int64_t epochs_done() const { return static_cast<int64_t>(metrics_.size()); }
  const std::vector<EpochMetrics>& metrics() const { return metrics_; }
  // Every optimizer step's training loss so far in this process (resume exactness tests).
  const std::vector<double>& step_losses() const { return step_losses_; }
  const std::string& describe_schedule() const { return schedule_text_; }
  // Fine-tuning (config.init, config.objective): whether the run started from a Hugging Face
  // GPT-2 folder (then it also writes OUT/hf in that layout, with the folder's tokenizer, and
  // OUT itself has no vocab.json), that tokenizer, and DPO's preference data with the
  // reference log-probabilities (null otherwise).
  bool from_gpt2() const { return bpe_.has_value(); }
  const std::optional<io::BpeTokenizer>& gpt2_tokenizer() const { return bpe_; }
  const PreferenceSet* train_preferences() const { return train_pref_.get(); }
  const PreferenceSet* valid_preferences() const { return valid_pref_.get(); }
  // The folder in the Hugging Face layout of a GPT-2 start: OUT/hf.
  static constexpr const char* kHfDirName = "hf";

 private:
  Trainer(TrainConfig config, std::string out_dir, bool fresh, const dist::Communicator& comm);
  void build();
  // Fine-tuning (src/train/finetune_setup.cpp): the init folder's model config and tokenization
  // into config_ (before validation); the pairs data; the model loaded from the init folder;
  // DPO's reference log-probabilities; the model folder(s) written after every epoch.
  void adopt_init_config();
  void load_pairs_data();
  void adopt_init_vocab();  // pretrain data from --init: re-read with the folder's vocabulary
  void load_init_weights();
  void measure_reference();
  void save_model_folders();
  void setup_ranks();
  // Whether any rank was asked to stop (a collective when there are several).
  bool stop_agreed();
  // One optimizer step on dataset indices `indices`; returns the loss and counts the tokens.
  double train_step(const std::vector<int64_t>& indices, int64_t* tokens);
  void finish_epoch(double seconds_before_validation);
  // The run state (src/train/run_state.cpp): state.json's contents and their restoring, this
  // rank's dropout generators from a checkpoint's state (per rank when it has them), and the
  // run files a (re)started run writes first.
  nlohmann::json state_json() const;
  void restore_state(const nlohmann::json& state);
  void restore_rank_rngs(const nlohmann::json& state);
  void write_run_files();

  TrainConfig config_;
  std::string out_dir_;
  dist::Communicator comm_;
  std::unique_ptr<dist::GradientReducer> reducer_;  // only with several ranks
  bool fresh_ = true;          // a new run: run() creates the folder first
  bool folder_ready_ = false;
  Dataset data_;
  std::shared_ptr<models::Model> model_;
  std::unique_ptr<Objective> objective_;
  // ThreadSplit::Batch: the step's shard count (1: no split) and the replicas of shards 1..
  int64_t shards_ = 1;
  std::unique_ptr<ReplicaEngine> replicas_;
  std::unique_ptr<Adam> adam_;
  std::unique_ptr<LrSchedule> schedule_;
  std::string schedule_text_;
  std::unique_ptr<BatchSource> source_;
  CorpusStream* stream_ = nullptr;  // source_ when streaming
  int64_t skipped_long_ = 0;
  std::optional<io::BpeTokenizer> bpe_;  // a GPT-2 start's tokenizer
  std::shared_ptr<models::Model> init_model_;  // the init folder's model, until its weights are copied
  std::optional<io::Vocab> init_vocab_;        // an attn init folder's vocab.json
  std::shared_ptr<PreferenceSet> train_pref_, valid_pref_;  // dpo
  std::shared_ptr<models::Model> ref_model_;  // dpo with validation pairs: the frozen reference, for val_kl_ref
  std::vector<EpochMetrics> metrics_;
  std::vector<double> step_losses_;
  // The current epoch so far (checkpointed, so a resumed epoch reports the same numbers).
  double epoch_loss_sum_ = 0;    // sum over batches of loss * target tokens
  int64_t epoch_tokens_ = 0;
  double epoch_seconds_ = 0;     // training time of this epoch before this session
  double last_lr_ = 0;
  std::atomic<bool> stop_requested_{false};
  bool stopped_ = false;
  ProgressCallback progress_;
  EpochCallback epoch_cb_;
};

}  // namespace attn::train
