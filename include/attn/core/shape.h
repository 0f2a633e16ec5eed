// attn/core/shape.h — shapes and strides in PyTorch's dimension order (row-major).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attn {

using Shape = std::vector<int64_t>;

// "[2, 3, 4]".
std::string shape_str(const Shape& shape);
// Product of the dimensions (1 for a rank-0 shape). Inline: Tensor::numel() runs it on
// every call, and ops call that a few times each.
inline int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}
// Row-major (C order) strides of a contiguous tensor of this shape.
Shape contiguous_strides(const Shape& shape);
// Maps a possibly negative dimension index into [0, rank); throws naming `op` otherwise.
int64_t wrap_dim(int64_t dim, int64_t rank, const char* op);
// NumPy broadcasting of two shapes; throws naming `op` when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace attn
