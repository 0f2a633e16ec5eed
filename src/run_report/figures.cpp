// run_report/figures.cpp — see attn/run_report/figures.h. Titles and captions are part of the
// report's bytes: a change here changes every report.
#include "attn/run_report/figures.h"

#include <algorithm>
#include <cstdio>

#include "attn/core/error.h"
#include "attn/io/run_files.h"
#include "attn/nn/feed_forward.h"
#include "attn/nn/norm.h"
#include "attn/nn/positional.h"
#include "attn/model_figures/model_figures.h"
#include "attn/report/model_figures.h"

namespace attn::run_report {

using report::Matrix;

namespace {

std::vector<std::string> layer_titles(size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(str_cat("Layer ", i + 1));
  return out;
}

std::vector<std::string> head_titles(int64_t n) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(str_cat("Head ", i + 1));
  return out;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

// The heads of a stack's layers (they all have the same).
int64_t heads_of(const std::vector<run::AttentionWeights>& stack) { return stack.empty() ? 0 : stack.front().heads; }

// Every layer (rows) x head (columns) of `stack`, rows [0, rows) and columns [0, cols) each.
std::vector<std::vector<Matrix>> layer_head_grid(const std::vector<run::AttentionWeights>& stack, int64_t rows,
                                                 int64_t cols) {
  std::vector<std::vector<Matrix>> grid(stack.size());
  for (size_t l = 0; l < stack.size(); ++l)
    for (int64_t h = 0; h < stack[l].heads; ++h) grid[l].push_back(head_matrix(stack[l], 0, h, rows, cols));
  return grid;
}

}  // namespace

Matrix head_matrix(const run::AttentionWeights& w, int64_t b, int64_t h, int64_t rows, int64_t cols) {
  std::vector<double> out(static_cast<size_t>(rows * cols), 0.0);
  const int64_t h0 = h < 0 ? 0 : h, h1 = h < 0 ? w.heads : h + 1;
  for (int64_t hh = h0; hh < h1; ++hh)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(r * cols + c)] += w.at(b, hh, r, c);
  const double n = static_cast<double>(h1 - h0);
  for (double& x : out) x /= n;
  return Matrix(std::move(out), rows, cols);
}

Matrix causal_mask(int64_t t) {
  std::vector<double> mask(static_cast<size_t>(t * t), 0.0);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = i + 1; j < t; ++j) mask[static_cast<size_t>(i * t + j)] = 1.0;
  return Matrix(std::move(mask), t, t);
}

std::vector<int64_t> pe_dims(int64_t d) {
  std::vector<int64_t> dims;
  for (int64_t k : {0, 4, 16, 32})
    if (k < d) dims.push_back(k);
  if (dims.size() < 3) {
    dims = {0};
    if (d > 1) dims.push_back(1);
    if (d > 4) dims.push_back((d / 4) * 2 - ((d / 4) * 2 >= d ? 2 : 0));
    if (d > 2) dims.push_back(d - 2);
    std::sort(dims.begin(), dims.end());
    dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  }
  return dims;
}

Figure architecture_figure(const models::ModelConfig& c, int64_t parameters) {
  return {"architecture.svg", report::architecture_figure(model_figures::architecture_spec(c, parameters)), "This model's architecture",
          "Seed 001's figure 1 drawn from this run's config.json: the stacks and their layer counts, "
          "the sublayers with their sizes, where the norms sit, the positions and the embeddings."};
}

Figure multi_head_figure(const models::ModelConfig& c, int64_t tokens) {
  return {"multi_head.svg", model_figures::multihead_svg(c, tokens), "Multi-head attention with this model's sizes",
          str_cat("Seed 001's figure 4 with this model's dimensions for the example's ", tokens,
                  " tokens: Q, K and V projected, split into heads, attended per head, concatenated and "
                  "multiplied by W_O.")};
}

Figure attention_steps_figure(const run::ModelFolder& folder, const std::vector<int64_t>& ids,
                              const std::vector<std::string>& labels) {
  const model_figures::StepsFigure f = model_figures::attention_steps_svg(folder, ids, labels);
  const run::AttentionSteps& s = f.steps;
  const bool encoder = s.kind == run::AttentionKind::EncoderSelf;
  char diff[32];
  std::snprintf(diff, sizeof diff, "%.1e", s.max_weight_diff);
  return {"attention_steps.svg", f.svg, "Scaled dot-product attention on this model's own numbers",
          str_cat("Seed 001's figure 3 on the model itself: the queries, keys and values of head 1 of the ",
                  encoder ? "encoder's first layer" : "first layer", " for the example's ",
                  f.cut ? str_cat("first ", s.queries, " tokens (a pass over them alone)") : std::string("tokens"),
                  ", then Q K^T, the division by sqrt(d_k) = sqrt(", s.head_dim, ")",
                  s.causal ? ", the causal mask" : "", ", the softmax of each row and the product with V, each "
                  "recomputed in float64 with the library's ops. The softmax step equals the weights the model "
                  "used in its own pass to ", diff, ".")};
}

Figure training_curve_figure(const RunMetrics& metrics, models::Arch arch) {
  std::string accuracy;
  switch (arch) {
    case models::Arch::EncoderDecoder:
      accuracy = "validation token / exact-sequence accuracy under greedy decoding (right)";
      break;
    case models::Arch::DecoderOnly:
      accuracy = "validation accuracy (right: the argmax of the next-token distribution, teacher-forced)";
      break;
    case models::Arch::EncoderOnly:
      accuracy = "validation accuracy (right: the argmax at the masked positions, with the same masks every epoch)";
      break;
  }
  return {"01_training_curve.svg", report::training_curve_figure(metrics.history), "Training curve",
          str_cat("Training and validation loss (left) and ", accuracy, " per epoch, from ", io::kMetricsFileName,
                  " (", metrics.rows.size(), " epochs).")};
}

Figure positional_encoding_figure(int64_t d_model, nn::PositionalKind positional) {
  const int64_t positions = 50, dims = std::min<int64_t>(d_model, 128);
  const Tensor pe = nn::sinusoidal_table(positions, d_model, DType::F64);  // [50, D]
  std::vector<double> values = pe.slice(1, 0, dims).to_vector<double>();
  const std::vector<int64_t> curve_dims = pe_dims(dims);
  std::vector<std::string> dim_names;
  for (int64_t d : curve_dims) dim_names.push_back(std::to_string(d));
  return {"02_positional_encoding.svg",
          report::positional_encoding_figure(Matrix(std::move(values), positions, dims), curve_dims),
          "Sinusoidal positional encoding",
          str_cat("PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(p / 10000^(2i/D)) for D = ", d_model,
                  ", positions 0-49", dims < d_model ? str_cat(", the first ", dims, " dimensions") : std::string(),
                  " (paper §3.5); right: dimensions ", join(dim_names, ", "),
                  " across positions (low dimensions oscillate fast, high ones slowly). This model uses ",
                  nn::positional_kind_name(positional), " positions.")};
}

Figure decoder_causal_mask_figure(const run::AttentionWeights& first_decoder_self,
                                  const std::vector<std::string>& in_labels) {
  const int64_t T = static_cast<int64_t>(in_labels.size());
  const int64_t t = std::min<int64_t>(T, 16);
  report::MaskFigureOptions mo;
  mo.title = "Causal mask and decoder self-attention weights (layer 1, mean of heads)";
  mo.labels.assign(in_labels.begin(), in_labels.begin() + t);
  return {"03_causal_mask.svg",
          report::mask_figure(causal_mask(t), head_matrix(first_decoder_self, 0, -1, t, t), mo),
          "Causal mask and its softmax weights",
          str_cat("Left: the decoder's causal mask over its input (BOS + the greedy output",
                  t < T ? ", first 16 positions" : "",
                  "); 1 = masked out (PyTorch's convention, -inf added to the score), 0 = allowed (paper §3.2.3). "
                  "Right: the softmax weights of the trained decoder's first self-attention layer, averaged over its ",
                  first_decoder_self.heads, " heads: every weight above the diagonal is exactly 0 and every row sums to 1.")};
}

Figure attention_example_figure(const run::CapturedAttention& attention, const std::vector<std::string>& src_labels,
                                const std::vector<std::string>& pred_labels, const std::string& source,
                                const std::string& output) {
  const int64_t S = static_cast<int64_t>(src_labels.size());
  const int64_t n_pred = static_cast<int64_t>(pred_labels.size());
  const int64_t H = heads_of(attention.cross);
  report::HeatmapPanel enc, cross;
  enc.matrix = head_matrix(attention.encoder_self.back(), 0, -1, S, S);
  enc.options.title = str_cat("Encoder self-attention, layer ", attention.encoder_self.size());
  enc.options.row_labels = src_labels;
  enc.options.col_labels = src_labels;
  enc.options.x_title = "key (source token)";
  enc.options.y_title = "query (source token)";
  enc.options.vmin = 0.0;  // up to the largest weight: encoder attention is often diffuse
  enc.options.colorbar_title = "weight";
  cross.matrix = head_matrix(attention.cross.back(), 0, -1, n_pred, S);
  cross.options.title = str_cat("Decoder cross-attention, layer ", attention.cross.size());
  cross.options.row_labels = pred_labels;
  cross.options.col_labels = src_labels;
  cross.options.x_title = "source token";
  cross.options.y_title = "output token (predicted)";
  cross.options.vmin = 0.0;
  cross.options.vmax = 1.0;
  cross.options.colorbar_title = "weight";
  return {"04_attention_example.svg",
          report::heatmap_row({enc, cross}, str_cat("Attention for ", source, " -> ", output, " (mean of ", H, " heads)")),
          "Encoder self-attention and decoder cross-attention",
          str_cat("For the source ", source, " and the model's greedy output ", output,
                  ". Left: each source position attends over the source (last encoder layer). Right: the row of "
                  "each output token is the attention of the decoder position that predicted it, over the source "
                  "(last decoder layer). Both are averaged over heads; each row sums to 1.")};
}

Figure cross_attention_grid_figure(const std::vector<run::AttentionWeights>& cross,
                                   const std::vector<std::string>& src_labels,
                                   const std::vector<std::string>& pred_labels) {
  report::HeatmapGridOptions go;
  go.title = "Decoder cross-attention by layer and head";
  go.row_titles = layer_titles(cross.size());
  go.col_titles = head_titles(heads_of(cross));
  go.row_labels = pred_labels;
  go.col_labels = src_labels;
  go.x_title = "source token";
  go.y_title = "output token";
  go.vmin = 0.0;
  go.vmax = 1.0;
  go.colorbar_title = "weight";
  const auto grid =
      layer_head_grid(cross, static_cast<int64_t>(pred_labels.size()), static_cast<int64_t>(src_labels.size()));
  return {"05_cross_attention_grid.svg", report::heatmap_grid(grid, go), "Decoder cross-attention, layer x head",
          "Every decoder layer (rows) and head (columns) for the same example: which source positions each head "
          "reads while predicting each output token. One colour scale for all maps."};
}

Figure encoder_self_attention_grid_figure(const std::vector<run::AttentionWeights>& encoder_self,
                                          const std::vector<std::string>& src_labels) {
  const int64_t S = static_cast<int64_t>(src_labels.size());
  report::HeatmapGridOptions go;
  go.title = "Encoder self-attention by layer and head";
  go.row_titles = layer_titles(encoder_self.size());
  go.col_titles = head_titles(heads_of(encoder_self));
  go.row_labels = src_labels;
  go.col_labels = src_labels;
  go.x_title = "key";
  go.y_title = "query";
  go.vmin = 0.0;
  go.colorbar_title = "weight";
  return {"06_encoder_self_attention_grid.svg", report::heatmap_grid(layer_head_grid(encoder_self, S, S), go),
          "Encoder self-attention, layer x head",
          "Every encoder layer (rows) and head (columns) for the same example, on one colour scale from 0 to the "
          "largest weight."};
}

Figure lm_causal_mask_figure(const run::AttentionWeights& first_self, const std::vector<std::string>& labels,
                             int64_t total_positions) {
  const int64_t t = static_cast<int64_t>(labels.size());
  report::MaskFigureOptions mo;
  mo.title = "Causal mask and self-attention weights (layer 1, mean of heads)";
  mo.labels = labels;
  return {"02_causal_mask.svg", report::mask_figure(causal_mask(t), head_matrix(first_self, 0, -1, t, t), mo),
          "Causal mask and its softmax weights",
          str_cat("Left: the causal mask over <bos> + prompt + greedy continuation",
                  t < total_positions ? " (first 24 positions)" : "",
                  "; 1 = masked out. Right: the first block's self-attention weights, averaged over its ",
                  first_self.heads, " heads: every weight above the diagonal is 0 and every row sums to 1.")};
}

Figure bidirectional_self_attention_figure(const std::vector<run::AttentionWeights>& self,
                                           const std::vector<std::string>& labels, const std::string& text) {
  const int64_t t = static_cast<int64_t>(labels.size());
  report::HeatmapOptions ho;
  ho.title = str_cat("Self-attention, layer ", self.size(), " (mean of heads)");
  ho.row_labels = labels;
  ho.col_labels = labels;
  ho.x_title = "key";
  ho.y_title = "query";
  ho.vmin = 0.0;
  ho.colorbar_title = "weight";
  return {"02_self_attention.svg", report::heatmap(head_matrix(self.back(), 0, -1, t, t), ho),
          "Bidirectional self-attention",
          str_cat("The last block's self-attention over ", text,
                  ", averaged over heads: every position (the masks included) reads the whole text.")};
}

Figure self_attention_grid_figure(const std::vector<run::AttentionWeights>& self,
                                  const std::vector<std::string>& labels) {
  const int64_t t = static_cast<int64_t>(labels.size());
  report::HeatmapGridOptions go;
  go.title = "Self-attention by layer and head";
  go.row_titles = layer_titles(self.size());
  go.col_titles = head_titles(heads_of(self));
  go.row_labels = labels;
  go.col_labels = labels;
  go.x_title = "key";
  go.y_title = "query";
  go.vmin = 0.0;
  go.vmax = 1.0;
  go.colorbar_title = "weight";
  return {"03_self_attention_grid.svg", report::heatmap_grid(layer_head_grid(self, t, t), go),
          "Self-attention, layer x head",
          "Every block (rows) and head (columns) for the same example, on one colour scale [0, 1]."};
}

}  // namespace attn::run_report
