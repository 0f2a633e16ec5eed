// attn/nn/decoder.h — the decoder layer and stack (paper §3.1), as nn.TransformerDecoderLayer
// and nn.TransformerDecoder (batch-first). Three sublayers: masked self-attention, attention
// over the encoder output ("memory"), FFN; each wrapped as in encoder.h (post- or pre-norm):
//   post-norm: x = norm1(x + d1(SA(x))); x = norm2(x + d2(CA(x, mem))); x = norm3(x + d3(FFN(x)))
// Names: self_attn.*, multihead_attn.*, linear1.*, linear2.*, norm1..3.*; stack "layers.N.", "norm.".
// forward_cached: incremental decoding of new positions (one, or several at once) against a KVCache (nn/kv_cache.h).
// The self-attention is softmax or linear attention (LayerOptions::attention_kind; the
// attention over memory stays softmax), the FFN dense or a mixture of experts ("moe").
#pragma once

#include <memory>
#include <vector>

#include "attn/core/rng.h"
#include "attn/nn/attention.h"
#include "attn/nn/dropout.h"
#include "attn/nn/feed_forward.h"
#include "attn/nn/kv_cache.h"
#include "attn/nn/layer_options.h"
#include "attn/nn/module.h"
#include "attn/nn/norm.h"

namespace attn::nn {

class DecoderLayer : public Module {
 public:
  DecoderLayer(const LayerOptions& options, Rng& rng);

  // x [B, T, D], memory [B, S, D] -> [B, T, D]. self_masks apply to self-attention (set
  // causal there for the paper's decoder), cross_masks to attention over memory (key padding
  // of the source).
  Tensor forward(const Tensor& x, const Tensor& memory, const AttentionMasks& self_masks = {},
                 const AttentionMasks& cross_masks = {});

  // One decoding step, or T new positions at once (speculative decoding's verification);
  // inference only: NoGradGuard, eval mode. x_t [N, T, D] are the newest positions; their
  // self-attention K/V are appended to cache.self and new position i attends over the cached
  // ones, itself and the new ones before it, and over cache.cross, through the same sublayers
  // and norms as forward(). self_padding Bool [N, T'+T] (the cached positions and the new ones)
  // / memory_padding Bool [N_src, S], or undefined; row r reads source row row_sources[r] of the
  // cross-attention K/V (empty: row r). With RoPE, the new positions are `positions` (I64
  // [N, T], each row's own: rows that joined a running batch later are left-padded), or when
  // undefined they follow the cached ones. -> [N, T, D].
  Tensor forward_cached(const Tensor& x_t, LayerKV& cache, const Tensor& self_padding, const Tensor& memory_padding,
                        const std::vector<int64_t>& row_sources = {}, const Tensor& positions = Tensor());

  // As EncoderLayer's: self_attention() of either kind, self_attn() the softmax one (an error
  // with linear attention), feed_forward() the dense FFN (an error with experts), moe().
  AttentionModule& self_attention() { return *self_attn_; }
  MultiHeadAttention& self_attn();
  MultiHeadAttention& multihead_attn() { return *cross_attn_; }
  FeedForward& feed_forward();
  MixtureOfExperts* moe() { return moe_.get(); }
  const LayerOptions& options() const { return options_; }

 private:
  Tensor ffn(const Tensor& x);  // [..., D] -> [..., D], dense or experts

  LayerOptions options_;
  std::shared_ptr<AttentionModule> self_attn_;
  std::shared_ptr<MultiHeadAttention> cross_attn_;
  std::shared_ptr<FeedForward> ff_;  // its linear1/dropout/linear2 are registered on this layer
  std::shared_ptr<MixtureOfExperts> moe_;  // instead of ff_ with n_experts > 0
  std::shared_ptr<Norm> norm1_, norm2_, norm3_;
  std::shared_ptr<Dropout> dropout1_, dropout2_, dropout3_;
};

class Decoder : public Module {
 public:
  Decoder(const LayerOptions& options, int64_t n_layers, bool final_norm, Rng& rng);

  // x [B, T, D], memory [B, S, D] -> [B, T, D].
  Tensor forward(const Tensor& x, const Tensor& memory, const AttentionMasks& self_masks = {},
                 const AttentionMasks& cross_masks = {});

  // memory [N, S, D] -> a cache with every layer's cross-attention K/V and memory_padding
  // (Bool [N, S] or undefined), and no target positions yet. Inference only.
  KVCache init_cache(const Tensor& memory, const Tensor& memory_padding);
  // One step (or T new positions) of every layer (DecoderLayer::forward_cached) then the final
  // norm: x_t [N, T, D] -> [N, T, D]. The caller has already appended the new positions' target
  // padding flags to `cache`. positions: each row's positions I64 [N, T] for RoPE, or undefined
  // (see DecoderLayer).
  Tensor forward_cached(const Tensor& x_t, KVCache& cache, const Tensor& positions = Tensor());

  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  DecoderLayer& layer(int64_t i) { return *layers_.at(static_cast<size_t>(i)); }
  Norm* norm() { return norm_.get(); }  // null without a final norm

 private:
  std::vector<std::shared_ptr<DecoderLayer>> layers_;
  std::shared_ptr<Norm> norm_;
};

}  // namespace attn::nn
