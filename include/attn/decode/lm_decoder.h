// attn/decode/lm_decoder.h — the IncrementalDecoder of a decoder-only language model
// (models::DecoderOnlyModel, GPT style), so that greedy_search, beam_search and sample
// (decode/*.h) continue prompts unchanged. start() takes the prompts right-padded, as every
// caller passes a batch, re-aligns them to the left (PAD first) and prefills the KV cache in one
// pass; step() then feeds one token per row; reorder() reorders the cache rows.
// Not here: prompts longer than the model allows are the model's error, not truncated.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/decode/incremental_decoder.h"
#include "attn/models/decoder_only.h"
#include "attn/nn/kv_cache.h"

namespace attn::decode {

class LmDecoder : public IncrementalDecoder {
 public:
  // Holds a reference: the model must outlive the adapter. Decoding requires eval mode.
  explicit LmDecoder(models::DecoderOnlyModel& model);

  // prompt_ids I64 [B, S], each row a prompt of at least one token followed by PAD (the
  // model's pad_id). Re-aligned to the left internally ([B, S'] with S' the longest prompt) and
  // run through DecoderOnlyModel::prefill; afterwards row b continues prompt b.
  void start(const Tensor& prompt_ids) override;
  // last_tokens I64 [N] -> log-probabilities [N, V] of the next token, in the model's dtype.
  // The FIRST step after start() ignores its tokens (the search's BOS: the prompt already ends
  // where generation begins) and returns the distribution of the token after each prompt; every
  // later step appends last_tokens[i] to row i and returns the distribution after it.
  Tensor step(const Tensor& last_tokens) override;
  void reorder(const std::vector<int64_t>& rows) override;
  int64_t vocab_size() const override;

  const nn::KVCache& cache() const { return cache_; }

 private:
  models::DecoderOnlyModel& model_;
  nn::KVCache cache_;
  Tensor first_;  // log-probabilities [N, V] after start(), until the first step returns them
  bool started_ = false;
};

}  // namespace attn::decode
