// attn/report/model_figures.h — seed 001's diagrams drawn for one model, from the numbers of
// its configuration (no generic pictures): fig 1, the architecture (its stacks, layer counts,
// D, heads, d_ff, norm placement, positions, embeddings and output tying), and fig 4, the
// multi-head split / attend / concat / W_O flow with its real dimensions for T tokens.
// The specs are plain numbers and names, so this layer knows nothing of models (run_report and
// serve fill them from a ModelConfig).
// Not here: heatmaps and line charts (figures.h), the report page (html_report.h).
#pragma once

#include <cstdint>
#include <string>

namespace attn::report {

struct ArchitectureSpec {
  std::string family = "encoder_decoder";  // encoder_decoder, decoder_only or encoder_only
  int64_t encoder_layers = 0, decoder_layers = 0;
  int64_t d_model = 0, heads = 0, kv_heads = 0, d_ff = 0;  // kv_heads: 0 or heads for multi-head
  int64_t src_vocab = 0, tgt_vocab = 0;
  std::string norm = "layer";            // layer or rms
  bool norm_first = false;               // pre-norm (true) or the paper's post-norm
  bool final_norm = true;                // a norm after each stack
  std::string positional = "sinusoidal"; // sinusoidal, learned, rope, alibi, none
  std::string activation = "relu";
  bool share_embeddings = true, tie_output = true, scale_embeddings = true;
  int64_t parameters = 0;                // 0: not shown
};

// The model as stacked blocks, bottom (tokens) to top (output distribution). An unknown family
// or non-positive sizes are an attn::Error.
std::string architecture_figure(const ArchitectureSpec& spec);

struct MultiHeadSpec {
  int64_t tokens = 0;    // T, the example's length
  int64_t d_model = 0;   // D
  int64_t heads = 0;     // H
  int64_t kv_heads = 0;  // 0 or H: multi-head; fewer: grouped-query (K and V have kv_heads heads)
  std::string title;     // empty: a default naming T, D and H
};

// X [T, D] -> Q, K, V projections -> H heads of [T, D/H] -> attention per head -> concat
// [T, D] -> W_O -> [T, D], every arrow labelled with its shape. D must divide by H.
std::string multihead_figure(const MultiHeadSpec& spec);

}  // namespace attn::report
