// Diagonal and anti-diagonal attention scores (see attention_stats.h for the exact definition).
// Sums run in double over the rows i < min(T, S); nothing is normalised per row, so rows that
// do not sum to 1 (e.g. fully masked rows of zeros) weigh by their mass.
#include "attn/report/attention_stats.h"

#include <algorithm>
#include <cmath>

#include "attn/core/error.h"

namespace attn::report {
namespace {

// sum_{i<n} w[i, column(i)] / sum_{i<n} sum_j w[i, j], n = min(T, S).
template <class Column>
double band_share(const char* op, const std::vector<double>& w, int64_t T, int64_t S, Column column) {
  ATTN_CHECK(T > 0 && S > 0, op, "T and S must be positive, got T=", T, " S=", S);
  ATTN_CHECK(static_cast<int64_t>(w.size()) == T * S, op, "expected T*S = ", T, "*", S, " = ", T * S, " weights, got ",
             w.size());
  for (size_t k = 0; k < w.size(); ++k) {
    ATTN_CHECK(std::isfinite(w[k]) && w[k] >= 0, op, "weights must be finite and >= 0, got ", w[k], " at row ",
               static_cast<int64_t>(k) / S, ", col ", static_cast<int64_t>(k) % S);
  }
  const int64_t n = std::min(T, S);
  double on_band = 0, total = 0;
  for (int64_t i = 0; i < n; ++i) {
    on_band += w[static_cast<size_t>(i * S + column(i))];
    for (int64_t j = 0; j < S; ++j) total += w[static_cast<size_t>(i * S + j)];
  }
  ATTN_CHECK(total > 0, op, "no attention mass in the first ", n, " rows of a ", T, " x ", S, " map");
  return on_band / total;
}

}  // namespace

double anti_diagonal_score(const std::vector<double>& weights, int64_t T, int64_t S) {
  return band_share("report.anti_diagonal_score", weights, T, S, [S](int64_t i) { return S - 1 - i; });
}

double diagonal_score(const std::vector<double>& weights, int64_t T, int64_t S) {
  return band_share("report.diagonal_score", weights, T, S, [](int64_t i) { return i; });
}

}  // namespace attn::report
