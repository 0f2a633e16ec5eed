// run/attention.cpp — see attn/run/attention.h. The weights are read from the model's own
// stacks (encoder and decoder layers, or a single stack's blocks), layer by layer, so they are
// typed by construction: no module name is parsed.
#include "attn/run/attention.h"

#include <algorithm>
#include <functional>
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

}  // namespace attn::run
