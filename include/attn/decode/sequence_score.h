// attn/decode/sequence_score.h — how decoded outputs score against references: the one
// definition of token and exact-sequence accuracy that training's validation (metrics.jsonl's
// val_token_acc / val_exact_acc) and `attn eval` share, and the length limit that makes greedy
// decoding for scoring stop as soon as no later token can change either accuracy.
// Not here: the decoding itself (greedy.h, beam_search.h) or loss and perplexity.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/decode/hypothesis.h"

namespace attn::decode {

// How one output scores against its reference of L tokens: `positions` = L + 1 (the tokens,
// then EOS), `right` = the positions where the output holds the reference's token (at position
// L: the output ended with EOS exactly there), exact = the output is the reference and ended
// with EOS. Too-short outputs miss the positions they do not reach, too-long ones the EOS one.
struct SequenceScore {
  int64_t right = 0, positions = 0;
  bool exact = false;
};
SequenceScore score_sequence(const std::vector<int64_t>& reference, const Hypothesis& output);

// Scores summed over a set of outputs, and the two accuracies they give.
struct AccuracyCounts {
  int64_t right = 0, positions = 0, exact = 0, sequences = 0;
  void add(const SequenceScore& s);
  double token_acc() const;  // right / positions
  double exact_acc() const;  // exact / sequences
};

// The generated-token limit (EOS included) that scoring greedy outputs against `references`
// needs: the longest reference + 1. No token past it can change either accuracy.
int64_t scoring_max_len(const std::vector<std::vector<int64_t>>& references);

}  // namespace attn::decode
