// cli/infer_io.h — what `attn translate`, `score`, `eval` and `inspect` share: opening a model
// folder (config.json + model.safetensors, vocab.json, train_config.json), reading stdin lines
// into token ids with errors that name the line, padded batches, decoding a batch (greedy, or
// beam search with the paper's length penalty, §6.1) and teacher-forced log-probabilities.
// Folders of every model family open here; the search and scoring helpers serve encoder-decoder
// models (generation and fill-mask for the single-stack models are in cli/lm_io.h).
#pragma once

#include <cstdint>
#include <istream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attn/core/tensor.h"
#include "attn/decode/hypothesis.h"
#include "attn/models/config.h"
#include "attn/models/encoder_decoder.h"
#include "attn/models/model.h"
#include "attn/train/tasks.h"
#include "attn/train/train_config.h"
#include "attn/train/vocab.h"

namespace attn::cli {

// The files a run folder holds besides the checkpoint.
inline constexpr const char* kVocabFileName = "vocab.json";
inline constexpr const char* kTrainConfigFileName = "train_config.json";
inline constexpr const char* kMetricsFileName = "metrics.jsonl";

// A model folder opened for inference: the model in evaluation mode (no dropout), and the
// vocabulary and training configuration when the folder has them.
struct ModelFolder {
  std::string dir;
  std::shared_ptr<models::Model> base;                 // the model, whatever its family
  std::shared_ptr<models::EncoderDecoderModel> model;  // the same model as an encoder-decoder (else null)
  std::optional<train::Vocab> vocab;     // vocab.json
  nlohmann::json train_config;           // train_config.json; null when absent
  int64_t pad = -1, bos = -1, eos = -1;  // the model config's special ids
  int64_t src_vocab_size = 0, tgt_vocab_size = 0;  // a single-stack model's vocabulary in both
};

// Opens `dir` for `command` (used in messages), which needs a model of family `arch`. A
// missing folder, a folder without a checkpoint, a model of another family (the message names
// the command that serves it), a decoding family without a BOS id, a vocab.json larger than the
// model's vocabulary, or (when need_vocab) a missing vocab.json is an attn::Error naming the path.
ModelFolder open_model_folder(const std::string& dir, const char* command, bool need_vocab,
                              models::Arch arch = models::Arch::EncoderDecoder);

// Lines of a stream with their 1-based numbers; a trailing "\r" and a UTF-8 byte-order mark
// at the start are dropped.
class LineReader {
 public:
  explicit LineReader(std::istream& in) : in_(in) {}
  bool next(std::string& line);
  int64_t line_number() const { return line_; }

 private:
  std::istream& in_;
  int64_t line_ = 0;
};

// How one side of an input line becomes token ids, and ids become output text.
// Text mode (vocab set): tokens as vocab.json's tokenization says (characters or whitespace-
// separated words, or SentencePiece pieces, whose output is detokenized text); for a character
// vocabulary without a space token, ASCII whitespace only separates characters, so "3 7 1" and
// "371" read the same. Ids mode: space-separated decimal
// ids in [0, vocab_size). PAD is never accepted in input (it would be silently masked).
struct TokenCodec {
  const train::Vocab* vocab = nullptr;  // null: ids mode
  int64_t vocab_size = 0;               // ids mode: the model's (source) vocabulary size
  int64_t pad = -1;
  std::string command;           // "translate", ...: the message prefix
  std::string source = "stdin";  // where lines come from, for messages
  // Text mode: when set, a token the vocabulary lacks reads as <unk> and is counted here
  // (as training's validation does) instead of being an error. A SentencePiece vocabulary always
  // reads characters it lacks as <unk>; they are counted here too.
  int64_t* unknown = nullptr;

  // The ids of `field`, the `what` side ("source", "target") of line `line_no`. An empty field,
  // an unknown token (unless `unknown` is set), a malformed or out-of-range id, or invalid UTF-8 is an attn::Error
  // "[command] stdin line N: ...".
  std::vector<int64_t> read(const std::string& field, int64_t line_no, const char* what) const;
  // Output text of generated ids: decoded through the vocabulary, or space-separated ids.
  std::string write(const std::vector<int64_t>& ids) const;
  // One label per id for figure axes (ids as numbers in ids mode).
  std::vector<std::string> labels(const std::vector<int64_t>& ids) const;
};

// Tokens of `text` under a vocabulary's tokenization, whitespace dropped for a character
// vocabulary that has no space token (see TokenCodec).
std::vector<std::string> split_tokens(const std::string& text, const train::Vocab& vocab);

// Space-separated integers of `text` (tokens of ASCII whitespace); a token that is not a
// non-negative decimal integer is an attn::Error naming it.
std::vector<int64_t> parse_ids(const std::string& text);

// Sequences padded with `pad` into I64 [B, max length]; every sequence must be non-empty.
Tensor pad_batch(const std::vector<std::vector<int64_t>>& seqs, int64_t pad);

// Search settings of translate and eval: greedy when beam == 1 and n_best == 1, else beam search.
struct SearchSettings {
  int64_t beam = 1;
  double alpha = 0.6;
  int64_t n_best = 1;
  std::optional<int64_t> max_len;  // generated tokens, EOS included; default source length + 50
};
// Throws attn::Error naming the first invalid setting.
void validate(const SearchSettings& settings);

// Best hypotheses (n_best each, best first) for every source of the batch.
std::vector<std::vector<decode::Hypothesis>> search_batch(const ModelFolder& folder,
                                                          const std::vector<std::vector<int64_t>>& srcs,
                                                          const SearchSettings& settings);

// Teacher forcing for one pair: the decoder is fed BOS + target and predicts target + EOS.
struct ForcedScores {
  std::vector<double> logprobs;  // log p(y_i | source, y_<i) for each target token, then EOS
  std::vector<int64_t> argmax;   // the most probable token at each of those positions
  double total() const;          // the sum of logprobs
};
// One batched forward pass over the pairs (srcs[i], tgts[i]); targets may be empty.
std::vector<ForcedScores> teacher_forced(const ModelFolder& folder, const std::vector<std::vector<int64_t>>& srcs,
                                         const std::vector<std::vector<int64_t>>& tgts);

// train_config.json (ModelFolder::train_config) as `attn train` writes it; std::nullopt when
// the folder has none or it does not parse as a train::TrainConfig.
std::optional<train::TrainConfig> run_train_config(const nlohmann::json& train_config);

// The synthetic task a training run used, with the seed and size of its validation set
// (validation examples are make_task_dataset(task, 0, valid_size, data_seed).valid).
struct RunTask {
  train::TaskConfig task{};
  uint64_t data_seed = train::kTaskSeed;
  int64_t valid_size = train::kTaskValidSize;
};
// std::nullopt when the run trained on a corpus, or its train_config.json is absent or unreadable.
std::optional<RunTask> task_from_train_config(const nlohmann::json& train_config);
// The validation corpus of a corpus run ("valid"), resolved against the run folder when
// relative and not found as given; empty when none is recorded or the file is gone.
std::string valid_path_from_train_config(const nlohmann::json& train_config, const std::string& run_dir);

// Metrics of a model on examples: teacher-forced loss (mean negative log-likelihood per
// target token, EOS included, no label smoothing) and its perplexity; under search (greedy by
// default, as metrics.jsonl's val_token_acc / val_exact_acc) the share of target positions
// (EOS included) where the output has the reference token, and the share of outputs equal to
// the reference (train::validate_model's definitions); and the teacher-forced argmax accuracy.
// Greedy search without max_len stops after the longest reference + EOS of each batch.
struct EvalMetrics {
  int64_t examples = 0;
  int64_t tokens = 0;  // target tokens + one EOS per example
  double loss = 0;
  double perplexity = 0;
  double token_acc = 0;
  double exact_acc = 0;
  double forced_token_acc = 0;
};
EvalMetrics evaluate(const ModelFolder& folder, const std::vector<train::Example>& examples, int64_t batch_size,
                     const SearchSettings& settings);

}  // namespace attn::cli
