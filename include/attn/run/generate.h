// attn/run/generate.h — continuing prompts with a decoder-only model folder (what `attn
// generate` and the samples at the end of `attn train` print): greedy, beam search or sampling
// over decode::LmDecoder, the KV-cached IncrementalDecoder, in eval mode under NoGradGuard.
// Deliberately no truncation of prompts: too long is an error, never a silent cut.
// Not here: reading stdin or printing (the commands do that), subword tokenizers.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/decode/hypothesis.h"
#include "attn/decode/kv_pool.h"
#include "attn/run/model_folder.h"
#include "attn/run/speculative.h"

namespace attn::run {

// How `attn generate` continues prompts.
struct GenerateSettings {
  enum class Mode { Greedy, Beam, Sample };
  Mode mode = Mode::Greedy;
  int64_t beam = 4;          // Beam: live hypotheses per prompt
  double alpha = 0.6;        // Beam: GNMT length-penalty exponent
  int64_t n_best = 1;        // Beam: hypotheses returned per prompt, in [1, beam]
  double temperature = 1.0;  // Sample: > 0
  int64_t top_k = 0;         // Sample: >= 0 (0: no top-k filter)
  double top_p = 1.0;        // Sample: in (0, 1]
  uint64_t seed = 0;         // Sample: each prompt of a batch draws from its own stream of it
  int64_t max_tokens = 50;   // generated tokens at most, EOS included (>= 1)
  // The model reads <bos> + prompt. Off for GPT-2 checkpoints, which read the prompt as it is
  // (as Hugging Face's generate does); <|endoftext|> is then only their end-of-text token.
  bool prepend_bos = true;
  // Greedy and Sample: speculative decoding with a draft model (a decoder-only folder that
  // check_draft accepts) or prompt lookup. Greedy output is the greedy output of the target
  // (in the batch-invariant mode, decode/speculative.h); sampling follows its distribution.
  SpeculativeSettings speculative;
  // The KV cache layout (--kv-cache, --kv-block, --kv-pool-mb): paged blocks from one pool per
  // batch (decode/kv_pool.h: kv_pool_for), or contiguous. Same output either way.
  decode::KvCacheOptions kv_cache;
};
// Throws attn::Error naming the first invalid setting (as its command-line flag).
void validate(const GenerateSettings& settings);

// Continues every prompt (token ids without <bos>, each non-empty and free of PAD): the model
// reads <bos> + prompt (or the prompt alone, see prepend_bos) and generates until <eos> or max_tokens. With learned positions a prompt
// whose <bos> + tokens exceed max_len is an error naming it, and generation stops where the
// positions end (prompt + generated tokens - 1 <= max_len). Returns each prompt's hypotheses,
// best first (n_best for beam search, one otherwise). Errors name a prompt as "prompt
// first + i": a caller that feeds its input in batches passes the number of the batch's first
// prompt, so that the message names the prompt of the whole input.
std::vector<std::vector<decode::Hypothesis>> generate_batch(const ModelFolder& folder,
                                                            const std::vector<std::vector<int64_t>>& prompts,
                                                            const GenerateSettings& settings, int64_t first = 1);

}  // namespace attn::run
