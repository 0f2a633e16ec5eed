// attn/nn/encoder.h — the encoder layer and stack (paper §3.1), as nn.TransformerEncoderLayer
// and nn.TransformerEncoder (batch-first):
//   post-norm (paper): x = norm1(x + dropout1(SA(x)));      x = norm2(x + dropout2(FFN(x)))
//   pre-norm:          x = x + dropout1(SA(norm1(x)));      x = x + dropout2(FFN(norm2(x)))
// Names: self_attn.*, linear1.*, linear2.*, norm1.*, norm2.* per layer; "layers.N." and an
// optional final "norm." in the stack. The same layer with a causal mask is a GPT block, and
// for that use it decodes incrementally against a KV cache (nn/kv_cache.h): forward_cached()
// runs T >= 1 new positions (a whole prompt at once, or one step).
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

class EncoderLayer : public Module {
 public:
  EncoderLayer(const LayerOptions& options, Rng& rng);

  // x [B, T, D] -> [B, T, D]; masks as in MultiHeadAttention (key padding, causal, ...).
  Tensor forward(const Tensor& x, const AttentionMasks& masks = {});

  // Cached causal decoding (inference only: NoGradGuard, eval mode), through the same
  // sublayers and norms as forward() with masks.causal set.
  // x [N, T, D], T >= 1 new positions (a prompt, the next chunk of one, or one step) attend
  // causally over kv's cached positions and themselves; their keys/values are appended to
  // kv.self. masks.key_padding_mask Bool [N, T' + T] (cached + new) or undefined;
  // masks.positions the new positions (I64 [N, T]; undefined = T' .. T' + T - 1).
  // -> [N, T, D], equal to forward()'s rows for those positions.
  Tensor forward_cached(const Tensor& x, LayerKV& kv, const AttentionMasks& masks);

  // The self-attention of either kind; self_attn() is the softmax one (an error with linear
  // attention), feed_forward() the dense FFN (an error with experts), moe() null without them.
  AttentionModule& self_attention() { return *self_attn_; }
  MultiHeadAttention& self_attn();
  FeedForward& feed_forward();
  MixtureOfExperts* moe() { return moe_.get(); }
  Norm& norm1() { return *norm1_; }
  Norm& norm2() { return *norm2_; }
  const LayerOptions& options() const { return options_; }

 private:
  // The FFN sublayer: the dense FFN or the mixture of experts. [..., D] -> [..., D].
  Tensor ffn(const Tensor& x);

  LayerOptions options_;
  std::shared_ptr<AttentionModule> self_attn_;
  std::shared_ptr<FeedForward> ff_;  // its linear1/dropout/linear2 are registered on this layer
  std::shared_ptr<MixtureOfExperts> moe_;  // instead of ff_ with n_experts > 0
  std::shared_ptr<Norm> norm1_, norm2_;
  std::shared_ptr<Dropout> dropout1_, dropout2_;
};

class Encoder : public Module {
 public:
  // n_layers copies of EncoderLayer (each initialised afresh), then a final norm if asked.
  Encoder(const LayerOptions& options, int64_t n_layers, bool final_norm, Rng& rng);

  // x [B, S, D] -> [B, S, D].
  Tensor forward(const Tensor& x, const AttentionMasks& masks = {});
  // Cached causal decoding through every layer (EncoderLayer::forward_cached) and the final norm:
  // x [N, T, D] new positions -> [N, T, D]. The caller has appended their PAD flags to `cache`;
  // the key padding mask is taken from there, masks.positions is passed on. Inference only.
  Tensor forward_cached(const Tensor& x, KVCache& cache, const AttentionMasks& masks);

  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  EncoderLayer& layer(int64_t i) { return *layers_.at(static_cast<size_t>(i)); }
  Norm* norm() { return norm_.get(); }  // null without a final norm

 private:
  std::vector<std::shared_ptr<EncoderLayer>> layers_;
  std::shared_ptr<Norm> norm_;
};

}  // namespace attn::nn
