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

}  // namespace attn::run
