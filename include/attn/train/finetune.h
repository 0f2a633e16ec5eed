// attn/train/finetune.h — the data and losses of fine-tuning (docs/training.md, "Fine-tuning"):
//   SFT   instruction tuning on prompt/response pairs: a decoder-only model reads
//         <bos> template(prompt) response and predicts response <eos>; the positions that
//         predict prompt tokens are masked out of the loss and the metrics (the target there is
//         kIgnoreTarget). An encoder-decoder reads the prompt as its source and the response as
//         its target: ordinary seq2seq training.
//   DPO   direct preference optimisation (Rafailov et al. 2023) on prompt/chosen/rejected
//         triples: loss = -log sigmoid(beta ((log pi(c) - log ref(c)) - (log pi(r) - log ref(r)))),
//         each log-probability summed over the response's tokens and its <eos> only.
// Pairs files are TSV (prompt<TAB>response, or prompt<TAB>chosen<TAB>rejected) or JSONL (one
// object per line with string fields "prompt" and "response", or "prompt", "chosen" and
// "rejected"). The objectives built on these are in objective.h; the trainer wires them up.
// SFT rows may be packed (make_packed_sft_batch): several pairs per row, each attending only to
// itself. Not here: PPO, reward models.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attn/core/tensor.h"
#include "attn/io/example.h"
#include "attn/train/batching.h"

namespace attn::train {

// What a run trains for: its family's pre-training objective (objective.h), instruction tuning,
// or preference optimisation. Named "pretrain", "sft" and "dpo" in train_config.json.
enum class ObjectiveKind { Pretrain, Sft, Dpo };
const char* objective_kind_name(ObjectiveKind kind);
// Parses the names above; another name is an error listing them.
ObjectiveKind parse_objective_kind(const std::string& name);

// ---- pairs files --------------------------------------------------------------------------

// One record: prompt and response (SFT), or prompt, chosen (in `response`) and rejected (DPO).
struct PairRecord {
  std::string prompt, response, rejected;
  int64_t line = 0;  // 1-based line in the file
};
struct PairsFile {
  std::string path;
  std::vector<PairRecord> records;
};

// Reads a pairs file for `kind` (Sft or Dpo): JSONL when the name ends in .jsonl or .json, TSV
// otherwise. Empty lines are skipped; a byte-order mark and CRLF endings are accepted. A line
// with the wrong number of TSV fields, JSON that is not an object, a missing or non-string
// field, an empty response (chosen or rejected), invalid UTF-8, or a file without any record is
// an error "[pairs] '<path>' line <n>: ...".
PairsFile read_pairs(const std::string& path, ObjectiveKind kind);

// The default prompt template: the prompt, then a newline that separates it from the response.
inline constexpr const char* kDefaultTemplate = "{prompt}\n";
// A template must hold "{prompt}" exactly once (an error otherwise).
void validate_template(const std::string& tmpl);
// The template with "{prompt}" replaced by `prompt`.
std::string apply_template(const std::string& tmpl, const std::string& prompt);
// A template as typed on a command line: "\n", "\t" and "\\" become a newline, a tab and a
// backslash; any other backslash is an error.
std::string unescape_template(const std::string& typed);

// Text -> ids with the run's tokenizer (an attn vocabulary or GPT-2's byte-level BPE).
using TextEncoder = std::function<std::vector<int64_t>(const std::string&)>;

// Pairs as examples: src = the prompt's ids (templated when `templated`: decoder-only models),
// tgt = the response's (DPO: the chosen one's), and DPO's rejected responses alongside. A
// response that encodes to no ids is an error naming the file and line.
struct PairExamples {
  std::vector<io::Example> examples;
  std::vector<std::vector<int64_t>> rejected;  // DPO only, one per example
};
PairExamples encode_pairs(const PairsFile& file, const std::string& tmpl, bool templated, const TextEncoder& encode);

// ---- batches and losses ---------------------------------------------------------------------

// The target of positions that count for nothing (prompt positions and padding of SFT and DPO
// rows): cross_entropy's ignore_index. Negative, so that it is never a token id (GPT-2 has no
// <pad>).
inline constexpr int64_t kIgnoreTarget = -100;

// Decoder-only rows of prompt + response pairs (examples as encode_pairs makes them, src =
// prompt, tgt = response) for the examples at `indices`, B rows, T = longest prompt + response + 1:
//   tgt_in  [B, T] = <bos> prompt response, then padding (ids.pad, or ids.eos when the model has
//                    no <pad>: a causal model's padded tail never reaches the earlier positions)
//   tgt_out [B, T] = kIgnoreTarget at the |prompt| positions that predict prompt tokens, then
//                    response <eos>, then kIgnoreTarget
// With ids.bos < 0 (GPT-2, which reads text without a <bos>, as attn generate feeds it) the
// rows are prompt response, one shorter, and the prompt must not be empty.
// `responses` replaces each example's tgt when given (DPO's rejected responses, one per index).
// n_tgt_tokens counts the response tokens and <eos> (what the loss averages over); src is left
// undefined. An empty response, an empty index list or an index out of range is an error.
Batch make_sft_batch(const std::vector<io::Example>& dataset, const std::vector<int64_t>& indices, SpecialIds ids,
                     const std::vector<std::vector<int64_t>>* responses = nullptr);

// Packed SFT rows (--pack N with objective sft): the pairs dataset[indices], each laid out as
// make_sft_batch lays out one row (<bos> prompt response, targets kIgnoreTarget at the prompt
// positions), placed end to end in index order into rows of at most `block` tokens (a new row
// when the next pair does not fit; a pair longer than `block` gets a row of its own). T = the
// longest row. Alongside batch.tgt_in / tgt_out:
//   positions [B, T]  each pair's positions restart at 0 (as the pair alone would have them)
//   segments  [B, T]  the pair's index within its row (0, 1, ...), -1 for the row's padding
// DecoderOnlyModel::forward_packed attends within a segment only, so a pair's logits equal its
// logits alone. batch.tgt_lengths holds each row's used length, n_tgt_tokens as make_sft_batch.
struct PackedSftBatch {
  Batch batch;
  Tensor positions, segments;  // I64 [B, T]
  int64_t pairs = 0;
};
PackedSftBatch make_packed_sft_batch(const std::vector<io::Example>& dataset, const std::vector<int64_t>& indices,
                                     SpecialIds ids, int64_t block);

// Per-row sums of log p(target) of logits [B, T, V] against targets I64 [B, T], over the
// positions whose target is not `ignore`: a [B] tensor on the tape (B = 1: shape [1]). A row
// without any counted position sums to 0.
Tensor sequence_logprobs(const Tensor& logits, const Tensor& targets, int64_t ignore);

// The DPO loss over P pairs: the mean of -log sigmoid(beta * z), z = (policy_chosen -
// ref_chosen) - (policy_rejected - ref_rejected), all [P] (the references are constants: their
// gradients are not taken). Computed as the two-class cross entropy of logits [beta z, 0]
// against class 0, which is -log sigmoid(beta z) without overflow.
Tensor dpo_loss(const Tensor& policy_chosen, const Tensor& policy_rejected, const Tensor& ref_chosen,
                const Tensor& ref_rejected, double beta);

// DPO's implicit rewards over a set of pairs: reward(y) = beta (log pi(y) - log ref(y)).
struct PreferenceStats {
  double loss = 0;             // mean -log sigmoid(margin)
  double accuracy = 0;         // share of pairs with reward(chosen) > reward(rejected); ties count half
  double margin = 0;           // mean reward(chosen) - reward(rejected)
  double chosen_reward = 0;    // mean reward(chosen)
  double rejected_reward = 0;  // mean reward(rejected)
  int64_t pairs = 0;
};
// From per-pair log-probabilities (all of one length, at least one pair).
PreferenceStats preference_stats(const std::vector<double>& policy_chosen, const std::vector<double>& policy_rejected,
                                 const std::vector<double>& ref_chosen, const std::vector<double>& ref_rejected,
                                 double beta);

// The preference data of one set for the DPO objective: each example's rejected response and
// the frozen reference model's log-probabilities of its chosen and rejected responses.
struct PreferenceSet {
  std::vector<std::vector<int64_t>> rejected;
  std::vector<double> ref_chosen, ref_rejected;
};

}  // namespace attn::train
