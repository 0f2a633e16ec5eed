// attn/run_report/run_report.h — the figures of seed 001 and report.html for a run folder
// (written by `attn train`) or any model folder: training curve, sinusoidal PE (§3.5), the
// causal mask with learned decoder self-attention weights (§3.2.3), encoder self- and decoder
// cross-attention for one example, layer x head grids, and for reversal tasks the anti-diagonal
// score. Decoder-only and encoder-only folders get the training curve and the self-attention of
// one example (a prompt and its greedy continuation, or a text with [MASK]).
// Deterministic: the same folder and options give the same bytes. Not here: any figure that
// needs training, or flags (the command line's).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attn/models/config.h"

namespace attn::run_report {

struct RunReportOptions {
  std::string out_dir{};             // where report.html and figures/ go; empty: the run folder
  // The example's source (a decoder-only model's prompt, an encoder-only model's text with
  // [MASK]); default: the first validation example (the first half of the first text line, or
  // the line with its middle token masked).
  std::optional<std::string> src{};
  bool src_ids = false;              // src holds space-separated token ids instead of text
  int64_t n_samples = 8;             // sample translations listed in the report
  int64_t n_score_examples = 64;     // validation examples the mean anti-diagonal score averages
  std::optional<int64_t> max_len{};  // greedy limit in generated tokens; default source length + 50
  std::string command = "report";    // names the caller in error messages
};

struct RunReportResult {
  std::string report_path;                // OUT/report.html
  std::vector<std::string> figure_paths;  // OUT/figures/*.svg, in report order
  std::string example_source;             // the example as text (or ids)
  std::string example_output;             // its greedy translation
  // Anti-diagonal score of the example's decoder cross-attention, head average, per decoder
  // layer (empty when the output is empty), and its mean over validation examples for the
  // last layer (reversal tasks with a validation set only).
  std::vector<double> anti_diagonal_per_layer;
  std::optional<double> anti_diagonal_mean;
  bool reversal_task = false;  // train_config.json names the reverse task
  models::Arch arch = models::Arch::EncoderDecoder;  // the model's family
};

// Loads the model folder `run_dir` (config.json, model.safetensors; vocab.json,
// train_config.json and metrics.jsonl when present), greedy-decodes the example with attention
// capture, writes OUT/figures/*.svg and OUT/report.html (each file atomically) and returns
// what it wrote. Errors (missing folder, bad --src, no example to show) are attn::Error.
RunReportResult write_run_report(const std::string& run_dir, const RunReportOptions& options = {});

}  // namespace attn::run_report
