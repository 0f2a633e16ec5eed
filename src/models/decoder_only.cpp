// DecoderOnlyModel: a GPT-style causal language model built from the encoder layer class, with
// cached decoding over left-padded prompt batches (per-row positions).
#include "attn/models/decoder_only.h"

#include <cmath>

#include "attn/core/autograd.h"
#include "attn/ops/ops.h"

namespace attn::models {

DecoderOnlyModel::DecoderOnlyModel(const ModelConfig& config) : Model(config) {
  const ModelConfig& c = config_;
  Rng rng(c.seed);
  blocks_ = std::make_shared<nn::Encoder>(c.layer_options(), c.n_decoder_layers, c.final_norm, rng);
  xavier_init_matrices(*blocks_, rng);
  const double std = embedding_init_std();
  embedding_ = std::make_shared<nn::Embedding>(c.vocab_size(), c.d_model, c.dtype, rng, std);  // [V, D]
  positions_ = nn::make_positional(c.positional, c.max_len, c.d_model, c.dtype, rng, std);
  lm_head_ = std::make_shared<nn::Linear>(c.d_model, c.vocab_size(), false, c.dtype, rng);     // [V, D]
  dropout_ = std::make_shared<nn::Dropout>(c.dropout, rng.next_u64());

  register_module("embedding", embedding_);
  if (c.positional == nn::PositionalKind::Learned) register_module("pos_embedding", positions_);
  for (const auto& [name, child] : blocks_->children()) register_module(name, child);  // layers, norm
  register_module("lm_head", lm_head_);
  register_module("dropout", dropout_);
  if (c.tie_output) lm_head_->tie_weight(embedding_->weight());
}

Tensor DecoderOnlyModel::hidden(const Tensor& ids) {
  Tensor x = embed(*embedding_, positions_.get(), *dropout_, ids);  // [B, T, D]
  nn::AttentionMasks masks;
  masks.causal = true;                             // position t sees positions <= t
  masks.key_padding_mask = padding_mask(ids);      // [B, T], true at PAD
  return blocks_->forward(x, masks);               // [B, T, D]
}

Tensor DecoderOnlyModel::forward_packed(const Tensor& ids, const Tensor& positions, const Tensor& segments) {
  ATTN_CHECK(ids.defined() && positions.defined() && segments.defined() && ids.dtype() == DType::I64 &&
                 positions.dtype() == DType::I64 && segments.dtype() == DType::I64 && ids.dim() == 2 &&
                 positions.shape() == ids.shape() && segments.shape() == ids.shape(),
             "forward_packed", "expected ids, positions and segments i64 [B, T] of one shape, got ",
             ids.defined() ? ids.str() : "undefined", ", ", positions.defined() ? positions.str() : "undefined",
             " and ", segments.defined() ? segments.str() : "undefined");
  const int64_t B = ids.size(0), T = ids.size(1), H = config_.n_heads;
  const std::vector<int64_t> seg = segments.to_vector<int64_t>();
  // [B, H, T, T], true (masked out) where query and key lie in different segments; the causal
  // flag hides the later keys of the same segment.
  std::vector<int> other(static_cast<size_t>(B * H * T * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) {
        const int v = seg[static_cast<size_t>(b * T + i)] != seg[static_cast<size_t>(b * T + j)] ? 1 : 0;
        for (int64_t h = 0; h < H; ++h) other[static_cast<size_t>(((b * H + h) * T + i) * T + j)] = v;
      }
  Tensor x = embed_at(*embedding_, positions_.get(), *dropout_, ids, positions);  // [B, T, D]
  nn::AttentionMasks masks;
  masks.causal = true;
  masks.attn_mask = Tensor::from_bools(other, {B, H, T, T});
  masks.positions = positions;
  return logits(blocks_->forward(x, masks));  // [B, T, V]
}

Tensor DecoderOnlyModel::logits(const Tensor& hidden) const {
  return lm_head_->forward(hidden);  // [B, T, V]
}

Tensor DecoderOnlyModel::forward(const Tensor& ids) { return logits(hidden(ids)); }

}  // namespace attn::models

namespace attn::models {

namespace {
constexpr const char* kCached = "DecoderOnlyModel";
}  // namespace

nn::KVCache DecoderOnlyModel::init_cache(int64_t rows) const {
  ATTN_CHECK(!grad_mode_enabled() && !is_training(), kCached,
             "init_cache is for inference: call it under NoGradGuard with the model in eval mode");
  ATTN_CHECK(rows >= 1, kCached, "init_cache needs at least one row, got ", rows);
  nn::KVCache cache(blocks_->num_layers());
  cache.set_left_pad(std::vector<int64_t>(static_cast<size_t>(rows), 0));
  return cache;
}

Tensor DecoderOnlyModel::forward_cached_hidden(const Tensor& ids, nn::KVCache& cache) {
  return cached_hidden(ids, nullptr, cache);
}

Tensor DecoderOnlyModel::forward_cached_hidden(const Tensor& ids, const std::vector<int64_t>& lengths,
                                               nn::KVCache& cache) {
  return cached_hidden(ids, &lengths, cache);
}

Tensor DecoderOnlyModel::cached_hidden(const Tensor& ids, const std::vector<int64_t>* lengths, nn::KVCache& cache) {
  ATTN_CHECK(!grad_mode_enabled() && !is_training(), kCached,
             "cached decoding is for inference: call it under NoGradGuard with the model in eval mode");
  ATTN_CHECK(ids.defined() && ids.dtype() == DType::I64 && ids.dim() == 2 && ids.size(1) >= 1, kCached,
             "ids must be i64 [N, T] with T >= 1, got ", ids.defined() ? ids.str() : "undefined");
  const int64_t n = ids.size(0), t = ids.size(1);
  ATTN_CHECK(cache.num_layers() == blocks_->num_layers() && cache.rows() == n, kCached, "the cache holds ",
             cache.rows(), " rows for ", cache.num_layers(), " layers; expected ", n, " rows for ",
             blocks_->num_layers(), " layers (init_cache first)");
  const auto tokens = ids.to_vector<int64_t>();
  std::vector<int> is_pad(tokens.size());
  if (lengths != nullptr) {
    ATTN_CHECK(cache.length() == 0, kCached, "lengths start a batch: the cache must be empty, it holds ",
               cache.length(), " positions");
    ATTN_CHECK(static_cast<int64_t>(lengths->size()) == n, kCached, "lengths has ", lengths->size(),
               " entries for ids ", ids.str());
    for (int64_t r = 0; r < n; ++r) {
      const int64_t len = (*lengths)[static_cast<size_t>(r)];
      ATTN_CHECK(len >= 1 && len <= t, kCached, "lengths[", r, "] = ", len, " is outside [1, ", t, "] for ids ",
                 ids.str());
      for (int64_t j = 0; j < t - len; ++j) is_pad[static_cast<size_t>(r * t + j)] = 1;
    }
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) is_pad[i] = config_.pad_id >= 0 && tokens[i] == config_.pad_id ? 1 : 0;
  }
  if (cache.length() == 0) {
    // Leading PAD tokens are left padding: the row's positions start after them.
    std::vector<int64_t> left(static_cast<size_t>(n), 0);
    for (int64_t r = 0; r < n; ++r)
      while (left[r] < t && is_pad[static_cast<size_t>(r * t + left[r])]) ++left[r];
    cache.set_left_pad(left);
  }
  const Tensor positions = cache.next_positions(t);  // [N, T]
  Tensor x = embedding_->forward(ids);               // [N, T, D]
  if (config_.scale_embeddings) x = scale(x, std::sqrt(static_cast<double>(config_.d_model)));  // [N, T, D]
  if (positions_) x = positions_->forward_at(x, positions);  // [N, T, D]
  x = dropout_->forward(x);                                  // [N, T, D] (identity in eval mode)
  cache.append_self_padding(is_pad, t);
  nn::AttentionMasks masks;
  masks.positions = positions;
  return blocks_->forward_cached(x, cache, masks);  // [N, T, D]
}

Tensor DecoderOnlyModel::forward_cached(const Tensor& ids, const std::vector<int64_t>& lengths, nn::KVCache& cache) {
  const Tensor hidden = forward_cached_hidden(ids, lengths, cache);  // [N, T, D]
  const int64_t n = hidden.size(0), t = hidden.size(1);
  return logits(hidden.slice(1, t - 1, t)).reshape({n, config_.vocab_size()});  // [N, V]
}

Tensor DecoderOnlyModel::forward_cached(const Tensor& ids, nn::KVCache& cache) {
  const Tensor hidden = forward_cached_hidden(ids, cache);                  // [N, T, D]
  const int64_t n = hidden.size(0), t = hidden.size(1);
  const Tensor last = hidden.slice(1, t - 1, t);                           // [N, 1, D]
  return logits(last).reshape({n, config_.vocab_size()});                  // [N, V]
}

}  // namespace attn::models
