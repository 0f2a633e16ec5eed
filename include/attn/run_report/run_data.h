// attn/run_report/run_data.h — what a run report reads from a model folder besides the model:
// the training history (metrics.jsonl through io/metrics_log.h), the run's validation examples
// or first text line to show, the configuration table and the report's title.
// Not here: decoding or figures (run_report.h, figures.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attn/io/example.h"
#include "attn/io/metrics_log.h"
#include "attn/report/figures.h"
#include "attn/report/html_report.h"
#include "attn/run/model_folder.h"

namespace attn::run_report {

// A run's metrics as the report shows them: every record as a table row, and the curves.
struct RunMetrics {
  std::vector<report::MetricsRow> rows;
  report::TrainingHistory history;  // a column that is never a number is left empty
  bool present = false;             // the folder has a metrics file
};

// The rows and curves of `log`: epoch (the record's number, else its 1-based position), loss,
// val_loss, val_token_acc, val_exact_acc (NaN where a record lacks the number).
RunMetrics run_metrics(const io::MetricsLog& log);
// RUN_DIR/metrics.jsonl read and converted; a bad line is an attn::Error "[report] ...".
RunMetrics read_run_metrics(const std::string& run_dir);

// Up to `count` validation examples of an encoder-decoder run: the synthetic task's validation
// stream, or the first pairs of the recorded validation corpus (unknown tokens as <unk>);
// `origin` names the set. Empty when the folder records neither (or its files no longer read).
std::vector<io::Example> validation_examples(const run::ModelFolder& f, int64_t count, std::string* origin);

// The first line of at least two tokens of a text run's validation text (else its training
// text) as ids; empty when the run records none or the file is gone. `origin` names the file.
std::vector<int64_t> first_text_line(const run::ModelFolder& f, std::string* origin);

// A fine-tuning run's (sft or dpo, decoder-only) first prompt of its validation pairs (else its
// training pairs), templated as in training, as ids; empty when the run records none, the file
// is gone or the folder has no vocabulary. `origin` names the file.
std::vector<int64_t> first_pair_prompt(const run::ModelFolder& f, std::string* origin);

// The config table: the folder, parameter count, vocabulary, every model key and every
// training key (nested values as compact JSON).
std::vector<std::pair<std::string, std::string>> config_table(const run::ModelFolder& f);

// "attn report: <the folder's last name>".
std::string report_title(const std::string& run_dir);

}  // namespace attn::run_report
