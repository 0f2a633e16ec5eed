// attn/nn/linear_attention.h — linear (kernel) attention, Katharopoulos et al. 2020, "Transformers
// are RNNs": softmax(q k^T) is replaced by the positive feature map phi(x) = elu(x) + 1, so
//   out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j))
// is computed as phi(Q) (phi(K)^T V) in O(T) time and memory instead of the O(T^2) score matrix
// (seed 000's "low-rank / linear attention"); causal attention keeps running prefix sums.
// It is not the paper's softmax attention (§3.2.1): no 1/sqrt(Dh) scale, no arbitrary masks.
#pragma once

#include <cstdint>
#include <memory>

#include "attn/core/rng.h"
#include "attn/nn/attention.h"
#include "attn/nn/linear.h"
#include "attn/nn/module.h"

namespace attn::nn {

struct LinearAttentionOptions {
  // Query i sees keys j <= i + (Tk - Tq) only (bottom-right aligned, as ops/attention.h).
  bool causal = false;
  // Bool [B, Tk], true = this key is padding: its phi(k) is zero, so it adds to neither sum.
  Tensor key_padding_mask;
};

// phi(x) = elu(x) + 1 = x + 1 for x > 0, exp(x) otherwise: positive, so every denominator is.
double linear_attention_feature(double x);

// q [B, H, Tq, Dk], k [B, H, Tk, Dk], v [B, H, Tk, Dv] (f32 or f64, one dtype) -> [B, H, Tq, Dv]:
//   out_i = sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j)  over the keys j query i sees.
// A query that sees no key (all masked, or before the first key when causal and Tq > Tk)
// outputs zeros. Differentiable with respect to q, k and v; beyond the inputs it keeps O(B*H*Tq)
// numbers for the backward (the denominators), never a [Tq, Tk] matrix.
Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                        const LinearAttentionOptions& options = {});

// The running state of causal linear attention for incremental decoding (the RNN view):
// kv = sum_j phi(k_j) v_j^T [N, H, Dk, Dv] and z = sum_j phi(k_j) [N, H, Dk]; constant size,
// whatever the number of steps. Undefined tensors = no step yet.
struct LinearAttentionState {
  Tensor kv;
  Tensor z;
  int64_t steps = 0;
};

// Multi-head linear attention with MultiHeadAttention's parameters, names and forward signature
// (in_proj_weight [3D, D], in_proj_bias [3D], out_proj.weight [D, D], out_proj.bias [D]; same
// initialisation), so a layer can hold either. Masks: causal and a Bool key_padding_mask;
// attn_mask and float padding masks are errors (they need the score matrix this avoids), and
// AttentionMasks::positions is not used (no rotary positions). No attention dropout and no
// weights to return: the [Tq, Tk] matrix is never formed.
class LinearAttention : public AttentionModule {
 public:
  LinearAttention(int64_t d_model, int64_t n_heads, DType dtype, Rng& rng);

  // query [B, Tq, D], key [B, Tk, D], value [B, Tk, D] -> [B, Tq, D].
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const AttentionMasks& masks = {}) override;

  // Incremental decoding with MultiHeadAttention's cache interface (inference only: call under
  // NoGradGuard). Causal self-attention of T new positions x [N, T, D] over the cached ones
  // and themselves (a whole prompt, or one step), as MultiHeadAttention::forward_cached: new
  // keys and values are appended to kv ([N, H, T', Dh] -> [N, H, T' + T, Dh]) and new query i
  // sees every cached key and new keys <= i (bottom-right causal alignment).
  // masks.key_padding_mask: Bool [N, T' + T] or undefined; the other fields are ignored.
  // -> [N, T, D].
  Tensor forward_cached(const Tensor& x, SelfKV& kv, const AttentionMasks& masks) override;
  // One query step query [N, 1, D] against cached keys/values kv [N, H, Tk, Dh]
  // (cross-attention); key_padding_mask Bool [N, Tk] or undefined. -> [N, 1, D].
  Tensor forward_cached(const Tensor& query, const CrossKV& kv, const Tensor& key_padding_mask);
  // The recurrent form of causal self-attention (inference only): x [N, 1, D] updates `state`
  // in O(H * Dh^2) and returns [N, 1, D], equal to forward(..., causal) at that position.
  // Every step's key counts (no key padding): the constant-size state is the point of the form.
  Tensor forward_cached(const Tensor& x, LinearAttentionState& state);
  // memory [B, S, D] -> keys and values [B, H, S, Dh], projected once per source.
  CrossKV project_memory_kv(const Tensor& memory) const;

  // [B, T, D] <-> [B, H, T, Dh], as MultiHeadAttention's.
  Tensor split_heads(const Tensor& x) const;
  Tensor join_heads(const Tensor& x) const;

  int64_t d_model() const { return d_model_; }
  int64_t n_heads() const { return n_heads_; }
  int64_t head_dim() const { return head_dim_; }
  const Tensor& in_proj_weight() const { return in_proj_weight_; }  // [3D, D]
  const Tensor& in_proj_bias() const { return in_proj_bias_; }      // [3D]
  Linear& out_proj() { return *out_proj_; }

 private:
  // x [B, T, D] @ W_i^T + b_i for i = 0 (query), 1 (key), 2 (value) -> [B, T, D].
  Tensor project(const Tensor& x, int64_t i) const;
  void check_input(const Tensor& x, const char* what) const;

  int64_t d_model_, n_heads_, head_dim_;
  Tensor in_proj_weight_, in_proj_bias_;
  std::shared_ptr<Linear> out_proj_;
};

}  // namespace attn::nn
