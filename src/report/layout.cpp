// Layout helpers for the figures: block stacking, round ticks, tick-label formats, label
// thinning and the colour bar. Everything is computed from character counts, never from font
// metrics, so the same input gives the same bytes on every machine.
#include "layout.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

#include "attn/core/error.h"

namespace attn::report::detail {

Block hstack(const std::vector<Block>& blocks, double gap) {
  Block out;
  double x = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i > 0) x += gap;
    out.svg.embed(blocks[i].svg, x, 0);
    x += blocks[i].width;
    out.height = std::max(out.height, blocks[i].height);
  }
  out.width = x;
  return out;
}

Block vstack(const std::vector<Block>& blocks, double gap) {
  Block out;
  double y = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i > 0) y += gap;
    out.svg.embed(blocks[i].svg, 0, y);
    y += blocks[i].height;
    out.width = std::max(out.width, blocks[i].width);
  }
  out.height = y;
  return out;
}

Block titled(const Block& block, const std::string& title) {
  if (title.empty()) return block;
  Block out;
  const double title_h = kPad + kTitleFont + 6;
  out.width = std::max(block.width, text_width(title, kTitleFont) + 2 * kPad);
  out.height = block.height + title_h;
  TextStyle style{.size = kTitleFont, .anchor = Anchor::Middle, .bold = true};
  out.svg.text(out.width / 2, kPad + kTitleFont, title, style);
  out.svg.embed(block.svg, (out.width - block.width) / 2, title_h);
  return out;
}

namespace {

// The 1, 2, 5 x 10^k step nearest to raw (on a log-ish scale), as plotting libraries do.
double nice_step(double raw) {
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  if (norm < 1.5) return mag;
  if (norm < 3.0) return 2 * mag;
  if (norm < 7.0) return 5 * mag;
  return 10 * mag;
}

}  // namespace

Ticks nice_ticks(double lo, double hi, int target, bool extend, double min_step) {
  ATTN_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "report.ticks", "bad range [", lo, ", ", hi, "]");
  if (hi - lo <= std::max(std::abs(lo), std::abs(hi)) * 1e-12) {
    const double pad = lo == 0 ? 1.0 : std::abs(lo) * 0.5;
    lo -= pad;
    hi += pad;
  }
  double step = nice_step((hi - lo) / std::max(target, 1));
  if (min_step > 0) step = std::max(step, min_step);
  Ticks t;
  if (extend) {
    lo = std::floor(lo / step + 1e-9) * step;
    hi = std::ceil(hi / step - 1e-9) * step;
  }
  t.lo = lo;
  t.hi = hi;
  const double first = std::ceil(lo / step - 1e-9);
  const double last = std::floor(hi / step + 1e-9);
  for (double k = first; k <= last && t.values.size() < 100; k += 1) t.values.push_back(k * step);
  t.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  return t;
}

std::string format_fixed(double v, int decimals) {
  ATTN_CHECK(std::isfinite(v), "report", "cannot print the non-finite number ", v);
  std::array<char, 64> buf{};
  auto [end, ec] =
      std::to_chars(buf.data(), buf.data() + buf.size(), v, std::chars_format::fixed, std::clamp(decimals, 0, 12));
  ATTN_CHECK(ec == std::errc(), "report", "number too large to print: ", v);
  std::string s(buf.data(), end);
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

std::string format_short(double v) {
  ATTN_CHECK(std::isfinite(v), "report", "cannot print the non-finite number ", v);
  const double a = std::abs(v);
  if (a == 0) return "0";
  if (a >= 1e5 || a < 1e-3) {
    std::array<char, 64> buf{};
    auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v, std::chars_format::scientific, 1);
    ATTN_CHECK(ec == std::errc(), "report", "cannot print ", v);
    std::string s(buf.data(), end);  // "4.7e-04" -> "4.7e-4", "1.2e+05" -> "1.2e5"
    const size_t e = s.find('e');
    std::string exponent = s.substr(e + 1);
    const bool negative = exponent[0] == '-';
    exponent.erase(0, exponent.find_first_not_of("+-0"));
    return s.substr(0, e + 1) + (negative ? "-" : "") + exponent;
  }
  const int decimals = std::clamp(2 - static_cast<int>(std::floor(std::log10(a))), 0, 6);
  return format_number(v, decimals);
}

namespace {

// 1, 2, 5, 10, 20, 50, ...: strides that keep numeric labels on round positions.
size_t next_stride(size_t s) {
  size_t mag = 1;
  while (s >= 10 * mag) mag *= 10;
  const size_t lead = s / mag;
  return lead < 2 ? 2 * mag : lead < 5 ? 5 * mag : 10 * mag;
}

double max_width(const std::vector<std::string>& labels, double font) {
  double w = 0;
  for (const auto& l : labels) w = std::max(w, text_width(l, font));
  return w;
}

}  // namespace

// Upright labels fit at a stride when every pair of neighbouring shown labels, each centred
// on its column, keeps 3 px between them.
bool upright_fits(const std::vector<std::string>& labels, double cell, double font, size_t stride) {
  for (size_t j = 0; j + stride < labels.size(); j += stride) {
    const double half_sum = (text_width(labels[j], font) + text_width(labels[j + stride], font)) / 2;
    if (half_sum + 3 > cell * static_cast<double>(stride)) return false;
  }
  return true;
}

LabelLayout layout_column_labels(const std::vector<std::string>& labels, double cell, double font) {
  size_t upright = 1, rotated = 1;
  while (!upright_fits(labels, cell, font, upright) && upright < labels.size()) upright = next_stride(upright);
  while (font * 1.2 > cell * static_cast<double>(rotated) && rotated < labels.size()) rotated = next_stride(rotated);
  LabelLayout l;
  if (upright <= rotated) {
    l.stride = upright;
    l.extent = font + 6;
  } else {
    l.stride = rotated;
    l.rotated = true;
    l.extent = max_width(labels, font) + 8;
  }
  return l;
}

LabelLayout layout_row_labels(const std::vector<std::string>& labels, double cell, double font) {
  LabelLayout l;
  while (font * 1.15 > cell * static_cast<double>(l.stride) && l.stride < labels.size()) {
    l.stride = next_stride(l.stride);
  }
  l.extent = max_width(labels, font) + 6;
  return l;
}

void draw_column_labels(Svg& svg, double x0, double y0, double cell, const std::vector<std::string>& labels,
                        const LabelLayout& layout) {
  for (size_t j = 0; j < labels.size(); j += layout.stride) {
    const double cx = x0 + (static_cast<double>(j) + 0.5) * cell;
    svg.line(cx, y0, cx, y0 + 3, kFrame, 0.8);
    if (layout.rotated) {
      // Rotated by -90 degrees the text reads upwards and its glyphs lie left of the baseline.
      svg.text(cx + 0.35 * kTickFont, y0 + 5, labels[j],
               {.size = kTickFont, .anchor = Anchor::End, .fill = kInk, .rotate = -90});
    } else {
      svg.text(cx, y0 + 4 + kTickFont, labels[j], {.size = kTickFont, .anchor = Anchor::Middle, .fill = kInk});
    }
  }
}

void draw_row_labels(Svg& svg, double x_right, double y0, double cell, const std::vector<std::string>& labels,
                     const LabelLayout& layout) {
  for (size_t i = 0; i < labels.size(); i += layout.stride) {
    const double cy = y0 + (static_cast<double>(i) + 0.5) * cell;
    svg.line(x_right - 3, cy, x_right, cy, kFrame, 0.8);
    svg.text(x_right - 5, cy + 0.35 * kTickFont, labels[i], {.size = kTickFont, .anchor = Anchor::End, .fill = kInk});
  }
}

Block colorbar(Palette palette, double vmin, double vmax, double height, const std::string& title) {
  constexpr double kBarWidth = 14;
  constexpr int kSteps = 64;
  Block b;
  height = std::max(height, 60.0);
  // The gradient as stacked bands, top = vmax; no <linearGradient>, whose ids would clash
  // when several figures are inlined into one HTML page.
  b.svg.begin_group(0, 0, true, "colorbar");
  const double band = height / kSteps;
  for (int k = 0; k < kSteps; ++k) {
    const double t = vmax > vmin ? 1.0 - (k + 0.5) / kSteps : 0.5;
    const double h = k + 1 < kSteps ? band + 0.5 : band;  // overlap so no seam shows
    b.svg.rect(0, k * band, kBarWidth, h, {.fill = palette_color(palette, t).hex()});
  }
  b.svg.end_group();
  b.svg.rect(0, 0, kBarWidth, height, {.stroke = kFrame, .stroke_width = 0.8});

  std::vector<std::pair<double, std::string>> marks;  // (y, label)
  if (vmax > vmin) {
    marks.push_back({0, format_short(vmax)});
    marks.push_back({height, format_short(vmin)});
    const Ticks t = nice_ticks(vmin, vmax, 4, false);
    for (double v : t.values) {
      const double y = (vmax - v) / (vmax - vmin) * height;
      if (y < kTickFont * 1.6 || y > height - kTickFont * 1.6) continue;  // would touch an end label
      marks.push_back({y, format_fixed(v, t.decimals)});
    }
  } else {
    marks.push_back({height / 2, format_short(vmin)});
  }
  double label_w = 0;
  for (const auto& [y, text] : marks) {
    b.svg.line(kBarWidth, y, kBarWidth + 3, y, kFrame, 0.8);
    b.svg.text(kBarWidth + 5, y + 0.35 * kTickFont, text, {.size = kTickFont, .fill = kInk});
    label_w = std::max(label_w, text_width(text, kTickFont));
  }
  b.width = kBarWidth + 5 + label_w;
  if (!title.empty()) {
    b.width += 6 + kAxisFont;
    b.svg.text(b.width - 2, height / 2, title,
               {.size = kAxisFont, .anchor = Anchor::Middle, .fill = kInk, .rotate = -90});
  }
  b.height = height + kTickFont * 0.5;  // the bottom label hangs below the bar
  return b;
}

Block swatch_legend(const std::vector<std::pair<Rgb, std::string>>& entries) {
  Block b;
  double y = 0;
  for (const auto& [color, label] : entries) {
    b.svg.rect(0, y, 14, 14, {.fill = color.hex(), .stroke = kFrame, .stroke_width = 0.8});
    b.svg.text(20, y + 7 + 0.35 * kTickFont, label, {.size = kTickFont, .fill = kInk});
    b.width = std::max(b.width, 20 + text_width(label, kTickFont));
    y += 22;
  }
  b.height = y;
  return b;
}

}  // namespace attn::report::detail
