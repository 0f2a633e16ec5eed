// EncoderDecoderModel: the paper's Transformer (§3, Figure 1) from token ids to logits.
#include "attn/models/encoder_decoder.h"

#include "attn/core/autograd.h"
#include "attn/ops/ops.h"

namespace attn::models {

EncoderDecoderModel::EncoderDecoderModel(const ModelConfig& config) : Model(config) {
  const ModelConfig& c = config_;
  Rng rng(c.seed);
  const nn::LayerOptions layer = c.layer_options();
  encoder_ = std::make_shared<nn::Encoder>(layer, c.n_encoder_layers, c.final_norm, rng);
  decoder_ = std::make_shared<nn::Decoder>(layer, c.n_decoder_layers, c.final_norm, rng);
  xavier_init_matrices(*encoder_, rng);
  xavier_init_matrices(*decoder_, rng);
  const double std = embedding_init_std();
  src_embedding_ = std::make_shared<nn::Embedding>(c.src_vocab_size, c.d_model, c.dtype, rng, std);  // [V_src, D]
  tgt_embedding_ = std::make_shared<nn::Embedding>(c.tgt_vocab_size, c.d_model, c.dtype, rng, std);  // [V_tgt, D]
  src_positions_ = nn::make_positional(c.positional, c.max_len, c.d_model, c.dtype, rng, std);
  tgt_positions_ = nn::make_positional(c.positional, c.max_len, c.d_model, c.dtype, rng, std);
  generator_ = std::make_shared<nn::Linear>(c.d_model, c.tgt_vocab_size, true, c.dtype, rng);  // [V_tgt, D]
  dropout_ = std::make_shared<nn::Dropout>(c.dropout, rng.next_u64());

  // Registration order = the state_dict order of an nn.Transformer subclass.
  register_module("encoder", encoder_);
  register_module("decoder", decoder_);
  register_module("src_embedding", src_embedding_);
  register_module("tgt_embedding", tgt_embedding_);
  if (c.positional == nn::PositionalKind::Learned) {
    register_module("src_pos_embedding", src_positions_);
    register_module("tgt_pos_embedding", tgt_positions_);
  }
  register_module("generator", generator_);
  register_module("dropout", dropout_);
  if (c.share_embeddings) tgt_embedding_->tie_weight(src_embedding_->weight());
  if (c.tie_output) generator_->tie_weight(tgt_embedding_->weight());
}

Tensor EncoderDecoderModel::forward(const Tensor& src_ids, const Tensor& tgt_in_ids) {
  Tensor memory = encode(src_ids);                             // [B, S, D]
  return decode(tgt_in_ids, memory, padding_mask(src_ids));    // [B, T, V]
}

Tensor EncoderDecoderModel::encode(const Tensor& src_ids) {
  Tensor x = embed(*src_embedding_, src_positions_.get(), *dropout_, src_ids);  // [B, S, D]
  nn::AttentionMasks masks;
  masks.key_padding_mask = padding_mask(src_ids);  // [B, S], true at PAD
  return encoder_->forward(x, masks);              // [B, S, D]
}

Tensor EncoderDecoderModel::decode_hidden(const Tensor& tgt_ids, const Tensor& memory,
                                          const Tensor& memory_padding) {
  ATTN_CHECK(memory.dim() == 3 && memory.size(0) == tgt_ids.size(0), "EncoderDecoderModel",
             "memory must be [B, S, D] with the batch of tgt_ids ", tgt_ids.str(), ", got ", memory.str());
  Tensor y = embed(*tgt_embedding_, tgt_positions_.get(), *dropout_, tgt_ids);  // [B, T, D]
  nn::AttentionMasks self_masks;
  self_masks.causal = true;                             // position t sees targets <= t (§3.2.3)
  self_masks.key_padding_mask = padding_mask(tgt_ids);  // [B, T]
  nn::AttentionMasks cross_masks;
  cross_masks.key_padding_mask = memory_padding;        // [B, S] or undefined
  return decoder_->forward(y, memory, self_masks, cross_masks);  // [B, T, D]
}

Tensor EncoderDecoderModel::decode(const Tensor& tgt_ids, const Tensor& memory, const Tensor& memory_padding) {
  return generate(decode_hidden(tgt_ids, memory, memory_padding));  // [B, T, V]
}

Tensor EncoderDecoderModel::generate(const Tensor& hidden) const {
  return generator_->forward(hidden);  // [B, T, V]
}

nn::KVCache EncoderDecoderModel::init_cache(const Tensor& memory, const Tensor& memory_padding) {
  ATTN_CHECK(!grad_mode_enabled() && !is_training(), "EncoderDecoderModel",
             "init_cache is for inference: call it under NoGradGuard with the model in eval mode");
  return decoder_->init_cache(memory, memory_padding);
}

Tensor EncoderDecoderModel::forward_cached(const Tensor& tgt_ids, nn::KVCache& cache) {
  ATTN_CHECK(tgt_ids.defined() && tgt_ids.dtype() == DType::I64 && tgt_ids.dim() == 2 && tgt_ids.size(1) == 1,
             "EncoderDecoderModel::forward_cached", "tgt_ids must be i64 [N, 1], got ",
             tgt_ids.defined() ? tgt_ids.str() : "undefined");
  const Tensor logits = forward_cached_all(tgt_ids, cache);  // [N, 1, V]
  return logits.reshape({logits.size(0), logits.size(2)});   // [N, V]
}

Tensor EncoderDecoderModel::forward_cached_all(const Tensor& tgt_ids, nn::KVCache& cache) {
  constexpr const char* kOp = "EncoderDecoderModel::forward_cached";
  ATTN_CHECK(!grad_mode_enabled() && !is_training(), kOp,
             "cached decoding is for inference: call it under NoGradGuard with the model in eval mode");
  ATTN_CHECK(tgt_ids.defined() && tgt_ids.dtype() == DType::I64 && tgt_ids.dim() == 2 && tgt_ids.size(1) >= 1, kOp,
             "tgt_ids must be i64 [N, T] with T >= 1, got ", tgt_ids.defined() ? tgt_ids.str() : "undefined");
  const int64_t n = tgt_ids.size(0), t = tgt_ids.size(1);
  ATTN_CHECK(cache.num_layers() == decoder_->num_layers() && cache.rows() == n, kOp, "the cache holds ",
             cache.rows(), " rows for ", cache.num_layers(), " layers; expected ", n, " rows for ",
             decoder_->num_layers(), " layers (init_cache first)");
  const auto tokens = tgt_ids.to_vector<int64_t>();
  std::vector<int> is_pad(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) is_pad[i] = config_.pad_id >= 0 && tokens[i] == config_.pad_id ? 1 : 0;
  // Rows of a running batch that joined at different steps are left-padded (KVCache::left_pad):
  // each then has its own positions; otherwise every row is at positions cache.length() ...
  Tensor positions;  // [N, T] or undefined
  Tensor y;
  if (cache.left_pad().empty()) {
    y = embed(*tgt_embedding_, tgt_positions_.get(), *dropout_, tgt_ids, cache.length());  // [N, T, D]
  } else {
    positions = cache.next_positions(t);                                                     // [N, T]
    y = embed_at(*tgt_embedding_, tgt_positions_.get(), *dropout_, tgt_ids, positions);      // [N, T, D]
  }
  cache.append_self_padding(is_pad, t);
  Tensor hidden = decoder_->forward_cached(y, cache, positions);  // [N, T, D]
  return generate(hidden);                                        // [N, T, V]
}

}  // namespace attn::models
