// report/model_figures.cpp — see attn/report/model_figures.h. Every coordinate is computed
// here: blocks are rounded rectangles of a fixed width stacked bottom-up, arrows are lines with
// a small two-stroke head, and every label is text (no fonts or markers that a viewer may lack).
#include "attn/report/model_figures.h"

#include <algorithm>
#include <vector>

#include "attn/core/error.h"
#include "attn/report/svg.h"

namespace attn::report {

namespace {

constexpr const char* kArch = "report.architecture_figure";
constexpr const char* kHeads = "report.multihead_figure";

// Block colours by role (the paper's figure 1 palette, lightened).
constexpr const char* kEmbed = "#fde2c6";
constexpr const char* kAttn = "#fcd9a8";
constexpr const char* kCross = "#f6c48f";
constexpr const char* kNorm = "#f3f1b8";
constexpr const char* kFfn = "#c8e6f6";
constexpr const char* kOut = "#d9d2f0";
constexpr const char* kLine = "#444444";

std::string n(int64_t v) { return std::to_string(v); }

void arrow(Svg& s, double x1, double y1, double x2, double y2) {
  s.line(x1, y1, x2, y2, kLine, 1.4);
  // A head at (x2, y2) pointing along the segment (the diagrams only use axis-aligned arrows).
  const double h = 6;
  if (x1 == x2) {
    const double d = y2 < y1 ? h : -h;
    s.line(x2, y2, x2 - h * 0.7, y2 + d, kLine, 1.4);
    s.line(x2, y2, x2 + h * 0.7, y2 + d, kLine, 1.4);
  } else {
    const double d = x2 > x1 ? -h : h;
    s.line(x2, y2, x2 + d, y2 - h * 0.7, kLine, 1.4);
    s.line(x2, y2, x2 + d, y2 + h * 0.7, kLine, 1.4);
  }
}

void block(Svg& s, double x, double y, double w, double h, const char* fill, const std::string& title,
           const std::string& detail = {}) {
  s.rect(x, y, w, h, Paint{fill, "#555555", 1}, title + (detail.empty() ? "" : ": " + detail));
  TextStyle t;
  t.anchor = Anchor::Middle;
  t.size = 12;
  t.bold = true;
  const double mid = x + w / 2;
  if (detail.empty()) {
    s.text(mid, y + h / 2 + 4, title, t);
    return;
  }
  s.text(mid, y + h / 2 - 3, title, t);
  t.bold = false;
  t.size = 10.5;
  t.fill = "#333333";
  s.text(mid, y + h / 2 + 11, detail, t);
}

struct Sublayer {
  const char* fill;
  std::string title, detail;
};

// One stack: a frame holding its sublayers bottom-up, "N x" beside it; returns the frame's top.
// `x`, `bottom`: the frame's left edge and bottom; `cross_at`: set to the y of the sublayer
// titled "cross-attention" (for the arrow from the encoder).
double stack(Svg& s, double x, double bottom, double w, const std::string& name, int64_t layers,
             const std::vector<Sublayer>& subs, double* cross_at = nullptr) {
  const double bh = 36, gap = 10, pad = 12;
  const double h = pad * 2 + static_cast<double>(subs.size()) * bh + static_cast<double>(subs.size() - 1) * gap + 16;
  const double top = bottom - h;
  s.rect(x, top, w, h, Paint{"#f7f7f7", "#888888", 1.2}, name);
  TextStyle t;
  t.size = 12;
  t.bold = true;
  s.text(x + 8, top + 15, name, t);
  TextStyle nx;
  nx.size = 15;
  nx.bold = true;
  nx.anchor = Anchor::End;
  s.text(x - 8, top + h / 2 + 5, n(layers) + " \u00d7", nx);
  double y = bottom - pad - bh;
  for (size_t i = 0; i < subs.size(); ++i) {
    block(s, x + pad, y, w - 2 * pad, bh, subs[i].fill, subs[i].title, subs[i].detail);
    if (cross_at && subs[i].title == "cross-attention") *cross_at = y + bh / 2;
    if (i + 1 < subs.size()) arrow(s, x + w / 2, y, x + w / 2, y - gap);
    y -= bh + gap;
  }
  return top;
}

std::vector<Sublayer> layer_sublayers(const ArchitectureSpec& a, bool causal, bool cross) {
  const int64_t dk = a.d_model / a.heads;
  std::string heads = n(a.heads) + " heads, d_k = " + n(dk);
  if (a.kv_heads > 0 && a.kv_heads < a.heads) heads += ", " + n(a.kv_heads) + " K/V heads";
  if (a.positional == "rope" || a.positional == "alibi") heads += ", " + a.positional;
  const std::string norm = a.norm == "rms" ? "RMSNorm" : "LayerNorm";
  const std::string where = a.norm_first ? "pre-norm: x + f(norm(x))" : "post-norm: norm(x + f(x))";
  std::vector<Sublayer> subs;
  auto with_norm = [&](Sublayer sub) {
    if (a.norm_first) {
      subs.push_back({kNorm, norm, where});
      subs.push_back(std::move(sub));
    } else {
      subs.push_back(std::move(sub));
      subs.push_back({kNorm, "add & " + norm, where});
    }
  };
  with_norm({kAttn, causal ? "masked self-attention" : "self-attention", heads + (causal ? ", causal" : "")});
  if (cross) with_norm({kCross, "cross-attention", heads + ", K, V from the encoder"});
  with_norm({kFfn, "feed-forward", n(a.d_model) + " \u2192 " + n(a.d_ff) + " \u2192 " + n(a.d_model) + ", " + a.activation});
  return subs;
}

std::string embedding_detail(const ArchitectureSpec& a, int64_t vocab) {
  std::string d = n(vocab) + " \u00d7 " + n(a.d_model);
  if (a.scale_embeddings) d += ", \u00d7\u221a" + n(a.d_model);
  if (a.positional == "sinusoidal" || a.positional == "learned") d += " + " + a.positional + " positions";
  return d;
}

}  // namespace

std::string architecture_figure(const ArchitectureSpec& a) {
  ATTN_CHECK(a.family == "encoder_decoder" || a.family == "decoder_only" || a.family == "encoder_only", kArch,
             "unknown family '", a.family, "'");
  ATTN_CHECK(a.d_model > 0 && a.heads > 0 && a.d_ff > 0 && a.d_model % a.heads == 0, kArch,
             "D, heads and d_ff must be positive and D divisible by the heads, got ", a.d_model, ", ", a.heads, ", ",
             a.d_ff);
  const bool ed = a.family == "encoder_decoder";
  ATTN_CHECK((a.family == "decoder_only" || a.encoder_layers > 0) && (a.family == "encoder_only" || a.decoder_layers > 0),
             kArch, "the stacks need layers");
  Svg s;
  const double w = 300, left = 70, top_margin = 54, bh = 40;
  const double col2 = left + w + 110;
  const std::string norm = a.norm == "rms" ? "RMSNorm" : "LayerNorm";
  // Heights: embedding at the bottom, the stack, the final norm, the output block on top.
  const double width = ed ? col2 + w + 30 : left + w + 40;
  auto column = [&](double x, const std::string& name, int64_t layers, bool causal, bool cross, int64_t vocab,
                    const std::string& tokens, double bottom, double* cross_at) {
    TextStyle t;
    t.anchor = Anchor::Middle;
    t.size = 12;
    s.text(x + w / 2, bottom + 16, tokens, t);
    block(s, x, bottom - bh - 6, w, bh, kEmbed, "embedding", embedding_detail(a, vocab));
    arrow(s, x + w / 2, bottom + 4, x + w / 2, bottom - 6);
    const double stack_bottom = bottom - bh - 20;
    arrow(s, x + w / 2, bottom - bh - 6, x + w / 2, stack_bottom);
    double top = stack(s, x, stack_bottom, w, name, layers, layer_sublayers(a, causal, cross), cross_at);
    if (a.final_norm) {
      arrow(s, x + w / 2, top, x + w / 2, top - 14);
      block(s, x + 30, top - 14 - 30, w - 60, 30, kNorm, "final " + norm);
      top -= 44;
    }
    return top;
  };
  // Drawn upwards from this baseline, then shifted so that the top lands under the title.
  const double bottom = 1000;
  double top = 0;
  if (ed) {
    double cross_y = 0;
    const double enc_top = column(left, "encoder layer", a.encoder_layers, false, false, a.src_vocab,
                                  "source tokens (S)", bottom, nullptr);
    const double dec_top = column(col2, "decoder layer", a.decoder_layers, true, true, a.tgt_vocab,
                                  "<bos> + output so far (T)", bottom, &cross_y);
    // The encoder's output (memory) feeds every decoder layer's cross-attention.
    const double mx = left + w + 55;
    s.line(left + w / 2, enc_top, left + w / 2, enc_top - 16, kLine, 1.4);
    s.line(left + w / 2, enc_top - 16, mx, enc_top - 16, kLine, 1.4);
    s.line(mx, enc_top - 16, mx, cross_y, kLine, 1.4);
    arrow(s, mx, cross_y, col2 + 12, cross_y);
    TextStyle t;
    t.size = 10.5;
    t.fill = "#333333";
    s.text(left + w / 2 + 6, enc_top - 22, "memory [S, " + n(a.d_model) + "]", t);
    top = std::min(enc_top - 30, dec_top);
    const double out_y = dec_top - 20 - bh;
    arrow(s, col2 + w / 2, dec_top, col2 + w / 2, dec_top - 20);
    block(s, col2, out_y, w, bh, kOut, "linear + softmax",
          n(a.d_model) + " \u2192 " + n(a.tgt_vocab) + (a.tie_output ? ", tied to the embedding" : ""));
    top = std::min(top, out_y);
    if (a.share_embeddings) {
      TextStyle st;
      st.size = 10.5;
      st.anchor = Anchor::Middle;
      st.fill = "#555555";
      s.text((left + w + col2) / 2, bottom - bh / 2, "one table", st);
      s.line(left + w, bottom - bh / 2 - 6 + 4, col2, bottom - bh / 2 - 6 + 4, "#999999", 1, "4 3");
    }
  } else {
    const bool lm = a.family == "decoder_only";
    const double stack_top = column(left, lm ? "decoder-only block" : "encoder-only block",
                                    lm ? a.decoder_layers : a.encoder_layers, lm, false, a.src_vocab,
                                    lm ? "<bos> + prompt (T)" : "text with [MASK] (T)", bottom, nullptr);
    const double out_y = stack_top - 20 - bh;
    arrow(s, left + w / 2, stack_top, left + w / 2, stack_top - 20);
    block(s, left, out_y, w, bh, kOut, lm ? "linear + softmax: next token" : "linear + softmax: masked tokens",
          n(a.d_model) + " \u2192 " + n(a.src_vocab) + (a.tie_output ? ", tied to the embedding" : ""));
    top = out_y;
  }
  const double height = bottom + 30 - top + top_margin;
  Svg doc;
  TextStyle title;
  title.size = 15;
  title.bold = true;
  std::string heading = std::string(ed ? "Encoder-decoder" : a.family == "decoder_only" ? "Decoder-only" : "Encoder-only") +
                        " Transformer: D = " + n(a.d_model) + ", " + n(a.heads) + " heads, d_ff = " + n(a.d_ff);
  doc.text(16, 24, heading, title);
  TextStyle sub;
  sub.size = 11.5;
  sub.fill = "#444444";
  std::string line = ed ? n(a.encoder_layers) + " encoder + " + n(a.decoder_layers) + " decoder layers"
                        : n(a.family == "decoder_only" ? a.decoder_layers : a.encoder_layers) + " layers";
  line += std::string(", ") + (a.norm_first ? "pre-norm" : "post-norm (the paper)") + ", " + a.positional + " positions";
  if (a.parameters > 0) line += ", " + n(a.parameters) + " parameters";
  doc.text(16, 42, line, sub);
  doc.embed(s, 0, top_margin - top);
  return doc.document(width, height, heading);
}

std::string multihead_figure(const MultiHeadSpec& m) {
  ATTN_CHECK(m.tokens > 0 && m.d_model > 0 && m.heads > 0 && m.d_model % m.heads == 0, kHeads,
             "T, D and H must be positive and D divisible by H, got ", m.tokens, ", ", m.d_model, ", ", m.heads);
  const int64_t kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
  ATTN_CHECK(m.heads % kv == 0, kHeads, "the K/V heads must divide the heads, got ", kv, " and ", m.heads);
  const int64_t T = m.tokens, D = m.d_model, H = m.heads, dk = D / H;
  Svg s;
  const double top = 80, bw = 150, bh = 44;
  const double x0 = 16, x1 = 196, x2 = 410, x3 = 690, x4 = 950, x5 = 1140;
  const double hw = 220, aw = 210;  // head and per-head attention block widths
  auto shape = [](int64_t r, int64_t c) { return "[" + n(r) + ", " + n(c) + "]"; };
  TextStyle title;
  title.size = 15;
  title.bold = true;
  const std::string heading = m.title.empty() ? "Multi-head attention with this model's sizes: T = " + n(T) + ", D = " + n(D) +
                                                    ", H = " + n(H) + ", d_k = d_v = " + n(dk)
                                              : m.title;
  s.text(16, 24, heading, title);
  TextStyle sub;
  sub.size = 11.5;
  sub.fill = "#444444";
  s.text(16, 42, "MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W_O,  head_i = softmax(Q_i K_i^T / \u221ad_k) V_i", sub);
  // The heads: at most 8 drawn, the rest summarised.
  const int64_t shown = std::min<int64_t>(H, 8);
  const double hh = 36, hgap = 8;
  const double heads_h = static_cast<double>(shown) * hh + static_cast<double>(shown - 1) * hgap;
  const double rows_h = std::max(3 * bh + 2 * 22, heads_h);
  const double mid = top + rows_h / 2;
  const double hy0 = mid - heads_h / 2;
  // The three projections, centred on the same middle line.
  const double py0 = mid - (3 * bh + 2 * 22) / 2;
  block(s, x0, mid - bh / 2, bw, bh, kEmbed, "X", shape(T, D));
  const char* names[3] = {"Q = X W_Q", "K = X W_K", "V = X W_V"};
  const int64_t widths[3] = {D, kv * dk, kv * dk};
  const double bus = x2 - 24;  // the projections feed every head through one vertical line
  for (int i = 0; i < 3; ++i) {
    const double y = py0 + i * (bh + 22);
    s.line(x0 + bw, mid, x0 + bw + 12, mid, kLine, 1.4);
    s.line(x0 + bw + 12, mid, x0 + bw + 12, y + bh / 2, kLine, 1.4);
    arrow(s, x0 + bw + 12, y + bh / 2, x1, y + bh / 2);
    block(s, x1, y, bw + 20, bh, kAttn, names[i], "W " + shape(D, widths[i]) + " \u2192 " + shape(T, widths[i]));
    s.line(x1 + bw + 20, y + bh / 2, bus, y + bh / 2, kLine, 1.4);
  }
  s.line(bus, std::min(py0, hy0) + std::min(bh, hh) / 2, bus, std::max(py0 + 2 * (bh + 22), hy0 + heads_h - hh), kLine, 1.4);
  TextStyle label;
  label.size = 11;
  label.fill = "#333333";
  s.text(x2, top - 10, "split into " + n(H) + " heads of d_k = " + n(dk), label);
  s.text(x3, top - 10, "attention weights " + shape(T, T) + " per head", label);
  for (int64_t h = 0; h < shown; ++h) {
    const double y = hy0 + static_cast<double>(h) * (hh + hgap);
    const bool last = h == shown - 1 && shown < H;
    arrow(s, bus, y + hh / 2, x2, y + hh / 2);
    block(s, x2, y, hw, hh, kCross, last ? "... head " + n(H) : "head " + n(h + 1),
          "Q_i, K_i, V_i: " + shape(T, dk) + " each");
    arrow(s, x2 + hw, y + hh / 2, x3, y + hh / 2);
    block(s, x3, y, aw, hh, kCross, "softmax(Q_i K_i^T / \u221a" + n(dk) + ") V_i", shape(T, dk));
    s.line(x3 + aw, y + hh / 2, x4 - 14, y + hh / 2, kLine, 1.2);
  }
  if (kv < H) s.text(x2, hy0 + heads_h + 18, n(kv) + " K/V heads, each shared by " + n(H / kv) + " query heads", label);
  // Concat and W_O.
  s.line(x4 - 14, hy0 + hh / 2, x4 - 14, hy0 + heads_h - hh / 2, kLine, 1.2);
  arrow(s, x4 - 14, mid, x4, mid);
  block(s, x4, mid - bh / 2, bw, bh, kFfn, "concat", shape(T, H * dk));
  arrow(s, x4 + bw, mid, x5, mid);
  block(s, x5, mid - bh / 2, bw, bh, kOut, "\u00d7 W_O", shape(H * dk, D) + " \u2192 " + shape(T, D));
  const double height = top + rows_h + (kv < H ? 40 : 20);
  return s.document(x5 + bw + 16, height, heading);
}

}  // namespace attn::report
