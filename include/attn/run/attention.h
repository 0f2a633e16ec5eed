// attn/run/attention.h — the attention weights a model folder's model used, captured in one
// pass and typed by stack and layer (encoder self-attention, decoder self-attention, decoder
// cross-attention, or a single-stack model's self-attention), each [B, H, Tq, Tk] as doubles.
// cross_attention() is the one-call form for one translated example.
// Not here: figures or scores computed from the weights (report/).
#pragma once

#include <cstdint>
#include <vector>

#include "attn/core/tensor.h"
#include "attn/run/model_folder.h"

namespace attn::run {

enum class AttentionKind { EncoderSelf, DecoderSelf, Cross, Self };

// One attention module's weights for one pass: [batch, heads, queries, keys], row-major.
struct AttentionWeights {
  AttentionKind kind = AttentionKind::Self;
  int64_t layer = 0;  // 0-based, in its stack
  int64_t batch = 0, heads = 0, queries = 0, keys = 0;
  std::vector<double> values;

  // The weight query q of batch row b puts on key k in head h (no bounds check).
  double at(int64_t b, int64_t h, int64_t q, int64_t k) const {
    return values[static_cast<size_t>(((b * heads + h) * queries + q) * keys + k)];
  }
};

// Every attention module of one pass, per stack in layer order (the stacks the model lacks stay
// empty).
struct CapturedAttention {
  std::vector<AttentionWeights> encoder_self, decoder_self, cross, self;
};

// A teacher-forced pass of an encoder-decoder folder over src [B, S] and tgt_in [B, T] (BOS +
// target) with capture on. A model that does not capture every layer is an attn::Error.
CapturedAttention capture_attention(const ModelFolder& folder, const Tensor& src, const Tensor& tgt_in);
// One pass of a single-stack (decoder-only or encoder-only) folder over ids [B, T]: `self`.
CapturedAttention capture_self_attention(const ModelFolder& folder, const Tensor& ids);

// The cross-attention of one example, [layer][head][query][key]: the decoder reads BOS +
// `output` (a translation of `src`, without EOS), so query i is the position that predicted
// output token i (and the last one EOS); keys are the source tokens.
using HeadWeights = std::vector<std::vector<double>>;  // [query][key]
std::vector<std::vector<HeadWeights>> cross_attention(const ModelFolder& folder, const std::vector<int64_t>& src,
                                                      const std::vector<int64_t>& output);

// Seed 001's figure 3 on a model's own numbers: softmax(Q K^T / sqrt(Dh)) V for one head of the
// first self-attention layer (the encoder's, or a single stack's), taken apart into its steps.
// The pass runs the model over `ids` (an encoder-decoder's source, or a single stack's ids as it
// reads them) with capture on; the head's queries, keys and values are the ones the model
// computed (after RoPE), and every later step is recomputed in float64 with the library's ops.
// The recomputed weights are checked against the weights the model itself used.
struct AttentionSteps {
  AttentionKind kind = AttentionKind::Self;
  int64_t layer = 0, head = 0;
  int64_t queries = 0, keys = 0, head_dim = 0;
  bool causal = false;   // a decoder-only model's: keys after the query (or out of its window) masked
  int64_t window = 0;    // the sliding window, 0: none
  // Row-major: q [queries, Dh]; k and v [keys, Dh]; scores = Q K^T, scaled = scores / sqrt(Dh),
  // mask (1: masked, else 0) and weights = softmax of scaled with the masked cells at -inf
  // [queries, keys]; out = weights V [queries, Dh].
  std::vector<double> q, k, v, scores, scaled, mask, weights, out;
  double max_weight_diff = 0;  // max |weights - the weights the model's pass used|
};
// `head` must be one of the model's heads; an ALiBi model (its scores carry a bias the steps do
// not show) or an empty input is an attn::Error.
AttentionSteps attention_steps(const ModelFolder& folder, const std::vector<int64_t>& ids, int64_t head = 0);

}  // namespace attn::run
