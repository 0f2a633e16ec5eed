// attn/decode/speculative.h — speculative decoding (Leviathan et al. 2023; Chen et al. 2023): a
// cheap drafter proposes up to K tokens per row, the target scores the last accepted token and
// the K draft tokens in ONE cached forward (IncrementalDecoder::step_many), keeps the longest
// acceptable prefix plus one token of its own, and takes the rejected positions back
// (IncrementalDecoder::rollback). Each target pass yields 1 to K + 1 tokens.
//   - Greedy: draft token i is accepted while it equals the target's argmax at its position
//     (ties: the lower id); the output is token for token the output of greedy_search over the
//     target (and the same log-probabilities) when both run in the batch-invariant mode
//     (ops/batch_invariant.h), which options.batch_invariant turns on here.
//   - Sampling: draft token x drawn from q is accepted with probability min(1, p(x)/q(x)); at
//     the first rejection the token is drawn from norm(max(0, p - q)); when all K are accepted
//     a bonus token is drawn from p. p and q are the distributions after the same temperature,
//     top-k and top-p filtering (SamplingOptions, as sample() filters), so the output follows
//     sample()'s distribution exactly (not sample for sample: the random draws differ).
// Drafters: another model over the same target vocabulary (any family: the draft of an
// encoder-decoder target is an encoder-decoder model that reads the same source), or prompt
// lookup (no model): the tokens that followed the most recent earlier occurrence of the row's
// last n-gram in its context (the prompt or source, then the output so far), as llama.cpp's
// lookup decoding proposes; its "q" is a point mass on the proposed token.
// Batches: every row drafts K tokens, but all rows keep the same number m of draft tokens each
// round, the fewest any row accepted (the caches of a batch share one length); a row that
// accepted more than m takes its (m+1)-th draft token, which passed the rule, as its own token
// of the round, so every row's output is still its own exact greedy (or sampled) continuation.
// Correct for any batch, but a batch accepts what its worst row accepts: batch 1 gains most.
// Not here: beam search, tree drafting, sliding-window models once the window is full (their
// caches cannot take positions back).
#pragma once

#include <cstdint>
#include <vector>

#include "attn/decode/greedy.h"
#include "attn/decode/hypothesis.h"
#include "attn/decode/incremental_decoder.h"
#include "attn/decode/sampler.h"

namespace attn::decode {

struct SpeculativeOptions {
  // K: draft tokens proposed per row and round (>= 1). llama.cpp's --spec-draft-n-max is 3,
  // Leviathan et al.'s gamma 3 to 7; 4 here.
  int64_t draft_tokens = 4;
  // Prompt lookup: the n-gram sizes tried, longest first (1 <= ngram_min <= ngram_max).
  int64_t ngram_max = 3;
  int64_t ngram_min = 1;
  // Run the target's and the draft's forward passes in the batch-invariant mode, so that a
  // position's logits are the same bits whether it is scored alone or with K others (what
  // makes greedy speculative output identical to greedy_search in that mode).
  bool batch_invariant = true;
  // Test hook, 0 in real use: added to every row's accepted count under the greedy rule
  // (clamped to [0, K]), a deliberately wrong acceptance rule that the tests must catch.
  int64_t test_accept_offset = 0;
  // Test hook, false in real use: at a rejection under the sampling rule, draw from p instead
  // of norm(max(0, p - q)) (a plausible bug that biases the output towards the draft).
  bool test_residual_from_p = false;
};

// Throws attn::Error naming the first invalid option.
void validate(const SpeculativeOptions& options);

// What a run did, summed over rows and rounds (llama.cpp's summary line).
struct SpeculativeStats {
  int64_t target_passes = 0;  // target forward passes (the first step included)
  int64_t target_rows = 0;    // rows in those passes, summed (= target_passes at batch 1)
  int64_t draft_passes = 0;   // draft forward passes (0 for prompt lookup)
  int64_t drafted = 0;        // draft tokens proposed, summed over rows
  int64_t accepted = 0;       // draft tokens that passed the rule, summed over rows (a batch
                              // keeps only the fewest any row passed: generated tells the gain)
  int64_t generated = 0;      // tokens in the outputs, EOS included
  // accepted / drafted (0 when nothing was drafted).
  double acceptance() const { return drafted > 0 ? static_cast<double>(accepted) / drafted : 0.0; }
  // Tokens per row and target pass (1 without speculation; up to K + 1).
  double tokens_per_pass() const { return target_rows > 0 ? static_cast<double>(generated) / target_rows : 0.0; }
};

// Greedy speculative decoding of src_ids I64 [B, S] (as greedy_search takes them) with a draft
// decoder over the same vocabulary (another vocabulary size is an attn::Error naming both).
// Both decoders must support step_many and rollback (LmDecoder, TransformerDecoder). Returns
// one Hypothesis per source, equal to greedy_search(target, src_ids, greedy) in the
// batch-invariant mode. `stats` (may be null) receives the counts.
std::vector<Hypothesis> speculative_greedy(IncrementalDecoder& target, IncrementalDecoder& draft,
                                           const Tensor& src_ids, const GreedyOptions& greedy,
                                           const SpeculativeOptions& options, SpeculativeStats* stats = nullptr);

// Speculative sampling: the same with the Leviathan/Chen acceptance rule; source s draws from
// its own stream Rng(Rng(sampling.seed)'s s-th next_u64()), as sample() seeds it.
std::vector<Hypothesis> speculative_sample(IncrementalDecoder& target, IncrementalDecoder& draft,
                                           const Tensor& src_ids, const SamplingOptions& sampling,
                                           const SpeculativeOptions& options, SpeculativeStats* stats = nullptr);

// Prompt-lookup drafting, no draft model: each row's context is its source row (src_ids without
// PAD: the prompt of a decoder-only model, the source sentence of a translation model) followed
// by its output so far. Greedy output equals greedy_search's (batch-invariant mode).
std::vector<Hypothesis> lookup_greedy(IncrementalDecoder& target, const Tensor& src_ids, const GreedyOptions& greedy,
                                      const SpeculativeOptions& options, SpeculativeStats* stats = nullptr);
std::vector<Hypothesis> lookup_sample(IncrementalDecoder& target, const Tensor& src_ids,
                                      const SamplingOptions& sampling, const SpeculativeOptions& options,
                                      SpeculativeStats* stats = nullptr);

// Prompt lookup's proposal for one context: for n from ngram_max down to ngram_min, the most
// recent earlier occurrence of the context's last n tokens (an occurrence that ends before the
// context does); the up to `count` tokens that follow it. Empty when no n-gram recurs.
std::vector<int64_t> lookup_draft(const std::vector<int64_t>& context, int64_t count, int64_t ngram_max,
                                  int64_t ngram_min);

}  // namespace attn::decode
