// attn/report/html_report.h — one self-contained report.html for a training run.
// SVG figures are inlined into the page (their text, not an <img> link), so the page shows
// every figure when moved or mailed as one file; the figure files stay next to it and are
// linked from the captions. Other image types (e.g. .png) are linked with <img>. Inline CSS,
// no JavaScript, no timestamp: the same input gives the same bytes. Figure files are trusted
// (written by figures.h); they are inlined as they are, not sanitised.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace attn::report {

// One cell of the metrics table: text, or a number printed with up to 6 significant digits
// (integers in full; NaN and infinity as "nan" / "inf", since a diverged loss must show).
struct MetricValue {
  std::string text{};
  bool numeric = false;

  MetricValue(const char* s) : text(s) {}             // NOLINT: implicit by design
  MetricValue(std::string s) : text(std::move(s)) {}  // NOLINT
  MetricValue(double v);                              // NOLINT
  // Any integer type (int, int64_t, size_t, ...), printed in full; bool is not a number here.
  template <std::integral I>
  MetricValue(I v) requires(!std::same_as<I, bool>) : text(std::to_string(v)), numeric(true) {}  // NOLINT
};

// One row of the metrics table, column name -> value, in column order. Columns are the union
// over rows in order of first appearance; a row without a column leaves that cell empty.
using MetricsRow = std::vector<std::pair<std::string, MetricValue>>;

struct FigureRef {
  std::string title{};
  std::string file{};     // relative to the report's directory (e.g. "fig_07_training_curve.svg")
  std::string caption{};  // plain text
};

struct TextSection {
  std::string title{};
  std::string body{};        // plain text (escaped)
  bool preformatted = true;  // <pre> (e.g. sample translations) or paragraphs split at blank lines
};

struct ReportInput {
  std::string title{};
  std::vector<std::pair<std::string, std::string>> config{};  // key -> value, in order
  std::vector<MetricsRow> metrics{};
  std::vector<FigureRef> figures{};
  std::vector<TextSection> sections{};
};

// The HTML text; figure files are read relative to base_dir. A missing or unreadable figure,
// or a .svg file that does not hold an <svg> element, is an attn::Error.
std::string render_report(const ReportInput& input, const std::string& base_dir);

// Renders with base_dir = the directory of `path` and writes `path` atomically.
void write_report(const std::string& path, const ReportInput& input);

}  // namespace attn::report
