// attn/report/matrix.h — the plain row-major matrix that figures and attention statistics take.
// The report layer never sees a Tensor: callers copy attention weights, positional encodings
// or masks out as doubles (tensor.to_vector<double>()) with their row and column counts.
// Deliberately minimal: construction with a size check, element access, head averaging, cropping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace attn::report {

struct Matrix {
  std::vector<double> values{};  // row-major, values[r * cols + c]
  int64_t rows = 0;
  int64_t cols = 0;

  Matrix() = default;
  // Throws attn::Error unless values.size() == rows * cols and both counts are positive.
  Matrix(std::vector<double> values, int64_t rows, int64_t cols);

  double at(int64_t r, int64_t c) const { return values[static_cast<size_t>(r * cols + c)]; }
  bool empty() const { return values.empty(); }
};

// Element-wise mean of same-shaped matrices (e.g. the head average of one layer's attention).
Matrix mean_of(const std::vector<Matrix>& matrices);

// Rows [row_begin, row_end) and columns [col_begin, col_end) of m, e.g. to drop BOS/EOS.
Matrix submatrix(const Matrix& m, int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end);

}  // namespace attn::report
