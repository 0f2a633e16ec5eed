// Private layout helpers shared by the figure functions: blocks that stack, round ticks,
// number formats for tick labels, label thinning, and the colour bar.
// Not public API: figures.h is. Sizes are in pixels and estimated from character counts
// (text_width), so layouts are deterministic and need no font metrics.
#pragma once

#include <string>
#include <vector>

#include "attn/report/figures.h"
#include "attn/report/svg.h"

namespace attn::report::detail {

constexpr double kPad = 10;  // outer margin of every block
constexpr double kTickFont = 11;
constexpr double kAxisFont = 12;
constexpr double kTitleFont = 14;
constexpr const char* kInk = "#222222";
constexpr const char* kMuted = "#555555";
constexpr const char* kGridLine = "#e3e3e3";
constexpr const char* kFrame = "#666666";

// A drawn piece of a figure with its size; blocks compose side by side.
struct Block {
  Svg svg{};
  double width = 0;
  double height = 0;
};

// Blocks left to right, tops aligned, `gap` pixels apart.
Block hstack(const std::vector<Block>& blocks, double gap);
// Blocks top to bottom, left edges aligned, `gap` pixels apart.
Block vstack(const std::vector<Block>& blocks, double gap);
// `block` under a bold centred title (the block is returned unchanged when title is empty).
Block titled(const Block& block, const std::string& title);

// Round ticks ("1, 2, 5 x 10^k" steps) covering [lo, hi].
struct Ticks {
  std::vector<double> values{};
  int decimals = 0;  // enough to tell the ticks apart
  double lo = 0;     // the axis range (widened to whole steps when `extend`)
  double hi = 1;
};
// About `target` ticks over [lo, hi]; a zero-width range is widened first. min_step > 0
// forces steps of at least that (1 for integer axes such as epochs).
Ticks nice_ticks(double lo, double hi, int target, bool extend, double min_step = 0);

// Fixed notation with exactly `decimals` decimals ("0.50"), "-0.00" printed as "0.00".
std::string format_fixed(double v, int decimals);
// About three significant digits, scientific for very large or small magnitudes ("0.873", "1.2e-05").
std::string format_short(double v);

// How a row of tick labels along one axis is drawn: every `stride`-th label, upright or
// rotated by -90 degrees, taking `extent` pixels perpendicular to the axis.
struct LabelLayout {
  size_t stride = 1;
  bool rotated = false;
  double extent = 0;
};
LabelLayout layout_column_labels(const std::vector<std::string>& labels, double cell, double font);
LabelLayout layout_row_labels(const std::vector<std::string>& labels, double cell, double font);

// Labels below a strip of columns whose left edge is x0 and top y0 (the plot's bottom).
void draw_column_labels(Svg& svg, double x0, double y0, double cell, const std::vector<std::string>& labels,
                        const LabelLayout& layout);
// Labels right-aligned at x_right beside rows starting at y0.
void draw_row_labels(Svg& svg, double x_right, double y0, double cell, const std::vector<std::string>& labels,
                     const LabelLayout& layout);

// A vertical colour bar `height` pixels tall for [vmin, vmax], its exact ends labelled and a
// few round ticks between them, with an optional rotated title on the right.
Block colorbar(Palette palette, double vmin, double vmax, double height, const std::string& title);

// A vertical legend of colour swatches (for categorical heatmaps such as the mask).
Block swatch_legend(const std::vector<std::pair<Rgb, std::string>>& entries);

}  // namespace attn::report::detail
