// The figures: well-formed SVG, one rect per heatmap cell with the palette's ends at the data's
// min and max, escaped labels, deterministic bytes, NaN handling, and errors for bad input.
#include "attn/report/figures.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "unit/report/xml_check.h"

namespace attn::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

void expect_well_formed(const std::string& svg) {
  const test::XmlSummary xml = test::check_xml(svg);
  EXPECT_TRUE(xml.error.empty()) << xml.error;
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf\""), std::string::npos);
}

// The fill colours of the cells of the n-th heatmap in the figure (the rects of its
// <g class="cells"> group), in row-major order.
std::vector<std::string> cell_fills(const std::string& svg, int n = 0) {
  size_t g = std::string::npos;
  for (int k = 0; k <= n; ++k) {
    g = svg.find("class=\"cells\"", g == std::string::npos ? 0 : g + 1);
    if (g == std::string::npos) return {};
  }
  const size_t end = svg.find("</g>", g);
  std::vector<std::string> fills;
  for (size_t p = svg.find("<rect", g); p < end; p = svg.find("<rect", p + 1)) {
    const size_t f = svg.find("fill=\"", p) + 6;
    fills.push_back(svg.substr(f, 7));
  }
  return fills;
}

Matrix ramp(int64_t rows, int64_t cols) {
  std::vector<double> v;
  for (int64_t i = 0; i < rows * cols; ++i) v.push_back(static_cast<double>((i * 7) % (rows * cols)) / 10.0);
  return Matrix(v, rows, cols);
}

TEST(Palette, ViridisRunsFromPurpleToYellowWithRisingLightness) {
  EXPECT_EQ(palette_color(Palette::Viridis, 0).hex(), "#440154");
  EXPECT_EQ(palette_color(Palette::Viridis, 1).hex(), "#fde725");
  EXPECT_EQ(palette_color(Palette::Viridis, -3), palette_color(Palette::Viridis, 0));
  EXPECT_EQ(palette_color(Palette::Viridis, 7), palette_color(Palette::Viridis, 1));
  double previous = -1;
  for (int k = 0; k <= 100; ++k) {
    const double l = palette_color(Palette::Viridis, k / 100.0).luminance();
    EXPECT_GT(l, previous) << "t = " << k / 100.0;
    previous = l;
  }
}

TEST(Palette, DivergingIsLightestInTheMiddle) {
  const double mid = palette_color(Palette::Diverging, 0.5).luminance();
  EXPECT_GT(mid, 0.85);
  EXPECT_LT(palette_color(Palette::Diverging, 0).luminance(), mid);
  EXPECT_LT(palette_color(Palette::Diverging, 1).luminance(), mid);
  EXPECT_NE(palette_color(Palette::Diverging, 0), palette_color(Palette::Diverging, 1));
}

TEST(Heatmap, DrawsOneCellPerEntryWithTheScaleEndsAtMinAndMax) {
  const Matrix m = ramp(4, 6);  // values 0 .. 2.3, min at index 0, max at the index where 7i % 24 = 23
  const std::string svg = heatmap(m, {.title = "ramp"});
  expect_well_formed(svg);
  const std::vector<std::string> fills = cell_fills(svg);
  ASSERT_EQ(fills.size(), 24u);
  size_t argmin = 0, argmax = 0;
  for (size_t i = 0; i < m.values.size(); ++i) {
    if (m.values[i] < m.values[argmin]) argmin = i;
    if (m.values[i] > m.values[argmax]) argmax = i;
  }
  EXPECT_EQ(fills[argmin], palette_color(Palette::Viridis, 0).hex());
  EXPECT_EQ(fills[argmax], palette_color(Palette::Viridis, 1).hex());
  for (size_t i = 0; i < fills.size(); ++i) {
    const double t = (m.values[i] - 0.0) / 2.3;
    EXPECT_EQ(fills[i], palette_color(Palette::Viridis, t).hex()) << "cell " << i;
  }
  // The colour bar is labelled with the exact range.
  EXPECT_NE(svg.find(">2.3</text>"), std::string::npos);
  EXPECT_NE(svg.find(">0</text>"), std::string::npos);
}

TEST(Heatmap, ExplicitRangeClampsValuesOutsideIt) {
  const Matrix m({-1.0, 0.5, 2.0, 0.25}, 2, 2);
  const std::vector<std::string> fills = cell_fills(heatmap(m, {.vmin = 0.0, .vmax = 1.0}));
  ASSERT_EQ(fills.size(), 4u);
  EXPECT_EQ(fills[0], palette_color(Palette::Viridis, 0).hex());
  EXPECT_EQ(fills[1], palette_color(Palette::Viridis, 0.5).hex());
  EXPECT_EQ(fills[2], palette_color(Palette::Viridis, 1).hex());
  EXPECT_EQ(fills[3], palette_color(Palette::Viridis, 0.25).hex());
}

TEST(Heatmap, TokenLabelsAndTitlesAppearEscaped) {
  const Matrix m({0.1, 0.9, 0.5, 0.5}, 2, 2);
  const std::string svg = heatmap(m, {.title = "Q&A <attn>",
                                      .x_title = "source",
                                      .y_title = "target",
                                      .row_labels = {"<bos>", "a&b"},
                                      .col_labels = {"\"x\"", "y"}});
  expect_well_formed(svg);
  for (const char* s : {"&lt;bos&gt;", "a&amp;b", "&quot;x&quot;", "Q&amp;A &lt;attn&gt;", ">source<", ">target<"}) {
    EXPECT_NE(svg.find(s), std::string::npos) << s;
  }
  EXPECT_EQ(svg.find("<bos>"), std::string::npos);
  EXPECT_EQ(svg.find("<attn>"), std::string::npos);
}

TEST(Heatmap, AnnotatesSmallMatricesAndNotLargeOnes) {
  const Matrix small({0.25, 0.5, 0.75, 1.0}, 2, 2);
  const std::string annotated = heatmap(small);
  EXPECT_NE(annotated.find(">0.50</text>"), std::string::npos);  // colour-bar labels never pad zeros
  EXPECT_NE(annotated.find(">1.00</text>"), std::string::npos);
  EXPECT_EQ(heatmap(small, {.annotate = Annotate::Never}).find(">0.50</text>"), std::string::npos);
  const Matrix big = ramp(30, 30);
  const std::string plain = heatmap(big);
  expect_well_formed(plain);
  EXPECT_EQ(cell_fills(plain).size(), 900u);
  EXPECT_EQ(plain.find(">0.70</text>"), std::string::npos);
}

TEST(Heatmap, SameInputGivesSameBytes) {
  const Matrix m = ramp(7, 5);
  const HeatmapOptions o{.title = "t", .row_labels = {"a", "b", "c", "d", "e", "f", "g"}};
  EXPECT_EQ(heatmap(m, o), heatmap(m, o));
  EXPECT_NE(heatmap(m, o), heatmap(ramp(5, 7), {}));
}

TEST(Heatmap, RejectsNonFiniteValuesAndBadOptions) {
  EXPECT_THROW(heatmap(Matrix({0.1, kNaN, 0.3, 0.4}, 2, 2)), Error);
  EXPECT_THROW(heatmap(Matrix({0.1, kInf, 0.3, 0.4}, 2, 2)), Error);
  EXPECT_THROW(heatmap(Matrix()), Error);
  const Matrix m({0.1, 0.2, 0.3, 0.4}, 2, 2);
  EXPECT_THROW(heatmap(m, {.row_labels = {"only one"}}), Error);
  EXPECT_THROW(heatmap(m, {.col_labels = {"a", "b", "c"}}), Error);
  EXPECT_THROW(heatmap(m, {.vmin = 1.0, .vmax = 0.0}), Error);
  EXPECT_THROW(heatmap(m, {.vmin = kNaN}), Error);
  EXPECT_THROW(heatmap(m, {.cell_size = -3}), Error);
  EXPECT_THROW(Matrix({1, 2, 3}, 2, 2), Error);
}

TEST(Heatmap, ConstantMatrixDrawsOneColourWithoutNan) {
  const std::string svg = heatmap(Matrix(std::vector<double>(9, 0.5), 3, 3));
  expect_well_formed(svg);
  for (const std::string& f : cell_fills(svg)) EXPECT_EQ(f, palette_color(Palette::Viridis, 0.5).hex());
}

TEST(HeatmapRow, PlacesEachPanelWithItsOwnLabels) {
  const Matrix a({0.5, 0.5, 0.2, 0.8}, 2, 2), b({1.0, 0.0, 0.0, 0.0, 1.0, 0.0}, 2, 3);
  const std::string svg = heatmap_row({{a, {.title = "Encoder self-attention", .col_labels = {"x1", "x2"}}},
                                       {b, {.title = "Decoder cross-attention", .col_labels = {"s1", "s2", "s3"}}}},
                                      "After training");
  expect_well_formed(svg);
  EXPECT_EQ(cell_fills(svg, 0).size(), 4u);
  EXPECT_EQ(cell_fills(svg, 1).size(), 6u);
  for (const char* s : {"Encoder self-attention", "Decoder cross-attention", "After training", ">s3<", ">x2<"}) {
    EXPECT_NE(svg.find(s), std::string::npos) << s;
  }
  EXPECT_THROW(heatmap_row({}), Error);
}

TEST(HeatmapGrid, DrawsLayersTimesHeadsMapsOnOneSharedScale) {
  std::vector<std::vector<Matrix>> grid(2);
  for (int l = 0; l < 2; ++l) {
    for (int h = 0; h < 3; ++h) {
      std::vector<double> v(12, 0.1 * (l + 1));
      v[static_cast<size_t>(h)] = l == 1 && h == 2 ? 0.9 : 0.3;  // the global max sits in layer 2, head 3
      grid[static_cast<size_t>(l)].push_back(Matrix(v, 3, 4));
    }
  }
  const std::string svg = heatmap_grid(grid, {.title = "Cross-attention",
                                              .row_titles = {"Layer 1", "Layer 2"},
                                              .col_titles = {"Head 1", "Head 2", "Head 3"},
                                              .row_labels = {"<bos>", "5", "8"}});
  expect_well_formed(svg);
  for (const char* s : {"Layer 1", "Layer 2", "Head 1", "Head 3", "&lt;bos&gt;", "Cross-attention"}) {
    EXPECT_NE(svg.find(s), std::string::npos) << s;
  }
  EXPECT_EQ(test::count_of(svg, "</title></rect>"), 2 * 3 * 12);
  EXPECT_EQ(test::count_of(svg, "fill=\"" + palette_color(Palette::Viridis, 1).hex() + "\"><title>"), 1);
  EXPECT_EQ(test::count_of(svg, "fill=\"" + palette_color(Palette::Viridis, 0).hex() + "\"><title>"), 3 * 11);
}

TEST(HeatmapGrid, RejectsRaggedGridsAndMismatchedShapesOrTitles) {
  const Matrix a({0.1, 0.2, 0.3, 0.4}, 2, 2), b({0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, 2, 3);
  EXPECT_THROW(heatmap_grid({}), Error);
  EXPECT_THROW(heatmap_grid({{a, a}, {a}}), Error);
  EXPECT_THROW(heatmap_grid({{a, b}}), Error);
  EXPECT_THROW(heatmap_grid({{a, a}}, {.row_titles = {"L1", "L2"}}), Error);
  EXPECT_THROW(heatmap_grid({{a, a}}, {.col_titles = {"H1"}}), Error);
  EXPECT_THROW(heatmap_grid({{a, Matrix({0.1, kNaN, 0.3, 0.4}, 2, 2)}}), Error);
}

TEST(LineChart, DrawsEverySeriesWithLegendAxesAndTicks) {
  Panel p{.title = "Loss", .x_title = "epoch", .y_title = "loss"};
  p.series.push_back({.name = "train <a>", .x = {1, 2, 3, 4}, .y = {2.0, 1.0, 0.5, 0.25}});
  p.series.push_back({.name = "val", .x = {1, 2, 3, 4}, .y = {2.1, 1.2, 0.7, 0.6}, .dashed = true});
  const std::string svg = line_chart({p});
  expect_well_formed(svg);
  EXPECT_EQ(test::count_of(svg, "<polyline"), 2);
  EXPECT_NE(svg.find("train &lt;a&gt;"), std::string::npos);
  EXPECT_NE(svg.find(">val</text>"), std::string::npos);
  EXPECT_NE(svg.find(">epoch</text>"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);
  // Integer x data gets integer ticks; the y axis reaches round numbers around the data.
  EXPECT_NE(svg.find(">4</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">3.5</text>"), std::string::npos);
  EXPECT_NE(svg.find(">2.5</text>"), std::string::npos);
  EXPECT_EQ(svg, line_chart({p}));
}

TEST(LineChart, NanLeavesAGapAndInfinityIsAnError) {
  Panel p;
  p.series.push_back({.name = "s", .x = {0, 1, 2, 3, 4}, .y = {1, 2, kNaN, 3, 4}});
  const std::string svg = line_chart({p});
  expect_well_formed(svg);
  EXPECT_EQ(test::count_of(svg, "<polyline"), 2);
  p.series[0].y[2] = kInf;
  EXPECT_THROW(line_chart({p}), Error);
  p.series[0].y = {1, 2};
  EXPECT_THROW(line_chart({p}), Error);  // x and y lengths differ
  EXPECT_THROW(line_chart({}), Error);
  EXPECT_THROW(line_chart({Panel{}}, {.plot_width = 0}), Error);
}

TEST(LineChart, AnEmptyPanelSaysNoData) {
  const std::string svg = line_chart({Panel{.title = "nothing yet"}});
  expect_well_formed(svg);
  EXPECT_NE(svg.find(">no data</text>"), std::string::npos);
}

TEST(TrainingCurve, HasLossAndAccuracyPanelsWithAllFourSeries) {
  TrainingHistory h;
  for (int e = 1; e <= 6; ++e) {
    h.epoch.push_back(e);
    h.loss.push_back(2.0 / e);
    h.val_loss.push_back(e % 2 == 0 ? 2.2 / e : kNaN);  // validated every second epoch
    h.val_token_acc.push_back(0.15 * e);
    h.val_exact_acc.push_back(0.1 * e);
  }
  const std::string svg = training_curve_figure(h);
  expect_well_formed(svg);
  for (const char* s : {">loss<", ">val_loss<", ">val_token_acc<", ">val_exact_acc<", ">Loss<", ">Validation accuracy<",
                        ">Training curve<"}) {
    EXPECT_NE(svg.find(s), std::string::npos) << s;
  }
  EXPECT_EQ(test::count_of(svg, "<polyline"), 4);  // val_loss joined across its unmeasured epochs
  h.val_loss.pop_back();
  EXPECT_THROW(training_curve_figure(h), Error);
}

TEST(PositionalEncodingFigure, ShowsTheMatrixAndTheChosenDimensions) {
  const int64_t P = 12, D = 8;
  std::vector<double> pe;
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t i = 0; i < D; ++i) {
      const double f = std::pow(10000.0, -static_cast<double>(i - i % 2) / D);
      pe.push_back(i % 2 == 0 ? std::sin(p * f) : std::cos(p * f));
    }
  }
  const std::string svg = positional_encoding_figure(Matrix(pe, P, D), {0, 4});
  expect_well_formed(svg);
  EXPECT_EQ(cell_fills(svg).size(), static_cast<size_t>(P * D));
  EXPECT_NE(svg.find(">dim 0<"), std::string::npos);
  EXPECT_NE(svg.find(">dim 4<"), std::string::npos);
  EXPECT_EQ(test::count_of(svg, "<polyline"), 2);
  EXPECT_THROW(positional_encoding_figure(Matrix(pe, P, D), {8}), Error);
  EXPECT_THROW(positional_encoding_figure(Matrix(pe, P, D), {-1}), Error);
}

TEST(MaskFigure, DrawsTheMaskAndItsWeightsSideBySide) {
  const int64_t T = 4;
  std::vector<double> mask, w;
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t j = 0; j < T; ++j) {
      mask.push_back(j > i ? 1 : 0);
      w.push_back(j > i ? 0 : 1.0 / static_cast<double>(i + 1));
    }
  }
  const std::string svg = mask_figure(Matrix(mask, T, T), Matrix(w, T, T), {.labels = {"<s>", "a", "b", "c"}});
  expect_well_formed(svg);
  EXPECT_EQ(test::count_of(svg, ">\u2212\u221e</text>"), 6);  // the masked cells, annotated in additive form
  EXPECT_NE(svg.find("&lt;s&gt;"), std::string::npos);
  EXPECT_NE(svg.find(">0.33</text>"), std::string::npos);
  EXPECT_EQ(cell_fills(svg, 0).size(), 16u);
  EXPECT_EQ(cell_fills(svg, 1).size(), 16u);
  EXPECT_THROW(mask_figure(Matrix(std::vector<double>(16, 0.5), T, T), Matrix(w, T, T)), Error);
  EXPECT_THROW(mask_figure(Matrix(mask, T, T), Matrix(std::vector<double>(8, 0.1), 2, 4)), Error);
}

}  // namespace
}  // namespace attn::report
