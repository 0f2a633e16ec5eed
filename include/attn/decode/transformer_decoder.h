// attn/decode/transformer_decoder.h — the IncrementalDecoder of the paper's Transformer
// (models::EncoderDecoderModel, §3): start() encodes every source once and projects the
// cross-attention keys/values once; step() runs one forward_cached for every row against a typed
// per-layer KV cache (nn/kv_cache.h) under NoGradGuard and returns log_softmax of the logits;
// reorder() reorders the cache rows. The old recompute path (the whole prefix each step,
// O(T^2) per hypothesis) stays available behind the constructor flag, for comparison.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "attn/decode/incremental_decoder.h"
#include "attn/models/encoder_decoder.h"
#include "attn/nn/kv_cache.h"

namespace attn::decode {

class TransformerDecoder : public IncrementalDecoder {
 public:
  // Holds a reference: the model must outlive the adapter. Decoding requires eval mode
  // (start() refuses a model in training mode, whose dropout would make decoding random).
  // use_kv_cache false: re-run the decoder over each row's whole prefix at every step.
  explicit TransformerDecoder(models::EncoderDecoderModel& model, bool use_kv_cache = true);

  // src_ids I64 [B, S] (PAD = the model's pad_id) -> memory [B, S, D], computed once per source
  // and shared by all of its rows.
  void start(const Tensor& src_ids) override;
  // last_tokens I64 [N] -> log-probabilities [N, V] in the model's dtype.
  Tensor step(const Tensor& last_tokens) override;
  void reorder(const std::vector<int64_t>& rows) override;
  int64_t vocab_size() const override;
  // Speculative decoding (KV path only): tokens I64 [N, T] appended to every row in one cached
  // forward (EncoderDecoderModel::forward_cached_all) -> [N, T, V] log-probabilities after
  // each; rollback(count) drops the last count target positions (nn::KVCache::truncate).
  Tensor step_many(const Tensor& tokens) override;
  void rollback(int64_t count) override;

  // Continuous batching (KV path only): src_ids I64 [B', S'] join the running batch as B' new
  // rows after the current ones, each with an empty prefix (its next step takes BOS), while the
  // other rows keep their state. Each source is encoded here, alone, so its rows compute the
  // same values as in a batch of their own (nn::KVCache::append_rows). With no rows running,
  // the same as start() but with per-row positions.
  void join(const Tensor& src_ids);
  // Drops cached positions that are padding for every row (KVCache::trim_padding).
  int64_t trim_padding() { return cache_.trim_padding(); }

  bool uses_kv_cache() const { return use_kv_cache_; }
  const nn::KVCache& cache() const { return cache_; }  // empty on the recompute path
  // The paged KV cache (nn/kv_cache.h): every cache the next start() or join() makes keeps its
  // self-attention keys and values in `pool`'s blocks (decode/kv_pool.h: make_kv_pool); null =
  // the contiguous layout. Same outputs either way.
  void set_kv_pool(std::shared_ptr<nn::BlockPool> pool) { pool_ = std::move(pool); }
  const std::shared_ptr<nn::BlockPool>& kv_pool() const { return pool_; }  // empty on the recompute path

 private:
  struct Row {
    int64_t source = 0;           // index into the batch given to start()
    std::vector<int64_t> prefix;  // BOS first (the KV path keeps only its length in the cache)
  };
  // memory_ and memory_padding_ gathered for the current rows (recomputed after reorder()).
  void gather_memory();

  Tensor step_recompute(const Tensor& last_tokens);
  Tensor step_cached(const Tensor& last_tokens);

  models::EncoderDecoderModel& model_;
  bool use_kv_cache_;
  nn::KVCache cache_;
  std::shared_ptr<nn::BlockPool> pool_;  // null = contiguous      // [N] rows, reordered with rows_ (the KV path)
  Tensor memory_;          // [B, S, D]
  Tensor memory_padding_;  // Bool [B, S], true at PAD; undefined without a pad_id
  std::vector<Row> rows_;
  Tensor row_memory_;      // [N, S, D], undefined when stale
  Tensor row_padding_;     // Bool [N, S] or undefined
  bool rows_gathered_ = false;
};

}  // namespace attn::decode
