// attn/models/decoder_only.h — a GPT-style causal language model: token embedding
// (x sqrt(D) if configured) + positions, n_decoder_layers self-attention blocks (the
// EncoderLayer class with a causal mask), an optional final norm, and an output head "lm_head"
// [V, D] without bias, tied to the embedding or not. state_dict names:
//   embedding.weight, [pos_embedding.weight,] layers.N.*, [norm.*,] lm_head.weight
// (with tie_output, lm_head.weight is an alias of embedding.weight, stored once).
// Cached decoding: init_cache, then forward_cached with the next T tokens of every row (a whole
// prompt batch at once, or one token per row), the decoder-only twin of EncoderDecoderModel's.
// Batched prompts of different lengths are LEFT-padded with PAD, so that every row's next
// token lands at the same cache index; a row's positions start at its first real token (see
// nn::KVCache::left_pad). Models without a PAD token (pad_id -1, GPT-2) give the rows' lengths
// instead.
#pragma once

#include <memory>
#include <vector>

#include "attn/models/model.h"
#include "attn/nn/encoder.h"
#include "attn/nn/kv_cache.h"
#include "attn/nn/linear.h"

namespace attn::models {

class DecoderOnlyModel : public Model {
 public:
  explicit DecoderOnlyModel(const ModelConfig& config);

  // ids I64 [B, T] -> logits [B, T, V]; position t sees positions <= t that are not PAD.
  Tensor forward(const Tensor& ids);
  // ids [B, T] -> the last block's (normed) output [B, T, D].
  Tensor hidden(const Tensor& ids);
  // hidden [B, T, D] -> logits [B, T, V].
  Tensor logits(const Tensor& hidden) const;
  // Packed rows (several sequences laid end to end in one row, train/finetune.h): ids,
  // positions and segments I64 [B, T] -> logits [B, T, V]. Position t sees the positions <= t
  // of its own segment only (a block-diagonal causal mask; PAD ids are not masked by id: give
  // padding a segment of its own) and is embedded at `positions` (each sequence restarting at
  // 0; RoPE rotates by them), so that a sequence's logits equal forward()'s for it alone.
  Tensor forward_packed(const Tensor& ids, const Tensor& positions, const Tensor& segments);

  // ---- incremental decoding (inference only: NoGradGuard and eval mode, both checked) ----
  // An empty cache for `rows` sequences.
  nn::KVCache init_cache(int64_t rows) const;
  // ids I64 [N, T]: the next T tokens of every row, all at once (the prompt). On an empty
  // cache the rows may be left-padded: row r's leading PAD tokens are recorded as its left
  // padding and its first real token gets position 0; PAD keys are masked everywhere. On a
  // non-empty cache the chunk continues every row (T = 1: one decoding step; the tokens sit
  // at cache index cache.length()). Appends the tokens' K/V (and PAD flags) to `cache` and
  // returns the logits of the chunk's LAST column, [N, V] (the next-token distribution).
  // Each row's logits equal forward()'s for that row alone without the padding (to rounding).
  // Learned positions beyond max_len - 1 are an error.
  Tensor forward_cached(const Tensor& ids, nn::KVCache& cache);
  // The same, returning the last block's (normed) output for every new position, [N, T, D].
  Tensor forward_cached_hidden(const Tensor& ids, nn::KVCache& cache);
  // Prompts of different lengths without PAD ids (any pad_id, also -1): on an empty cache,
  // ids [N, T] left-aligned, row r's real tokens are its last lengths[r] (1 <= lengths[r] <= T);
  // the T - lengths[r] before them are padding whatever their ids (masked, not positioned).
  // -> logits [N, V] of the last column, as forward_cached(ids, cache).
  Tensor forward_cached(const Tensor& ids, const std::vector<int64_t>& lengths, nn::KVCache& cache);
  Tensor forward_cached_hidden(const Tensor& ids, const std::vector<int64_t>& lengths, nn::KVCache& cache);

  nn::Encoder& blocks() { return *blocks_; }
  nn::Embedding& embedding() { return *embedding_; }
  nn::Linear& lm_head() { return *lm_head_; }

 private:
  // forward_cached_hidden with the rows' padding from PAD ids (lengths null) or from lengths.
  Tensor cached_hidden(const Tensor& ids, const std::vector<int64_t>* lengths, nn::KVCache& cache);

  std::shared_ptr<nn::Embedding> embedding_;
  std::shared_ptr<nn::PositionalEncoding> positions_;
  std::shared_ptr<nn::Encoder> blocks_;  // its "layers" and "norm" are registered at the root
  std::shared_ptr<nn::Linear> lm_head_;
  std::shared_ptr<nn::Dropout> dropout_;
};

}  // namespace attn::models
