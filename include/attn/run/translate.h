// attn/run/translate.h — translating and scoring with an encoder-decoder model folder: the best
// outputs of a batch of sources (greedy, or beam search with the paper's length penalty, §6.1)
// and teacher-forced log-probabilities of given targets (what `attn translate` and `attn score`
// print). Everything runs with the model in eval mode under NoGradGuard.
// Not here: tokenizing (token_codec.h), accuracies (evaluate.h), single-stack models (generate.h).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attn/decode/hypothesis.h"
#include "attn/decode/kv_pool.h"
#include "attn/run/model_folder.h"
#include "attn/run/speculative.h"

namespace attn::run {

// Search settings of translate and eval: greedy when beam == 1 and n_best == 1, else beam search.
struct SearchSettings {
  int64_t beam = 1;
  double alpha = 0.6;
  int64_t n_best = 1;
  std::optional<int64_t> max_len;  // generated tokens, EOS included; default source length + 50
  // Greedy only: speculative decoding with an encoder-decoder draft model (check_draft) or
  // prompt lookup over the source; the output is greedy's (decode/speculative.h).
  SpeculativeSettings speculative;
  // The KV cache layout (--kv-cache, --kv-block, --kv-pool-mb): paged blocks from one pool per
  // batch (decode/kv_pool.h: kv_pool_for), or contiguous. Same output either way.
  decode::KvCacheOptions kv_cache;
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

}  // namespace attn::run
