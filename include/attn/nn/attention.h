// attn/nn/attention.h — multi-head attention (paper §3.2.2), as nn.MultiheadAttention:
//   MultiHead(Q, K, V) = Concat(head_1..head_h) W_O,  head_i = Attention(Q W_Q^i, K W_K^i, V W_V^i).
// Parameters under PyTorch's names: "in_proj_weight" [3D, D] (W_Q; W_K; W_V stacked in q, k, v
// order), "in_proj_bias" [3D], "out_proj.weight" [D, D], "out_proj.bias" [D]. Batch-first.
// Heads are split [B, T, D] -> [B, H, T, Dh] with a reshape and a transpose (never a bare
// reshape), attended with the fused scaled_dot_product_attention op, and joined back.
// Incremental decoding steps against cached keys/values (nn/kv_cache.h) are the *_step methods.
// Not here: separate kdim/vdim, bias_k/bias_v, add_zero_attn, RoPE/ALiBi.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attn/core/rng.h"
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
};

// The output and, on request, the per-head attention weights.
struct AttentionOutput {
  Tensor out;      // [B, Tq, D]
  Tensor weights;  // [B, H, Tq, Tk] (after masking, before dropout; not differentiable)
};

class MultiHeadAttention : public Module {
 public:
  // Initialisation as nn.MultiheadAttention: in_proj_weight xavier-uniform, both biases zero,
  // out_proj.weight nn.Linear's default. `dropout` applies to the attention weights in training;
  // its generator is seeded from `rng`.
  MultiHeadAttention(int64_t d_model, int64_t n_heads, double dropout, DType dtype, Rng& rng);

  // query [B, Tq, D], key [B, Tk, D], value [B, Tk, D] -> [B, Tq, D].
  // Self-attention passes the same tensor three times; cross-attention passes the encoder
  // output ("memory") as key and value.
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const AttentionMasks& masks = {});
  // The same, also returning the weights [B, H, Tq, Tk] (average over H for PyTorch's default).
  AttentionOutput forward_with_weights(const Tensor& query, const Tensor& key, const Tensor& value,
                                       const AttentionMasks& masks = {});

  // Incremental decoding (inference only: call under NoGradGuard in eval mode; no dropout, no
  // attention capture). memory [B, S, D] -> its keys k and values v [B, H, S, Dh], projected
  // once per source for cross-attention.
  void project_memory_kv(const Tensor& memory, Tensor& k, Tensor& v) const;
  // One self-attention step: x [N, 1, D]. Its key and value are appended to k_cache and v_cache
  // ([N, H, T, Dh] -> [N, H, T+1, Dh]; undefined = empty) and the query attends over all of
  // them (every cached position is in the past, so no causal mask is needed).
  // key_padding_mask Bool [N, T+1] or undefined. -> [N, 1, D].
  Tensor forward_step_self(const Tensor& x, Tensor& k_cache, Tensor& v_cache, const Tensor& key_padding_mask);
  // One query step against cached keys/values: query [N, 1, D], k and v [N, H, Tk, Dh],
  // key_padding_mask Bool [N, Tk] or undefined. -> [N, 1, D].
  Tensor forward_step_cached(const Tensor& query, const Tensor& k, const Tensor& v, const Tensor& key_padding_mask);

  // [B, T, D] -> [B, H, T, Dh]: reshape to [B, T, H, Dh], then swap T and H.
  Tensor split_heads(const Tensor& x) const;
  // [B, H, T, Dh] -> [B, T, D]: swap back, then merge H and Dh.
  Tensor join_heads(const Tensor& x) const;

  // When on, every forward keeps its weights [B, H, Tq, Tk] (detached) for last_attention().
  void set_capture_attention(bool on) { capture_ = on; }
  bool capture_attention() const { return capture_; }
  const Tensor& last_attention() const { return last_attention_; }

  int64_t d_model() const { return d_model_; }
  int64_t n_heads() const { return n_heads_; }
  int64_t head_dim() const { return head_dim_; }
  double dropout() const { return dropout_; }
  const Tensor& in_proj_weight() const { return in_proj_weight_; }  // [3D, D]
  const Tensor& in_proj_bias() const { return in_proj_bias_; }      // [3D]
  Linear& out_proj() { return *out_proj_; }
  Rng& rng() { return rng_; }

 private:
  // x [B, T, D] @ W_i^T + b_i for i = 0 (query), 1 (key), 2 (value) -> [B, T, D].
  Tensor project(const Tensor& x, int64_t i) const;
  AttentionOutput run(const Tensor& query, const Tensor& key, const Tensor& value,
                      const AttentionMasks& masks, bool need_weights);

  int64_t d_model_, n_heads_, head_dim_;
  double dropout_;
  Rng rng_;
  Tensor in_proj_weight_, in_proj_bias_;
  std::shared_ptr<Linear> out_proj_;
  bool capture_ = false;
  Tensor last_attention_;
};

// Turns attention capture on or off in every MultiHeadAttention under `root`.
void set_capture_attention(Module& root, bool on);
// The captured weights under `root`: (module name, e.g. "decoder.layers.1.multihead_attn",
// weights [B, H, Tq, Tk]) for every attention module that has captured something.
std::vector<std::pair<std::string, Tensor>> captured_attention(Module& root);

}  // namespace attn::nn
