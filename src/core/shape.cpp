// Shape helpers: printing, element counts, strides, dimension wrapping, broadcasting.
#include "attn/core/shape.h"

#include <algorithm>

#include "attn/core/error.h"

namespace attn {

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t checked_mul(int64_t a, int64_t b, const char* op, const char* what) {
  ATTN_CHECK(a >= 0 && b >= 0, op, what, " must not be negative, got ", a, " x ", b);
  int64_t out = 0;
  ATTN_CHECK(!__builtin_mul_overflow(a, b, &out), op, what, " overflows int64: ", a, " x ", b);
  return out;
}

int64_t checked_add(int64_t a, int64_t b, const char* op, const char* what) {
  ATTN_CHECK(a >= 0 && b >= 0, op, what, " must not be negative, got ", a, " + ", b);
  int64_t out = 0;
  ATTN_CHECK(!__builtin_add_overflow(a, b, &out), op, what, " overflows int64: ", a, " + ", b);
  return out;
}

int64_t checked_numel(const Shape& shape, const char* op) {
  int64_t n = 1;
  for (const int64_t d : shape) {
    ATTN_CHECK(d >= 0, op, "negative dimension in shape ", shape_str(shape));
    int64_t next = 0;
    ATTN_CHECK(!__builtin_mul_overflow(n, d, &next), op, "the element count of shape ", shape_str(shape),
               " overflows int64");
    n = next;
  }
  return n;
}

int64_t checked_nbytes(const Shape& shape, int64_t element_size, const char* op) {
  const int64_t n = checked_numel(shape, op);
  int64_t bytes = 0;
  ATTN_CHECK(!__builtin_mul_overflow(n, element_size, &bytes), op, "the byte count of shape ", shape_str(shape),
             " (", n, " elements of ", element_size, " bytes) overflows int64");
  return bytes;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t rank, const char* op) {
  const int64_t d = dim < 0 ? dim + rank : dim;
  ATTN_CHECK(d >= 0 && d < rank, op, "dimension ", dim, " out of range for rank ", rank);
  return d;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    ATTN_CHECK(da == db || da == 1 || db == 1, op, "shapes ", shape_str(a), " and ",
               shape_str(b), " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace attn
