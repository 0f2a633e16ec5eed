// attn/decode/lm_decoder.h — the IncrementalDecoder of a decoder-only language model
// (models::DecoderOnlyModel, GPT style), so that greedy_search, beam_search and sample
// (decode/*.h) continue prompts unchanged. start() takes the prompts right-padded, as every
// caller passes a batch, re-aligns them to the left (PAD first) and runs them through the KV cache
// in one pass; step() then feeds one token per row; reorder() reorders the cache rows. Models without a
// PAD token (pad_id -1, GPT-2) take prompts of different lengths as token lists or as lengths:
// the padding mask then comes from the lengths, never from a token id.
// Not here: prompts longer than the model allows are the model's error, not truncated.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
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
  // run through DecoderOnlyModel::forward_cached; afterwards row b continues prompt b.
  // With pad_id -1 every token of every row is a prompt token (all prompts as long as S), unless
  // set_prompt_lengths() gave the lengths first.
  void start(const Tensor& prompt_ids) override;
  // prompt_ids I64 [B, S] right-padded with anything; row b's prompt is its first lengths[b]
  // tokens (1 <= lengths[b] <= S), whatever the ids after them (PAD ids inside are kept).
  void start(const Tensor& prompt_ids, const std::vector<int64_t>& lengths);
  // The prompts as token lists (each non-empty), for any pad_id.
  void start(const std::vector<std::vector<int64_t>>& prompts);
  // The lengths the NEXT start(prompt_ids) uses (then forgotten), for searches that call
  // start() themselves: greedy_search(decoder, ids) after decoder.set_prompt_lengths(lengths).
  void set_prompt_lengths(std::vector<int64_t> lengths) { pending_lengths_ = std::move(lengths); }
  // last_tokens I64 [N] -> log-probabilities [N, V] of the next token, in the model's dtype.
  // The FIRST step after start() ignores its tokens (the search's BOS: the prompt already ends
  // where generation begins) and returns the distribution of the token after each prompt; every
  // later step appends last_tokens[i] to row i and returns the distribution after it.
  Tensor step(const Tensor& last_tokens) override;
  void reorder(const std::vector<int64_t>& rows) override;
  int64_t vocab_size() const override;
  // Speculative decoding: tokens I64 [N, T] appended to every row in one cached forward (the
  // causal mask sits bottom-right: new token t sees the cache and new tokens <= t) -> [N, T, V]
  // log-probabilities after each; rollback(count) drops the last count cache positions
  // (nn::KVCache::truncate). Models with a sliding window refuse rollback once the window has
  // dropped positions.
  Tensor step_many(const Tensor& tokens) override;
  void rollback(int64_t count) override;

  // Continuous batching: a new row joins the running batch after the current ones. `prefix` is
  // its input without the last token (possibly empty), run through a cache of its own here,
  // alone; the row's next step takes that last token (as search's BOS) and returns the
  // distribution after it. The other rows keep their state (nn::KVCache::append_rows). Not
  // while a start()'s first distribution is pending.
  // Prefix sharing (paged cache only): with share_positions > 0 the row takes the first
  // share_positions positions of row share_row of the running batch as they are
  // (nn::KVCache::share_prefix: the caller vouches that they hold this prefix's first tokens,
  // computed on batch-invariant kernels) and runs only the rest of `prefix`.
  void join(const std::vector<int64_t>& prefix, int64_t share_row = -1, int64_t share_positions = 0);
  // Drops cached positions that are padding for every row (KVCache::trim_padding).
  int64_t trim_padding() { return cache_.trim_padding(); }

  const nn::KVCache& cache() const { return cache_; }
  // The paged KV cache (nn/kv_cache.h): every cache the next start() or join() makes keeps its
  // self-attention keys and values in `pool`'s blocks (decode/kv_pool.h: make_kv_pool); null =
  // the contiguous layout. Same outputs either way.
  void set_kv_pool(std::shared_ptr<nn::BlockPool> pool) { pool_ = std::move(pool); }
  const std::shared_ptr<nn::BlockPool>& kv_pool() const { return pool_; }

 private:
  // Left-aligns the prompts and runs them through the cache.
  void start_prompts(const std::vector<std::vector<int64_t>>& prompts);

  models::DecoderOnlyModel& model_;
  std::vector<int64_t> pending_lengths_;  // for the next start(prompt_ids); empty = none
  nn::KVCache cache_;
  std::shared_ptr<nn::BlockPool> pool_;  // null = contiguous
  Tensor first_;  // log-probabilities [N, V] after start(), until the first step returns them
  bool started_ = false;
};

}  // namespace attn::decode
