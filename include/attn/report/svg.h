// attn/report/svg.h — a tiny SVG 1.1 builder for the figures of a training report.
// Elements (rect, line, polyline, circle, text, translated groups) are appended to a body
// and wrapped in an <svg> document at the end. Output is deterministic: numbers go through
// std::to_chars (locale-free), and no ids or gradients are emitted, so several documents can
// be inlined into one HTML page without clashing. It deliberately does no layout or clipping:
// figures.cpp computes every coordinate. A non-finite coordinate is an attn::Error.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attn::report {

// Escapes & < > " ' for XML text and attribute values.
std::string xml_escape(std::string_view text);

// `v` in fixed notation with at most `decimals` decimals, trailing zeros trimmed and "-0"
// printed as "0" (1.50 -> "1.5", 2.0 -> "2"). Throws attn::Error for NaN or infinity.
std::string format_number(double v, int decimals = 2);

// Estimated rendered width of `text` in a sans-serif font of size `font_size` (UTF-8 code
// points times 0.6 em); used for layout, so it errs on the wide side.
double text_width(std::string_view text, double font_size);

// An sRGB colour.
struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  std::string hex() const;  // "#rrggbb"
  // Relative luminance in [0, 1] (sRGB weights), used to pick black or white text on a cell.
  double luminance() const;
  bool operator==(const Rgb&) const = default;
};

struct Point {
  double x = 0, y = 0;
};

// How a shape is filled and outlined; empty colour strings mean "none".
struct Paint {
  std::string fill{};
  std::string stroke{};
  double stroke_width = 1;
  double opacity = 1;  // fill-opacity
  std::string dash{};  // stroke-dasharray, e.g. "4 3"
};

enum class Anchor { Start, Middle, End };

struct TextStyle {
  double size = 12;
  Anchor anchor = Anchor::Start;
  bool bold = false;
  std::string fill = "#222222";
  double rotate = 0;  // degrees, about the text's (x, y)
};

// An SVG document under construction. Coordinates are in pixels, y pointing down.
class Svg {
 public:
  void rect(double x, double y, double w, double h, const Paint& paint, std::string_view tooltip = {});
  void line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1,
            const std::string& dash = {});
  // An open polyline; needs at least one point. NaN is an error here: callers split at gaps.
  void polyline(const std::vector<Point>& points, const std::string& stroke, double width = 1.5,
                const std::string& dash = {});
  void circle(double cx, double cy, double r, const std::string& fill);
  void text(double x, double y, std::string_view text, const TextStyle& style = {});
  // Opens <g transform="translate(dx,dy)">; every begin_group needs an end_group. crisp_edges
  // turns off anti-aliasing inside (no hairline seams between heatmap cells); css_class names
  // the group for styling and tests (the figures use "cells" and "colorbar").
  void begin_group(double dx, double dy, bool crisp_edges = false, std::string_view css_class = {});
  void end_group();
  // Appends another builder's body translated by (dx, dy).
  void embed(const Svg& other, double dx, double dy);

  // The complete document: <svg xmlns width height viewBox> with an optional <title>, a white
  // background, and the body. Throws attn::Error if groups are unbalanced or the size is not positive.
  std::string document(double width, double height, std::string_view title = {}) const;
  const std::string& body() const { return body_; }

 private:
  std::string body_;
  int open_groups_ = 0;
};

// Writes `text` to `path` atomically (temporary file in the same directory, then rename),
// so a reader never sees a half-written figure. Throws attn::Error naming the path on failure.
void save_text_file(const std::string& path, std::string_view text);

}  // namespace attn::report
