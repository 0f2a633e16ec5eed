// attn/run_report/figures.h — the figures of a run report, one function each, from typed inputs
// (the run's metrics, the model's width, captured attention by stack and layer, token labels)
// to the SVG with its file name, title and caption. Pure: nothing is read or written here.
// Not here: drawing primitives (report/figures.h) or which figures a report holds (run_report.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/models/config.h"
#include "attn/nn/positional.h"
#include "attn/report/matrix.h"
#include "attn/run/attention.h"
#include "attn/run/model_folder.h"
#include "attn/run_report/run_data.h"

namespace attn::run_report {

// One figure of the report: OUT/figures/<file>, with its title and caption in report.html.
struct Figure {
  std::string file;
  std::string svg;
  std::string title;
  std::string caption;
};

// Rows [0, rows) and columns [0, cols) of batch row b of `w` for head h, or the head mean when h < 0.
report::Matrix head_matrix(const run::AttentionWeights& w, int64_t b, int64_t h, int64_t rows, int64_t cols);
// The t x t causal mask: 1 above the diagonal (masked out), 0 elsewhere.
report::Matrix causal_mask(int64_t t);
// The dimensions the PE figure draws as curves: 0, 4, 16, 32 where they exist, else a spread
// over the available (even) dimensions of `d`.
std::vector<int64_t> pe_dims(int64_t d);

// Seed 001's fig 1: this model's architecture from its configuration (model_figures/).
Figure architecture_figure(const models::ModelConfig& config, int64_t parameters);
// Seed 001's fig 4: the multi-head split / concat / W_O flow with this model's sizes, for the
// example's T tokens.
Figure multi_head_figure(const models::ModelConfig& config, int64_t tokens);
// Seed 001's fig 3: the scaled dot-product steps on the model's own queries, keys and values
// (its first self-attention layer, head 1) over `ids` (an encoder-decoder's source, else the
// ids as the model reads them) labelled `labels`; the caption reports the check of the
// recomputed weights against the model's (model_figures/model_figures.h).
Figure attention_steps_figure(const run::ModelFolder& folder, const std::vector<int64_t>& ids,
                              const std::vector<std::string>& labels);
// 01_training_curve.svg: loss and validation accuracy per epoch; the caption says what the
// accuracy of `arch`'s validation measures.
Figure training_curve_figure(const RunMetrics& metrics, models::Arch arch);
// 02_positional_encoding.svg: the sinusoidal table (§3.5) for 50 positions of width d_model
// (at most 128 dimensions shown); the caption names the model's own `positional` kind.
Figure positional_encoding_figure(int64_t d_model, nn::PositionalKind positional);
// 03_causal_mask.svg: the causal mask over the decoder's input and the first decoder layer's
// self-attention (head mean), at most 16 positions; `in_labels` label BOS + the output.
Figure decoder_causal_mask_figure(const run::AttentionWeights& first_decoder_self,
                                  const std::vector<std::string>& in_labels);
// 04_attention_example.svg: the last encoder layer's self-attention and the last decoder
// layer's cross-attention (head means) for `source` -> `output`.
Figure attention_example_figure(const run::CapturedAttention& attention, const std::vector<std::string>& src_labels,
                                const std::vector<std::string>& pred_labels, const std::string& source,
                                const std::string& output);
// 05_cross_attention_grid.svg: every decoder layer x head of the cross-attention, scale [0, 1].
Figure cross_attention_grid_figure(const std::vector<run::AttentionWeights>& cross,
                                   const std::vector<std::string>& src_labels,
                                   const std::vector<std::string>& pred_labels);
// 06_encoder_self_attention_grid.svg: every encoder layer x head, scale [0, the largest weight].
Figure encoder_self_attention_grid_figure(const std::vector<run::AttentionWeights>& encoder_self,
                                          const std::vector<std::string>& src_labels);

// Single-stack models; `labels` label the first positions drawn (their count is the size drawn).
// 02_causal_mask.svg: a decoder-only model's causal mask and first block's self-attention.
Figure lm_causal_mask_figure(const run::AttentionWeights& first_self, const std::vector<std::string>& labels,
                             int64_t total_positions);
// 02_self_attention.svg: an encoder-only model's last block's self-attention over `text`.
Figure bidirectional_self_attention_figure(const std::vector<run::AttentionWeights>& self,
                                           const std::vector<std::string>& labels, const std::string& text);
// 03_self_attention_grid.svg: every block x head of a single-stack model, scale [0, 1].
Figure self_attention_grid_figure(const std::vector<run::AttentionWeights>& self,
                                  const std::vector<std::string>& labels);

}  // namespace attn::run_report
