// Private helpers shared by greedy search, beam search and sampling: option checks, the
// per-source length limit (paper §6.1: input length + 50), reading a step's log-probabilities
// and building the token tensor fed to step(). Not part of the public API.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attn/core/tensor.h"
#include "attn/decode/incremental_decoder.h"

namespace attn::decode::detail {

// The options every search shares, gathered from its options struct.
struct SearchLimits {
  int64_t bos = -1;
  int64_t eos = -1;
  int64_t pad = -1;
  std::optional<int64_t> max_len = std::nullopt;
  std::optional<int64_t> max_extra = std::nullopt;
  std::optional<int64_t> max_positions = std::nullopt;  // caps every limit
};

// Checks src_ids (I64 [B, S]) and the shared options against the decoder's vocabulary and
// returns each source's length limit in generated tokens. `op` names the search in errors.
std::vector<int64_t> prepare(const char* op, const IncrementalDecoder& decoder, const Tensor& src_ids,
                             const SearchLimits& limits);

// Checks that the limit options are consistent (no vocabulary needed).
void check_limit_options(const char* op, const SearchLimits& limits);

// log_probs from step(): must be floating [n, v]; returns its values row-major as doubles.
std::vector<double> read_log_probs(const char* op, const Tensor& log_probs, int64_t n, int64_t v);

// Sampling's filter of one row of log-probabilities [v] (no NaN): temperature, then top_k, then
// top_p (ties towards the lower id), as sample() draws. Writes weight [v], the unnormalised
// tempered probabilities p^(1/T) with the filtered-out tokens at 0 (order: scratch [v]).
// attn::Error when every token has probability 0. Shared by sampling and speculative sampling,
// so that both filter the same way.
void sampling_weights(const double* row, int64_t v, double temperature, int64_t top_k, double top_p,
                      std::vector<int64_t>& order, std::vector<double>& weight);

// I64 [n] tensor of the given tokens.
Tensor token_tensor(const std::vector<int64_t>& tokens);

}  // namespace attn::decode::detail
