// attn/decode/transformer_decoder.h — the IncrementalDecoder of the paper's Transformer
// (models::EncoderDecoderModel, §3): start() encodes every source once; step() re-runs the
// decoder stack over each row's whole prefix under NoGradGuard and returns log_softmax of the
// last position. Deliberately no KV cache yet (O(T^2) work per hypothesis): the per-row state
// below is where a typed per-layer KVCache will live, reordered together with the prefixes.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/decode/incremental_decoder.h"
#include "attn/models/encoder_decoder.h"

namespace attn::decode {

class TransformerDecoder : public IncrementalDecoder {
 public:
  // Holds a reference: the model must outlive the adapter. Decoding requires eval mode
  // (start() refuses a model in training mode, whose dropout would make decoding random).
  explicit TransformerDecoder(models::EncoderDecoderModel& model);

  // src_ids I64 [B, S] (PAD = the model's pad_id) -> memory [B, S, D], computed once per source
  // and shared by all of its rows.
  void start(const Tensor& src_ids) override;
  // last_tokens I64 [N] -> log-probabilities [N, V] in the model's dtype.
  Tensor step(const Tensor& last_tokens) override;
  void reorder(const std::vector<int64_t>& rows) override;
  int64_t vocab_size() const override;

 private:
  struct Row {
    int64_t source = 0;           // index into the batch given to start()
    std::vector<int64_t> prefix;  // BOS first
  };
  // memory_ and memory_padding_ gathered for the current rows (recomputed after reorder()).
  void gather_memory();

  models::EncoderDecoderModel& model_;
  Tensor memory_;          // [B, S, D]
  Tensor memory_padding_;  // Bool [B, S], true at PAD; undefined without a pad_id
  std::vector<Row> rows_;
  Tensor row_memory_;      // [N, S, D], undefined when stale
  Tensor row_padding_;     // Bool [N, S] or undefined
  bool rows_gathered_ = false;
};

}  // namespace attn::decode
