// attn lab steps and the scale figure (cli/lab_steps.h): every step of softmax(Q K^T / sqrt(d_k)) V
// against a double loop, the fused op's agreement, one-decimal inputs, well-formed SVG, bad sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/lab/steps.h"
#include "unit/report/xml_check.h"

namespace attn::lab {
namespace {

void expect_matrix_near(const report::Matrix& got, const std::vector<double>& want, int64_t rows, int64_t cols,
                        const std::string& what) {
  ASSERT_EQ(got.rows, rows) << what;
  ASSERT_EQ(got.cols, cols) << what;
  for (int64_t i = 0; i < rows * cols; ++i)
    EXPECT_NEAR(got.values[static_cast<size_t>(i)], want[static_cast<size_t>(i)], 1e-12) << what << " entry " << i;
}

TEST(LabSteps, EachStepMatchesADoubleLoop) {
  for (auto [L, dk] : {std::pair<int64_t, int64_t>{4, 4}, {3, 5}}) {
    StepsOptions o;
    o.length = L;
    o.d_k = dk;
    o.seed = 7;
    const StepsDemo d = steps_demo(o);
    std::vector<double> scores(static_cast<size_t>(L * L)), scaled(scores.size()), weights(scores.size());
    std::vector<double> out(static_cast<size_t>(L * dk), 0.0);
    for (int64_t i = 0; i < L; ++i) {
      double mx = -1e300, total = 0;
      for (int64_t j = 0; j < L; ++j) {
        double s = 0;
        for (int64_t a = 0; a < dk; ++a) s += d.q.at(i, a) * d.k.at(j, a);
        scores[static_cast<size_t>(i * L + j)] = s;
        scaled[static_cast<size_t>(i * L + j)] = s / std::sqrt(static_cast<double>(dk));
        mx = std::max(mx, scaled[static_cast<size_t>(i * L + j)]);
      }
      for (int64_t j = 0; j < L; ++j) total += std::exp(scaled[static_cast<size_t>(i * L + j)] - mx);
      for (int64_t j = 0; j < L; ++j)
        weights[static_cast<size_t>(i * L + j)] = std::exp(scaled[static_cast<size_t>(i * L + j)] - mx) / total;
      for (int64_t j = 0; j < L; ++j)
        for (int64_t c = 0; c < dk; ++c)
          out[static_cast<size_t>(i * dk + c)] += weights[static_cast<size_t>(i * L + j)] * d.v.at(j, c);
    }
    expect_matrix_near(d.scores, scores, L, L, "Q K^T");
    expect_matrix_near(d.scaled, scaled, L, L, "scaled");
    expect_matrix_near(d.weights, weights, L, L, "softmax");
    expect_matrix_near(d.out, out, L, dk, "output");
    EXPECT_LT(d.sdpa_max_diff, 1e-12);
  }
}

TEST(LabSteps, InputsHaveOneDecimalAndWeightRowsSumToOne) {
  const StepsDemo d = steps_demo({});
  EXPECT_EQ(d.q.rows, 4);
  EXPECT_EQ(d.q.cols, 4);
  for (const report::Matrix* m : {&d.q, &d.k, &d.v})
    for (double v : m->values) EXPECT_NEAR(v * 10, std::round(v * 10), 1e-9);
  for (int64_t i = 0; i < 4; ++i) {
    double s = 0;
    for (int64_t j = 0; j < 4; ++j) s += d.weights.at(i, j);
    EXPECT_NEAR(s, 1.0, 1e-15);
  }
  // A different seed draws different matrices.
  StepsOptions other;
  other.seed = 1;
  EXPECT_NE(steps_demo(other).q.values, d.q.values);
}

TEST(LabSteps, PrintsEveryStepAndDrawsWellFormedFigures) {
  const StepsDemo d = steps_demo({});
  const std::string text = format_steps_demo(d);
  for (const char* step : {"step 1", "step 2", "step 3", "step 4", "step 5"})
    EXPECT_NE(text.find(step), std::string::npos) << step;
  const std::string svg = steps_figure(d);
  const auto summary = test::check_xml(svg);
  EXPECT_EQ(summary.error, "");
  EXPECT_NE(svg.find("4. softmax"), std::string::npos);
  const auto rows = nn::saturation_table({4, 64}, 8, 2, 0);
  const std::string chart = scale_figure(rows);
  EXPECT_EQ(test::check_xml(chart).error, "");
  EXPECT_NE(chart.find("log2 D"), std::string::npos);
}

TEST(LabSteps, RejectsNonPositiveSizes) {
  StepsOptions o;
  o.length = 0;
  EXPECT_THROW(steps_demo(o), Error);
  o.length = 4;
  o.d_k = -1;
  EXPECT_THROW(steps_demo(o), Error);
}

}  // namespace
}  // namespace attn::lab
