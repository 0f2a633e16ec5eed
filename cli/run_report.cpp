// The run report (see run_report.h): reads the run folder, decodes one example with attention
// capture on, draws the seed-001 figures through attn/report and writes report.html (for the
// single-stack models: the training curve and the self-attention of one example).
// Attention for the figures comes from one teacher-forced pass over the model's own greedy
// output (BOS + output), which gives exactly the weights the decoder used while generating.
// Deliberately no timing, no timestamps and no absolute paths beyond those given.
#include "run_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/io/lines.h"
#include "attn/io/run_files.h"
#include "attn/io/tsv.h"
#include "attn/models/checkpoint.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_only.h"
#include "attn/nn/positional.h"
#include "attn/report/attention_stats.h"
#include "attn/report/figures.h"
#include "attn/report/html_report.h"
#include "attn/run/attention.h"
#include "attn/run/fill_mask.h"
#include "attn/run/generate.h"
#include "attn/run/model_folder.h"
#include "attn/run/token_codec.h"
#include "attn/run/translate.h"
#include "attn/train/run_record.h"
#include "attn/train/text_data.h"

namespace attn::cli {

namespace fs = std::filesystem;
using report::Matrix;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string fixed(double v, int decimals = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// ---- captured attention as figure matrices ------------------------------------------------

// Rows [0, rows) and columns [0, cols) of batch row b of `w` for head h, or the head mean when h < 0.
Matrix matrix(const run::AttentionWeights& w, int64_t b, int64_t h, int64_t rows, int64_t cols) {
  std::vector<double> out(static_cast<size_t>(rows * cols), 0.0);
  const int64_t h0 = h < 0 ? 0 : h, h1 = h < 0 ? w.heads : h + 1;
  for (int64_t hh = h0; hh < h1; ++hh)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) out[r * cols + c] += w.at(b, hh, r, c);
  const double n = static_cast<double>(h1 - h0);
  for (double& x : out) x /= n;
  return Matrix(std::move(out), rows, cols);
}

// ---- the run's files ----------------------------------------------------------------------

report::MetricValue metric_value(const nlohmann::ordered_json& v) {
  if (v.is_number_integer()) return report::MetricValue(v.get<int64_t>());
  if (v.is_number()) return report::MetricValue(v.get<double>());
  if (v.is_string()) return report::MetricValue(v.get<std::string>());
  if (v.is_null()) return report::MetricValue("");
  return report::MetricValue(v.dump());
}

double number_or_nan(const nlohmann::ordered_json& record, const char* key) {
  auto it = record.find(key);
  if (it == record.end() || !it->is_number()) return kNaN;
  return it->get<double>();
}

struct Metrics {
  std::vector<report::MetricsRow> rows;
  report::TrainingHistory history;
  bool present = false;
};

// metrics.jsonl: one JSON object per line; blank lines are skipped, anything else is an error
// naming the file and line.
Metrics read_metrics(const std::string& path) {
  Metrics m;
  std::error_code ec;
  if (!fs::exists(path, ec)) return m;
  m.present = true;
  std::ifstream in(path);
  ATTN_CHECK(in, "report", "cannot read '", path, "'");
  io::LineReader reader(in);
  std::string line;
  while (reader.next(line)) {
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    nlohmann::ordered_json rec;
    try {
      rec = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("report", "'", path, "' line ", reader.line_number(), ": not valid JSON (", e.what(), ")");
    }
    ATTN_CHECK(rec.is_object(), "report", "'", path, "' line ", reader.line_number(), ": expected a JSON object");
    report::MetricsRow row;
    for (const auto& [k, v] : rec.items()) row.emplace_back(k, metric_value(v));
    m.rows.push_back(std::move(row));
    const double epoch = number_or_nan(rec, "epoch");
    m.history.epoch.push_back(std::isnan(epoch) ? static_cast<double>(m.rows.size()) : epoch);
    m.history.loss.push_back(number_or_nan(rec, "loss"));
    m.history.val_loss.push_back(number_or_nan(rec, "val_loss"));
    m.history.val_token_acc.push_back(number_or_nan(rec, "val_token_acc"));
    m.history.val_exact_acc.push_back(number_or_nan(rec, "val_exact_acc"));
  }
  // A column that is NaN throughout (never measured) is dropped rather than drawn empty.
  const auto all_nan = [](const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return std::isnan(x); });
  };
  for (auto* v : {&m.history.loss, &m.history.val_loss, &m.history.val_token_acc, &m.history.val_exact_acc})
    if (all_nan(*v)) v->clear();
  return m;
}

// Up to `count` validation examples of the run: the synthetic task's validation stream, or the
// first pairs of the recorded validation corpus (unknown tokens as <unk>). `origin` names the set.
std::vector<io::Example> validation_examples(const run::ModelFolder& f, int64_t count, std::string* origin) {
  std::vector<io::Example> out;
  if (count <= 0) return out;
  if (const auto run = train::task_from_train_config(f.train_config)) {
    const train::TaskConfig& task = run->task;
    const int64_t top = io::Vocab::kNumSpecial + task.n_symbols;
    if (top > std::min(f.src_vocab_size, f.tgt_vocab_size)) return out;
    if (f.vocab) {
      const io::Vocab tv = train::task_vocab(task);
      for (int64_t id = 0; id < top; ++id)
        if (id >= f.vocab->size() || f.vocab->token(id) != tv.token(id)) return out;
    }
    // The run's validation set; a run without one still has the stream to draw an example from.
    const int64_t n = run->valid_size > 0 ? std::min(count, run->valid_size) : count;
    out = train::make_task_dataset(task, 0, n, run->data_seed).valid;
    *origin = str_cat("the ", train::task_kind_name(task.kind), " task's validation set (seed ", run->data_seed, ")");
    return out;
  }
  const std::string path = train::valid_path_from_train_config(f.train_config, f.dir);
  if (path.empty() || !f.vocab) return out;
  // The pairs under io/tsv.h's rule. A file that no longer reads under it gives no examples:
  // training read it under the same rule, so it has changed since.
  io::TsvLines lines;
  try {
    lines = io::read_tsv_lines(path, "report");
  } catch (const Error&) {
    return out;
  }
  for (const io::TsvLine& pair : lines.pairs) {
    if (static_cast<int64_t>(out.size()) >= count) break;
    io::Example ex;
    if (f.vocab->sentencepiece()) {
      ex.src = f.vocab->encode(pair.source);
      ex.tgt = f.vocab->encode(pair.target);
    } else {
      for (const std::string& t : run::split_tokens(pair.source, *f.vocab)) ex.src.push_back(f.vocab->id(t, true));
      for (const std::string& t : run::split_tokens(pair.target, *f.vocab)) ex.tgt.push_back(f.vocab->id(t, true));
    }
    if (!ex.src.empty()) out.push_back(std::move(ex));
  }
  *origin = path;
  return out;
}

// ---- figures ------------------------------------------------------------------------------

// Dimensions whose curves the PE figure draws: the seed's 0, 4, 16, 32 where they exist, else
// a spread over the available (even) dimensions.
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

// Writes `svg` as OUT/figures/<name> and records it in the report.
struct FigureWriter {
  std::string out_dir;
  std::vector<report::FigureRef>* refs;
  std::vector<std::string>* paths;

  void add(const std::string& name, const std::string& svg, const std::string& title, const std::string& caption) {
    const std::string rel = "figures/" + name;
    const std::string path = (fs::path(out_dir) / rel).string();
    report::save_text_file(path, svg);
    refs->push_back({title, rel, caption});
    paths->push_back(path);
  }
};

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

// The config table: the run folder, vocabulary, parameter count, every model key, every
// training key (nested values as compact JSON).
std::vector<std::pair<std::string, std::string>> config_table(const run::ModelFolder& f) {
  std::vector<std::pair<std::string, std::string>> out;
  out.emplace_back("model folder", f.dir);
  out.emplace_back("parameters", std::to_string(f.base->num_parameters()));
  out.emplace_back("vocabulary", f.vocab ? str_cat(f.vocab->size(), " tokens (",
                                                   io::tokenization_name(f.vocab->tokenization()), ")")
                                         : std::string("none (token ids only)"));
  const auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  const nlohmann::json model_config = f.base->config().to_json();
  for (const auto& [k, v] : model_config.items()) out.emplace_back("model." + k, text(v));
  if (f.train_config.is_object())
    for (const auto& [k, v] : f.train_config.items())
      if (k != "model") out.emplace_back("train." + k, text(v));  // its "model" is config.json's, listed above
  return out;
}

// ---- decoder-only and encoder-only models -------------------------------------------------

// The first usable line of a text run's validation text (else its training text) as ids;
// empty when the run records none or the file is gone. `origin` names the file.
std::vector<int64_t> first_text_line(const run::ModelFolder& f, std::string* origin) {
  const auto c = train::run_train_config(f.train_config);
  if (!c || !c->uses_text() || !f.vocab) return {};
  std::error_code ec;
  for (const std::string& path : {c->valid_text_path, c->text_path}) {
    if (path.empty() || !fs::is_regular_file(path, ec)) continue;
    try {
      const train::TextFile file = train::read_text(path, f.vocab->tokenization());
      for (const auto& ids : train::encode_text(file, *f.vocab, true)) {
        if (ids.size() < 2) continue;
        *origin = path;
        return ids;
      }
    } catch (const Error&) {
      continue;  // unreadable now: no example from it
    }
  }
  return {};
}

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
  const int64_t H = f.base->config().n_heads;
  const std::vector<std::string> labels = vocab.labels(shown);

  std::vector<report::FigureRef> refs;
  FigureWriter fig{out_dir, &refs, &result.figure_paths};
  fs::create_directories(fs::path(out_dir) / "figures");
  const Metrics metrics = read_metrics((fs::path(run_dir) / io::kMetricsFileName).string());
  if (!metrics.rows.empty())
    fig.add("01_training_curve.svg", report::training_curve_figure(metrics.history), "Training curve",
            str_cat("Training and validation loss (left) and validation accuracy (right: ",
                    lm ? "the argmax of the next-token distribution, teacher-forced"
                       : "the argmax at the masked positions, with the same masks every epoch",
                    ") per epoch, from ", io::kMetricsFileName, " (", metrics.rows.size(), " epochs)."));
  const int64_t t = std::min<int64_t>(T, 24);
  const std::vector<std::string> first_labels(labels.begin(), labels.begin() + t);
  if (lm) {
    std::vector<double> mask(static_cast<size_t>(t * t), 0.0);
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = i + 1; j < t; ++j) mask[static_cast<size_t>(i * t + j)] = 1.0;
    report::MaskFigureOptions mo;
    mo.title = "Causal mask and self-attention weights (layer 1, mean of heads)";
    mo.labels = first_labels;
    fig.add("02_causal_mask.svg", report::mask_figure(Matrix(std::move(mask), t, t), matrix(att[0], 0, -1, t, t), mo),
            "Causal mask and its softmax weights",
            str_cat("Left: the causal mask over <bos> + prompt + greedy continuation", t < T ? " (first 24 positions)" : "",
                    "; 1 = masked out. Right: the first block's self-attention weights, averaged over its ", H,
                    " heads: every weight above the diagonal is 0 and every row sums to 1."));
  } else {
    report::HeatmapOptions ho;
    ho.title = str_cat("Self-attention, layer ", att.size(), " (mean of heads)");
    ho.row_labels = first_labels;
    ho.col_labels = first_labels;
    ho.x_title = "key";
    ho.y_title = "query";
    ho.vmin = 0.0;
    ho.colorbar_title = "weight";
    fig.add("02_self_attention.svg", report::heatmap(matrix(att.back(), 0, -1, t, t), ho), "Bidirectional self-attention",
            str_cat("The last block's self-attention over ", result.example_source,
                    ", averaged over heads: every position (the masks included) reads the whole text."));
  }
  {
    std::vector<std::vector<Matrix>> grid(att.size());
    for (size_t l = 0; l < att.size(); ++l)
      for (int64_t h = 0; h < H; ++h) grid[l].push_back(matrix(att[l], 0, h, t, t));
    report::HeatmapGridOptions go;
    go.title = "Self-attention by layer and head";
    go.row_titles = layer_titles(att.size());
    go.col_titles = head_titles(H);
    go.row_labels = first_labels;
    go.col_labels = first_labels;
    go.x_title = "key";
    go.y_title = "query";
    go.vmin = 0.0;
    go.vmax = 1.0;
    go.colorbar_title = "weight";
    fig.add("03_self_attention_grid.svg", report::heatmap_grid(grid, go), "Self-attention, layer x head",
            "Every block (rows) and head (columns) for the same example, on one colour scale [0, 1].");
  }

  report::ReportInput in;
  {
    fs::path name = fs::path(run_dir).lexically_normal();
    if (name.filename().empty()) name = name.parent_path();
    in.title = "attn report: " + (name.filename().empty() ? run_dir : name.filename().string());
  }
  in.config = config_table(f);
  in.metrics = metrics.rows;
  in.figures = refs;
  std::string body = lm ? str_cat("prompt        ", result.example_source, "\ncontinuation  ", result.example_output,
                                  "   (greedy)\n")
                        : str_cat("text    ", result.example_source, "\nfilled  ", result.example_output,
                                  "   (the most probable token at each ", run::kMaskMarker, ")\n");
  if (!origin.empty())
    body += str_cat("taken from the first line of ", origin, lm ? " (its first half)" : " (its middle token masked)", "\n");
  in.sections.push_back({"Example", body, true});
  if (!metrics.present)
    in.sections.push_back({"Notes", str_cat("No ", io::kMetricsFileName, " in ", run_dir, ": no training curve."), false});
  result.report_path = (fs::path(out_dir) / "report.html").string();
  report::write_report(result.report_path, in);
  return result;
}

}  // namespace

RunReportResult write_run_report(const std::string& run_dir, const RunReportOptions& options) {
  const char* cmd = options.command.c_str();
  {
    // A decoder-only or encoder-only folder gets the single-stack report; anything else
    // (missing folder or config) is reported by run::open_model_folder below.
    std::error_code ec;
    if (fs::is_regular_file(fs::path(run_dir) / io::kConfigFileName, ec)) {
      const models::Arch arch = models::load_model_config(run_dir).arch;
      if (arch != models::Arch::EncoderDecoder) {
        RunReportResult r = write_single_stack_report(run_dir, options, arch);
        r.arch = arch;
        return r;
      }
    }
  }
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
  const decode::Hypothesis hyp = run::search_batch(f, {src}, greedy).front().front();
  result.example_source = out_codec.write(src);
  result.example_output = out_codec.write(hyp.tokens);

  // Teacher-forced pass over BOS + output: when the output finished, its last row is the one
  // that predicted EOS; when it was cut, the last token is not fed (nothing predicted it).
  std::vector<int64_t> dec_in{f.bos};
  std::vector<int64_t> predicted = hyp.tokens;
  if (hyp.finished) {
    dec_in.insert(dec_in.end(), hyp.tokens.begin(), hyp.tokens.end());
    predicted.push_back(f.eos);
  } else {
    dec_in.insert(dec_in.end(), hyp.tokens.begin(), hyp.tokens.end() - 1);
  }
  const run::CapturedAttention cap =
      run::capture_attention(f, run::pad_batch({src}, f.pad), run::pad_batch({dec_in}, f.pad));
  const int64_t S = static_cast<int64_t>(src.size());
  const int64_t T = static_cast<int64_t>(dec_in.size());
  const int64_t H = mc.n_heads;
  const size_t n_enc = cap.encoder_self.size(), n_dec = cap.cross.size();

  const std::vector<std::string> src_labels = out_codec.labels(src);
  std::vector<std::string> pred_labels = out_codec.labels(predicted);
  if (hyp.finished && !f.vocab) pred_labels.back() = "EOS";
  std::vector<std::string> in_labels = out_codec.labels(dec_in);
  if (!f.vocab) in_labels.front() = "BOS";

  std::vector<report::FigureRef> refs;
  FigureWriter fig{out_dir, &refs, &result.figure_paths};
  fs::create_directories(fs::path(out_dir) / "figures");

  // 1. Training curve.
  const std::string metrics_path = (fs::path(run_dir) / io::kMetricsFileName).string();
  const Metrics metrics = read_metrics(metrics_path);
  if (!metrics.rows.empty())
    fig.add("01_training_curve.svg", report::training_curve_figure(metrics.history), "Training curve",
            str_cat("Training and validation loss (left) and validation token / exact-sequence accuracy under "
                    "greedy decoding (right) per epoch, from ",
                    io::kMetricsFileName, " (", metrics.rows.size(), " epochs)."));

  // 2. Sinusoidal positional encoding (§3.5): 50 positions of the model's D (at most 128 shown).
  {
    const int64_t positions = 50, dims = std::min<int64_t>(mc.d_model, 128);
    const Tensor pe = nn::sinusoidal_table(positions, mc.d_model, DType::F64);  // [50, D]
    std::vector<double> values = pe.slice(1, 0, dims).to_vector<double>();
    const std::vector<int64_t> curve_dims = pe_dims(dims);
    std::vector<std::string> dim_names;
    for (int64_t d : curve_dims) dim_names.push_back(std::to_string(d));
    fig.add(
        "02_positional_encoding.svg",
        report::positional_encoding_figure(Matrix(std::move(values), positions, dims), curve_dims),
        "Sinusoidal positional encoding",
        str_cat("PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(p / 10000^(2i/D)) for D = ", mc.d_model,
                ", positions 0-49", dims < mc.d_model ? str_cat(", the first ", dims, " dimensions") : std::string(),
                " (paper §3.5); right: dimensions ", join(dim_names, ", "),
                " across positions (low dimensions oscillate fast, high ones slowly). This model uses ",
                nn::positional_kind_name(mc.positional), " positions."));
  }

  // 3. Causal mask and the decoder's first-layer self-attention weights for the example.
  {
    const int64_t t = std::min<int64_t>(T, 16);
    std::vector<double> mask(static_cast<size_t>(t * t), 0.0);
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = i + 1; j < t; ++j) mask[i * t + j] = 1.0;
    report::MaskFigureOptions mo;
    mo.title = "Causal mask and decoder self-attention weights (layer 1, mean of heads)";
    mo.labels.assign(in_labels.begin(), in_labels.begin() + t);
    fig.add(
        "03_causal_mask.svg",
        report::mask_figure(Matrix(std::move(mask), t, t), matrix(cap.decoder_self[0], 0, -1, t, t), mo),
        "Causal mask and its softmax weights",
        str_cat("Left: the decoder's causal mask over its input (BOS + the greedy output",
                t < T ? ", first 16 positions" : "",
                "); 1 = masked out (PyTorch's convention, -inf added to the score), 0 = allowed (paper §3.2.3). "
                "Right: the softmax weights of the trained decoder's first self-attention layer, averaged over its ",
                H, " heads: every weight above the diagonal is exactly 0 and every row sums to 1."));
  }

  // 4. Encoder self-attention and decoder cross-attention of the last layers, head average.
  const Matrix cross_last = matrix(cap.cross.back(), 0, -1, static_cast<int64_t>(predicted.size()), S);
  {
    report::HeatmapPanel enc, cross;
    enc.matrix = matrix(cap.encoder_self.back(), 0, -1, S, S);
    enc.options.title = str_cat("Encoder self-attention, layer ", n_enc);
    enc.options.row_labels = src_labels;
    enc.options.col_labels = src_labels;
    enc.options.x_title = "key (source token)";
    enc.options.y_title = "query (source token)";
    enc.options.vmin = 0.0;  // up to the largest weight: encoder attention is often diffuse
    enc.options.colorbar_title = "weight";
    cross.matrix = cross_last;
    cross.options.title = str_cat("Decoder cross-attention, layer ", n_dec);
    cross.options.row_labels = pred_labels;
    cross.options.col_labels = src_labels;
    cross.options.x_title = "source token";
    cross.options.y_title = "output token (predicted)";
    cross.options.vmin = 0.0;
    cross.options.vmax = 1.0;
    cross.options.colorbar_title = "weight";
    fig.add("04_attention_example.svg",
            report::heatmap_row({enc, cross}, str_cat("Attention for ", result.example_source, " -> ",
                                                      result.example_output, " (mean of ", H, " heads)")),
            "Encoder self-attention and decoder cross-attention",
            str_cat("For the source ", result.example_source, " and the model's greedy output ", result.example_output,
                    ". Left: each source position attends over the source (last encoder layer). Right: the row of "
                    "each output token is the attention of the decoder position that predicted it, over the source "
                    "(last decoder layer). Both are averaged over heads; each row sums to 1."));
  }

  // 5-6. Layer x head grids, one colour scale [0, 1].
  {
    std::vector<std::vector<Matrix>> grid(n_dec);
    for (size_t l = 0; l < n_dec; ++l)
      for (int64_t h = 0; h < H; ++h)
        grid[l].push_back(matrix(cap.cross[l], 0, h, static_cast<int64_t>(predicted.size()), S));
    report::HeatmapGridOptions go;
    go.title = "Decoder cross-attention by layer and head";
    go.row_titles = layer_titles(n_dec);
    go.col_titles = head_titles(H);
    go.row_labels = pred_labels;
    go.col_labels = src_labels;
    go.x_title = "source token";
    go.y_title = "output token";
    go.vmin = 0.0;
    go.vmax = 1.0;
    go.colorbar_title = "weight";
    fig.add("05_cross_attention_grid.svg", report::heatmap_grid(grid, go), "Decoder cross-attention, layer x head",
            str_cat("Every decoder layer (rows) and head (columns) for the same example: which source positions "
                    "each head reads while predicting each output token. One colour scale for all maps."));
  }
  {
    std::vector<std::vector<Matrix>> grid(n_enc);
    for (size_t l = 0; l < n_enc; ++l)
      for (int64_t h = 0; h < H; ++h) grid[l].push_back(matrix(cap.encoder_self[l], 0, h, S, S));
    report::HeatmapGridOptions go;
    go.title = "Encoder self-attention by layer and head";
    go.row_titles = layer_titles(n_enc);
    go.col_titles = head_titles(H);
    go.row_labels = src_labels;
    go.col_labels = src_labels;
    go.x_title = "key";
    go.y_title = "query";
    go.vmin = 0.0;
    go.colorbar_title = "weight";
    fig.add("06_encoder_self_attention_grid.svg", report::heatmap_grid(grid, go),
            "Encoder self-attention, layer x head",
            "Every encoder layer (rows) and head (columns) for the same example, on one colour scale from 0 to the "
            "largest weight.");
  }

  // Anti-diagonal scores: the example's per layer (and per head in the last layer), and the
  // mean over validation examples for the last layer.
  const int64_t n_out = static_cast<int64_t>(hyp.tokens.size());
  std::vector<double> last_layer_heads;
  if (n_out > 0) {
    for (size_t l = 0; l < n_dec; ++l)
      result.anti_diagonal_per_layer.push_back(report::anti_diagonal_score(matrix(cap.cross[l], 0, -1, n_out, S)));
    for (int64_t h = 0; h < H; ++h)
      last_layer_heads.push_back(report::anti_diagonal_score(matrix(cap.cross.back(), 0, h, n_out, S)));
  }
  std::vector<decode::Hypothesis> valid_out;
  if (!valid.empty()) {
    const size_t n = std::min(valid.size(), static_cast<size_t>(std::max(options.n_samples, options.n_score_examples)));
    for (size_t start = 0; start < n; start += 32) {
      std::vector<std::vector<int64_t>> srcs;
      for (size_t i = start; i < std::min(n, start + 32); ++i) srcs.push_back(valid[i].src);
      for (auto& hs : run::search_batch(f, srcs, greedy)) valid_out.push_back(hs.front());
    }
  }
  int64_t scored = 0;
  if (result.reversal_task && !valid_out.empty()) {
    double sum = 0;
    const size_t n = std::min(valid_out.size(), static_cast<size_t>(std::max<int64_t>(options.n_score_examples, 0)));
    for (size_t i = 0; i < n; ++i) {
      const auto& h = valid_out[i];
      if (h.tokens.empty()) continue;
      std::vector<int64_t> in{f.bos};
      in.insert(in.end(), h.tokens.begin(), h.tokens.end());
      const run::CapturedAttention c =
          run::capture_attention(f, run::pad_batch({valid[i].src}, f.pad), run::pad_batch({in}, f.pad));
      sum += report::anti_diagonal_score(matrix(c.cross.back(), 0, -1, static_cast<int64_t>(h.tokens.size()),
                                                               static_cast<int64_t>(valid[i].src.size())));
      ++scored;
    }
    if (scored > 0) result.anti_diagonal_mean = sum / static_cast<double>(scored);
  }

  // The report.
  report::ReportInput in;
  {
    fs::path name = fs::path(run_dir).lexically_normal();
    if (name.filename().empty()) name = name.parent_path();  // "runs/reverse/" -> "reverse"
    in.title = "attn report: " + (name.filename().empty() ? run_dir : name.filename().string());
  }
  in.config = config_table(f);
  in.metrics = metrics.rows;
  in.figures = refs;

  {
    std::string body = str_cat("source     ", result.example_source, "\noutput     ", result.example_output,
                               hyp.finished ? "" : "   (cut at the length limit)", "\n");
    if (reference) {
      body += str_cat("reference  ", out_codec.write(*reference), "\n");
      body += str_cat("correct    ", hyp.finished && hyp.tokens == *reference ? "yes" : "no", "\n");
    }
    body += str_cat("log-prob   ", fixed(hyp.logprob), " (greedy, natural log, EOS included)\n");
    if (!options.src) body += str_cat("taken from the first example of ", origin, "\n");
    in.sections.push_back({"Example", body, true});
  }

  if (result.reversal_task || options.src) {
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
    in.sections.push_back({"Anti-diagonal score", body, true});
  }

  if (!valid_out.empty() && options.n_samples > 0) {
    const size_t n = std::min(valid_out.size(), static_cast<size_t>(options.n_samples));
    std::string body = str_cat("Greedy translations of the first ", n, " examples of ", origin, ".\n\n");
    int64_t right = 0;
    for (size_t i = 0; i < n; ++i) {
      const bool ok = valid_out[i].finished && valid_out[i].tokens == valid[i].tgt;
      right += ok ? 1 : 0;
      body += str_cat(out_codec.write(valid[i].src), "  ->  ", out_codec.write(valid_out[i].tokens),
                      ok ? "   ok" : str_cat("   expected ", out_codec.write(valid[i].tgt)), "\n");
    }
    body += str_cat("\n", right, " of ", n, " exactly right.\n");
    in.sections.push_back({"Sample translations", body, true});
  }
  if (!metrics.present)
    in.sections.push_back({"Notes", str_cat("No ", io::kMetricsFileName, " in ", run_dir, ": no training curve."), false});

  result.report_path = (fs::path(out_dir) / "report.html").string();
  report::write_report(result.report_path, in);
  return result;
}

}  // namespace attn::cli
