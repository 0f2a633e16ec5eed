// The figures of seed 001 as SVG: line charts (training curve), heatmaps with token labels
// and a colour bar, a layer x head grid, the positional-encoding figure and the mask figure.
// Layout is computed here from character-count text widths; drawing goes through Svg.
// Deliberately no model code and no statistics: inputs are plain matrices and series.
#include "attn/report/figures.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>

#include "attn/core/error.h"
#include "layout.h"

namespace attn::report {

using detail::Block;
using detail::kAxisFont;
using detail::kFrame;
using detail::kGridLine;
using detail::kInk;
using detail::kMuted;
using detail::kPad;
using detail::kTickFont;
using detail::kTitleFont;

// ---- colour -------------------------------------------------------------------------------

Rgb palette_color(Palette palette, double t) {
  // Viridis sampled at ten evenly spaced points; RdBu (reversed) from ColorBrewer for signed data.
  // clang-format off
  static constexpr std::array<Rgb, 10> kViridis{{
      {0x44, 0x01, 0x54}, {0x48, 0x28, 0x78}, {0x3e, 0x49, 0x89}, {0x31, 0x68, 0x8e}, {0x26, 0x82, 0x8e},
      {0x1f, 0x9e, 0x89}, {0x35, 0xb7, 0x79}, {0x6e, 0xce, 0x58}, {0xb5, 0xde, 0x2b}, {0xfd, 0xe7, 0x25}}};
  static constexpr std::array<Rgb, 9> kDiverging{{
      {0x21, 0x66, 0xac}, {0x43, 0x93, 0xc3}, {0x92, 0xc5, 0xde}, {0xd1, 0xe5, 0xf0}, {0xf7, 0xf7, 0xf7},
      {0xfd, 0xdb, 0xc7}, {0xf4, 0xa5, 0x82}, {0xd6, 0x60, 0x4d}, {0xb2, 0x18, 0x2b}}};
  // clang-format on
  const Rgb* anchors = palette == Palette::Viridis ? kViridis.data() : kDiverging.data();
  const size_t n = palette == Palette::Viridis ? kViridis.size() : kDiverging.size();
  if (!(t > 0)) t = 0;  // also maps NaN to the low end; callers reject NaN earlier
  if (t > 1) t = 1;
  const double pos = t * static_cast<double>(n - 1);
  const size_t i = std::min(static_cast<size_t>(pos), n - 2);
  const double f = pos - static_cast<double>(i);
  auto mix = [f](uint8_t a, uint8_t b) {
    return static_cast<uint8_t>(std::lround(a + (static_cast<double>(b) - a) * f));
  };
  const Rgb& a = anchors[i];
  const Rgb& b = anchors[i + 1];
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}

std::string series_color(size_t i) {
  static constexpr std::array<const char*, 10> kColors{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                                       "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return kColors[i % kColors.size()];
}

namespace {

std::string default_title(const std::string& op, const std::string& t) { return t.empty() ? op : t; }

// ---- line charts --------------------------------------------------------------------------

Block line_panel(const Panel& panel, double pw, double ph) {
  // Data ranges over finite points; NaN is a gap, infinity an error.
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  bool integer_x = true;
  for (const Series& s : panel.series) {
    ATTN_CHECK(s.x.size() == s.y.size(), "report.line_chart", "series '", s.name, "' has ", s.x.size(),
               " x values but ", s.y.size(), " y values");
    for (size_t i = 0; i < s.x.size(); ++i) {
      ATTN_CHECK(!std::isinf(s.x[i]) && !std::isinf(s.y[i]), "report.line_chart", "series '", s.name,
                 "' has an infinite value at index ", i);
      if (std::isnan(s.x[i]) || std::isnan(s.y[i])) continue;
      xlo = std::min(xlo, s.x[i]);
      xhi = std::max(xhi, s.x[i]);
      ylo = std::min(ylo, s.y[i]);
      yhi = std::max(yhi, s.y[i]);
      integer_x = integer_x && s.x[i] == std::round(s.x[i]);
    }
  }
  const bool has_data = xlo <= xhi;
  if (!has_data) xlo = 0, xhi = 1, ylo = 0, yhi = 1;
  if (panel.y_min) {
    ATTN_CHECK(std::isfinite(*panel.y_min), "report.line_chart", "y_min must be finite");
    ylo = std::min(ylo, *panel.y_min);
  }
  if (panel.y_max) {
    ATTN_CHECK(std::isfinite(*panel.y_max), "report.line_chart", "y_max must be finite");
    yhi = std::max(yhi, *panel.y_max);
  }
  const detail::Ticks xt = detail::nice_ticks(xlo, xhi, 6, true, integer_x ? 1.0 : 0.0);
  const detail::Ticks yt = detail::nice_ticks(ylo, yhi, 5, true);

  double ytick_w = 0;
  for (double v : yt.values) ytick_w = std::max(ytick_w, text_width(detail::format_fixed(v, yt.decimals), kTickFont));
  const double left = kPad + (panel.y_title.empty() ? 0 : kAxisFont + 8) + ytick_w + 8;
  const double top = kPad + (panel.title.empty() ? 0 : kTitleFont + 10);
  auto X = [&](double x) { return left + (x - xt.lo) / (xt.hi - xt.lo) * pw; };
  auto Y = [&](double y) { return top + ph - (y - yt.lo) / (yt.hi - yt.lo) * ph; };

  Block b;
  Svg& svg = b.svg;
  if (!panel.title.empty()) {
    svg.text(left + pw / 2, kPad + kTitleFont, panel.title,
             {.size = kTitleFont - 1, .anchor = Anchor::Middle, .bold = true, .fill = kInk});
  }
  // Grid, frame and ticks.
  for (double v : yt.values) {
    svg.line(left, Y(v), left + pw, Y(v), kGridLine, 1);
    svg.line(left - 4, Y(v), left, Y(v), kFrame, 1);
    svg.text(left - 6, Y(v) + 0.35 * kTickFont, detail::format_fixed(v, yt.decimals),
             {.size = kTickFont, .anchor = Anchor::End, .fill = kInk});
  }
  for (double v : xt.values) {
    svg.line(X(v), top + ph, X(v), top + ph + 4, kFrame, 1);
    svg.text(X(v), top + ph + 6 + kTickFont, detail::format_fixed(v, xt.decimals),
             {.size = kTickFont, .anchor = Anchor::Middle, .fill = kInk});
  }
  svg.rect(left, top, pw, ph, {.stroke = kFrame, .stroke_width = 1});
  double y_cursor = top + ph + 8 + kTickFont;
  if (!panel.x_title.empty()) {
    y_cursor += kAxisFont + 6;
    svg.text(left + pw / 2, y_cursor, panel.x_title, {.size = kAxisFont, .anchor = Anchor::Middle, .fill = kInk});
  }
  if (!panel.y_title.empty()) {
    svg.text(kPad + kAxisFont, top + ph / 2, panel.y_title,
             {.size = kAxisFont, .anchor = Anchor::Middle, .fill = kInk, .rotate = -90});
  }
  if (!has_data) {
    svg.text(left + pw / 2, top + ph / 2, "no data", {.size = kAxisFont, .anchor = Anchor::Middle, .fill = kMuted});
  }

  // Series: one polyline per run of finite points.
  for (size_t si = 0; si < panel.series.size(); ++si) {
    const Series& s = panel.series[si];
    const std::string color = s.color.empty() ? series_color(si) : s.color;
    const std::string dash = s.dashed ? "6 4" : "";
    std::vector<Point> run;
    auto flush = [&] {
      if (run.size() >= 2) svg.polyline(run, color, 2, dash);
      if (run.size() == 1) svg.circle(run[0].x, run[0].y, 2.5, color);  // an isolated point stays visible
      run.clear();
    };
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (std::isnan(s.x[i]) || std::isnan(s.y[i])) {
        flush();
        continue;
      }
      run.push_back({X(s.x[i]), Y(s.y[i])});
    }
    flush();
    if (s.markers && s.x.size() <= 60) {
      for (size_t i = 0; i < s.x.size(); ++i) {
        if (!std::isnan(s.x[i]) && !std::isnan(s.y[i])) svg.circle(X(s.x[i]), Y(s.y[i]), 2.5, color);
      }
    }
  }

  // Legend below the plot, wrapping at the plot's width.
  double lx = left, ly = y_cursor + 8;
  bool any = false;
  for (size_t si = 0; si < panel.series.size(); ++si) {
    const Series& s = panel.series[si];
    if (s.name.empty()) continue;
    const double item_w = 26 + text_width(s.name, kTickFont) + 14;
    if (any && lx + item_w > left + pw) {
      lx = left;
      ly += kTickFont + 8;
    }
    const std::string color = s.color.empty() ? series_color(si) : s.color;
    const double cy = ly + kTickFont / 2;
    svg.line(lx, cy, lx + 20, cy, color, 2, s.dashed ? "6 4" : "");
    if (s.markers) svg.circle(lx + 10, cy, 2.5, color);
    svg.text(lx + 26, cy + 0.35 * kTickFont, s.name, {.size = kTickFont, .fill = kInk});
    lx += item_w;
    any = true;
  }
  if (any) y_cursor = ly + kTickFont + 2;
  double width = left + pw + kPad + 6;
  if (!panel.title.empty()) width = std::max(width, left + pw / 2 + text_width(panel.title, kTitleFont) / 2 + kPad);
  b.width = width;
  b.height = y_cursor + kPad;
  return b;
}

// ---- heatmaps -----------------------------------------------------------------------------

void check_finite_matrix(const Matrix& m, const char* op) {
  ATTN_CHECK(!m.empty() && m.rows > 0 && m.cols > 0 && static_cast<int64_t>(m.values.size()) == m.rows * m.cols, op,
             "needs a non-empty matrix with rows * cols values, got ", m.rows, " x ", m.cols, " with ", m.values.size(),
             " values");
  for (size_t i = 0; i < m.values.size(); ++i) {
    ATTN_CHECK(std::isfinite(m.values[i]), op, "non-finite value ", m.values[i], " at row ",
               static_cast<int64_t>(i) / m.cols, ", col ", static_cast<int64_t>(i) % m.cols, " of a ", m.rows, " x ",
               m.cols, " matrix");
  }
}

std::vector<std::string> resolve_labels(const std::vector<std::string>& given, int64_t n, const char* op,
                                        const char* what) {
  if (given.empty()) {
    std::vector<std::string> out;
    for (int64_t i = 0; i < n; ++i) out.push_back(std::to_string(i));
    return out;
  }
  ATTN_CHECK(static_cast<int64_t>(given.size()) == n, op, "expected ", n, " ", what, ", got ", given.size());
  return given;
}

// The colour range: the given ends or the data's min and max.
std::pair<double, double> value_range(const std::vector<const Matrix*>& ms, std::optional<double> vmin,
                                      std::optional<double> vmax, const char* op) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const Matrix* m : ms) {
    for (double v : m->values) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (vmin) {
    ATTN_CHECK(std::isfinite(*vmin), op, "vmin must be finite");
    lo = *vmin;
  }
  if (vmax) {
    ATTN_CHECK(std::isfinite(*vmax), op, "vmax must be finite");
    hi = *vmax;
  }
  ATTN_CHECK(lo <= hi, op, "vmin ", lo, " is above vmax ", hi);
  return {lo, hi};
}

// How each cell is coloured and annotated.
struct CellRender {
  std::function<Rgb(double)> color;
  std::function<std::string(double)> text;  // the annotation of a value
};

CellRender continuous_render(Palette palette, double lo, double hi, int decimals) {
  return {[=](double v) { return palette_color(palette, hi > lo ? (v - lo) / (hi - lo) : 0.5); },
          [=](double v) { return detail::format_fixed(v, decimals); }};
}

// The cells of m with their top-left corner at (x0, y0); annotation font 0 means none.
void draw_cells(Svg& svg, double x0, double y0, const Matrix& m, double cell, const CellRender& render,
                double annotate_font, bool tooltips, const std::vector<std::string>& row_labels,
                const std::vector<std::string>& col_labels, const std::string& tooltip_prefix) {
  svg.begin_group(x0, y0, true, "cells");
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t c = 0; c < m.cols; ++c) {
      const double v = m.at(r, c);
      std::string tip;
      if (tooltips) {
        tip = tooltip_prefix + row_labels[static_cast<size_t>(r)] + " / " + col_labels[static_cast<size_t>(c)] + ": " +
              detail::format_short(v);
      }
      svg.rect(static_cast<double>(c) * cell, static_cast<double>(r) * cell, cell, cell,
               {.fill = render.color(v).hex()}, tip);
    }
  }
  svg.end_group();
  if (annotate_font > 0) {
    for (int64_t r = 0; r < m.rows; ++r) {
      for (int64_t c = 0; c < m.cols; ++c) {
        const double v = m.at(r, c);
        const bool dark = render.color(v).luminance() < 0.35;
        svg.text(x0 + (static_cast<double>(c) + 0.5) * cell,
                 y0 + (static_cast<double>(r) + 0.5) * cell + 0.35 * annotate_font, render.text(v),
                 {.size = annotate_font, .anchor = Anchor::Middle, .fill = dark ? "#ffffff" : "#111111"});
      }
    }
  }
  svg.rect(x0, y0, static_cast<double>(m.cols) * cell, static_cast<double>(m.rows) * cell,
           {.stroke = kFrame, .stroke_width = 0.8});
}

// The annotation font size, or 0 when cells are not annotated.
double annotation_font(const Matrix& m, double cell, Annotate mode, const CellRender& render) {
  if (mode == Annotate::Never) return 0;
  double em_width = 0.6;  // widest annotation, in units of the font size
  for (double v : m.values) em_width = std::max(em_width, text_width(render.text(v), 1.0));
  const double font = std::min(11.0, (cell - 4) / em_width);
  if (mode == Annotate::Always) return std::max(font, 4.0);
  return m.rows * m.cols <= 256 && cell >= 22 && font >= 6.5 ? font : 0;
}

double auto_cell(const Matrix& m, double target, double lo, double hi) {
  return std::clamp(std::floor(target / static_cast<double>(std::max(m.rows, m.cols))), lo, hi);
}

// One heatmap with its labels, titles and colour bar (or, when `legend` is non-empty, a
// swatch legend instead of the colour bar for categorical cells).
Block heatmap_block(const Matrix& m, const HeatmapOptions& o, const CellRender* render_override = nullptr,
                    const std::vector<std::pair<Rgb, std::string>>& legend = {}) {
  check_finite_matrix(m, "report.heatmap");
  const auto rows = resolve_labels(o.row_labels, m.rows, "report.heatmap", "row labels");
  const auto cols = resolve_labels(o.col_labels, m.cols, "report.heatmap", "column labels");
  const auto [lo, hi] = value_range({&m}, o.vmin, o.vmax, "report.heatmap");
  ATTN_CHECK(std::isfinite(o.cell_size) && o.cell_size >= 0, "report.heatmap", "bad cell_size ", o.cell_size);
  ATTN_CHECK(o.annotate_decimals >= 0 && o.annotate_decimals <= 6, "report.heatmap",
             "annotate_decimals must be in [0, 6], got ", o.annotate_decimals);
  const CellRender render =
      render_override ? *render_override : continuous_render(o.palette, lo, hi, o.annotate_decimals);
  const double cell = o.cell_size > 0 ? o.cell_size : auto_cell(m, 360, 3, 40);
  const double font = annotation_font(m, cell, o.annotate, render);
  const detail::LabelLayout rl = detail::layout_row_labels(rows, cell, kTickFont);
  const detail::LabelLayout cl = detail::layout_column_labels(cols, cell, kTickFont);

  const double pw = static_cast<double>(m.cols) * cell, ph = static_cast<double>(m.rows) * cell;
  const double left = kPad + (o.y_title.empty() ? 0 : kAxisFont + 8) + rl.extent;
  const double top = kPad + (o.title.empty() ? 0 : kTitleFont + 10);
  Block b;
  draw_cells(b.svg, left, top, m, cell, render, font, o.tooltips, rows, cols, "");
  detail::draw_row_labels(b.svg, left, top, cell, rows, rl);
  detail::draw_column_labels(b.svg, left, top + ph, cell, cols, cl);
  double bottom = top + ph + cl.extent;
  if (!o.x_title.empty()) {
    bottom += kAxisFont + 6;
    b.svg.text(left + pw / 2, bottom, o.x_title, {.size = kAxisFont, .anchor = Anchor::Middle, .fill = kInk});
  }
  if (!o.y_title.empty()) {
    b.svg.text(kPad + kAxisFont, top + ph / 2, o.y_title,
               {.size = kAxisFont, .anchor = Anchor::Middle, .fill = kInk, .rotate = -90});
  }
  double right = left + pw;
  double side_h = 0;
  if (!legend.empty()) {
    const Block lg = detail::swatch_legend(legend);
    b.svg.embed(lg.svg, right + 14, top);
    right += 14 + lg.width;
    side_h = lg.height;
  } else if (o.colorbar) {
    const Block cb = detail::colorbar(o.palette, lo, hi, ph, o.colorbar_title);
    b.svg.embed(cb.svg, right + 14, top);
    right += 14 + cb.width;
    side_h = cb.height;
  }
  b.width = right + kPad;
  if (!o.title.empty()) {
    b.width = std::max(b.width, left + pw / 2 + text_width(o.title, kTitleFont) / 2 + kPad);
    b.svg.text(left + pw / 2, kPad + kTitleFont, o.title,
               {.size = kTitleFont - 1, .anchor = Anchor::Middle, .bold = true, .fill = kInk});
  }
  b.height = std::max(bottom, top + side_h) + kPad;
  return b;
}

}  // namespace

// ---- public figures -----------------------------------------------------------------------

std::string line_chart(const std::vector<Panel>& panels, const LineChartOptions& options) {
  ATTN_CHECK(!panels.empty(), "report.line_chart", "no panels");
  ATTN_CHECK(std::isfinite(options.plot_width) && std::isfinite(options.plot_height) && options.plot_width >= 40 &&
                 options.plot_height >= 40,
             "report.line_chart", "plot size must be at least 40 x 40, got ", options.plot_width, " x ",
             options.plot_height);
  std::vector<Block> blocks;
  for (const Panel& p : panels) blocks.push_back(line_panel(p, options.plot_width, options.plot_height));
  const Block b = detail::titled(detail::hstack(blocks, 10), options.title);
  return b.svg.document(b.width, b.height, default_title("line chart", options.title));
}

std::string training_curve_figure(const TrainingHistory& h, const std::string& title) {
  auto series = [&](const std::string& name, const std::vector<double>& y, std::vector<Series>& out,
                    const std::string& color, bool dashed) {
    if (y.empty()) return;
    ATTN_CHECK(y.size() == h.epoch.size(), "report.training_curve", name, " has ", y.size(), " values but there are ",
               h.epoch.size(), " epochs");
    // A NaN here means "not evaluated that epoch" (e.g. validation every k epochs): the point
    // is dropped so the evaluated epochs stay connected, instead of leaving a gap.
    Series s{.name = name, .color = color, .dashed = dashed};
    for (size_t i = 0; i < y.size(); ++i) {
      if (std::isnan(y[i])) continue;
      s.x.push_back(h.epoch[i]);
      s.y.push_back(y[i]);
    }
    out.push_back(std::move(s));
  };
  Panel loss{.title = "Loss", .x_title = "epoch", .y_title = "cross-entropy"};
  series("loss", h.loss, loss.series, series_color(0), false);
  series("val_loss", h.val_loss, loss.series, series_color(1), true);
  Panel acc{.title = "Validation accuracy", .x_title = "epoch", .y_title = "accuracy", .y_min = 0.0, .y_max = 1.0};
  series("val_token_acc", h.val_token_acc, acc.series, series_color(2), false);
  series("val_exact_acc", h.val_exact_acc, acc.series, series_color(4), true);
  return line_chart({loss, acc}, {.title = title});
}

std::string heatmap(const Matrix& m, const HeatmapOptions& options) {
  const Block b = heatmap_block(m, options);
  return b.svg.document(b.width, b.height, default_title("heatmap", options.title));
}

std::string heatmap_row(const std::vector<HeatmapPanel>& panels, const std::string& title) {
  ATTN_CHECK(!panels.empty(), "report.heatmap_row", "no panels");
  std::vector<Block> blocks;
  for (const HeatmapPanel& p : panels) blocks.push_back(heatmap_block(p.matrix, p.options));
  const Block b = detail::titled(detail::hstack(blocks, 16), title);
  return b.svg.document(b.width, b.height, default_title("heatmaps", title));
}

std::string heatmap_grid(const std::vector<std::vector<Matrix>>& grid, const HeatmapGridOptions& o) {
  constexpr const char* op = "report.heatmap_grid";
  ATTN_CHECK(!grid.empty() && !grid[0].empty(), op, "empty grid");
  const size_t R = grid.size(), C = grid[0].size();
  std::vector<const Matrix*> all;
  for (size_t i = 0; i < R; ++i) {
    ATTN_CHECK(grid[i].size() == C, op, "grid row ", i, " has ", grid[i].size(), " maps, row 0 has ", C);
    for (const Matrix& m : grid[i]) {
      check_finite_matrix(m, op);
      ATTN_CHECK(m.rows == grid[0][0].rows && m.cols == grid[0][0].cols, op, "all maps must share one shape: ", m.rows,
                 " x ", m.cols, " vs ", grid[0][0].rows, " x ", grid[0][0].cols);
      all.push_back(&m);
    }
  }
  ATTN_CHECK(o.row_titles.empty() || o.row_titles.size() == R, op, "expected ", R, " row titles, got ",
             o.row_titles.size());
  ATTN_CHECK(o.col_titles.empty() || o.col_titles.size() == C, op, "expected ", C, " column titles, got ",
             o.col_titles.size());
  ATTN_CHECK(std::isfinite(o.cell_size) && o.cell_size >= 0, op, "bad cell_size ", o.cell_size);
  const Matrix& first = grid[0][0];
  const auto rows = resolve_labels(o.row_labels, first.rows, op, "row labels");
  const auto cols = resolve_labels(o.col_labels, first.cols, op, "column labels");
  const auto [lo, hi] = value_range(all, o.vmin, o.vmax, op);
  const CellRender render = continuous_render(o.palette, lo, hi, 2);
  const double cell = o.cell_size > 0 ? o.cell_size : auto_cell(first, 150, 2, 24);
  const detail::LabelLayout rl = detail::layout_row_labels(rows, cell, kTickFont);
  const detail::LabelLayout cl = detail::layout_column_labels(cols, cell, kTickFont);

  double row_title_w = 0;
  for (const auto& t : o.row_titles) row_title_w = std::max(row_title_w, text_width(t, kAxisFont));
  const double pw = static_cast<double>(first.cols) * cell, ph = static_cast<double>(first.rows) * cell;
  const double gap = 14;
  const double left =
      kPad + (o.y_title.empty() ? 0 : kAxisFont + 8) + (o.row_titles.empty() ? 0 : row_title_w + 10) + rl.extent;
  const double top = kPad + (o.title.empty() ? 0 : kTitleFont + 12) + (o.col_titles.empty() ? 0 : kAxisFont + 8);
  const double grid_w = static_cast<double>(C) * pw + static_cast<double>(C - 1) * gap;
  const double grid_h = static_cast<double>(R) * ph + static_cast<double>(R - 1) * gap;

  Block b;
  for (size_t i = 0; i < R; ++i) {
    const double y = top + static_cast<double>(i) * (ph + gap);
    for (size_t j = 0; j < C; ++j) {
      const double x = left + static_cast<double>(j) * (pw + gap);
      std::string prefix;
      if (!o.row_titles.empty()) prefix += o.row_titles[i] + ", ";
      if (!o.col_titles.empty()) prefix += o.col_titles[j] + ", ";
      draw_cells(b.svg, x, y, grid[i][j], cell, render, 0, true, rows, cols, prefix);
      if (j == 0) detail::draw_row_labels(b.svg, x, y, cell, rows, rl);
      if (i + 1 == R) detail::draw_column_labels(b.svg, x, y + ph, cell, cols, cl);
      if (i == 0 && !o.col_titles.empty()) {
        b.svg.text(x + pw / 2, top - 8, o.col_titles[j],
                   {.size = kAxisFont, .anchor = Anchor::Middle, .bold = true, .fill = kInk});
      }
    }
    if (!o.row_titles.empty()) {
      b.svg.text(left - rl.extent - 8, y + ph / 2 + 0.35 * kAxisFont, o.row_titles[i],
                 {.size = kAxisFont, .anchor = Anchor::End, .bold = true, .fill = kInk});
    }
  }
  double bottom = top + grid_h + cl.extent;
  if (!o.x_title.empty()) {
    bottom += kAxisFont + 6;
    b.svg.text(left + grid_w / 2, bottom, o.x_title, {.size = kAxisFont, .anchor = Anchor::Middle, .fill = kInk});
  }
  if (!o.y_title.empty()) {
    b.svg.text(kPad + kAxisFont, top + grid_h / 2, o.y_title,
               {.size = kAxisFont, .anchor = Anchor::Middle, .fill = kInk, .rotate = -90});
  }
  const Block cb = detail::colorbar(o.palette, lo, hi, grid_h, o.colorbar_title);
  b.svg.embed(cb.svg, left + grid_w + 16, top);
  b.width = left + grid_w + 16 + cb.width + kPad;
  if (!o.title.empty()) {
    b.width = std::max(b.width, text_width(o.title, kTitleFont) + 2 * kPad);
    b.svg.text(b.width / 2, kPad + kTitleFont, o.title,
               {.size = kTitleFont, .anchor = Anchor::Middle, .bold = true, .fill = kInk});
  }
  b.height = std::max(bottom, top + cb.height) + kPad;
  return b.svg.document(b.width, b.height, default_title("attention grid", o.title));
}

std::string positional_encoding_figure(const Matrix& pe, const std::vector<int64_t>& dims, const std::string& title) {
  constexpr const char* op = "report.positional_encoding_figure";
  check_finite_matrix(pe, op);
  double amax = 0;
  for (double v : pe.values) amax = std::max(amax, std::abs(v));
  if (amax == 0) amax = 1;
  HeatmapOptions ho{.title = "PE[position, dimension]",
                    .x_title = "dimension",
                    .y_title = "position",
                    .palette = Palette::Diverging,
                    .vmin = -amax,
                    .vmax = amax,
                    .annotate = Annotate::Never,
                    .tooltips = false};
  ho.cell_size = std::clamp(
      std::floor(std::min(400.0 / static_cast<double>(pe.cols), 320.0 / static_cast<double>(pe.rows))), 2.0, 24.0);
  const Block heat = heatmap_block(pe, ho);

  Panel curves{.title = "Selected dimensions", .x_title = "position", .y_title = "value"};
  std::vector<double> positions;
  for (int64_t p = 0; p < pe.rows; ++p) positions.push_back(static_cast<double>(p));
  for (int64_t d : dims) {
    ATTN_CHECK(d >= 0 && d < pe.cols, op, "dimension ", d, " out of range for ", pe.rows, " x ", pe.cols, " PE");
    std::vector<double> y;
    for (int64_t p = 0; p < pe.rows; ++p) y.push_back(pe.at(p, d));
    curves.series.push_back({.name = "dim " + std::to_string(d), .x = positions, .y = y, .markers = false});
  }
  std::vector<Block> blocks{heat};
  if (!dims.empty()) {
    const double ph = std::max(160.0, static_cast<double>(pe.rows) * ho.cell_size);
    blocks.push_back(line_panel(curves, 340, ph));
  }
  const Block b = detail::titled(detail::hstack(blocks, 16), title);
  return b.svg.document(b.width, b.height, default_title("positional encoding", title));
}

namespace {

// A mask's cells (1 = masked, 0 = allowed) in two colours, annotated in the additive form.
constexpr Rgb kMaskAllowed{0x43, 0x93, 0xc3}, kMaskMasked{0xd6, 0x60, 0x4d};
CellRender mask_cell_render() {
  return {[](double v) { return v != 0 ? kMaskMasked : kMaskAllowed; },
          [](double v) { return std::string(v != 0 ? "\u2212\u221e" : "0"); }};
}

}  // namespace

std::string mask_figure(const Matrix& mask, const Matrix& weights, const MaskFigureOptions& o) {
  constexpr const char* op = "report.mask_figure";
  check_finite_matrix(mask, op);
  check_finite_matrix(weights, op);
  ATTN_CHECK(mask.rows == weights.rows && mask.cols == weights.cols, op, "mask is ", mask.rows, " x ", mask.cols,
             " but weights are ", weights.rows, " x ", weights.cols);
  for (double v : mask.values) ATTN_CHECK(v == 0 || v == 1, op, "mask entries must be 0 or 1, got ", v);
  const Rgb allowed = kMaskAllowed, masked = kMaskMasked;
  const CellRender mask_render = mask_cell_render();
  HeatmapOptions common{
      .x_title = "key position j", .y_title = "query position i", .row_labels = o.labels, .col_labels = o.labels};
  HeatmapOptions mo = common;
  mo.title = "Mask (additive form)";
  HeatmapOptions wo = common;
  wo.title = "Softmax weights";
  wo.vmin = 0.0;
  wo.vmax = 1.0;
  wo.colorbar_title = "weight";
  const Block left = heatmap_block(mask, mo, &mask_render, {{allowed, "allowed: 0"}, {masked, "masked: \u2212\u221e"}});
  const Block right = heatmap_block(weights, wo);
  const Block b = detail::titled(detail::hstack({left, right}, 16), o.title);
  return b.svg.document(b.width, b.height, default_title("mask", o.title));
}

std::string attention_steps_figure(const AttentionStepsFigure& f) {
  constexpr const char* op = "report.attention_steps_figure";
  for (const Matrix* m : {&f.q, &f.k, &f.v, &f.scores, &f.scaled, &f.weights, &f.out}) check_finite_matrix(*m, op);
  const int64_t Lq = f.q.rows, Lk = f.k.rows, dk = f.q.cols;
  ATTN_CHECK(f.k.cols == dk && f.v.rows == Lk && f.v.cols == dk, op, "Q is ", Lq, " x ", dk, ", K ", f.k.rows, " x ",
             f.k.cols, " and V ", f.v.rows, " x ", f.v.cols, ": K and V must be Lk x ", dk);
  for (const Matrix* m : {&f.scores, &f.scaled, &f.weights})
    ATTN_CHECK(m->rows == Lq && m->cols == Lk, op, "scores, scaled scores and weights must be ", Lq, " x ", Lk,
               ", got ", m->rows, " x ", m->cols);
  ATTN_CHECK(f.out.rows == Lq && f.out.cols == dk, op, "the output must be ", Lq, " x ", dk, ", got ", f.out.rows,
             " x ", f.out.cols);
  if (!f.mask.empty()) {
    check_finite_matrix(f.mask, op);
    ATTN_CHECK(f.mask.rows == Lq && f.mask.cols == Lk, op, "the mask must be ", Lq, " x ", Lk);
    for (double v : f.mask.values) ATTN_CHECK(v == 0 || v == 1, op, "mask entries must be 0 or 1, got ", v);
  }
  const bool small = Lq <= 8 && Lk <= 8 && dk <= 8;
  // A panel: rows labelled by `rows` (queries or keys), columns by `cols` (keys, or dimensions).
  // `by_dims`: the columns are the d_k dimensions (Q, K, V and the output), else the keys.
  auto panel = [&](const Matrix& m, const std::string& title, bool probabilities, const std::vector<std::string>& rows,
                   const std::vector<std::string>& cols, bool by_dims) {
    HeatmapOptions o;
    o.title = title;
    o.row_labels = rows;
    o.col_labels = cols;
    o.colorbar = false;
    o.annotate_decimals = 2;
    if (small) {
      o.cell_size = 40;
      o.annotate = Annotate::Always;
    } else if (by_dims) {
      o.cell_size = dk <= 16 ? 18 : 10;  // the d_k columns of Q, K, V and the output: colour only
      o.annotate = Annotate::Never;
    } else {
      o.cell_size = Lk <= 12 ? 34 : 24;
      o.annotate = Lk <= 12 ? Annotate::Always : Annotate::Never;
    }
    if (probabilities) {
      o.vmin = 0.0;
      o.vmax = 1.0;
    } else {
      o.palette = Palette::Diverging;
      double top = 1e-12;
      for (double v : m.values) top = std::max(top, std::fabs(v));
      o.vmin = -top;
      o.vmax = top;
    }
    return heatmap_block(m, o);
  };
  const std::vector<std::string> none;
  const auto& ql = f.query_labels;
  const auto& kl = f.key_labels;
  std::vector<Block> inputs{panel(f.q, "1. Q", false, ql, none, true), panel(f.k, "K", false, kl, none, true),
                            panel(f.v, "V", false, kl, none, true)};
  std::vector<Block> steps{
      panel(f.scores, "2. Q K^T", false, ql, kl, false),
      panel(f.scaled, "3. / sqrt(d_k) = / " + detail::format_fixed(std::sqrt(static_cast<double>(dk)), 2), false, ql,
            kl, false)};
  if (!f.mask.empty()) {
    const CellRender mask_render = mask_cell_render();
    HeatmapOptions mo;
    mo.title = "+ mask";
    mo.row_labels = ql;
    mo.col_labels = kl;
    mo.colorbar = false;
    mo.cell_size = small ? 40 : (Lk <= 12 ? 34 : 24);
    mo.annotate = small || Lk <= 12 ? Annotate::Always : Annotate::Never;
    steps.push_back(heatmap_block(f.mask, mo, &mask_render));
  }
  steps.push_back(panel(f.weights, "4. softmax", true, ql, kl, false));
  steps.push_back(panel(f.out, "5. x V", false, ql, none, true));
  Block body;
  if (small) {
    inputs.insert(inputs.end(), steps.begin(), steps.end());
    body = detail::hstack(inputs, 16);
  } else {
    body = detail::vstack({detail::hstack(inputs, 16), detail::hstack(steps, 16)}, 12);
  }
  const Block b = detail::titled(body, f.title);
  return b.svg.document(b.width, b.height, default_title("attention steps", f.title));
}

}  // namespace attn::report
