// attn/train/train_config.h — every training hyper-parameter of `attn train` in one struct,
// validated once: the data (a synthetic task or a TSV corpus for the encoder-decoder, a text
// file for the decoder-only and encoder-only models, chosen by model.arch), batching, Adam (paper §5.3),
// the learning-rate schedule (Noam, constant, cosine), label smoothing (§5.4), clipping,
// checkpointing, seed and threads, plus the model's hyper-parameters (ModelConfig).
// JSON in and out with strict keys, as ModelConfig. Defaults: the seed's digit-reversal recipe.
// Not here: the loop itself (trainer.h) or the command line (cli/cmd_train.cpp).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "attn/models/config.h"
#include "attn/ops/precision.h"
#include "attn/train/finetune.h"
#include "attn/train/schedule.h"
#include "attn/train/tasks.h"
#include "attn/io/vocab.h"

namespace attn::train {

// Bounds on the sizes a training config sets, checked by validate() before anything is made:
// a synthetic task's length and its data (train_size + valid_size examples of up to `length`
// symbols, made in memory), and the counts of a batch or a chunk (batch_size, max_tokens,
// bucket_size, chunk_lines). docs/training.md lists them.
inline constexpr int64_t kMaxTaskLength = int64_t{1} << 16;
inline constexpr int64_t kMaxTaskTokens = int64_t{1} << 28;
inline constexpr int64_t kMaxBatchCount = int64_t{1} << 30;

struct TrainConfig {
  // ---- data: a synthetic task (task non-empty), a TSV corpus (train_path non-empty) or a
  // ---- text file (text_path non-empty; decoder_only and encoder_only models) -------------
  std::string task = "reverse";   // "reverse", "copy", "sort"; "" with a TSV corpus or a text file
  int64_t length = 8;             // symbols per source (synthetic tasks)
  int64_t min_length = 0;         // 0: fixed length; else lengths uniform in [min_length, length]
  int64_t symbols = 10;           // alphabet size of the synthetic task (1..62)
  int64_t train_size = kTaskTrainSize;  // synthetic training examples
  int64_t valid_size = kTaskValidSize;  // synthetic validation examples (0: no validation)
  uint64_t data_seed = kTaskSeed;       // the synthetic data's generator (fixed: the data never
                                        // depends on `seed`)
  std::string train_path;         // TSV "source<TAB>target" training corpus
  std::string valid_path;         // TSV validation corpus ("" = no validation)
  std::string text_path;         // plain text, one training sequence per non-blank line (text_data.h)
  std::string valid_text_path;   // plain-text validation lines ("" = no validation)
  io::Tokenization tokens = io::Tokenization::Chars;  // how TSV and text lines split into tokens
  std::string vocab;             // tokens = sentencepiece: the SentencePiece model (a file, or a
                                 // folder holding sentencepiece.model); "" otherwise
  double mask_prob = 0.15;       // encoder_only: share of each line's tokens chosen for the masked LM
  int64_t pack = 0;              // decoder_only text: 0 = one example per line; N >= 2 = the lines
                                 // packed (with <eos> between them) into rows of N tokens, <bos>
                                 // included (text_data.h, load_text_dataset); sft pairs: each
                                 // batch's pairs packed into rows of at most N tokens, every pair
                                 // attending only to itself (finetune.h, make_packed_sft_batch)

  // ---- fine-tuning (finetune.h; docs/training.md "Fine-tuning") ---------------------------
  // What the run trains for: the family's pre-training objective, or sft / dpo on a pairs file
  // (then task, data and text are empty).
  ObjectiveKind objective = ObjectiveKind::Pretrain;
  std::string pairs_path;         // sft: prompt/response pairs; dpo: prompt/chosen/rejected (TSV or JSONL)
  std::string valid_pairs_path;   // the same for validation ("" = no validation)
  std::string prompt_template = kDefaultTemplate;  // decoder_only: the text before the response
  // A model folder to start from (attn's, or a Hugging Face GPT-2 folder): its architecture,
  // weights and vocabulary (or BPE tokenizer) replace model and the data's vocabulary.
  std::string init;
  std::string ref;                // dpo: the frozen reference model's folder ("" = the init model)
  double dpo_beta = 0.1;          // dpo: beta, the strength of the pull toward the reference

  // ---- model (vocabulary sizes and special ids are set from the data's vocabulary) -------
  models::ModelConfig model = default_model();

  // ---- batching (batching.h) ---------------------------------------------------------------
  int64_t epochs = 25;
  int64_t batch_size = 64;       // examples per batch (0 = only max_tokens caps)
  int64_t max_tokens = 0;        // padded tokens per batch (0 = no cap)
  bool group_by_length = true;   // sort by length within buckets, then shuffle the batches
  int64_t bucket_size = 0;       // examples per length bucket (0 = the whole epoch)
  // Streaming (corpus_stream.h): the training file (data or text) read in chunks instead of
  // held in memory; buckets and shuffling are then per chunk, and bucket_size 0 = the chunk.
  bool stream = false;
  int64_t chunk_lines = 100000;  // stream: lines per chunk
  int64_t chunk_bytes = 0;       // stream: also end a chunk at this many bytes (0 = lines only)
  int64_t max_length = 0;        // skip (and count) training examples with a side longer than
                                 // this many tokens (0 = no limit)

  // ---- optimizer and schedule ----------------------------------------------------------------
  double beta1 = 0.9, beta2 = 0.98, eps = 1e-9;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = true;  // AdamW's decay (false: L2 added to the gradient)
  ScheduleKind schedule = ScheduleKind::Noam;
  int64_t warmup = 400;          // warmup steps (Noam: >= 1)
  double lr_scale = 1.0;         // Noam: the factor in front of d_model^-0.5 * min(...)
  double lr = 1e-3;              // constant / cosine: the peak rate
  double min_lr = 0.0;           // cosine: the final rate
  double label_smoothing = 0.1;  // eps_ls in [0, 1)
  double clip = 0.0;             // max global gradient norm; 0 = no clipping

  // ---- run ----------------------------------------------------------------------------------
  // The precision of the training step's matrix products (attn/ops/precision.h): f32, or bf16
  // (bf16 operands, float32 sums; weights, gradients, Adam's moments, checkpoints and
  // validation stay float32).
  Precision precision = Precision::F32;
  uint64_t seed = 0;             // model initialisation, dropout and batch order
  int64_t threads = 0;           // OpenMP/BLAS threads; 0 = auto (trainer.h, training_threads)
  // How the threads share a step (trainer.h, ThreadSplit): "ops" (each op's work is divided),
  // "batch" (each batch is split into one shard per thread), "auto" (batch for d_model <= 128
  // in a single process, ops otherwise).
  std::string parallel = "auto";
  int64_t keep = 5;              // checkpoints kept (the newest ones); 0 = keep all
  int64_t checkpoint_every = 0;  // also checkpoint every N steps inside epochs; 0 = epoch ends only

  // The seed's model: D=64, 4 heads, 2+2 layers, d_ff 256, dropout 0.1, post-norm, sinusoidal.
  static models::ModelConfig default_model();

  bool uses_tsv() const { return !train_path.empty(); }
  bool uses_text() const { return !text_path.empty(); }
  bool uses_pairs() const { return objective != ObjectiveKind::Pretrain; }
  // Throws attn::Error "[TrainConfig] ..." naming the first invalid field; the model config is
  // validated too, with the vocabulary of the data in place of its own sizes.
  void validate() const;

  // Every field; enums by name ("noam", "char"); the model as a nested object "model".
  nlohmann::json to_json() const;
  // Reads the keys present over the defaults (the nested "model" object over default_model()).
  // Unknown keys and wrong types are errors naming the key. Does not validate.
  static TrainConfig from_json(const nlohmann::json& j);
  // Applies the keys present in `j` on top of this config (same rules as from_json).
  void update_from_json(const nlohmann::json& j);
  // from_json of a file; errors name the path.
  static TrainConfig load(const std::string& path);

  bool operator==(const TrainConfig& other) const;
};

// The schedule this config describes, for `steps_per_epoch` batches per epoch (cosine decays
// over epochs * steps_per_epoch steps).
ScheduleConfig schedule_config(const TrainConfig& config, int64_t steps_per_epoch);

}  // namespace attn::train
