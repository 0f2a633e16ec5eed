// attn/decode/sampler.h — ancestral sampling with temperature, top-k and nucleus (top-p)
// filtering, reproducible from a seed (attn::Rng). Each source draws from its own generator
// stream derived from the seed, so its sample does not depend on which other sources of the
// batch are still running. No repetition penalty, no beam-sampling hybrid.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attn/decode/hypothesis.h"
#include "attn/decode/incremental_decoder.h"

namespace attn::decode {

struct SamplingOptions {
  double temperature = 1.0;  // > 0: log-probabilities are divided by it; for temperature -> 0 use greedy_search
  int64_t top_k = 0;         // >= 0: keep the k most probable tokens (0: all; k > V keeps all)
  double top_p = 1.0;        // in (0, 1]: keep the smallest most-probable set whose mass reaches top_p
  uint64_t seed = 0;
  int64_t bos = -1;  // required: the token fed at the first step, in [0, V)
  int64_t eos = -1;  // the token that ends a sample, in [0, V); -1: none (run to the limit)
  int64_t pad = -1;  // the source PAD id, not counted in the source length; -1: no padding
  // Length limit in generated tokens (EOS included): max_len (absolute) or source length +
  // max_extra; setting both is an error; with neither, max_extra = 50.
  std::optional<int64_t> max_len = std::nullopt;
  std::optional<int64_t> max_extra = std::nullopt;
  // A cap on every source's limit, whatever set it: the positions the decoder has (a model
  // with learned positions cannot place token max_len); unset: no cap.
  std::optional<int64_t> max_positions = std::nullopt;
};

// Throws attn::Error naming the first invalid option (vocabulary-dependent checks happen in sample()).
void validate(const SamplingOptions& options);

// src_ids I64 [B, S] -> one sample per source. Filters apply in the order temperature, top_k,
// top_p (ties broken towards the lower token id); the kept tokens are renormalised. logprob
// (and score) sum the model's own log-probabilities of the sampled tokens, before any filtering.
std::vector<Hypothesis> sample(IncrementalDecoder& decoder, const Tensor& src_ids,
                               const SamplingOptions& options);

}  // namespace attn::decode
