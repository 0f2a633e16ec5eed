// Reductions: sum and mean of all elements (rank-0 results) and sum over one dimension,
// with their backward nodes (the gradient is broadcast back to the input's shape).
// Used by the losses (§5.4) and by the gradient checks. Floating tensors only; float sums
// accumulate in double. Not here: max, var, or reductions over several dimensions at once.
#include "attn/ops/ops.h"
#include "kernels/reduce.h"

namespace attn {

namespace {

void check_floating(const char* op, const Tensor& x) {
  ATTN_CHECK(x.defined(), op, "undefined input tensor");
  ATTN_CHECK(is_floating(x.dtype()), op, "expected f32 or f64, got ", x.str());
}

template <class F>
void dispatch_floating(DType dtype, F&& f) {
  if (dtype == DType::F32)
    f(float{});
  else
    f(double{});
}

// sum (divisor 1) and mean (divisor n): dx[i] = dout / divisor.
struct SumAllBackward : Node {
  Shape in_shape;
  double divisor = 1;
  bool is_mean = false;
  const char* name() const override { return is_mean ? "MeanBackward" : "SumBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    NoGradGuard guard;
    Tensor dx = Tensor::zeros(in_shape, g.dtype());
    dispatch_floating(g.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T dout = static_cast<T>(g.item() / divisor);
      kernels::sum_backward<T>(dx.data<T>(), &dout, dx.numel());
    });
    return {dx};
  }
};

struct SumDimBackward : Node {
  Shape in_shape;
  int64_t outer = 1, n = 1, inner = 1;
  const char* name() const override { return "SumBackward"; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    NoGradGuard guard;
    const Tensor g = g_in.contiguous();
    Tensor dx = Tensor::zeros(in_shape, g.dtype());
    dispatch_floating(g.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::sum_dim_backward<T>(dx.data<T>(), g.data<T>(), outer, n, inner);
    });
    return {dx};
  }
};

Tensor sum_all(const char* op, const Tensor& x_in, bool is_mean) {
  check_floating(op, x_in);
  const Tensor x = x_in.contiguous();
  Tensor out = Tensor::empty({}, x.dtype());
  const int64_t n = x.numel();
  const double divisor = is_mean ? static_cast<double>(n) : 1.0;
  dispatch_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::sum_forward<T>(out.data<T>(), x.data<T>(), n);
    // mean = sum / n, divided in double (0 / 0 = NaN for an empty tensor, as PyTorch).
    if (is_mean) *out.data<T>() = static_cast<T>(static_cast<double>(*out.data<T>()) / divisor);
  });
  if (needs_grad({&x})) {
    auto node = std::make_shared<SumAllBackward>();
    node->in_shape = x.shape();
    node->divisor = divisor;
    node->is_mean = is_mean;
    attach_node(out, node, {x});
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x) { return sum_all("sum", x, false); }
Tensor mean(const Tensor& x) { return sum_all("mean", x, true); }

Tensor sum(const Tensor& x_in, int64_t dim, bool keepdim) {
  check_floating("sum", x_in);
  dim = wrap_dim(dim, x_in.dim(), "sum");
  const Tensor x = x_in.contiguous();
  const Shape& s = x.shape();
  const size_t d = static_cast<size_t>(dim);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < d; ++i) outer *= s[i];
  for (size_t i = d + 1; i < s.size(); ++i) inner *= s[i];
  const int64_t n = s[d];
  Shape out_shape = s;
  if (keepdim)
    out_shape[d] = 1;
  else
    out_shape.erase(out_shape.begin() + dim);
  Tensor out = Tensor::empty(out_shape, x.dtype());
  dispatch_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::sum_dim_forward<T>(out.data<T>(), x.data<T>(), outer, n, inner);
  });
  if (needs_grad({&x})) {
    auto node = std::make_shared<SumDimBackward>();
    node->in_shape = s;
    node->outer = outer;
    node->n = n;
    node->inner = inner;
    attach_node(out, node, {x});
  }
  return out;
}

}  // namespace attn
