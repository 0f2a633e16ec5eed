// run_report/run_data.cpp — see attn/run_report/run_data.h. The validation examples and text
// lines follow what train_config.json records (train/run_record.h), so a report shows the data
// the run was trained and validated on.
#include "attn/run_report/run_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include "attn/core/error.h"
#include "attn/io/run_files.h"
#include "attn/io/tsv.h"
#include "attn/run/token_codec.h"
#include "attn/train/finetune.h"
#include "attn/train/run_record.h"
#include "attn/train/tasks.h"
#include "attn/train/text_data.h"

namespace attn::run_report {

namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

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

}  // namespace

RunMetrics run_metrics(const io::MetricsLog& log) {
  RunMetrics m;
  m.present = log.present;
  for (const nlohmann::ordered_json& rec : log.records) {
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

RunMetrics read_run_metrics(const std::string& run_dir) {
  return run_metrics(io::read_metrics_log((fs::path(run_dir) / io::kMetricsFileName).string(), "report"));
}

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

std::vector<int64_t> first_pair_prompt(const run::ModelFolder& f, std::string* origin) {
  const auto c = train::run_train_config(f.train_config);
  if (!c || !c->uses_pairs() || !f.vocab) return {};
  std::error_code ec;
  for (const std::string& path : {c->valid_pairs_path, c->pairs_path}) {
    if (path.empty() || !fs::is_regular_file(path, ec)) continue;
    try {
      const train::PairsFile file = train::read_pairs(path, c->objective);
      std::vector<int64_t> ids = f.vocab->encode(train::apply_template(c->prompt_template, file.records.front().prompt), true);
      if (ids.empty()) continue;
      *origin = path;
      return ids;
    } catch (const Error&) {
      continue;  // unreadable now: no example from it
    }
  }
  return {};
}

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

std::string report_title(const std::string& run_dir) {
  fs::path name = fs::path(run_dir).lexically_normal();
  if (name.filename().empty()) name = name.parent_path();  // "runs/reverse/" -> "reverse"
  return "attn report: " + (name.filename().empty() ? run_dir : name.filename().string());
}

}  // namespace attn::run_report
