// attn/decode/beam_search.h — batched beam search with a length penalty (paper §6.1: beam 4,
// alpha 0.6, maximum output length = input length + 50, early termination). Each source keeps
// `beam` live hypotheses, expands them into its top 2*beam candidates, moves candidates ending
// in EOS to a finished list and stops once no live hypothesis can beat its `beam` best finished
// ones (tensor2tensor's bound; fairseq's rule for which EOS candidates finish, so that beam 1 is
// greedy search). No diversity penalties, no coverage or word penalty, no constraints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attn/decode/hypothesis.h"
#include "attn/decode/incremental_decoder.h"

namespace attn::decode {

// Gnmt: ((5 + len) / 6)^alpha (Wu et al. 2016; the paper and tensor2tensor).
// Power: len^alpha (fairseq, CTranslate2, Marian).
enum class LengthPenalty { Gnmt, Power };
// "gnmt" / "power", and back; an unknown name is an error naming the option.
const char* length_penalty_name(LengthPenalty kind);
LengthPenalty parse_length_penalty(const std::string& name);
// The divisor of a hypothesis' log-probability; length counts generated tokens, EOS included.
double length_penalty(LengthPenalty kind, double alpha, int64_t length);

// The largest beam a search accepts (and the CLI's --beam): each hypothesis holds a KV cache
// and a row of every step's logits, so a beam of 10^14 must be refused, not allocated.
inline constexpr int64_t kMaxBeam = 1024;

struct BeamOptions {
  int64_t beam = 4;      // live hypotheses per source, in [1, kMaxBeam]
  double alpha = 0.6;    // length-penalty exponent, >= 0 (0: rank by raw log-probability)
  LengthPenalty length_penalty = LengthPenalty::Gnmt;
  int64_t n_best = 1;    // hypotheses returned per source, in [1, beam]
  int64_t bos = -1;      // required: the token fed at the first step, in [0, V)
  int64_t eos = -1;      // the token that ends a hypothesis, in [0, V); -1: none (run to the limit)
  int64_t pad = -1;      // the source PAD id, not counted in the source length; -1: no padding
  // Length limit in generated tokens (EOS included): max_len (absolute) or source length +
  // max_extra; setting both is an error; with neither, max_extra = 50 (paper §6.1).
  std::optional<int64_t> max_len = std::nullopt;
  std::optional<int64_t> max_extra = std::nullopt;
  // A cap on every source's limit, whatever set it: the positions the decoder has (a model
  // with learned positions cannot place token max_len); unset: no cap.
  std::optional<int64_t> max_positions = std::nullopt;
};

// Throws attn::Error naming the first invalid option (vocabulary-dependent checks happen in beam_search()).
void validate(const BeamOptions& options);

// src_ids I64 [B, S] -> for each source its best hypotheses, best first (at most n_best; fewer
// only when the vocabulary is too small to make n_best distinct ones). score = logprob / penalty.
// Each step ranks a source's candidates (live hypothesis + token) by log-probability and takes
// the top 2*beam: an EOS candidate among the first `beam` of them finishes (one ranked lower is
// dropped, as in fairseq), and the first `beam` non-EOS candidates become the live hypotheses.
// A source stops when it holds `beam` finished hypotheses and the worst of them scores higher
// than any live hypothesis could ever reach (its log-probability, which can only fall, over the
// penalty at the limit); at the limit its finished and live hypotheses are ranked together.
// This early stop never changes the result. Ties rank the lower row, then the lower token id
// first; equal final scores rank lexicographically smaller token sequences first.
// Requires step() to return true log-probabilities (<= 0), on which the stopping bound relies.
std::vector<std::vector<Hypothesis>> beam_search(IncrementalDecoder& decoder, const Tensor& src_ids,
                                                 const BeamOptions& options);

}  // namespace attn::decode
