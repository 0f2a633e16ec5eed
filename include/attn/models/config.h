// attn/models/config.h — every hyper-parameter of the three model families in one struct,
// validated once (paper §3 and Table 3). JSON in and out with strict keys: an unknown key
// or a wrong type is an error naming the key; absent keys keep their defaults. The defaults
// are the paper's base model (N=6, D=512, d_ff=2048, h=8, dropout 0.1, shared 37k vocabulary).
// The descendants of the paper (issue 5) are options too: "positional": "rope" / "alibi"
// (with rope_theta, rope_pairing), n_kv_heads (grouped-query attention), sliding_window and
// "activation": "swiglu", "attention": "linear" and a mixture-of-experts FFN (n_experts,
// expert_top_k, expert_capacity_factor, moe_aux_loss_weight); docs/conventions.md states their
// conventions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "attn/core/dtype.h"
#include "attn/nn/feed_forward.h"
#include "attn/nn/layer_options.h"
#include "attn/nn/norm.h"
#include "attn/nn/positional.h"
#include "attn/ops/attention.h"
#include "attn/ops/quantize.h"

namespace attn::models {

// encoder_decoder: the paper's Transformer (and T5); decoder_only: GPT-style causal LM;
// encoder_only: BERT-style bidirectional encoder with a masked-LM head.
enum class Arch { EncoderDecoder, DecoderOnly, EncoderOnly };

// Bounds on the size keys, checked by ModelConfig::validate() before anything is built (a
// config.json is input like any other: a key of 10^12 must be refused, not allocated).
// Each is far above any model this library trains or loads; docs/checkpoint.md lists them.
inline constexpr int64_t kMaxDModel = int64_t{1} << 16;       // d_model (and n_heads, which divides it)
inline constexpr int64_t kMaxLayers = 1024;                   // n_encoder_layers, n_decoder_layers
inline constexpr int64_t kMaxDFF = int64_t{1} << 20;          // d_ff
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;        // src_vocab_size, tgt_vocab_size
inline constexpr int64_t kMaxPositions = int64_t{1} << 20;    // max_len, sliding_window
inline constexpr int64_t kMaxExperts = 1024;                  // n_experts
inline constexpr int64_t kMaxParameters = int64_t{1} << 36;   // ModelConfig::min_parameters()

// One part of the parameter count a config implies (ModelConfig::parameter_parts): `count`
// parameters at least, driven by the size key `key` (its value `value`); `what` says how
// ("decoder layers of at least 12288 parameters each (d_model 32, d_ff 64)").
struct ParameterPart {
  const char* key;
  int64_t value;
  int64_t count;
  std::string what;
};
const char* arch_name(Arch arch);
Arch parse_arch(const std::string& name);

struct ModelConfig {
  Arch arch = Arch::EncoderDecoder;
  int64_t d_model = 512;
  int64_t n_heads = 8;
  int64_t n_encoder_layers = 6;  // used by encoder_decoder and encoder_only
  int64_t n_decoder_layers = 6;  // used by encoder_decoder and decoder_only
  int64_t d_ff = 2048;
  double dropout = 0.1;            // sublayer outputs, embeddings + positions, inside the FFN
  double attention_dropout = 0.1;  // attention weights
  nn::Activation activation = nn::Activation::ReLU;  // relu, gelu, gelu_tanh, or swiglu (gated FFN)
  bool norm_first = false;  // false: post-norm (the paper); true: pre-norm
  nn::NormKind norm = nn::NormKind::Layer;
  double norm_eps = 1e-5;
  bool final_norm = true;  // a norm after each stack (nn.Transformer always has one)
  // sinusoidal / learned are added to the embeddings; rope / alibi act inside every
  // self-attention (cross-attention has none); none = no position information.
  nn::PositionalKind positional = nn::PositionalKind::Sinusoidal;
  int64_t max_len = 1024;  // bound of learned positions
  double rope_theta = 10000.0;                         // RoPE base, > 0
  RopePairing rope_pairing = RopePairing::Interleaved;  // RoPE's feature pairs: (2i, 2i+1) or (i, i + Dh/2)
  // Key/value heads of every attention: 0 = n_heads (multi-head attention); a divisor of
  // n_heads below it = grouped-query attention (1 = multi-query). in_proj_weight is then
  // [D + 2 * n_kv_heads * D / n_heads, D] and the KV cache holds n_kv_heads heads.
  int64_t n_kv_heads = 0;
  // Sliding-window attention (decoder_only only): each position sees itself and the W - 1
  // before it; the KV cache keeps W positions. 0 = full causal attention.
  int64_t sliding_window = 0;
  // Self-attention of every layer: "softmax" (the paper) or "linear" (elu+1 kernel attention,
  // nn/linear_attention.h; O(T) memory). Linear attention combines with sinusoidal, learned or
  // no positions only (not rope, alibi, sliding_window or n_kv_heads), has no attention
  // dropout, and gives no attention weights to capture. Cross-attention stays softmax.
  nn::AttentionKind attention = nn::AttentionKind::Softmax;
  // Mixture of experts in place of every layer's FFN: n_experts (0 = the dense FFN) experts of
  // width d_ff, expert_top_k of them per token (1 <= k <= n_experts), per-expert capacity
  // ceil(expert_capacity_factor * tokens * k / n_experts) per forward (0 = unlimited). The
  // trainer adds moe_aux_loss_weight * Model::aux_loss() (the load-balancing loss) to the loss.
  int64_t n_experts = 0;
  int64_t expert_top_k = 2;
  double expert_capacity_factor = 0.0;
  double moe_aux_loss_weight = 0.01;
  // Single-stack models (decoder_only, encoder_only) use src_vocab_size as their vocabulary;
  // their tgt_vocab_size must be 0 or equal to it.
  int64_t src_vocab_size = 37000;
  int64_t tgt_vocab_size = 37000;
  bool share_embeddings = true;  // one table for source and target tokens (encoder_decoder)
  bool tie_output = true;        // the output projection reuses the (target) embedding matrix
  bool scale_embeddings = true;  // multiply embeddings by sqrt(d_model) (paper §3.4)
  int64_t pad_id = 0;  // -1: no padding token (then nothing is masked)
  int64_t bos_id = 1;  // -1: none
  int64_t eos_id = 2;  // -1: none
  DType dtype = DType::F32;  // f32 or f64
  uint64_t seed = 0;         // initialisation and dropout generators
  // Weights stored in reduced precision for inference (nn/quantize.h, `attn quantize`): none,
  // int8 or bf16; needs dtype f32. A quantized model is built with zero weights in that layout
  // (the loader fills them) and cannot be trained.
  Quantization quantization = Quantization::None;

  // Throws attn::Error naming the first problem found: the size keys are bounded first
  // (kMax* above, each named with its bound), then every other rule, then the parameter
  // count (min_parameters() <= kMaxParameters).
  void validate() const;
  // The largest parts of the parameter count, from the size keys alone and without
  // allocating (overflow-checked; call after the key bounds hold, as validate() does): the
  // embedding tables, the learned position tables and each stack's layers (attention's query
  // and output projections and the FFN's two matrices per expert). A lower bound of
  // Model::num_parameters(), within a small factor of it; loaders compare it with the weights
  // file's element count before building the model.
  std::vector<ParameterPart> parameter_parts() const;
  // The sum of parameter_parts().
  int64_t min_parameters() const;
  // "n_decoder_layers 1000 decoder layers ... need at least N parameters": the largest part,
  // for messages.
  std::string largest_part() const;
  // The vocabulary of a single-stack model (src_vocab_size).
  int64_t vocab_size() const { return src_vocab_size; }
  // The per-layer options of the stacks.
  nn::LayerOptions layer_options() const;

  // Every field, enums as their names ("encoder_decoder", "relu", "layer", "sinusoidal", "f32");
  // rope_theta, rope_pairing, n_kv_heads, sliding_window, attention and the MoE keys only when
  // they differ from their defaults (a paper model's config keeps the keys it always had).
  nlohmann::json to_json() const;
  // Reads the keys present over the defaults; unknown keys and wrong types are errors naming
  // the key. Does not validate (call validate()).
  static ModelConfig from_json(const nlohmann::json& j);

  // Presets: "base" and "big" (paper Table 3; vocabulary 37000 shared), and "small", the
  // seed's digit-reversal model (D=64, 4 heads, 2+2 layers, d_ff 256, vocabulary 13:
  // PAD 0, BOS 1, EOS 2, digits 3..12).
  static ModelConfig paper_base();
  static ModelConfig paper_big();
  static ModelConfig seed_small();
  static ModelConfig preset(const std::string& name);
};

}  // namespace attn::models
