// Diagonal and anti-diagonal attention scores against their definition, for square and
// non-square maps, plus the plain Matrix helpers they are used with.
#include "attn/report/attention_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "attn/core/error.h"

namespace attn::report {
namespace {

// A [T, S] map with all weight of row i on column col(i) (rows without a column stay uniform).
template <class Col>
std::vector<double> one_hot_rows(int64_t T, int64_t S, Col col) {
  std::vector<double> w;
  for (int64_t i = 0; i < T; ++i) {
    const int64_t c = col(i);
    std::vector<double> row(static_cast<size_t>(S), c >= 0 && c < S ? 0.0 : 1.0 / static_cast<double>(S));
    if (c >= 0 && c < S) row[static_cast<size_t>(c)] = 1.0;
    w.insert(w.end(), row.begin(), row.end());
  }
  return w;
}

TEST(AttentionStats, PerfectAntiDiagonalScoresOne) {
  for (int64_t n : {1, 2, 5, 8}) {
    EXPECT_DOUBLE_EQ(anti_diagonal_score(one_hot_rows(n, n, [n](int64_t i) { return n - 1 - i; }), n, n), 1.0);
  }
}

TEST(AttentionStats, UniformRowsScoreOneOverS) {
  for (auto [T, S] : {std::pair<int64_t, int64_t>{4, 4}, {3, 7}, {9, 5}}) {
    const std::vector<double> w(static_cast<size_t>(T * S), 1.0 / static_cast<double>(S));
    EXPECT_NEAR(anti_diagonal_score(w, T, S), 1.0 / static_cast<double>(S), 1e-12);
    EXPECT_NEAR(diagonal_score(w, T, S), 1.0 / static_cast<double>(S), 1e-12);
  }
}

TEST(AttentionStats, DiagonalMapScoresZeroOnTheAntiDiagonal) {
  const std::vector<double> eye = one_hot_rows(8, 8, [](int64_t i) { return i; });
  EXPECT_DOUBLE_EQ(anti_diagonal_score(eye, 8, 8), 0.0);
  EXPECT_DOUBLE_EQ(diagonal_score(eye, 8, 8), 1.0);
  // With odd S the centre lies on both diagonals: one row of S hits it.
  const std::vector<double> eye5 = one_hot_rows(5, 5, [](int64_t i) { return i; });
  EXPECT_DOUBLE_EQ(anti_diagonal_score(eye5, 5, 5), 1.0 / 5.0);
}

TEST(AttentionStats, NonSquareMapsUseRowsBelowMinTSAndSourceSMinus1MinusI) {
  // T < S: rows 0..2 on columns 4, 3, 2.
  EXPECT_DOUBLE_EQ(anti_diagonal_score(one_hot_rows(3, 5, [](int64_t i) { return 4 - i; }), 3, 5), 1.0);
  // T > S: rows 0..2 on columns 2, 1, 0; rows 3 and 4 are not counted, whatever they hold.
  std::vector<double> tall = one_hot_rows(5, 3, [](int64_t i) { return i < 3 ? 2 - i : 0; });
  EXPECT_DOUBLE_EQ(anti_diagonal_score(tall, 5, 3), 1.0);
  tall[static_cast<size_t>(4 * 3 + 0)] = 0;
  tall[static_cast<size_t>(4 * 3 + 1)] = 1;
  EXPECT_DOUBLE_EQ(anti_diagonal_score(tall, 5, 3), 1.0);
  EXPECT_DOUBLE_EQ(diagonal_score(one_hot_rows(5, 3, [](int64_t i) { return i; }), 5, 3), 1.0);
}

TEST(AttentionStats, MatchesTheDefinitionOnRandomMaps) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (auto [T, S] : {std::pair<int64_t, int64_t>{6, 6}, {4, 9}, {10, 3}}) {
    std::vector<double> w(static_cast<size_t>(T * S));
    for (double& v : w) v = u(rng);
    double anti = 0, diag = 0, total = 0;
    for (int64_t i = 0; i < std::min(T, S); ++i) {
      anti += w[static_cast<size_t>(i * S + S - 1 - i)];
      diag += w[static_cast<size_t>(i * S + i)];
      for (int64_t j = 0; j < S; ++j) total += w[static_cast<size_t>(i * S + j)];
    }
    EXPECT_NEAR(anti_diagonal_score(w, T, S), anti / total, 1e-14);
    EXPECT_NEAR(diagonal_score(w, T, S), diag / total, 1e-14);
    EXPECT_DOUBLE_EQ(anti_diagonal_score(Matrix(w, T, S)), anti_diagonal_score(w, T, S));
    EXPECT_DOUBLE_EQ(diagonal_score(Matrix(w, T, S)), diagonal_score(w, T, S));
  }
}

TEST(AttentionStats, RejectsBadInput) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(anti_diagonal_score({0.5, 0.5, 0.5}, 2, 2), Error);
  EXPECT_THROW(anti_diagonal_score({}, 0, 0), Error);
  EXPECT_THROW(anti_diagonal_score({0.5, nan, 0.5, 0.5}, 2, 2), Error);
  EXPECT_THROW(anti_diagonal_score({1.5, -0.5, 0.5, 0.5}, 2, 2), Error);
  EXPECT_THROW(anti_diagonal_score({0, 0, 0, 0}, 2, 2), Error);
  EXPECT_THROW(diagonal_score({0.5, 0.5, 0.5, std::numeric_limits<double>::infinity()}, 2, 2), Error);
}

TEST(ReportMatrix, MeanOfAveragesHeadsElementWise) {
  const Matrix a({1, 2, 3, 4}, 2, 2), b({3, 2, 1, 0}, 2, 2);
  const Matrix m = mean_of({a, b});
  EXPECT_EQ(m.rows, 2);
  EXPECT_EQ(m.cols, 2);
  EXPECT_EQ(m.values, (std::vector<double>{2, 2, 2, 2}));
  EXPECT_THROW(mean_of({}), Error);
  EXPECT_THROW(mean_of({a, Matrix({1, 2, 3, 4, 5, 6}, 2, 3)}), Error);
}

TEST(ReportMatrix, SubmatrixCropsRowsAndColumns) {
  const Matrix m({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 3, 4);
  const Matrix s = submatrix(m, 1, 3, 1, 3);
  EXPECT_EQ(s.rows, 2);
  EXPECT_EQ(s.cols, 2);
  EXPECT_EQ(s.values, (std::vector<double>{5, 6, 9, 10}));
  EXPECT_DOUBLE_EQ(m.at(2, 3), 11);
  EXPECT_THROW(submatrix(m, 0, 4, 0, 1), Error);
  EXPECT_THROW(submatrix(m, 1, 1, 0, 1), Error);
  EXPECT_THROW(Matrix({1, 2}, 1, 3), Error);
  EXPECT_THROW(Matrix({}, 0, 0), Error);
}

}  // namespace
}  // namespace attn::report
