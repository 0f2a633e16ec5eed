// attn/run/evaluate.h — the metrics of an encoder-decoder model folder on examples (what
// `attn eval` prints): teacher-forced loss and perplexity, and the accuracies of its search
// outputs as decode/sequence_score.h defines them, the same definition as training's validation.
// Not here: BLEU or chrF (train/metrics.h), reading the examples (io/tsv.h, train/tasks.h).
#pragma once

#include <cstdint>
#include <vector>

#include "attn/io/example.h"
#include "attn/run/model_folder.h"
#include "attn/run/translate.h"

namespace attn::run {

// Metrics of a model on examples: teacher-forced loss (mean negative log-likelihood per
// target token, EOS included, no label smoothing) and its perplexity; under search (greedy by
// default, as metrics.jsonl's val_token_acc / val_exact_acc) the token and exact accuracies of
// decode::score_sequence; and the teacher-forced argmax accuracy. Greedy search without max_len
// stops after the longest reference + EOS of each batch (decode::scoring_max_len).
struct EvalMetrics {
  int64_t examples = 0;
  int64_t tokens = 0;  // target tokens + one EOS per example
  double loss = 0;
  double perplexity = 0;
  double token_acc = 0;
  double exact_acc = 0;
  double forced_token_acc = 0;
};
// Batches of `batch_size` examples; no examples or a batch size below 1 is an attn::Error.
EvalMetrics evaluate(const ModelFolder& folder, const std::vector<io::Example>& examples, int64_t batch_size,
                     const SearchSettings& settings);

}  // namespace attn::run
