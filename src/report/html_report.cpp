// The HTML report: configuration and metrics tables, inlined SVG figures with captions, and
// free-text sections. Built as one string and written atomically with save_text_file.
// Deliberately static: no scripts, no external styles or fonts, no generation timestamp.
#include "attn/report/html_report.h"

#include <array>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "attn/core/error.h"
#include "attn/report/svg.h"

namespace attn::report {

MetricValue::MetricValue(double v) : numeric(true) {
  if (std::isnan(v)) {
    text = "nan";
  } else if (std::isinf(v)) {
    text = v > 0 ? "inf" : "-inf";
  } else if (v == std::round(v) && std::abs(v) < 1e15) {
    text = std::to_string(static_cast<int64_t>(v));
  } else {
    std::array<char, 64> buf{};
    auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v, std::chars_format::general, 6);
    text = ec == std::errc() ? std::string(buf.data(), end) : "?";
  }
}

namespace {

constexpr const char* kStyle = R"css(
body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; color: #222; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; line-height: 1.45; }
h1 { font-size: 1.6em; border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { font-size: 1.25em; margin-top: 2em; }
table { border-collapse: collapse; margin: .5em 0; font-size: .92em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.scroll { overflow-x: auto; }
figure { margin: 1.5em 0; padding: .8em; border: 1px solid #e4e4e4; border-radius: 4px; }
figure h3 { margin: 0 0 .5em 0; font-size: 1.05em; }
figure svg, figure img { max-width: 100%; height: auto; display: block; }
figcaption { color: #555; font-size: .92em; margin-top: .5em; }
pre { background: #f7f7f7; padding: .8em; overflow-x: auto; border: 1px solid #e4e4e4; }
nav ul { margin: .3em 0; }
)css";

// HTML-escapes text (the same entities as XML).
std::string esc(std::string_view s) { return xml_escape(s); }

std::string read_whole(const std::filesystem::path& p, const std::string& file) {
  std::ifstream in(p, std::ios::binary);
  ATTN_CHECK(in.good(), "report.write_report", "cannot read figure '", file, "' (looked for '", p.string(), "')");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool ends_with_ci(const std::string& s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  for (size_t i = 0; i < suffix.size(); ++i) {
    char c = s[s.size() - suffix.size() + i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != suffix[i]) return false;
  }
  return true;
}

// The <svg> element of an SVG file, without an XML declaration or doctype before it.
std::string svg_element(const std::string& text, const std::string& file) {
  const size_t start = text.find("<svg");
  ATTN_CHECK(start != std::string::npos, "report.write_report", "figure '", file, "' holds no <svg> element");
  const size_t end = text.rfind("</svg>");
  ATTN_CHECK(end != std::string::npos && end > start, "report.write_report", "figure '", file,
             "' has no closing </svg>");
  return text.substr(start, end + 6 - start);
}

void metrics_table(std::string& o, const std::vector<MetricsRow>& rows) {
  std::vector<std::string> columns;
  for (const MetricsRow& row : rows) {
    for (const auto& [name, value] : row) {
      bool seen = false;
      for (const auto& c : columns) seen = seen || c == name;
      if (!seen) columns.push_back(name);
    }
  }
  o += "<div class=\"scroll\"><table>\n<tr>";
  for (const auto& c : columns) o += "<th>" + esc(c) + "</th>";
  o += "</tr>\n";
  for (const MetricsRow& row : rows) {
    o += "<tr>";
    for (const auto& c : columns) {
      const MetricValue* cell = nullptr;
      for (const auto& [name, value] : row) {
        if (name == c) cell = &value;
      }
      if (cell == nullptr) {
        o += "<td></td>";
      } else {
        o += cell->numeric ? "<td class=\"num\">" : "<td>";
        o += esc(cell->text) + "</td>";
      }
    }
    o += "</tr>\n";
  }
  o += "</table></div>\n";
}

}  // namespace

std::string render_report(const ReportInput& in, const std::string& base_dir) {
  namespace fs = std::filesystem;
  const std::string title = in.title.empty() ? "Training report" : in.title;
  std::string o;
  o += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  o += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  o += "<title>" + esc(title) + "</title>\n<style>" + std::string(kStyle) + "</style>\n</head>\n<body>\n";
  o += "<h1>" + esc(title) + "</h1>\n";

  // Contents.
  o += "<nav><ul>\n";
  if (!in.config.empty()) o += "<li><a href=\"#config\">Configuration</a></li>\n";
  if (!in.metrics.empty()) o += "<li><a href=\"#metrics\">Metrics</a></li>\n";
  for (size_t i = 0; i < in.figures.size(); ++i) {
    o += "<li><a href=\"#fig-" + std::to_string(i + 1) + "\">" + esc(in.figures[i].title) + "</a></li>\n";
  }
  for (size_t i = 0; i < in.sections.size(); ++i) {
    o += "<li><a href=\"#sec-" + std::to_string(i + 1) + "\">" + esc(in.sections[i].title) + "</a></li>\n";
  }
  o += "</ul></nav>\n";

  if (!in.config.empty()) {
    o += "<h2 id=\"config\">Configuration</h2>\n<table>\n";
    for (const auto& [k, v] : in.config) o += "<tr><th>" + esc(k) + "</th><td>" + esc(v) + "</td></tr>\n";
    o += "</table>\n";
  }
  if (!in.metrics.empty()) {
    o += "<h2 id=\"metrics\">Metrics</h2>\n";
    metrics_table(o, in.metrics);
  }
  if (!in.figures.empty()) o += "<h2>Figures</h2>\n";
  for (size_t i = 0; i < in.figures.size(); ++i) {
    const FigureRef& f = in.figures[i];
    ATTN_CHECK(!f.file.empty(), "report.write_report", "figure '", f.title, "' has no file");
    o += "<figure id=\"fig-" + std::to_string(i + 1) + "\">\n<h3>" + esc(f.title) + "</h3>\n";
    if (ends_with_ci(f.file, ".svg")) {
      o += svg_element(read_whole(fs::path(base_dir) / f.file, f.file), f.file);
      o += "\n";
    } else {
      ATTN_CHECK(fs::exists(fs::path(base_dir) / f.file), "report.write_report", "figure file '", f.file,
                 "' not found in '", base_dir, "'");
      o += "<img src=\"" + esc(f.file) + "\" alt=\"" + esc(f.title) + "\">\n";
    }
    o += "<figcaption>" + esc(f.caption) + (f.caption.empty() ? "" : " ") + "(<a href=\"" + esc(f.file) + "\">" +
         esc(f.file) + "</a>)</figcaption>\n</figure>\n";
  }
  for (size_t i = 0; i < in.sections.size(); ++i) {
    const TextSection& s = in.sections[i];
    o += "<h2 id=\"sec-" + std::to_string(i + 1) + "\">" + esc(s.title) + "</h2>\n";
    if (s.preformatted) {
      o += "<pre>" + esc(s.body) + "</pre>\n";
    } else {
      size_t pos = 0;
      while (pos <= s.body.size()) {
        size_t next = s.body.find("\n\n", pos);
        if (next == std::string::npos) next = s.body.size();
        const std::string para = s.body.substr(pos, next - pos);
        if (para.find_first_not_of(" \n\t") != std::string::npos) o += "<p>" + esc(para) + "</p>\n";
        pos = next + 2;
      }
    }
  }
  o += "</body>\n</html>\n";
  return o;
}

void write_report(const std::string& path, const ReportInput& input) {
  namespace fs = std::filesystem;
  ATTN_CHECK(!path.empty(), "report.write_report", "empty path");
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  save_text_file(path, render_report(input, dir.string()));
}

}  // namespace attn::report
