// Seed 001's figure 3 (report::attention_steps_figure): well-formed SVG with every step's
// panel, the mask panel only when a mask is given, every value in a cell's tooltip, one row for
// small cases and two for larger ones, and errors for shapes that do not chain.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/report/figures.h"
#include "unit/report/xml_check.h"

namespace attn::report {
namespace {

Matrix filled(int64_t rows, int64_t cols, double start) {
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + 0.01 * static_cast<double>(i);
  return Matrix(v, rows, cols);
}

AttentionStepsFigure figure(int64_t T, int64_t dk) {
  AttentionStepsFigure f;
  f.q = filled(T, dk, 0.1);
  f.k = filled(T, dk, 0.2);
  f.v = filled(T, dk, 0.3);
  f.scores = filled(T, T, 0.4);
  f.scaled = filled(T, T, 0.2);
  f.weights = filled(T, T, 0.0);
  f.out = filled(T, dk, 0.5);
  return f;
}

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

TEST(AttentionStepsFigure, DrawsEveryStepAndTheMaskOnlyWhenGiven) {
  AttentionStepsFigure f = figure(3, 4);
  const std::string plain = attention_steps_figure(f);
  EXPECT_EQ(test::check_xml(plain).error, "");
  for (const char* step : {"1. Q", "2. Q K^T", "3. / sqrt(d_k) = / 2.00", "4. softmax", "5. x V"})
    EXPECT_NE(plain.find(step), std::string::npos) << step;
  EXPECT_EQ(plain.find("+ mask"), std::string::npos);
  EXPECT_EQ(count(plain, "<title>"), 1u + 3 * 12 + 3 * 9 + 12);  // the document's, then one per cell
  f.mask = Matrix({0, 1, 1, 0, 0, 1, 0, 0, 0}, 3, 3);
  f.query_labels = f.key_labels = {"a", "b", "c"};
  const std::string masked = attention_steps_figure(f);
  EXPECT_EQ(test::check_xml(masked).error, "");
  EXPECT_NE(masked.find("+ mask"), std::string::npos);
  EXPECT_NE(masked.find("<title>b / c: 1</title>"), std::string::npos);  // a masked cell
  EXPECT_EQ(count(masked, "<title>"), count(plain, "<title>") + 9);
}

TEST(AttentionStepsFigure, LargeCasesTakeTwoRows) {
  const std::string small = attention_steps_figure(figure(4, 4));
  const std::string large = attention_steps_figure(figure(10, 16));
  EXPECT_EQ(test::check_xml(large).error, "");
  // One row is wider than tall; the large figure stacks Q, K, V above the steps.
  const auto size = [](const std::string& svg) {
    const size_t w = svg.find("width=\""), h = svg.find("height=\"");
    return std::make_pair(std::stod(svg.substr(w + 7)), std::stod(svg.substr(h + 8)));
  };
  const auto [sw, sh] = size(small);
  const auto [lw, lh] = size(large);
  EXPECT_GT(sw / sh, 3.0);
  EXPECT_LT(lw / lh, sw / sh);
  EXPECT_GT(lh, 2 * 10 * 10.0);  // two rows of at least ten 10-px cells
}

TEST(AttentionStepsFigure, ShapesMustChain) {
  AttentionStepsFigure f = figure(3, 4);
  f.k = filled(3, 5, 0);
  EXPECT_THROW(attention_steps_figure(f), Error);
  f = figure(3, 4);
  f.weights = filled(3, 2, 0);
  EXPECT_THROW(attention_steps_figure(f), Error);
  f = figure(3, 4);
  f.out = filled(2, 4, 0);
  EXPECT_THROW(attention_steps_figure(f), Error);
  f = figure(3, 4);
  f.mask = Matrix({0, 2, 0, 0, 0, 0, 0, 0, 0}, 3, 3);  // mask entries are 0 or 1
  EXPECT_THROW(attention_steps_figure(f), Error);
  f.mask = Matrix({0, 1, 0, 0}, 2, 2);
  EXPECT_THROW(attention_steps_figure(f), Error);
}

}  // namespace
}  // namespace attn::report
