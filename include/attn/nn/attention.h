// attn/nn/attention.h — multi-head attention (paper §3.2.2), as nn.MultiheadAttention:
//   MultiHead(Q, K, V) = Concat(head_1..head_h) W_O,  head_i = Attention(Q W_Q^i, K W_K^i, V W_V^i).
// Parameters under PyTorch's names: "in_proj_weight" [3D, D] (W_Q; W_K; W_V stacked in q, k, v
// order), "in_proj_bias" [3D], "out_proj.weight" [D, D], "out_proj.bias" [D]. Batch-first.
// Heads are split [B, T, D] -> [B, H, T, Dh] with a reshape and a transpose (never a bare
// reshape), attended with the fused scaled_dot_product_attention op, and joined back; all views
// (the op reads and writes through strides). Self-attention without RoPE projects q, k, v in
// one product by in_proj_weight and attends inside that [B, T, 3D] tensor
// (scaled_dot_product_attention_packed).
// Incremental decoding against cached keys/values (nn/kv_cache.h) is forward_cached: over a
// layer's SelfKV (causal self-attention) or its CrossKV (attention over memory). The
// descendants are AttentionOptions: grouped-query attention (fewer key/value heads; then
// in_proj is [D + 2*Hkv*Dh, D]), RoPE on q and k, ALiBi biases, and a sliding window (the
// cache then keeps only W positions).
// Not here: separate kdim/vdim, bias_k/bias_v, add_zero_attn.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attn/core/rng.h"
#include "attn/nn/kv_cache.h"
#include "attn/nn/linear.h"
#include "attn/nn/module.h"
#include "attn/ops/attention.h"

namespace attn::nn {

// The masks of one attention call, in PyTorch's convention (bool true = masked out; a float
// mask is added to the scores).
struct AttentionMasks {
  // [Tq, Tk], [B*H, Tq, Tk] (nn.MultiheadAttention's 3-D form) or [B, H, Tq, Tk]; bool or float.
  Tensor attn_mask;
  // [B, Tk]: bool true = that key is padding; or float, added to every query's scores.
  Tensor key_padding_mask;
  // Query i sees keys j <= i + (Tk - Tq) only (the decoder's masked self-attention, §3.2.3).
  bool causal = false;
  // I64 [B, Tq] or [Tq]: the positions of the queries (and, in self-attention, of the new
  // keys), for position-aware attention (RoPE). Undefined = 0 .. Tq-1. Left-padded batches
  // pass each row's own positions.
  Tensor positions;
};

// What makes an attention one of the paper's descendants; the defaults are the paper's.
// rope, alibi and window are for self-attention (query and key positions are the same).
struct AttentionOptions {
  // Key/value heads Hkv: 0 or n_heads = multi-head attention; a divisor of n_heads below it =
  // grouped-query attention (1 = multi-query). Query head h uses key/value head h / (H / Hkv).
  int64_t n_kv_heads = 0;
  // Rotary position embedding of q and k (ops/attention.h: rotary_embedding), by the positions
  // in AttentionMasks::positions (default 0 .. T-1).
  bool rope = false;
  RopeOptions rope_options;
  // ALiBi: head h adds -m_h * |i - j| to its scores, m = alibi_slopes(n_heads).
  bool alibi = false;
  // Sliding window W > 0: with a causal mask, query i sees keys i - W < j <= i (itself
  // included); the incremental path keeps only the last W positions' keys and values.
  int64_t window = 0;
};

// The output and, on request, the per-head attention weights.
struct AttentionOutput {
  Tensor out;      // [B, Tq, D]
  Tensor weights;  // [B, H, Tq, Tk] (after masking, before dropout; not differentiable)
};

// What an encoder or decoder layer needs of its self-attention, so that a layer holds either
// softmax attention (MultiHeadAttention) or linear attention (nn/linear_attention.h) behind one
// pointer: the full forward and the cached causal forward of decoding.
class AttentionModule : public Module {
 public:
  // query [B, Tq, D], key [B, Tk, D], value [B, Tk, D] -> [B, Tq, D].
  virtual Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                         const AttentionMasks& masks = {}) = 0;
  // Causal self-attention of T new positions x [N, T, D] over the cached keys/values kv
  // ([N, Hkv, T', Dh]) and themselves; the new keys/values are appended to kv. -> [N, T, D].
  virtual Tensor forward_cached(const Tensor& x, SelfKV& kv, const AttentionMasks& masks) = 0;
};

class MultiHeadAttention : public AttentionModule {
 public:
  // Initialisation as nn.MultiheadAttention: in_proj_weight xavier-uniform, both biases zero,
  // out_proj.weight nn.Linear's default. `dropout` applies to the attention weights in training;
  // its generator is seeded from `rng`. Parameters: in_proj_weight [3D, D] and in_proj_bias
  // [3D] (PyTorch's) with n_heads key/value heads; with Hkv < n_heads they are
  // [D + 2*Hkv*Dh, D] and [D + 2*Hkv*Dh]: rows W_Q [D], then W_K [Hkv*Dh], then W_V [Hkv*Dh].
  MultiHeadAttention(int64_t d_model, int64_t n_heads, double dropout, DType dtype, Rng& rng,
                     const AttentionOptions& options = {});

  // query [B, Tq, D], key [B, Tk, D], value [B, Tk, D] -> [B, Tq, D].
  // Self-attention passes the same tensor three times; cross-attention passes the encoder
  // output ("memory") as key and value.
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const AttentionMasks& masks = {}) override;
  // The same, also returning the weights [B, H, Tq, Tk] (average over H for PyTorch's default).
  AttentionOutput forward_with_weights(const Tensor& query, const Tensor& key, const Tensor& value,
                                       const AttentionMasks& masks = {});

  // Incremental decoding (inference only: call under NoGradGuard in eval mode; no dropout, no
  // attention capture). Cached keys and values have Hkv heads. memory [B, S, D] -> its keys and
  // values [B, Hkv, S, Dh], projected once per source for cross-attention.
  CrossKV project_memory_kv(const Tensor& memory) const;
  // Causal self-attention of T new positions x [N, T, D] over the cached ones and themselves
  // (a whole prompt, or T = 1 for a step): their keys and values (rotated by RoPE) are
  // appended to kv.k and kv.v ([N, Hkv, T', Dh] -> [N, Hkv, T' + T, Dh]; undefined =
  // empty) and new query i sees every cached key and new keys <= i (and with a window W only
  // the last W; the cache then keeps only its last W positions). The caches grow in place
  // through nn::append_positions (nn/kv_cache.h): views of buffers with spare room, so a step
  // copies only its own keys and values; the step's q, k and v come from one product with the
  // stacked in_proj_weight. masks.key_padding_mask: Bool
  // [N, T' + T] or undefined; masks.positions: I64 [N, T] or [T], the new positions (RoPE;
  // undefined = T' .. T' + T - 1); masks.causal and attn_mask are ignored. -> [N, T, D].
  Tensor forward_cached(const Tensor& x, SelfKV& kv, const AttentionMasks& masks) override;
  // T new positions (T = 1: one step; more: speculative decoding's verification) against a
  // layer's cross-attention K/V (no rope, alibi or window): query [N, T, D], kv.k and kv.v
  // [N_src, Hkv, Tk, Dh], key_padding_mask Bool [N_src, Tk] or undefined; row r attends source
  // row row_sources[r] (empty: N_src = N and row r reads row r). Every query sees every memory
  // key. The rows of one source read its K/V where they lie, never a copy per row: they attend
  // as extra query heads of that source (grouped-query attention, so each row's result is the
  // one it gets alone). -> [N, T, D].
  Tensor forward_cached(const Tensor& query, const CrossKV& kv, const Tensor& key_padding_mask,
                        const std::vector<int64_t>& row_sources = {});

  // The paged layout of forward_cached (SelfKV::paged): the new keys and values go into the
  // blocks KVCache::append_self_padding allocated, and the attention reads the blocks in place
  // (ops/attention.h: paged_attention). q [N, H, T, Dh] (rotated), k_new, v_new [N, Hkv, T, Dh].
  Tensor forward_paged(const Tensor& q, const Tensor& k_new, const Tensor& v_new, SelfKV& kv,
                       const AttentionMasks& masks);

  // [B, T, D] -> [B, H, T, Dh]: reshape to [B, T, H, Dh], then swap T and H. With `heads`
  // given, [B, T, heads*Dh] -> [B, heads, T, Dh] (the key/value heads).
  Tensor split_heads(const Tensor& x) const;
  Tensor split_heads(const Tensor& x, int64_t heads) const;
  // [B, H, T, Dh] -> [B, T, D]: swap back, then merge H and Dh.
  Tensor join_heads(const Tensor& x) const;

  // When on, every forward keeps its weights [B, H, Tq, Tk] (detached) for last_attention(),
  // and the per-head queries, keys and values the weights came from (after RoPE):
  // last_query() [B, H, Tq, Dh], last_key() and last_value() [B, Hkv, Tk, Dh].
  void set_capture_attention(bool on) { capture_ = on; }
  bool capture_attention() const { return capture_; }
  const Tensor& last_attention() const { return last_attention_; }
  const Tensor& last_query() const { return last_query_; }
  const Tensor& last_key() const { return last_key_; }
  const Tensor& last_value() const { return last_value_; }

  int64_t d_model() const { return d_model_; }
  int64_t n_heads() const { return n_heads_; }
  int64_t n_kv_heads() const { return n_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  double dropout() const { return dropout_; }
  const AttentionOptions& options() const { return options_; }
  const Tensor& in_proj_weight() const { return in_proj_weight_; }  // [D + 2*Hkv*Dh, D] ([3D, D])
  const Tensor& in_proj_bias() const { return in_proj_bias_; }      // [D + 2*Hkv*Dh]
  // For inference in_proj_weight may be int8 with these scales [D + 2*Hkv*Dh], or bf16
  // (nn/quantize.h; undefined scales then, and for a float weight).
  const Tensor& in_proj_weight_scale() const { return in_proj_weight_scale_; }
  void quantize_own(QuantizeContext& ctx) override;
  Linear& out_proj() { return *out_proj_; }
  Rng& rng() { return rng_; }

 private:
  // x [B, T, D] @ W_i^T + b_i for i = 0 (query, -> [B, T, D]), 1 (key) and 2 (value)
  // (-> [B, T, Hkv*Dh]).
  Tensor project(const Tensor& x, int64_t i) const;
  AttentionOutput run(const Tensor& query, const Tensor& key, const Tensor& value,
                      const AttentionMasks& masks, bool need_weights);
  // The sdpa options every call shares: ALiBi slopes.
  SdpaOptions base_options() const;

  int64_t d_model_, n_heads_, n_kv_heads_, head_dim_;
  double dropout_;
  AttentionOptions options_;
  Tensor alibi_;  // [H] slopes in the parameters' dtype; undefined without ALiBi
  Rng rng_;
  Tensor in_proj_weight_, in_proj_bias_, in_proj_weight_scale_;
  std::shared_ptr<Linear> out_proj_;
  bool capture_ = false;
  Tensor last_attention_, last_query_, last_key_, last_value_;
};

// Turns attention capture on or off in every MultiHeadAttention under `root`.
void set_capture_attention(Module& root, bool on);
// The captured weights under `root`: (module name, e.g. "decoder.layers.1.multihead_attn",
// weights [B, H, Tq, Tk]) for every attention module that has captured something.
std::vector<std::pair<std::string, Tensor>> captured_attention(Module& root);

}  // namespace attn::nn
