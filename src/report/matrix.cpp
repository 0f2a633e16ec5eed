// The report layer's plain matrix: size checks, head averaging and cropping.
// No arithmetic beyond what figures need; anything model-specific stays with the caller.
#include "attn/report/matrix.h"

#include <utility>

#include "attn/core/error.h"

namespace attn::report {

Matrix::Matrix(std::vector<double> v, int64_t r, int64_t c) : values(std::move(v)), rows(r), cols(c) {
  ATTN_CHECK(r > 0 && c > 0, "report.matrix", "rows and cols must be positive, got ", r, " x ", c);
  ATTN_CHECK(static_cast<int64_t>(values.size()) == r * c, "report.matrix", "expected ", r, " x ", c, " = ", r * c,
             " values, got ", values.size());
}

Matrix mean_of(const std::vector<Matrix>& matrices) {
  ATTN_CHECK(!matrices.empty(), "report.mean_of", "no matrices to average");
  const Matrix& first = matrices.front();
  ATTN_CHECK(!first.empty(), "report.mean_of", "empty matrix");
  std::vector<double> sum(first.values.size(), 0.0);
  for (const Matrix& m : matrices) {
    ATTN_CHECK(m.rows == first.rows && m.cols == first.cols, "report.mean_of", "shape mismatch: ", m.rows, " x ",
               m.cols, " vs ", first.rows, " x ", first.cols);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += m.values[i];
  }
  for (double& v : sum) v /= static_cast<double>(matrices.size());
  return Matrix(std::move(sum), first.rows, first.cols);
}

Matrix submatrix(const Matrix& m, int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end) {
  ATTN_CHECK(0 <= row_begin && row_begin < row_end && row_end <= m.rows && 0 <= col_begin && col_begin < col_end &&
                 col_end <= m.cols,
             "report.submatrix", "rows [", row_begin, ", ", row_end, ") cols [", col_begin, ", ", col_end,
             ") out of range for ", m.rows, " x ", m.cols);
  std::vector<double> out;
  out.reserve(static_cast<size_t>((row_end - row_begin) * (col_end - col_begin)));
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t c = col_begin; c < col_end; ++c) out.push_back(m.at(r, c));
  }
  return Matrix(std::move(out), row_end - row_begin, col_end - col_begin);
}

}  // namespace attn::report
