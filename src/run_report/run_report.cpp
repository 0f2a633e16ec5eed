// run_report/run_report.cpp — see attn/run_report/run_report.h: reads the run folder, decodes
// one example with attention capture on, writes the figures of figures.h and report.html.
// Attention for the figures comes from one teacher-forced pass over the model's own greedy
// output (BOS + output), which gives exactly the weights the decoder used while generating.
// Deliberately no timing, no timestamps and no absolute paths beyond those given.
#include "attn/run_report/run_report.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "attn/core/error.h"
#include "attn/io/run_files.h"
#include "attn/models/checkpoint.h"
#include "attn/report/attention_stats.h"
#include "attn/report/html_report.h"
#include "attn/run/attention.h"
#include "attn/run/fill_mask.h"
#include "attn/run/generate.h"
#include "attn/run/model_folder.h"
#include "attn/run/token_codec.h"
#include "attn/run/translate.h"
#include "attn/run_report/figures.h"
#include "attn/run_report/run_data.h"
#include "attn/train/run_record.h"

namespace attn::run_report {

namespace fs = std::filesystem;

namespace {

std::string fixed(double v, int decimals = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

// Writes each figure as OUT/figures/<file> (the folder made on construction) and records it
// for report.html and the result.
class FigureWriter {
 public:
  FigureWriter(std::string out_dir, std::vector<std::string>* paths) : out_dir_(std::move(out_dir)), paths_(paths) {
    fs::create_directories(fs::path(out_dir_) / "figures");
  }
  void add(const Figure& f) {
    const std::string rel = "figures/" + f.file;
    const std::string path = (fs::path(out_dir_) / rel).string();
    report::save_text_file(path, f.svg);
    refs_.push_back({f.title, rel, f.caption});
    paths_->push_back(path);
  }
  const std::vector<report::FigureRef>& refs() const { return refs_; }

 private:
  std::string out_dir_;
  std::vector<std::string>* paths_;
  std::vector<report::FigureRef> refs_;
};

report::TextSection notes_section(const std::string& run_dir) {
  return {"Notes", str_cat("No ", io::kMetricsFileName, " in ", run_dir, ": no training curve."), false};
}

// Writes OUT/report.html from the folder's config, metrics, figures and sections.
std::string write_html(const run::ModelFolder& f, const std::string& run_dir, const std::string& out_dir,
                       const RunMetrics& metrics, const FigureWriter& fig, std::vector<report::TextSection> sections) {
  report::ReportInput in;
  in.title = report_title(run_dir);
  in.config = config_table(f);
  in.metrics = metrics.rows;
  in.figures = fig.refs();
  in.sections = std::move(sections);
  if (!metrics.present) in.sections.push_back(notes_section(run_dir));
  const std::string path = (fs::path(out_dir) / "report.html").string();
  report::write_report(path, in);
  return path;
}

// ---- decoder-only and encoder-only models -------------------------------------------------

RunReportResult write_single_stack_report(const std::string& run_dir, const RunReportOptions& options,
                                          models::Arch arch) {
  const char* cmd = options.command.c_str();
  const bool lm = arch == models::Arch::DecoderOnly;
  const run::ModelFolder f = run::open_model_folder(run_dir, cmd, true, arch);
  const std::string out_dir = options.out_dir.empty() ? run_dir : options.out_dir;
  const io::Vocab& vocab = *f.vocab;
  RunReportResult result;
  run::TokenCodec codec;
  codec.vocab = options.src_ids ? nullptr : &vocab;
  codec.vocab_size = f.tgt_vocab_size;
  codec.pad = f.pad;
  codec.command = options.command;
  codec.source = "--src";

  // The example: a prompt and its greedy continuation, or a text with masks and their fills.
  std::string origin;
  std::vector<int64_t> input;  // the prompt, or the masked text
  if (options.src) {
    input = options.src_ids || lm ? codec.read(*options.src, 0, lm ? "prompt" : "text")
                                  : run::read_masked_text(*options.src, vocab, options.command, "--src");
  } else if (std::vector<int64_t> prompt = lm ? first_pair_prompt(f, &origin) : std::vector<int64_t>{};
             !prompt.empty()) {
    input = std::move(prompt);  // a fine-tuning run: its first prompt, as it was trained
  } else {
    std::vector<int64_t> line = first_text_line(f, &origin);
    ATTN_CHECK(!line.empty(), cmd, "'", run_dir,
               "' records no readable training or validation text to take an example from; give one with --src");
    if (lm) {
      line.resize(line.size() / 2);  // the first half as the prompt
    } else {
      line[line.size() / 2] = vocab.mask_id();
    }
    input = line;
  }
  std::vector<int64_t> shown;  // what the figures show: <bos> + prompt + continuation, or the masked text
  if (lm) {
    run::GenerateSettings g;
    g.max_tokens = options.max_len.value_or(50);
    const decode::Hypothesis h = run::generate_batch(f, {input}, g).front().front();
    result.example_source = vocab.decode(input);
    result.example_output = vocab.decode(h.tokens);
    shown.push_back(f.bos);
    shown.insert(shown.end(), input.begin(), input.end());
    shown.insert(shown.end(), h.tokens.begin(), h.tokens.end());
  } else {
    ATTN_CHECK(std::find(input.begin(), input.end(), vocab.mask_id()) != input.end(), cmd,
               "--src: the text has no ", run::kMaskMarker, " to fill");
    std::vector<int64_t> filled = input;
    const std::vector<std::vector<run::MaskPrediction>> predicted = run::fill_masks(f, {input}, 1);
    for (const run::MaskPrediction& m : predicted.front())
      filled[static_cast<size_t>(m.position)] = m.candidates.front().first;
    result.example_source = vocab.decode(input);
    result.example_output = vocab.decode(filled);
    shown = input;
  }
  const int64_t T = static_cast<int64_t>(shown.size());
  const std::vector<run::AttentionWeights> att =
      run::capture_self_attention(f, Tensor::from_vector<int64_t>(shown, {1, T})).self;  // [1, H, T, T] per layer
  const std::vector<std::string> labels = vocab.labels(shown);
  const std::vector<std::string> first_labels(labels.begin(), labels.begin() + std::min<int64_t>(T, 24));

  FigureWriter fig(out_dir, &result.figure_paths);
  const RunMetrics metrics = read_run_metrics(run_dir);
  if (!metrics.rows.empty()) fig.add(training_curve_figure(metrics, arch));
  fig.add(lm ? lm_causal_mask_figure(att.front(), first_labels, T)
             : bidirectional_self_attention_figure(att, first_labels, result.example_source));
  fig.add(self_attention_grid_figure(att, first_labels));
  fig.add(architecture_figure(f.base->config(), f.base->num_parameters()));
  fig.add(multi_head_figure(f.base->config(), T));
  if (f.base->config().positional != nn::PositionalKind::Alibi) fig.add(attention_steps_figure(f, shown, labels));

  std::string body = lm ? str_cat("prompt        ", result.example_source, "\ncontinuation  ", result.example_output,
                                  "   (greedy)\n")
                        : str_cat("text    ", result.example_source, "\nfilled  ", result.example_output,
                                  "   (the most probable token at each ", run::kMaskMarker, ")\n");
  if (!origin.empty())
    body += str_cat("taken from the first line of ", origin, lm ? " (its first half)" : " (its middle token masked)", "\n");
  result.report_path = write_html(f, run_dir, out_dir, metrics, fig, {{"Example", body, true}});
  return result;
}

// ---- encoder-decoder models ---------------------------------------------------------------

// The example an encoder-decoder report draws: its source, greedy output and the attention of
// the teacher-forced pass over BOS + output.
struct Example {
  std::vector<int64_t> src;
  std::optional<std::vector<int64_t>> reference;
  decode::Hypothesis hyp;
  std::vector<int64_t> dec_in;     // BOS + output (without the last token when it was cut)
  std::vector<int64_t> predicted;  // what each decoder row predicted (EOS last when finished)
  run::CapturedAttention attention;
};

Example decode_example(const run::ModelFolder& f, std::vector<int64_t> src, const run::SearchSettings& greedy) {
  Example ex;
  ex.src = std::move(src);
  ex.hyp = run::search_batch(f, {ex.src}, greedy).front().front();
  // Teacher-forced pass over BOS + output: when the output finished, its last row is the one
  // that predicted EOS; when it was cut, the last token is not fed (nothing predicted it).
  ex.dec_in = {f.bos};
  ex.predicted = ex.hyp.tokens;
  if (ex.hyp.finished) {
    ex.dec_in.insert(ex.dec_in.end(), ex.hyp.tokens.begin(), ex.hyp.tokens.end());
    ex.predicted.push_back(f.eos);
  } else {
    ex.dec_in.insert(ex.dec_in.end(), ex.hyp.tokens.begin(), ex.hyp.tokens.end() - 1);
  }
  ex.attention = run::capture_attention(f, run::pad_batch({ex.src}, f.pad), run::pad_batch({ex.dec_in}, f.pad));
  return ex;
}

// The anti-diagonal score of each decoder layer's cross-attention (head mean) over the first
// n_out rows; empty when n_out is 0.
std::vector<double> anti_diagonal_per_layer(const std::vector<run::AttentionWeights>& cross, int64_t n_out, int64_t S) {
  std::vector<double> out;
  if (n_out > 0)
    for (const run::AttentionWeights& w : cross) out.push_back(report::anti_diagonal_score(head_matrix(w, 0, -1, n_out, S)));
  return out;
}

// The same for each head of one layer.
std::vector<double> anti_diagonal_per_head(const run::AttentionWeights& w, int64_t n_out, int64_t S) {
  std::vector<double> out;
  if (n_out > 0)
    for (int64_t h = 0; h < w.heads; ++h) out.push_back(report::anti_diagonal_score(head_matrix(w, 0, h, n_out, S)));
  return out;
}

// Greedy outputs of the first n validation examples, in batches of 32.
std::vector<decode::Hypothesis> decode_validation(const run::ModelFolder& f, const std::vector<io::Example>& valid,
                                                  size_t n, const run::SearchSettings& greedy) {
  std::vector<decode::Hypothesis> out;
  for (size_t start = 0; start < n; start += 32) {
    std::vector<std::vector<int64_t>> srcs;
    for (size_t i = start; i < std::min(n, start + 32); ++i) srcs.push_back(valid[i].src);
    for (auto& hs : run::search_batch(f, srcs, greedy)) out.push_back(hs.front());
  }
  return out;
}

// The last decoder layer's anti-diagonal score averaged over the first n validation examples
// with a non-empty output; `scored` counts them (no mean when 0).
std::optional<double> mean_anti_diagonal(const run::ModelFolder& f, const std::vector<io::Example>& valid,
                                         const std::vector<decode::Hypothesis>& outputs, size_t n, int64_t* scored) {
  double sum = 0;
  *scored = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto& h = outputs[i];
    if (h.tokens.empty()) continue;
    std::vector<int64_t> in{f.bos};
    in.insert(in.end(), h.tokens.begin(), h.tokens.end());
    const run::CapturedAttention c =
        run::capture_attention(f, run::pad_batch({valid[i].src}, f.pad), run::pad_batch({in}, f.pad));
    sum += report::anti_diagonal_score(head_matrix(c.cross.back(), 0, -1, static_cast<int64_t>(h.tokens.size()),
                                                   static_cast<int64_t>(valid[i].src.size())));
    ++*scored;
  }
  if (*scored == 0) return std::nullopt;
  return sum / static_cast<double>(*scored);
}

report::TextSection example_section(const Example& ex, const RunReportResult& result, const run::TokenCodec& out_codec,
                                    const std::string* origin) {
  std::string body = str_cat("source     ", result.example_source, "\noutput     ", result.example_output,
                             ex.hyp.finished ? "" : "   (cut at the length limit)", "\n");
  if (ex.reference) {
    body += str_cat("reference  ", out_codec.write(*ex.reference), "\n");
    body += str_cat("correct    ", ex.hyp.finished && ex.hyp.tokens == *ex.reference ? "yes" : "no", "\n");
  }
  body += str_cat("log-prob   ", fixed(ex.hyp.logprob), " (greedy, natural log, EOS included)\n");
  if (origin) body += str_cat("taken from the first example of ", *origin, "\n");
  return {"Example", body, true};
}

// The scores of `result` as text; `n_dec` decoder layers, S source tokens, `scored` validation
// examples behind the mean.
report::TextSection anti_diagonal_section(const RunReportResult& result, const std::vector<double>& last_layer_heads,
                                          int64_t S, size_t n_dec, int64_t scored) {
  std::string body =
      "The share of decoder cross-attention mass on the anti-diagonal, target position i -> source position N-1-i "
      "(head average, rows of the output tokens, EOS row left out): 1 for a perfect anti-diagonal, 1/N for uniform "
      "attention. A model that learned to reverse reads source N-1-i while writing target i.\n\n";
  if (result.anti_diagonal_per_layer.empty()) {
    body += "The example's output is empty: no score.\n";
  } else {
    body += str_cat("uniform attention would give 1/N = ", fixed(1.0 / static_cast<double>(S)), " (N = ", S, ")\n");
    for (size_t l = 0; l < n_dec; ++l)
      body += str_cat("example, decoder layer ", l + 1, ": ", fixed(result.anti_diagonal_per_layer[l]), "\n");
    std::vector<std::string> heads;
    for (double s : last_layer_heads) heads.push_back(fixed(s, 3));
    body += str_cat("example, decoder layer ", n_dec, " per head: ", join(heads, "  "), "\n");
  }
  if (result.anti_diagonal_mean)
    body += str_cat("mean over ", scored, " validation examples, decoder layer ", n_dec, ": ",
                    fixed(*result.anti_diagonal_mean), "\n");
  return {"Anti-diagonal score", body, true};
}

report::TextSection samples_section(const std::vector<io::Example>& valid, const std::vector<decode::Hypothesis>& outputs,
                                    size_t n, const run::TokenCodec& out_codec, const std::string& origin) {
  std::string body = str_cat("Greedy translations of the first ", n, " examples of ", origin, ".\n\n");
  int64_t right = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool ok = outputs[i].finished && outputs[i].tokens == valid[i].tgt;
    right += ok ? 1 : 0;
    body += str_cat(out_codec.write(valid[i].src), "  ->  ", out_codec.write(outputs[i].tokens),
                    ok ? "   ok" : str_cat("   expected ", out_codec.write(valid[i].tgt)), "\n");
  }
  body += str_cat("\n", right, " of ", n, " exactly right.\n");
  return {"Sample translations", body, true};
}

RunReportResult write_encoder_decoder_report(const std::string& run_dir, const RunReportOptions& options) {
  const char* cmd = options.command.c_str();
  const run::ModelFolder f = run::open_model_folder(run_dir, cmd, options.src && !options.src_ids);
  const std::string out_dir = options.out_dir.empty() ? run_dir : options.out_dir;
  const models::ModelConfig& mc = f.model->config();
  RunReportResult result;
  const auto run_task = train::task_from_train_config(f.train_config);
  result.reversal_task = run_task && run_task->task.kind == train::TaskKind::Reverse;

  run::TokenCodec codec;
  codec.vocab = f.vocab ? &*f.vocab : nullptr;
  codec.vocab_size = f.src_vocab_size;
  codec.pad = f.pad;
  codec.command = options.command;
  codec.source = "--src";
  if (options.src_ids) codec.vocab = nullptr;
  run::TokenCodec out_codec = codec;
  out_codec.vocab = f.vocab ? &*f.vocab : nullptr;  // outputs are shown as text when possible

  // The example: --src, else the first validation example.
  std::string origin;
  const int64_t n_valid = std::max<int64_t>({options.n_samples, options.n_score_examples, 1});
  const std::vector<io::Example> valid = validation_examples(f, n_valid, &origin);
  std::vector<int64_t> src;
  std::optional<std::vector<int64_t>> reference;
  if (options.src) {
    src = codec.read(*options.src, 0, "source");
    if (run_task) reference = train::task_target(run_task->task.kind, src);
  } else {
    ATTN_CHECK(!valid.empty(), cmd, "'", run_dir,
               "' records no synthetic task or readable validation file to take an example from; give one with --src");
    src = valid.front().src;
    reference = valid.front().tgt;
  }
  run::SearchSettings greedy;
  greedy.max_len = options.max_len;
  Example ex = decode_example(f, std::move(src), greedy);
  ex.reference = std::move(reference);
  result.example_source = out_codec.write(ex.src);
  result.example_output = out_codec.write(ex.hyp.tokens);
  const run::CapturedAttention& cap = ex.attention;
  const int64_t S = static_cast<int64_t>(ex.src.size());

  const std::vector<std::string> src_labels = out_codec.labels(ex.src);
  std::vector<std::string> pred_labels = out_codec.labels(ex.predicted);
  if (ex.hyp.finished && !f.vocab) pred_labels.back() = "EOS";
  std::vector<std::string> in_labels = out_codec.labels(ex.dec_in);
  if (!f.vocab) in_labels.front() = "BOS";

  FigureWriter fig(out_dir, &result.figure_paths);
  const RunMetrics metrics = read_run_metrics(run_dir);
  if (!metrics.rows.empty()) fig.add(training_curve_figure(metrics, models::Arch::EncoderDecoder));
  fig.add(positional_encoding_figure(mc.d_model, mc.positional));
  fig.add(decoder_causal_mask_figure(cap.decoder_self.front(), in_labels));
  fig.add(attention_example_figure(cap, src_labels, pred_labels, result.example_source, result.example_output));
  fig.add(cross_attention_grid_figure(cap.cross, src_labels, pred_labels));
  fig.add(encoder_self_attention_grid_figure(cap.encoder_self, src_labels));
  fig.add(architecture_figure(mc, f.base->num_parameters()));
  fig.add(multi_head_figure(mc, S));
  if (mc.positional != nn::PositionalKind::Alibi) fig.add(attention_steps_figure(f, ex.src, src_labels));

  // Anti-diagonal scores: the example's per layer (and per head in the last layer), and the
  // mean over validation examples for the last layer.
  const int64_t n_out = static_cast<int64_t>(ex.hyp.tokens.size());
  result.anti_diagonal_per_layer = anti_diagonal_per_layer(cap.cross, n_out, S);
  const std::vector<double> last_layer_heads = anti_diagonal_per_head(cap.cross.back(), n_out, S);
  const size_t n_decoded =
      std::min(valid.size(), static_cast<size_t>(std::max(options.n_samples, options.n_score_examples)));
  const std::vector<decode::Hypothesis> valid_out = decode_validation(f, valid, n_decoded, greedy);
  int64_t scored = 0;
  if (result.reversal_task && !valid_out.empty()) {
    const size_t n = std::min(valid_out.size(), static_cast<size_t>(std::max<int64_t>(options.n_score_examples, 0)));
    result.anti_diagonal_mean = mean_anti_diagonal(f, valid, valid_out, n, &scored);
  }

  std::vector<report::TextSection> sections;
  sections.push_back(example_section(ex, result, out_codec, options.src ? nullptr : &origin));
  if (result.reversal_task || options.src)
    sections.push_back(anti_diagonal_section(result, last_layer_heads, S, cap.cross.size(), scored));
  if (!valid_out.empty() && options.n_samples > 0)
    sections.push_back(samples_section(valid, valid_out, std::min(valid_out.size(), static_cast<size_t>(options.n_samples)),
                                       out_codec, origin));
  result.report_path = write_html(f, run_dir, out_dir, metrics, fig, std::move(sections));
  return result;
}

}  // namespace

RunReportResult write_run_report(const std::string& run_dir, const RunReportOptions& options) {
  // A decoder-only or encoder-only folder gets the single-stack report; anything else (missing
  // folder or config) is reported by run::open_model_folder.
  std::error_code ec;
  if (fs::is_regular_file(fs::path(run_dir) / io::kConfigFileName, ec)) {
    const models::Arch arch = models::load_model_config(run_dir).arch;
    if (arch != models::Arch::EncoderDecoder) {
      RunReportResult r = write_single_stack_report(run_dir, options, arch);
      r.arch = arch;
      return r;
    }
  }
  return write_encoder_decoder_report(run_dir, options);
}

}  // namespace attn::run_report
