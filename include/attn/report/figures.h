// attn/report/figures.h — the figures of seed 001 as standalone SVG documents.
// Training curves (two panels), heatmaps with token labels and a colour bar, a layer x head
// grid, the sinusoidal PE figure and the causal-mask figure. Inputs are plain numbers; nothing
// here knows about models or tensors, and nothing is computed beyond layout and colour.
// Every function returns the complete SVG text (same input, same bytes); save it with
// save_text_file. Non-finite heatmap values are an attn::Error; in line charts NaN is a gap.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attn/report/matrix.h"
#include "attn/report/svg.h"

namespace attn::report {

// ---- colour -------------------------------------------------------------------------------

// Viridis: a perceptually ordered sequential scale (dark purple -> yellow), piecewise-linear
// between ten fixed sRGB anchors. Diverging: blue -> light grey -> red, for signed data.
enum class Palette { Viridis, Diverging };

// The colour at t in [0, 1] (clamped); t = 0 is the low end of the scale.
Rgb palette_color(Palette palette, double t);

// The i-th colour of the categorical series palette (cycles after ten).
std::string series_color(size_t i);

// ---- line charts --------------------------------------------------------------------------

// One named curve. NaN in y (or x) leaves a gap, e.g. for validation run every k epochs;
// infinity is an error. x and y must have the same length.
struct Series {
  std::string name{};
  std::vector<double> x{};
  std::vector<double> y{};
  std::string color{};  // empty: series_color(index in its panel)
  bool dashed = false;
  bool markers = true;  // dots at the points (drawn only when the series has <= 60 points)
};

// One plot area with its axes, ticks, grid and legend (below the plot).
struct Panel {
  std::string title{};
  std::string x_title{};
  std::string y_title{};
  std::vector<Series> series{};
  // Hints for the y range: the axis covers [y_min, y_max] and is widened to contain the data.
  std::optional<double> y_min{};
  std::optional<double> y_max{};
};

struct LineChartOptions {
  std::string title{};      // over all panels; empty for none
  double plot_width = 360;  // of each panel's plot area, in pixels
  double plot_height = 240;
};

// The panels side by side, each with its own axes (e.g. loss | accuracy).
std::string line_chart(const std::vector<Panel>& panels, const LineChartOptions& options = {});

// Per-epoch training history; an empty vector is omitted. A NaN entry means "not measured
// that epoch" (validation every k epochs): the point is skipped and its neighbours joined.
struct TrainingHistory {
  std::vector<double> epoch{};
  std::vector<double> loss{};  // training loss
  std::vector<double> val_loss{};
  std::vector<double> val_token_acc{};  // fractions in [0, 1]
  std::vector<double> val_exact_acc{};
};

// Two panels: (loss, val_loss) and (val_token_acc, val_exact_acc) against epoch.
std::string training_curve_figure(const TrainingHistory& history, const std::string& title = "Training curve");

// ---- heatmaps -----------------------------------------------------------------------------

enum class Annotate { Auto, Never, Always };

struct HeatmapOptions {
  std::string title{};
  std::string x_title{};                  // under the column labels (e.g. "source")
  std::string y_title{};                  // left of the row labels (e.g. "target")
  std::vector<std::string> row_labels{};  // empty: 0, 1, 2, ...; otherwise exactly one per row
  std::vector<std::string> col_labels{};  // empty: 0, 1, 2, ...; otherwise exactly one per column
  Palette palette = Palette::Viridis;
  // Colour range; default the data's min and max. Values outside are clamped to the ends.
  std::optional<double> vmin{};
  std::optional<double> vmax{};
  // Values printed in the cells: Auto does so when there are at most 256 cells of >= 22 px.
  Annotate annotate = Annotate::Auto;
  int annotate_decimals = 2;
  double cell_size = 0;  // pixels per cell; 0 picks one from the matrix size
  bool colorbar = true;
  std::string colorbar_title{};
  bool tooltips = true;  // a <title> per cell ("row, col: value") for browsers
};

// A rows x cols heatmap: row 0 at the top, row labels on the left, column labels below,
// and a colour bar on the right labelled with its exact range and a few round ticks.
std::string heatmap(const Matrix& m, const HeatmapOptions& options = {});

// A matrix with its options, for figures made of several heatmaps.
struct HeatmapPanel {
  Matrix matrix{};
  HeatmapOptions options{};
};

// Heatmaps side by side, each with its own labels and colour bar (e.g. encoder self-attention
// next to decoder cross-attention for one example).
std::string heatmap_row(const std::vector<HeatmapPanel>& panels, const std::string& title = {});

struct HeatmapGridOptions {
  std::string title{};
  std::vector<std::string> row_titles{};  // one per grid row, e.g. "Layer 1"; empty: none
  std::vector<std::string> col_titles{};  // one per grid column, e.g. "Head 1"; empty: none
  std::vector<std::string> row_labels{};  // token labels of each cell's rows (left column only)
  std::vector<std::string> col_labels{};  // token labels of each cell's columns (bottom row only)
  std::string x_title{};
  std::string y_title{};
  Palette palette = Palette::Viridis;
  // One colour range for all cells so they compare; default the global min and max.
  std::optional<double> vmin{};
  std::optional<double> vmax{};
  double cell_size = 0;  // 0: about 150 px per map
  std::string colorbar_title{};
};

// A grid of same-shaped heatmaps, grid[row][col] (rows = layers, columns = heads), with one
// shared colour bar.
std::string heatmap_grid(const std::vector<std::vector<Matrix>>& grid, const HeatmapGridOptions& options = {});

// ---- the two figures of seed 001 that explain a mechanism --------------------------------

// The PE matrix [positions x dims] as a diverging heatmap (symmetric range around 0), next to
// a line chart of the chosen dimensions across positions (e.g. dims {0, 4, 16, 32}).
std::string positional_encoding_figure(const Matrix& pe, const std::vector<int64_t>& dims,
                                       const std::string& title = "Sinusoidal positional encoding");

struct MaskFigureOptions {
  std::string title = "Causal mask and softmax weights";
  std::vector<std::string> labels{};  // token labels for both axes; empty: positions
};

// Left: the mask, 1 = masked out (PyTorch's convention, true = masked), 0 = allowed, drawn
// in two colours and annotated "-inf" / "0" (the additive form) when small. Right: the softmax
// weights on a fixed [0, 1] scale. Both [T, T] (or any equal shape); mask entries must be 0 or 1.
std::string mask_figure(const Matrix& mask, const Matrix& weights, const MaskFigureOptions& options = {});

// Seed 001's figure 3: softmax(Q K^T / sqrt(d_k)) V taken apart into its steps, each matrix an
// annotated heatmap: 1. Q, K, V; 2. Q K^T; 3. divided by sqrt(d_k); (the mask, when given);
// 4. softmax per row; 5. times V. Small cases (L <= 8 and d_k <= 8) fit one row with every
// value printed; larger ones put Q, K, V on a first row and the rest on a second.
struct AttentionStepsFigure {
  Matrix q, k, v;                // [Lq, d_k], [Lk, d_k], [Lk, d_k]
  Matrix scores, scaled;         // [Lq, Lk]
  Matrix mask;                   // [Lq, Lk], 1 = masked (softmax sees -inf), 0 = allowed; empty: no mask
  Matrix weights;                // [Lq, Lk]
  Matrix out;                    // [Lq, d_k]
  std::vector<std::string> query_labels{}, key_labels{};  // empty: positions
  std::string title = "softmax(Q K^T / sqrt(d_k)) V, step by step";
};
// Errors (attn::Error) for shapes that do not chain as above.
std::string attention_steps_figure(const AttentionStepsFigure& figure);

}  // namespace attn::report
