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
// every call, and ops call that a few times each. Unchecked: a tensor's shape was checked by
// checked_numel when the tensor was made, so its product fits.
inline int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}
// Size arithmetic that refuses overflow instead of wrapping: a * b and a + b of non-negative
// sizes, throwing attn::Error "[op] <what> overflows int64: a x b" (or "a + b") when the
// result does not fit in int64_t. Inputs from files and command lines reach allocations
// through these, so that a product is refused by name before it is formed.
int64_t checked_mul(int64_t a, int64_t b, const char* op, const char* what);
int64_t checked_add(int64_t a, int64_t b, const char* op, const char* what);
// shape_numel with every dimension checked non-negative and the product checked with
// checked_mul; the message names `op` and the shape. Tensors run it when they are made.
int64_t checked_numel(const Shape& shape, const char* op);
// checked_numel(shape) * element_size, checked: the bytes of a contiguous tensor.
int64_t checked_nbytes(const Shape& shape, int64_t element_size, const char* op);
// Row-major (C order) strides of a contiguous tensor of this shape.
Shape contiguous_strides(const Shape& shape);
// Maps a possibly negative dimension index into [0, rank); throws naming `op` otherwise.
int64_t wrap_dim(int64_t dim, int64_t rank, const char* op);
// NumPy broadcasting of two shapes; throws naming `op` when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace attn
