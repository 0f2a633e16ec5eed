// run/attention.cpp — see attn/run/attention.h. The models name their attention modules as
// their parameters are named ("decoder.layers.3.multihead_attn", "layers.0.self_attn"); this
// file is the one place those names become typed stacks and layers.
#include "attn/run/attention.h"

#include <algorithm>
#include <functional>
#include <string>
#include <utility>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_only.h"
#include "attn/run/token_codec.h"

namespace attn::run {

namespace {

// Turns capture off again however the pass ends.
struct CaptureScope {
  models::Model& model;
  explicit CaptureScope(models::Model& m) : model(m) { model.set_capture_attention(true); }
  ~CaptureScope() { model.set_capture_attention(false); }
};

// "decoder.layers.3.multihead_attn" -> (Cross, 3), "layers.0.self_attn" -> (Self, 0); false for
// a name of no attention module this layer knows.
bool parse_attention_name(const std::string& name, AttentionKind* kind, int64_t* layer) {
  std::string rest = name;
  int stack = 0;  // 0 single stack, 1 encoder, 2 decoder
  for (const auto& [prefix, s] : {std::pair<std::string, int>{"encoder.", 1}, {"decoder.", 2}})
    if (rest.rfind(prefix, 0) == 0) rest = rest.substr(prefix.size()), stack = s;
  const std::string layers = "layers.";
  if (rest.rfind(layers, 0) != 0) return false;
  rest = rest.substr(layers.size());
  const size_t dot = rest.find('.');
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (dot == std::string::npos || dot == 0) return false;
  if (!std::all_of(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(dot), digit)) return false;
  *layer = std::stoll(rest.substr(0, dot));
  const std::string module = rest.substr(dot + 1);
  if (module == "self_attn")
    *kind = stack == 0 ? AttentionKind::Self : stack == 1 ? AttentionKind::EncoderSelf : AttentionKind::DecoderSelf;
  else if (module == "multihead_attn" && stack == 2)
    *kind = AttentionKind::Cross;
  else
    return false;
  return true;
}

std::vector<AttentionWeights>& stack_of(CapturedAttention& c, AttentionKind kind) {
  switch (kind) {
    case AttentionKind::EncoderSelf: return c.encoder_self;
    case AttentionKind::DecoderSelf: return c.decoder_self;
    case AttentionKind::Cross: return c.cross;
    case AttentionKind::Self: break;
  }
  return c.self;
}

// The weights the pass `run` leaves in `model`'s attention modules, typed.
CapturedAttention capture(models::Model& model, const std::function<void()>& run) {
  NoGradGuard no_grad;
  std::vector<std::pair<std::string, Tensor>> caps;
  {
    CaptureScope scope(model);
    run();
    caps = model.captured_attention();
  }
  CapturedAttention out;
  for (const auto& [name, t] : caps) {
    AttentionKind kind{};
    int64_t layer = 0;
    if (!parse_attention_name(name, &kind, &layer)) continue;
    std::vector<AttentionWeights>& list = stack_of(out, kind);
    if (static_cast<int64_t>(list.size()) <= layer) list.resize(static_cast<size_t>(layer + 1));
    AttentionWeights& w = list[static_cast<size_t>(layer)];
    w.kind = kind;
    w.layer = layer;
    w.values = t.to_vector<double>();
    w.batch = t.size(0), w.heads = t.size(1), w.queries = t.size(2), w.keys = t.size(3);
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
