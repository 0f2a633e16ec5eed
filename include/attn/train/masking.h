// attn/train/masking.h — BERT's masked-LM corruption (Devlin et al. 2019, §3.1 "Task #1"):
// of every sequence's non-special tokens, 15% are chosen (max(1, round(0.15 n)) of them, drawn
// without replacement as BERT's create_pretraining_data does); each chosen token becomes [MASK]
// with probability 0.8, a random symbol with probability 0.1, and stays itself otherwise. The
// loss is taken only at the chosen positions. Masks come from a generator per sequence, seeded
// from (seed, epoch, example), so a resumed run masks exactly as an uninterrupted one.
// Not here: whole-word masking, span masking, next-sentence prediction.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/core/rng.h"
#include "attn/core/tensor.h"
#include "attn/train/tasks.h"

namespace attn::train {

struct MaskingOptions {
  double prob = 0.15;          // share of a sequence's candidate tokens that are chosen, in (0, 1)
  double mask_share = 0.8;     // of the chosen: replaced by [MASK]
  double random_share = 0.1;   // of the chosen: replaced by a random symbol (the rest stay)
  int64_t mask_id = -1;        // the [MASK] id (required)
  int64_t first_symbol = 0;    // ids below are special: never chosen, never drawn as random tokens
  int64_t vocab_size = 0;      // random tokens are drawn uniformly from [first_symbol, vocab_size)
};
// Throws attn::Error naming the first invalid field.
void validate(const MaskingOptions& options);

// One corrupted sequence.
struct MaskedSequence {
  std::vector<int64_t> input;      // the sequence with the chosen tokens replaced (or kept)
  std::vector<int64_t> positions;  // the chosen positions, ascending
  std::vector<int64_t> targets;    // the original token at each chosen position
};

// Corrupts `ids`: the candidates are the positions holding ids >= first_symbol; n = max(1,
// round(prob * candidates)) of them are chosen (none when there are no candidates), then each
// is replaced as the options say. Draws from `rng` only.
MaskedSequence mask_sequence(const std::vector<int64_t>& ids, const MaskingOptions& options, Rng& rng);

// The generator seed of example `index` in epoch `epoch` of a run seeded `seed`. Validation
// uses epoch -1, so its masks are the same every epoch and comparable across epochs.
uint64_t masking_seed(uint64_t seed, int64_t epoch, int64_t index);

// A padded masked-LM batch of B sequences, S = the longest.
struct MaskedBatch {
  Tensor input;   // I64 [B, S]: corrupted sequences, then <pad>
  Tensor labels;  // I64 [B, S]: the original token at chosen positions, `pad` everywhere else
  int64_t n_chosen = 0;  // chosen positions (where the loss is taken)
  std::vector<int64_t> indices;
  int64_t size() const { return static_cast<int64_t>(indices.size()); }
};

// The masked batch of dataset[indices[...]] (examples hold their line in src, see
// text_data.h): example k is masked with Rng(masking_seed(seed, epoch, k)), so its masks do
// not depend on the batch it lands in. An empty index list or sequence, or an index out of
// range, is an error.
MaskedBatch make_masked_batch(const std::vector<io::Example>& dataset, const std::vector<int64_t>& indices,
                              const MaskingOptions& options, uint64_t seed, int64_t epoch, int64_t pad);

// Cross entropy of logits [B, S, V] against labels I64 [B, S] at the positions whose label is
// not `ignore` (the pad id of make_masked_batch), averaged over those positions, with label
// smoothing as cross_entropy. Unchosen positions contribute neither loss nor gradient.
Tensor masked_lm_loss(const Tensor& logits, const Tensor& labels, int64_t ignore, double label_smoothing = 0.0);

}  // namespace attn::train
