// attn/models/encoder_decoder.h — the paper's Transformer (§3, Figure 1): source and target
// embeddings x sqrt(D) + positions, an encoder stack, a decoder stack with causal
// self-attention and attention over the encoder output, and a linear output layer.
// state_dict names are those of a subclass of nn.Transformer (batch_first) with attributes
// src_embedding, tgt_embedding, [src_pos_embedding, tgt_pos_embedding,] generator:
//   encoder.layers.N.*, encoder.norm.*, decoder.layers.N.*, decoder.norm.*, src_embedding.weight,
//   tgt_embedding.weight, [src_pos_embedding.weight, tgt_pos_embedding.weight,] generator.weight,
//   generator.bias. Tied tensors are stored once, under the first name (src_embedding.weight).
// Step-by-step decoding: init_cache + forward_cached, with a typed KV cache (nn/kv_cache.h).
#pragma once

#include <memory>

#include "attn/models/model.h"
#include "attn/nn/decoder.h"
#include "attn/nn/encoder.h"
#include "attn/nn/kv_cache.h"
#include "attn/nn/linear.h"

namespace attn::models {

class EncoderDecoderModel : public Model {
 public:
  explicit EncoderDecoderModel(const ModelConfig& config);

  // src_ids I64 [B, S], tgt_in_ids I64 [B, T] (the target shifted right: BOS ...) -> logits [B, T, V].
  // PAD (pad_id) keys are masked in every attention; the decoder's self-attention is causal.
  Tensor forward(const Tensor& src_ids, const Tensor& tgt_in_ids);
  // src_ids [B, S] -> memory [B, S, D].
  Tensor encode(const Tensor& src_ids);
  // tgt_ids [B, T], memory [B, S, D], memory_padding Bool [B, S] (true = PAD; may be undefined)
  // -> logits [B, T, V].
  Tensor decode(const Tensor& tgt_ids, const Tensor& memory, const Tensor& memory_padding);
  // The same, stopping before the output layer -> [B, T, D].
  Tensor decode_hidden(const Tensor& tgt_ids, const Tensor& memory, const Tensor& memory_padding);
  // hidden [B, T, D] -> logits [B, T, V].
  Tensor generate(const Tensor& hidden) const;

  // Incremental decoding (inference only: call under NoGradGuard with the model in eval mode;
  // both are checked). memory [N, S, D], memory_padding Bool [N, S] or undefined -> a cache
  // holding every decoder layer's cross-attention K/V (computed once per source).
  nn::KVCache init_cache(const Tensor& memory, const Tensor& memory_padding);
  // tgt_ids I64 [N, 1], every row's token at target position cache.length() (0 for BOS)
  // -> logits [N, V] for the next token, equal to decode()'s logits at that position for the
  // whole prefix. Appends the step's self-attention K/V (and PAD flag) to `cache`.
  Tensor forward_cached(const Tensor& tgt_ids, nn::KVCache& cache);
  // T new target positions per row at once (speculative decoding scores a draft in one pass):
  // tgt_ids I64 [N, T], the tokens at target positions cache.length() .. + T - 1 -> logits
  // [N, T, V], entry t the distribution after tgt_ids[:, t] (decode()'s logits there). Appends
  // their self-attention K/V (and PAD flags) to `cache`; T = 1 is forward_cached.
  Tensor forward_cached_all(const Tensor& tgt_ids, nn::KVCache& cache);

  nn::Encoder& encoder() { return *encoder_; }
  nn::Decoder& decoder() { return *decoder_; }
  nn::Embedding& src_embedding() { return *src_embedding_; }
  nn::Embedding& tgt_embedding() { return *tgt_embedding_; }
  nn::Linear& generator() { return *generator_; }

 private:
  std::shared_ptr<nn::Encoder> encoder_;
  std::shared_ptr<nn::Decoder> decoder_;
  std::shared_ptr<nn::Embedding> src_embedding_, tgt_embedding_;
  std::shared_ptr<nn::PositionalEncoding> src_positions_, tgt_positions_;  // null for "none"
  std::shared_ptr<nn::Linear> generator_;
  std::shared_ptr<nn::Dropout> dropout_;  // on embeddings + positions
};

}  // namespace attn::models
