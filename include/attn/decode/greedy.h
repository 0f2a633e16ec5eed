// attn/decode/greedy.h — greedy search: at every step each live hypothesis takes its most
// probable next token (ties: the lower token id), as the Annotated Transformer decodes.
// Hypotheses that emit EOS or reach their length limit drop out of the decoder's batch, so
// they cost nothing in later steps. No length penalty: use beam_search for the paper's decoding.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attn/decode/hypothesis.h"
#include "attn/decode/incremental_decoder.h"

namespace attn::decode {

struct GreedyOptions {
  int64_t bos = -1;  // required: the token fed at the first step, in [0, V)
  int64_t eos = -1;  // the token that ends a hypothesis, in [0, V); -1: none (run to the limit)
  int64_t pad = -1;  // the source PAD id, not counted in the source length; -1: no padding
  // Length limit in generated tokens (EOS included). Either max_len (absolute) or, per source,
  // its length + max_extra; setting both is an error; with neither, max_extra = 50 (paper §6.1).
  std::optional<int64_t> max_len = std::nullopt;
  std::optional<int64_t> max_extra = std::nullopt;
  // A cap on every source's limit, whatever set it: the positions the decoder has (a model
  // with learned positions cannot place token max_len); unset: no cap.
  std::optional<int64_t> max_positions = std::nullopt;
};

// Throws attn::Error naming the first invalid option (vocabulary-dependent checks happen in greedy_search()).
void validate(const GreedyOptions& options);

// src_ids I64 [B, S] -> one Hypothesis per source (score = logprob).
std::vector<Hypothesis> greedy_search(IncrementalDecoder& decoder, const Tensor& src_ids,
                                      const GreedyOptions& options);

}  // namespace attn::decode
