// model_figures/model_figures.cpp — see attn/model_figures/model_figures.h.
#include "attn/model_figures/model_figures.h"

#include <utility>

#include "attn/core/error.h"
#include "attn/nn/feed_forward.h"
#include "attn/nn/norm.h"
#include "attn/nn/positional.h"
#include "attn/report/figures.h"

namespace attn::model_figures {

report::ArchitectureSpec architecture_spec(const models::ModelConfig& c, int64_t parameters) {
  report::ArchitectureSpec a;
  a.family = models::arch_name(c.arch);
  a.encoder_layers = c.arch == models::Arch::DecoderOnly ? 0 : c.n_encoder_layers;
  a.decoder_layers = c.arch == models::Arch::EncoderOnly ? 0 : c.n_decoder_layers;
  a.d_model = c.d_model;
  a.heads = c.n_heads;
  a.kv_heads = c.n_kv_heads;
  a.d_ff = c.d_ff;
  a.src_vocab = c.src_vocab_size;
  a.tgt_vocab = c.arch == models::Arch::EncoderDecoder ? c.tgt_vocab_size : c.src_vocab_size;
  a.norm = nn::norm_kind_name(c.norm);
  a.norm_first = c.norm_first;
  a.final_norm = c.final_norm;
  a.positional = nn::positional_kind_name(c.positional);
  a.activation = nn::activation_name(c.activation);
  a.share_embeddings = c.arch == models::Arch::EncoderDecoder && c.share_embeddings;
  a.tie_output = c.tie_output;
  a.scale_embeddings = c.scale_embeddings;
  a.parameters = parameters;
  return a;
}

std::string architecture_svg(const run::ModelFolder& folder) {
  return report::architecture_figure(architecture_spec(folder.base->config(), folder.base->num_parameters()));
}

std::string multihead_svg(const models::ModelConfig& c, int64_t tokens) {
  report::MultiHeadSpec m;
  m.tokens = tokens;
  m.d_model = c.d_model;
  m.heads = c.n_heads;
  m.kv_heads = c.n_kv_heads;
  return report::multihead_figure(m);
}

StepsFigure attention_steps_svg(const run::ModelFolder& folder, std::vector<int64_t> ids, std::vector<std::string> labels,
                                int64_t head) {
  ATTN_CHECK(labels.empty() || labels.size() == ids.size(), "attention steps", "expected ", ids.size(),
             " token labels, got ", labels.size());
  StepsFigure out;
  if (static_cast<int64_t>(ids.size()) > kStepsMaxTokens) {
    out.cut = true;
    ids.resize(static_cast<size_t>(kStepsMaxTokens));
    if (!labels.empty()) labels.resize(static_cast<size_t>(kStepsMaxTokens));
  }
  out.steps = run::attention_steps(folder, ids, head);
  const run::AttentionSteps& s = out.steps;
  report::AttentionStepsFigure f;
  f.q = report::Matrix(s.q, s.queries, s.head_dim);
  f.k = report::Matrix(s.k, s.keys, s.head_dim);
  f.v = report::Matrix(s.v, s.keys, s.head_dim);
  f.scores = report::Matrix(s.scores, s.queries, s.keys);
  f.scaled = report::Matrix(s.scaled, s.queries, s.keys);
  if (s.causal) f.mask = report::Matrix(s.mask, s.queries, s.keys);
  f.weights = report::Matrix(s.weights, s.queries, s.keys);
  f.out = report::Matrix(s.out, s.queries, s.head_dim);
  f.query_labels = labels;
  f.key_labels = labels;
  f.title = str_cat(s.kind == run::AttentionKind::EncoderSelf ? "Encoder" : "Layer 1", " self-attention, ",
                    s.kind == run::AttentionKind::EncoderSelf ? "layer 1, " : "", "head ", head + 1,
                    ": softmax(Q K^T / sqrt(d_k)) V step by step (d_k = ", s.head_dim, ")");
  out.svg = report::attention_steps_figure(f);
  return out;
}

}  // namespace attn::model_figures
