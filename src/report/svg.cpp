// The SVG builder: element serialisation, number formatting and atomic file saving.
// Numbers are printed with std::to_chars so the bytes do not depend on the locale; the file
// writer is a small local helper (temporary file + rename) because attn_report depends only
// on attn_core. No fsync: a report is cheap to regenerate, unlike a checkpoint.
#include "attn/report/svg.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "attn/core/error.h"

namespace attn::report {
namespace {

const char* anchor_name(Anchor a) {
  switch (a) {
    case Anchor::Start:
      return "start";
    case Anchor::Middle:
      return "middle";
    case Anchor::End:
      return "end";
  }
  return "start";
}

// Appends ` name="value"` with the value escaped.
void attr(std::string& out, const char* name, std::string_view value) {
  out += ' ';
  out += name;
  out += "=\"";
  out += xml_escape(value);
  out += '"';
}

void num_attr(std::string& out, const char* name, double v) {
  out += ' ';
  out += name;
  out += "=\"";
  out += format_number(v);
  out += '"';
}

void check_finite(const char* op, std::initializer_list<double> values) {
  for (double v : values) {
    ATTN_CHECK(std::isfinite(v), op, "non-finite coordinate ", v);
  }
}

std::atomic<uint64_t> g_temp_counter{0};

}  // namespace

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        // Control characters other than tab/newline are not allowed in XML 1.0: drop them.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') break;
        out += c;
    }
  }
  return out;
}

std::string format_number(double v, int decimals) {
  ATTN_CHECK(std::isfinite(v), "svg", "cannot print the non-finite number ", v);
  ATTN_CHECK(decimals >= 0 && decimals <= 12, "svg", "decimals must be in [0, 12], got ", decimals);
  std::array<char, 64> buf{};
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v, std::chars_format::fixed, decimals);
  ATTN_CHECK(ec == std::errc(), "svg", "number too large to print: ", v);
  std::string s(buf.data(), end);
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

double text_width(std::string_view text, double font_size) {
  size_t code_points = 0;
  for (char c : text) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++code_points;  // skip UTF-8 continuation bytes
  }
  return 0.6 * font_size * static_cast<double>(code_points);
}

std::string Rgb::hex() const {
  static const char* digits = "0123456789abcdef";
  std::string s = "#";
  for (uint8_t c : {r, g, b}) {
    s += digits[c >> 4];
    s += digits[c & 15];
  }
  return s;
}

double Rgb::luminance() const {
  auto lin = [](uint8_t c) {
    const double v = c / 255.0;
    return v <= 0.04045 ? v / 12.92 : std::pow((v + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
}

void Svg::rect(double x, double y, double w, double h, const Paint& paint, std::string_view tooltip) {
  check_finite("svg.rect", {x, y, w, h, paint.stroke_width, paint.opacity});
  ATTN_CHECK(w >= 0 && h >= 0, "svg.rect", "negative size ", w, " x ", h);
  std::string& o = body_;
  o += "<rect";
  num_attr(o, "x", x);
  num_attr(o, "y", y);
  num_attr(o, "width", w);
  num_attr(o, "height", h);
  attr(o, "fill", paint.fill.empty() ? "none" : paint.fill);
  if (paint.opacity != 1) num_attr(o, "fill-opacity", paint.opacity);
  if (!paint.stroke.empty()) {
    attr(o, "stroke", paint.stroke);
    num_attr(o, "stroke-width", paint.stroke_width);
    if (!paint.dash.empty()) attr(o, "stroke-dasharray", paint.dash);
  }
  if (tooltip.empty()) {
    o += "/>\n";
  } else {
    o += "><title>";
    o += xml_escape(tooltip);
    o += "</title></rect>\n";
  }
}

void Svg::line(double x1, double y1, double x2, double y2, const std::string& stroke, double width,
               const std::string& dash) {
  check_finite("svg.line", {x1, y1, x2, y2, width});
  std::string& o = body_;
  o += "<line";
  num_attr(o, "x1", x1);
  num_attr(o, "y1", y1);
  num_attr(o, "x2", x2);
  num_attr(o, "y2", y2);
  attr(o, "stroke", stroke);
  num_attr(o, "stroke-width", width);
  if (!dash.empty()) attr(o, "stroke-dasharray", dash);
  o += "/>\n";
}

void Svg::polyline(const std::vector<Point>& points, const std::string& stroke, double width, const std::string& dash) {
  ATTN_CHECK(!points.empty(), "svg.polyline", "needs at least one point");
  std::string pts;
  for (const Point& p : points) {
    check_finite("svg.polyline", {p.x, p.y});
    if (!pts.empty()) pts += ' ';
    pts += format_number(p.x);
    pts += ',';
    pts += format_number(p.y);
  }
  std::string& o = body_;
  o += "<polyline";
  attr(o, "points", pts);
  o += " fill=\"none\"";
  attr(o, "stroke", stroke);
  num_attr(o, "stroke-width", width);
  o += " stroke-linejoin=\"round\" stroke-linecap=\"round\"";
  if (!dash.empty()) attr(o, "stroke-dasharray", dash);
  o += "/>\n";
}

void Svg::circle(double cx, double cy, double r, const std::string& fill) {
  check_finite("svg.circle", {cx, cy, r});
  std::string& o = body_;
  o += "<circle";
  num_attr(o, "cx", cx);
  num_attr(o, "cy", cy);
  num_attr(o, "r", r);
  attr(o, "fill", fill);
  o += "/>\n";
}

void Svg::text(double x, double y, std::string_view text, const TextStyle& style) {
  check_finite("svg.text", {x, y, style.size, style.rotate});
  std::string& o = body_;
  o += "<text";
  num_attr(o, "x", x);
  num_attr(o, "y", y);
  num_attr(o, "font-size", style.size);
  if (style.anchor != Anchor::Start) attr(o, "text-anchor", anchor_name(style.anchor));
  if (style.bold) o += " font-weight=\"bold\"";
  attr(o, "fill", style.fill);
  if (style.rotate != 0) {
    attr(o, "transform",
         "rotate(" + format_number(style.rotate) + " " + format_number(x) + " " + format_number(y) + ")");
  }
  o += '>';
  o += xml_escape(text);
  o += "</text>\n";
}

void Svg::begin_group(double dx, double dy, bool crisp_edges, std::string_view css_class) {
  check_finite("svg.group", {dx, dy});
  body_ += "<g transform=\"translate(" + format_number(dx) + " " + format_number(dy) + ")\"";
  if (!css_class.empty()) attr(body_, "class", css_class);
  body_ += crisp_edges ? " shape-rendering=\"crispEdges\">\n" : ">\n";
  ++open_groups_;
}

void Svg::end_group() {
  ATTN_CHECK(open_groups_ > 0, "svg.group", "end_group without a matching begin_group");
  body_ += "</g>\n";
  --open_groups_;
}

void Svg::embed(const Svg& other, double dx, double dy) {
  ATTN_CHECK(other.open_groups_ == 0, "svg.embed", "the embedded figure has ", other.open_groups_,
             " unclosed group(s)");
  begin_group(dx, dy);
  body_ += other.body_;
  end_group();
}

std::string Svg::document(double width, double height, std::string_view title) const {
  ATTN_CHECK(open_groups_ == 0, "svg", open_groups_, " unclosed group(s)");
  check_finite("svg", {width, height});
  ATTN_CHECK(width > 0 && height > 0, "svg", "document size must be positive, got ", width, " x ", height);
  const std::string w = format_number(width), h = format_number(height);
  std::string o;
  o.reserve(body_.size() + 512);
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + w + "\" height=\"" + h +
       "\" viewBox=\"0 0 " + w + " " + h + "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n";
  if (!title.empty()) {
    o += "<title>";
    o += xml_escape(title);
    o += "</title>\n";
  }
  o += "<rect x=\"0\" y=\"0\" width=\"" + w + "\" height=\"" + h + "\" fill=\"#ffffff\"/>\n";
  o += body_;
  o += "</svg>\n";
  return o;
}

void save_text_file(const std::string& path, std::string_view text) {
  namespace fs = std::filesystem;
  ATTN_CHECK(!path.empty(), "save_text_file", "empty path");
  const fs::path target(path);
  ATTN_CHECK(target.has_filename(), "save_text_file", "'", path, "' names a directory, not a file");
  fs::path temp = target;
  temp.replace_filename("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                        std::to_string(g_temp_counter.fetch_add(1)));
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    ATTN_CHECK(out.good(), "save_text_file", "cannot create '", temp.string(), "' for '", path, "'");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out.good()) {
      out.close();
      std::error_code ignored;
      fs::remove(temp, ignored);
      fail("save_text_file", "write to '", temp.string(), "' failed");
    }
  }
  std::error_code ec;
  fs::rename(temp, target, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    fail("save_text_file", "cannot rename '", temp.string(), "' to '", path, "': ", ec.message());
  }
}

}  // namespace attn::report
