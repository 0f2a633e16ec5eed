// kernels/elementwise.h — element-wise forward/backward kernels: add, sub, mul with NumPy
// broadcasting, and the unary maps scale, relu, gelu (exact and tanh), silu and tanh.
// Used by the residual connections (§3.1), the FFN activation (§3.3, Eq. 2) and the
// embedding scaling (§3.4). Raw pointers and sizes only: no allocation, no shape checks
// (src/ops/elementwise.cpp does those), and no SIMD intrinsics (the compiler vectorises).
#pragma once

#include <cstdint>

#include "attn/core/shape.h"

namespace attn::kernels {

enum class BinaryOp : uint8_t { Add, Sub, Mul };

// How the two operands of a binary op line up with the output (computed once per call).
//   Same:    a, b and out all have out's shape.
//   RowB:    a has out's shape [outer, inner]; b holds `inner` elements repeated over outer
//            (b's shape is a suffix of out's, possibly with leading 1s; a scalar has inner 1).
//   RowA:    the mirror image (b is full, a is repeated).
//   General: any other broadcast; a_strides/b_strides are per output dimension, 0 where the
//            operand is broadcast.
struct BroadcastPlan {
  enum class Kind : uint8_t { Same, RowA, RowB, General };
  Kind kind = Kind::Same;
  Shape out_shape;
  int64_t numel = 0;
  int64_t outer = 1, inner = 1;  // RowA / RowB
  Shape a_strides, b_strides;    // General, in elements, rank of out_shape
};

// Plans the broadcast of a and b (shapes must broadcast; throws naming `op` otherwise).
BroadcastPlan plan_broadcast(const Shape& a, const Shape& b, const char* op);

// out = a (op) b, elementwise over plan.out_shape.
template <class T>
void binary_forward(BinaryOp op, T* out, const T* a, const T* b, const BroadcastPlan& plan);

// da += reduce(dout * d(a op b)/da), db += reduce(dout * d(a op b)/db), where reduce sums over
// the dimensions the operand was broadcast along. Either of da / db may be null (not needed).
// a is read only for Mul's db, b only for Mul's da.
template <class T>
void binary_backward(BinaryOp op, T* da, T* db, const T* dout, const T* a, const T* b,
                     const BroadcastPlan& plan);

// ---- unary maps: out[i] = f(x[i]); backward dx[i] += dout[i] * f'(x[i]) ------------------
template <class T> void scale_forward(T* out, const T* x, T s, int64_t n);
template <class T> void scale_backward(T* dx, const T* dout, T s, int64_t n);

template <class T> void relu_forward(T* out, const T* x, int64_t n);
template <class T> void relu_backward(T* dx, const T* dout, const T* x, int64_t n);

template <class T> void gelu_forward(T* out, const T* x, int64_t n);
template <class T> void gelu_backward(T* dx, const T* dout, const T* x, int64_t n);

template <class T> void gelu_tanh_forward(T* out, const T* x, int64_t n);
template <class T> void gelu_tanh_backward(T* dx, const T* dout, const T* x, int64_t n);

template <class T> void silu_forward(T* out, const T* x, int64_t n);
template <class T> void silu_backward(T* dx, const T* dout, const T* x, int64_t n);

// tanh's backward reads the forward output y = tanh(x) rather than x.
template <class T> void tanh_forward(T* out, const T* x, int64_t n);
template <class T> void tanh_backward(T* dx, const T* dout, const T* y, int64_t n);

}  // namespace attn::kernels
