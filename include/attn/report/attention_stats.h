// attn/report/attention_stats.h — one-number summaries of an attention map.
// For the reversal task of seed 001 a trained decoder's cross-attention concentrates on the
// anti-diagonal (target i -> source S-1-i); these scores measure how much. They read plain
// row-major weights [T, S] (row = query/target, column = key/source) and know no model.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/report/matrix.h"

namespace attn::report {

// The share of attention mass on the anti-diagonal:
//   n = min(T, S),  score = sum_{i<n} w[i, S-1-i] / sum_{i<n} sum_j w[i, j].
// Only rows i < n count; for T > S the later rows are ignored, for T < S the anti-diagonal
// runs from the last source column leftwards. With rows that sum to 1 this is the mean over
// those rows of the weight on S-1-i: 1 for a perfect anti-diagonal, 1/S for uniform rows.
// Weights must be finite and >= 0 with some mass in the counted rows; otherwise attn::Error.
double anti_diagonal_score(const std::vector<double>& weights, int64_t T, int64_t S);
// The same with w[i, i] (i < min(T, S)): how much a query attends to its own position.
double diagonal_score(const std::vector<double>& weights, int64_t T, int64_t S);

inline double anti_diagonal_score(const Matrix& w) { return anti_diagonal_score(w.values, w.rows, w.cols); }
inline double diagonal_score(const Matrix& w) { return diagonal_score(w.values, w.rows, w.cols); }

}  // namespace attn::report
