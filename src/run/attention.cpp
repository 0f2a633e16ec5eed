// run/attention.cpp — see attn/run/attention.h. The weights are read from the model's own
// stacks (encoder and decoder layers, or a single stack's blocks), layer by layer, so they are
// typed by construction: no module name is parsed.
#include "attn/run/attention.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "attn/models/encoder_only.h"
#include "attn/nn/attention.h"
#include "attn/nn/decoder.h"
#include "attn/nn/encoder.h"
#include "attn/ops/ops.h"
#include "attn/run/token_codec.h"

namespace attn::run {

namespace {

// Turns capture off again however the pass ends.
struct CaptureScope {
  models::Model& model;
  explicit CaptureScope(models::Model& m) : model(m) { model.set_capture_attention(true); }
  ~CaptureScope() { model.set_capture_attention(false); }
};

// One module's captured weights as a typed entry; undefined weights (the module did not run)
// leave the entry empty, which complete() reports.
AttentionWeights typed(AttentionKind kind, int64_t layer, const nn::MultiHeadAttention& mha) {
  AttentionWeights w;
  w.kind = kind;
  w.layer = layer;
  const Tensor& t = mha.last_attention();  // [B, H, Tq, Tk]
  if (!t.defined()) return w;
  w.values = t.to_vector<double>();
  w.batch = t.size(0), w.heads = t.size(1), w.queries = t.size(2), w.keys = t.size(3);
  return w;
}

// Every layer's self-attention of one stack, as `kind`.
std::vector<AttentionWeights> stack_weights(nn::Encoder& stack, AttentionKind kind) {
  std::vector<AttentionWeights> out;
  for (int64_t i = 0; i < stack.num_layers(); ++i) out.push_back(typed(kind, i, stack.layer(i).self_attn()));
  return out;
}

// The weights the pass `run` leaves in `model`'s attention modules, read layer by layer from the
// model's own stacks.
CapturedAttention capture(models::Model& model, const std::function<void()>& run) {
  NoGradGuard no_grad;
  CaptureScope scope(model);
  run();
  CapturedAttention out;
  if (auto* ed = dynamic_cast<models::EncoderDecoderModel*>(&model)) {
    out.encoder_self = stack_weights(ed->encoder(), AttentionKind::EncoderSelf);
    nn::Decoder& decoder = ed->decoder();
    for (int64_t i = 0; i < decoder.num_layers(); ++i) {
      out.decoder_self.push_back(typed(AttentionKind::DecoderSelf, i, decoder.layer(i).self_attn()));
      out.cross.push_back(typed(AttentionKind::Cross, i, decoder.layer(i).multihead_attn()));
    }
  } else if (auto* lm = dynamic_cast<models::DecoderOnlyModel*>(&model)) {
    out.self = stack_weights(lm->blocks(), AttentionKind::Self);
  } else if (auto* mlm = dynamic_cast<models::EncoderOnlyModel*>(&model)) {
    out.self = stack_weights(mlm->blocks(), AttentionKind::Self);
  }
  return out;
}

bool complete(const std::vector<AttentionWeights>& l) {
  return !l.empty() && std::all_of(l.begin(), l.end(), [](const AttentionWeights& w) { return !w.values.empty(); });
}

}  // namespace

CapturedAttention capture_attention(const ModelFolder& folder, const Tensor& src, const Tensor& tgt_in) {
  ATTN_CHECK(folder.model != nullptr, "attention", "the model in '", folder.dir, "' is not encoder_decoder");
  CapturedAttention out = capture(*folder.model, [&] { folder.model->forward(src, tgt_in); });
  ATTN_CHECK(complete(out.encoder_self) && complete(out.decoder_self) && complete(out.cross), "attention",
             "the model did not capture attention weights for every layer");
  return out;
}

CapturedAttention capture_self_attention(const ModelFolder& folder, const Tensor& ids) {
  models::Model& model = *folder.base;
  CapturedAttention out = capture(model, [&] {
    if (auto* lm = dynamic_cast<models::DecoderOnlyModel*>(&model)) lm->forward(ids);
    else if (auto* mlm = dynamic_cast<models::EncoderOnlyModel*>(&model)) mlm->forward(ids);
  });
  ATTN_CHECK(complete(out.self), "attention", "the model did not capture attention weights for every layer");
  return out;
}

std::vector<std::vector<HeadWeights>> cross_attention(const ModelFolder& folder, const std::vector<int64_t>& src,
                                                      const std::vector<int64_t>& output) {
  std::vector<int64_t> dec_in{folder.bos};
  dec_in.insert(dec_in.end(), output.begin(), output.end());
  const CapturedAttention c = capture_attention(folder, pad_batch({src}, folder.pad), pad_batch({dec_in}, folder.pad));
  std::vector<std::vector<HeadWeights>> out;
  for (const AttentionWeights& w : c.cross) {
    std::vector<HeadWeights> heads(static_cast<size_t>(w.heads));
    for (int64_t h = 0; h < w.heads; ++h)
      for (int64_t q = 0; q < w.queries; ++q) {
        std::vector<double> row(static_cast<size_t>(w.keys));
        for (int64_t k = 0; k < w.keys; ++k) row[static_cast<size_t>(k)] = w.at(0, h, q, k);
        heads[static_cast<size_t>(h)].push_back(std::move(row));
      }
    out.push_back(std::move(heads));
  }
  return out;
}

namespace {

// Head h of a captured [1, heads, rows, Dh] tensor as a float64 [rows, Dh] tensor.
Tensor head_rows(const Tensor& t, int64_t h) {
  ATTN_CHECK(t.defined() && t.dim() == 4 && t.size(0) == 1 && h < t.size(1), "attention steps",
             "the model did not capture its queries, keys and values");
  const std::vector<double> all = t.contiguous().to_vector<double>();
  const int64_t rows = t.size(2), dh = t.size(3);
  const auto begin = all.begin() + static_cast<std::ptrdiff_t>(h * rows * dh);
  return Tensor::from_vector<double>(std::vector<double>(begin, begin + rows * dh), {rows, dh});  // [rows, Dh]
}

}  // namespace

AttentionSteps attention_steps(const ModelFolder& folder, const std::vector<int64_t>& ids, int64_t head) {
  constexpr const char* kOp = "attention steps";
  const models::ModelConfig& c = folder.base->config();
  ATTN_CHECK(!ids.empty(), kOp, "the input has no tokens");
  ATTN_CHECK(c.positional != nn::PositionalKind::Alibi, kOp,
             "an ALiBi model adds a per-head bias to its scores, which the steps do not show");
  ATTN_CHECK(head >= 0 && head < c.n_heads, kOp, "head ", head, " is not one of the model's ", c.n_heads, " heads");
  NoGradGuard no_grad;
  AttentionSteps s;
  s.head = head;
  const nn::MultiHeadAttention* mha = nullptr;
  const AttentionWeights* used = nullptr;
  CapturedAttention captured;
  if (folder.model) {
    captured = capture_attention(folder, pad_batch({ids}, folder.pad), pad_batch({{folder.bos}}, folder.pad));
    mha = &folder.model->encoder().layer(0).self_attn();
    used = &captured.encoder_self[0];
    s.kind = AttentionKind::EncoderSelf;
  } else {
    captured = capture_self_attention(folder, pad_batch({ids}, folder.pad));
    if (auto* lm = dynamic_cast<models::DecoderOnlyModel*>(folder.base.get())) {
      mha = &lm->blocks().layer(0).self_attn();
      s.causal = true;
      s.window = c.sliding_window;
    } else {
      mha = &dynamic_cast<models::EncoderOnlyModel&>(*folder.base).blocks().layer(0).self_attn();
    }
    used = &captured.self[0];
    s.kind = AttentionKind::Self;
  }
  const int64_t kv_head = head / (mha->n_heads() / mha->n_kv_heads());  // grouped-query: the head's K/V group
  const Tensor q = head_rows(mha->last_query(), head);     // [T, Dh]
  const Tensor k = head_rows(mha->last_key(), kv_head);    // [T, Dh]
  const Tensor v = head_rows(mha->last_value(), kv_head);  // [T, Dh]
  s.queries = q.size(0), s.keys = k.size(0), s.head_dim = q.size(1);

  // The steps, in float64 with the library's ops.
  const Tensor scores = matmul(q, transpose(k, 0, 1));                                       // [T, T]  Q K^T
  const Tensor scaled = scale(scores, 1.0 / std::sqrt(static_cast<double>(s.head_dim)));     // [T, T]  / sqrt(Dh)
  std::vector<double> mask(static_cast<size_t>(s.queries * s.keys), 0.0), bias(mask.size(), 0.0);
  for (int64_t i = 0; i < s.queries; ++i)
    for (int64_t j = 0; j < s.keys; ++j) {
      const bool hidden = s.causal && (j > i || (s.window > 0 && j <= i - s.window));
      mask[static_cast<size_t>(i * s.keys + j)] = hidden ? 1.0 : 0.0;
      bias[static_cast<size_t>(i * s.keys + j)] = hidden ? -std::numeric_limits<double>::infinity() : 0.0;
    }
  const Tensor weights = softmax(add(scaled, Tensor::from_vector<double>(bias, {s.queries, s.keys})));  // [T, T]
  const Tensor out = matmul(weights, v);                                                     // [T, Dh]
  s.q = q.to_vector<double>(), s.k = k.to_vector<double>(), s.v = v.to_vector<double>();
  s.scores = scores.to_vector<double>(), s.scaled = scaled.to_vector<double>(), s.mask = std::move(mask);
  s.weights = weights.to_vector<double>(), s.out = out.to_vector<double>();
  for (int64_t i = 0; i < s.queries; ++i)
    for (int64_t j = 0; j < s.keys; ++j)
      s.max_weight_diff = std::max(s.max_weight_diff, std::fabs(s.weights[static_cast<size_t>(i * s.keys + j)] -
                                                                used->at(0, head, i, j)));
  return s;
}

}  // namespace attn::run
