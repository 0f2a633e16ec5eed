// kernels/elementwise.cpp — element-wise kernels: broadcast add/sub/mul and unary activations.
// Residual sums (§3.1), the FFN activation (§3.3: ReLU in the paper, GELU/SiLU for the
// variants) and scaling (§3.4). Fast paths for equal shapes and for an operand repeated over
// leading dimensions ([B, T, D] + [D]); everything else walks strides. OpenMP only kicks in
// at kParallelMin elements. float spans of the fast paths run the active ISA's vector
// kernels (simd/vector_kernels.cpp); double and general broadcasts run the loops below.
// Not done here: vector kernels for silu/tanh, in-place variants.
#include "kernels/elementwise.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "attn/core/error.h"
#include "kernels/parallel_for.h"
#include "kernels/simd/parallel_chunks.h"
#include "kernels/simd/vector_kernels.h"

namespace attn::kernels {

namespace {

// Below this many elements threads cost more than they save.
constexpr int64_t kParallelMin = 32768;

// ---- broadcast drivers, templated on the scalar function so the loops vectorise ----------

template <class T, class F>
void forward_same(T* out, const T* a, const T* b, int64_t n, F f) {
  parallel_for(n, n >= kParallelMin, [&](int64_t i) { out[i] = f(a[i], b[i]); });
}

// out[o, i] = f(a[o, i], b[i]) (RowB) or f(a[i], b[o, i]) (RowA).
template <class T, class F>
void forward_row(T* out, const T* a, const T* b, int64_t outer, int64_t inner, bool small_is_a,
                 F f) {
  parallel_for(outer, outer * inner >= kParallelMin && outer > 1, [&](int64_t o) {
    T* po = out + o * inner;  // [inner]
    if (small_is_a) {
      const T* pb = b + o * inner;
      for (int64_t i = 0; i < inner; ++i) po[i] = f(a[i], pb[i]);
    } else {
      const T* pa = a + o * inner;
      for (int64_t i = 0; i < inner; ++i) po[i] = f(pa[i], b[i]);
    }
  });
}

// Calls visit(flat_out, off_a, off_b) for every output element, in row-major order.
template <class V>
void walk_general(const BroadcastPlan& p, V visit) {
  const size_t rank = p.out_shape.size();
  if (p.numel == 0) return;
  if (rank == 0) {
    visit(int64_t{0}, int64_t{0}, int64_t{0});
    return;
  }
  std::vector<int64_t> idx(rank, 0);
  const int64_t last = p.out_shape[rank - 1];
  const int64_t sa = p.a_strides[rank - 1], sb = p.b_strides[rank - 1];
  int64_t off_a = 0, off_b = 0;
  for (int64_t flat = 0; flat < p.numel; flat += last) {
    for (int64_t i = 0; i < last; ++i) visit(flat + i, off_a + i * sa, off_b + i * sb);
    // Advance the multi-index over all but the last dimension.
    for (size_t d = rank - 1; d-- > 0;) {
      if (++idx[d] < p.out_shape[d]) {
        off_a += p.a_strides[d];
        off_b += p.b_strides[d];
        break;
      }
      off_a -= (idx[d] - 1) * p.a_strides[d];
      off_b -= (idx[d] - 1) * p.b_strides[d];
      idx[d] = 0;
    }
  }
}

template <class T, class F>
void forward_any(T* out, const T* a, const T* b, const BroadcastPlan& p, F f) {
  using K = BroadcastPlan::Kind;
  switch (p.kind) {
    case K::Same: forward_same(out, a, b, p.numel, f); return;
    case K::RowA: forward_row(out, a, b, p.outer, p.inner, true, f); return;
    case K::RowB: forward_row(out, a, b, p.outer, p.inner, false, f); return;
    case K::General:
      walk_general(p, [&](int64_t i, int64_t ia, int64_t ib) { out[i] = f(a[ia], b[ib]); });
      return;
  }
}

// dsmall[i] += sum_o term(o * inner + i, i): the gradient of an operand repeated over
// `outer` rows. Columns are cut into blocks, each summed in double by one thread, so the
// result does not depend on the thread count.
template <class T, class F>
void reduce_rows(T* dsmall, int64_t outer, int64_t inner, F term) {
  constexpr int64_t kBlock = 64;
  const int64_t nblocks = (inner + kBlock - 1) / kBlock;
  parallel_for(nblocks, outer * inner >= kParallelMin && nblocks > 1, [&](int64_t blk) {
    const int64_t i0 = blk * kBlock, i1 = std::min(inner, i0 + kBlock);
    double acc[kBlock] = {};
    for (int64_t o = 0; o < outer; ++o) {
      const int64_t base = o * inner;
      for (int64_t i = i0; i < i1; ++i) acc[i - i0] += static_cast<double>(term(base + i, i));
    }
    for (int64_t i = i0; i < i1; ++i) dsmall[i] += static_cast<T>(acc[i - i0]);
  });
}

// ga(g, a, b) = g * d(a op b)/da, gb likewise for b.
template <class T, class GA, class GB>
void backward_any(T* da, T* db, const T* dout, const T* a, const T* b, const BroadcastPlan& p,
                  GA ga, GB gb) {
  using K = BroadcastPlan::Kind;
  const int64_t n = p.numel;
  switch (p.kind) {
    case K::Same:
      if (da) {
        parallel_for(n, n >= kParallelMin, [&](int64_t i) { da[i] += ga(dout[i], a, b, i, i); });
      }
      if (db) {
        parallel_for(n, n >= kParallelMin, [&](int64_t i) { db[i] += gb(dout[i], a, b, i, i); });
      }
      return;
    case K::RowB: {  // a full [outer, inner], b repeated [inner]
      const int64_t inner = p.inner;
      if (da) {
        parallel_for(n, n >= kParallelMin, [&](int64_t i) { da[i] += ga(dout[i], a, b, i, i % inner); });
      }
      if (db)
        reduce_rows(db, p.outer, inner,
                    [&](int64_t i, int64_t j) { return gb(dout[i], a, b, i, j); });
      return;
    }
    case K::RowA: {  // a repeated [inner], b full [outer, inner]
      const int64_t inner = p.inner;
      if (da)
        reduce_rows(da, p.outer, inner,
                    [&](int64_t i, int64_t j) { return ga(dout[i], a, b, j, i); });
      if (db) {
        parallel_for(n, n >= kParallelMin, [&](int64_t i) { db[i] += gb(dout[i], a, b, i % inner, i); });
      }
      return;
    }
    case K::General:
      // Serial: several output elements may add into one gradient element.
      walk_general(p, [&](int64_t i, int64_t ia, int64_t ib) {
        if (da) da[ia] += ga(dout[i], a, b, ia, ib);
        if (db) db[ib] += gb(dout[i], a, b, ia, ib);
      });
      return;
  }
}

// ---- float paths through the vector kernels ----------------------------------------------

using SpanFn = void (*)(float*, const float*, const float*, int64_t);

SpanFn binary_span(const simd::VectorKernels& vk, BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return vk.add;
    case BinaryOp::Sub: return vk.sub;
    case BinaryOp::Mul: return vk.mul;
  }
  return vk.add;
}

// out = a (op) b for the Same / RowA / RowB plans; false for General (not handled here).
bool binary_forward_vector(BinaryOp op, float* out, const float* a, const float* b,
                           const BroadcastPlan& p) {
  using K = BroadcastPlan::Kind;
  const auto& vk = simd::vector_kernels();
  const SpanFn f = binary_span(vk, op);
  switch (p.kind) {
    case K::Same:
      simd::for_chunks(p.numel, kParallelMin,
                       [&](int64_t i, int64_t n) { f(out + i, a + i, b + i, n); });
      return true;
    case K::RowA:
    case K::RowB: {
      const bool small_is_a = p.kind == K::RowA;
      const int64_t inner = p.inner;
      parallel_for(p.outer, p.outer * inner >= kParallelMin && p.outer > 1, [&](int64_t o) {
        const int64_t off = o * inner;
        f(out + off, small_is_a ? a : a + off, small_is_a ? b + off : b, inner);
      });
      return true;
    }
    case K::General: return false;
  }
  return false;
}

// The gradient of the operand that has out's shape: dfull += dout * s (Add, Sub) or
// dfull += dout * other (Mul), where `other` is the second operand, full or one repeated row.
void full_grad_vector(float* dfull, const float* dout, float s, const float* other,
                      bool other_is_row, const BroadcastPlan& p) {
  const auto& vk = simd::vector_kernels();
  if (other == nullptr) {
    simd::for_chunks(p.numel, kParallelMin,
                     [&](int64_t i, int64_t n) { vk.accumulate(dfull + i, dout + i, s, n); });
  } else if (!other_is_row) {
    simd::for_chunks(p.numel, kParallelMin, [&](int64_t i, int64_t n) {
      vk.accumulate_mul(dfull + i, dout + i, other + i, n);
    });
  } else {
    const int64_t inner = p.inner;
    parallel_for(p.outer, p.numel >= kParallelMin && p.outer > 1,
                 [&](int64_t o) { vk.accumulate_mul(dfull + o * inner, dout + o * inner, other, inner); });
  }
}

}  // namespace

BroadcastPlan plan_broadcast(const Shape& a, const Shape& b, const char* op) {
  BroadcastPlan p;
  p.out_shape = broadcast_shapes(a, b, op);
  p.numel = shape_numel(p.out_shape);
  const size_t rank = p.out_shape.size();
  if (a == b) {
    p.kind = BroadcastPlan::Kind::Same;
    return p;
  }
  // Pad both shapes with leading 1s to the output's rank.
  auto pad = [&](const Shape& s) {
    Shape r(rank - s.size(), 1);
    r.insert(r.end(), s.begin(), s.end());
    return r;
  };
  const Shape pa = pad(a), pb = pad(b);
  // Is `small` a suffix of out (after leading 1s) while `full` equals out? Then it is a row.
  auto row_split = [&](const Shape& full, const Shape& small, int64_t& inner) {
    if (full != p.out_shape) return false;
    size_t k = rank;
    while (k > 0 && small[k - 1] == p.out_shape[k - 1]) --k;
    for (size_t d = 0; d < k; ++d)
      if (small[d] != 1) return false;
    inner = 1;
    for (size_t d = k; d < rank; ++d) inner *= p.out_shape[d];
    return true;
  };
  int64_t inner = 1;
  if (row_split(pa, pb, inner)) {
    p.kind = BroadcastPlan::Kind::RowB;
  } else if (row_split(pb, pa, inner)) {
    p.kind = BroadcastPlan::Kind::RowA;
  } else {
    p.kind = BroadcastPlan::Kind::General;
    auto bstrides = [&](const Shape& s) {
      Shape st = contiguous_strides(s);
      for (size_t d = 0; d < rank; ++d)
        if (s[d] == 1 && p.out_shape[d] != 1) st[d] = 0;
      return st;
    };
    p.a_strides = bstrides(pa);
    p.b_strides = bstrides(pb);
    return p;
  }
  p.inner = inner;
  p.outer = inner > 0 ? p.numel / inner : 0;
  return p;
}

template <class T>
void binary_forward(BinaryOp op, T* out, const T* a, const T* b, const BroadcastPlan& plan) {
  if constexpr (std::is_same_v<T, float>)
    if (binary_forward_vector(op, out, a, b, plan)) return;
  switch (op) {
    case BinaryOp::Add: forward_any(out, a, b, plan, [](T x, T y) { return x + y; }); return;
    case BinaryOp::Sub: forward_any(out, a, b, plan, [](T x, T y) { return x - y; }); return;
    case BinaryOp::Mul: forward_any(out, a, b, plan, [](T x, T y) { return x * y; }); return;
  }
}

template <class T>
void binary_backward(BinaryOp op, T* da, T* db, const T* dout, const T* a, const T* b,
                     const BroadcastPlan& plan) {
  // Local derivatives, with (ia, ib) the operands' flat indices:
  //   out = a + b:  dout/da = 1, dout/db = 1
  //   out = a - b:  dout/da = 1, dout/db = -1
  //   out = a * b:  dout/da = b, dout/db = a
  if constexpr (std::is_same_v<T, float>) {
    using K = BroadcastPlan::Kind;
    if (plan.kind != K::General) {
      // The operand with out's shape goes through the vector kernels; a repeated row's
      // gradient is a column sum (reduce_rows, in double) and keeps the generic path.
      const bool a_full = plan.kind != K::RowA, b_full = plan.kind != K::RowB;
      const bool mul = op == BinaryOp::Mul;
      if (da && a_full) full_grad_vector(da, dout, 1.0f, mul ? b : nullptr, !b_full, plan);
      if (db && b_full)
        full_grad_vector(db, dout, op == BinaryOp::Sub ? -1.0f : 1.0f, mul ? a : nullptr, !a_full,
                         plan);
      if (a_full) da = nullptr;  // done
      if (b_full) db = nullptr;
      if (!da && !db) return;
    }
  }
  auto one = [](T g, const T*, const T*, int64_t, int64_t) { return g; };
  switch (op) {
    case BinaryOp::Add: backward_any(da, db, dout, a, b, plan, one, one); return;
    case BinaryOp::Sub:
      backward_any(da, db, dout, a, b, plan, one,
                   [](T g, const T*, const T*, int64_t, int64_t) { return -g; });
      return;
    case BinaryOp::Mul:
      backward_any(
          da, db, dout, a, b, plan,
          [](T g, const T*, const T* pb, int64_t, int64_t ib) { return g * pb[ib]; },
          [](T g, const T* pa, const T*, int64_t ia, int64_t) { return g * pa[ia]; });
      return;
  }
}

// ---- unary maps ---------------------------------------------------------------------------

template <class T>
void scale_forward(T* out, const T* x, T s, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    return simd::for_chunks(n, kParallelMin, [&](int64_t i, int64_t k) { vk.scale(out + i, x + i, s, k); });
  }
  parallel_for(n, n >= kParallelMin, [&](int64_t i) { out[i] = x[i] * s; });
}

// forward: out = s * x;  d out / dx = s.
template <class T>
void scale_backward(T* dx, const T* dout, T s, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    return simd::for_chunks(n, kParallelMin,
                            [&](int64_t i, int64_t k) { vk.accumulate(dx + i, dout + i, s, k); });
  }
  parallel_for(n, n >= kParallelMin, [&](int64_t i) { dx[i] += dout[i] * s; });
}

template <class T>
void relu_forward(T* out, const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    return simd::for_chunks(n, kParallelMin, [&](int64_t i, int64_t k) { vk.relu_forward(out + i, x + i, k); });
  }
  parallel_for(n, n >= kParallelMin, [&](int64_t i) { out[i] = x[i] < T(0) ? T(0) : x[i]; });  // NaN passes through
}

// forward: out = max(x, 0);  d out / dx = 1 for x > 0, else 0 (0 at x = 0, as PyTorch).
template <class T>
void relu_backward(T* dx, const T* dout, const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    return simd::for_chunks(n, kParallelMin,
                            [&](int64_t i, int64_t k) { vk.relu_backward(dx + i, dout + i, x + i, k); });
  }
  parallel_for(n, n >= kParallelMin, [&](int64_t i) { dx[i] += x[i] > T(0) ? dout[i] : T(0); });
}

template <class T>
void gelu_forward(T* out, const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    return simd::for_chunks(n, kParallelMin, [&](int64_t i, int64_t k) { vk.gelu_forward(out + i, x + i, k); });
  }
  const T inv_sqrt2 = static_cast<T>(0.70710678118654752440);
  parallel_for(n, n >= kParallelMin, [&](int64_t i) { out[i] = T(0.5) * x[i] * (T(1) + std::erf(x[i] * inv_sqrt2)); });
}

// forward: out = x * Phi(x), Phi(x) = 0.5 * (1 + erf(x / sqrt 2)) (Hendrycks & Gimpel 2016);
// d out / dx = Phi(x) + x * phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
template <class T>
void gelu_backward(T* dx, const T* dout, const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    return simd::for_chunks(n, kParallelMin,
                            [&](int64_t i, int64_t k) { vk.gelu_backward(dx + i, dout + i, x + i, k); });
  }
  const T inv_sqrt2 = static_cast<T>(0.70710678118654752440);
  const T inv_sqrt_2pi = static_cast<T>(0.39894228040143267794);
  parallel_for(n, n >= kParallelMin, [&](int64_t i) {
    const T v = x[i];
    const T cdf = T(0.5) * (T(1) + std::erf(v * inv_sqrt2));
    const T pdf = inv_sqrt_2pi * std::exp(T(-0.5) * v * v);
    dx[i] += dout[i] * (cdf + v * pdf);
  });
}

template <class T>
void gelu_tanh_forward(T* out, const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    return simd::for_chunks(n, kParallelMin, [&](int64_t i, int64_t k) { vk.gelu_tanh_forward(out + i, x + i, k); });
  }
  const T k = static_cast<T>(0.79788456080286535588);  // sqrt(2 / pi)
  const T c = static_cast<T>(0.044715);
  parallel_for(n, n >= kParallelMin, [&](int64_t i) {
    const T v = x[i];
    out[i] = T(0.5) * v * (T(1) + std::tanh(k * (v + c * v * v * v)));
  });
}

// forward: out = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3) (PyTorch approximate='tanh');
// d out / dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
template <class T>
void gelu_tanh_backward(T* dx, const T* dout, const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    return simd::for_chunks(n, kParallelMin,
                            [&](int64_t i, int64_t k) { vk.gelu_tanh_backward(dx + i, dout + i, x + i, k); });
  }
  const T k = static_cast<T>(0.79788456080286535588);
  const T c = static_cast<T>(0.044715);
  parallel_for(n, n >= kParallelMin, [&](int64_t i) {
    const T v = x[i];
    const T t = std::tanh(k * (v + c * v * v * v));
    const T local = T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * k * (T(1) + T(3) * c * v * v);
    dx[i] += dout[i] * local;
  });
}

template <class T>
void silu_forward(T* out, const T* x, int64_t n) {
  parallel_for(n, n >= kParallelMin, [&](int64_t i) { out[i] = x[i] / (T(1) + std::exp(-x[i])); });
}

// forward: out = x * s(x), s = sigmoid;  d out / dx = s(x) * (1 + x * (1 - s(x))).
template <class T>
void silu_backward(T* dx, const T* dout, const T* x, int64_t n) {
  parallel_for(n, n >= kParallelMin, [&](int64_t i) {
    const T s = T(1) / (T(1) + std::exp(-x[i]));
    dx[i] += dout[i] * s * (T(1) + x[i] * (T(1) - s));
  });
}

template <class T>
void tanh_forward(T* out, const T* x, int64_t n) {
  parallel_for(n, n >= kParallelMin, [&](int64_t i) { out[i] = std::tanh(x[i]); });
}

// forward: y = tanh(x);  dy / dx = 1 - y^2.
template <class T>
void tanh_backward(T* dx, const T* dout, const T* y, int64_t n) {
  parallel_for(n, n >= kParallelMin, [&](int64_t i) { dx[i] += dout[i] * (T(1) - y[i] * y[i]); });
}

#define ATTN_INSTANTIATE(T)                                                                   \
  template void binary_forward<T>(BinaryOp, T*, const T*, const T*, const BroadcastPlan&);    \
  template void binary_backward<T>(BinaryOp, T*, T*, const T*, const T*, const T*,            \
                                   const BroadcastPlan&);                                     \
  template void scale_forward<T>(T*, const T*, T, int64_t);                                   \
  template void scale_backward<T>(T*, const T*, T, int64_t);                                  \
  template void relu_forward<T>(T*, const T*, int64_t);                                       \
  template void relu_backward<T>(T*, const T*, const T*, int64_t);                            \
  template void gelu_forward<T>(T*, const T*, int64_t);                                       \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t);                            \
  template void gelu_tanh_forward<T>(T*, const T*, int64_t);                                  \
  template void gelu_tanh_backward<T>(T*, const T*, const T*, int64_t);                       \
  template void silu_forward<T>(T*, const T*, int64_t);                                       \
  template void silu_backward<T>(T*, const T*, const T*, int64_t);                            \
  template void tanh_forward<T>(T*, const T*, int64_t);                                       \
  template void tanh_backward<T>(T*, const T*, const T*, int64_t);
ATTN_INSTANTIATE(float)
ATTN_INSTANTIATE(double)
#undef ATTN_INSTANTIATE

}  // namespace attn::kernels
