// ops/softmax.cpp — softmax and log_softmax over the last dimension, with backward nodes.
// Attention weights (§3.2.1, Eq. 1) and output log-probabilities (§3.4). Checks and dtype
// dispatch only; the math is in kernels/softmax.cpp. A fully -inf row gives zeros (softmax)
// or -inf (log_softmax) and a zero gradient, never NaN. Not done here: a `dim` argument
// (callers transpose), fused masking or scaling (see attention).
#include "attn/ops/ops.h"
#include "kernels/softmax.h"

namespace attn {

namespace {

// The incoming gradient as a contiguous tensor of the forward dtype.
Tensor grad_as(const Tensor& g, DType dtype) {
  NoGradGuard guard;
  return g.dtype() == dtype ? contiguous(g) : g.to(dtype);
}

enum class SoftmaxKind { Softmax, LogSoftmax };

const char* op_name(SoftmaxKind kind) {
  return kind == SoftmaxKind::Softmax ? "softmax" : "log_softmax";
}

template <class T>
void forward_run(SoftmaxKind kind, T* y, const T* x, int64_t rows, int64_t cols) {
  if (kind == SoftmaxKind::Softmax)
    kernels::softmax_forward<T>(y, x, rows, cols);
  else
    kernels::log_softmax_forward<T>(y, x, rows, cols);
}

template <class T>
void backward_run(SoftmaxKind kind, T* dx, const T* dy, const T* y, int64_t rows, int64_t cols) {
  if (kind == SoftmaxKind::Softmax)
    kernels::softmax_backward<T>(dx, dy, y, rows, cols);
  else
    kernels::log_softmax_backward<T>(dx, dy, y, rows, cols);
}

struct SoftmaxBackward : Node {
  SoftmaxKind kind = SoftmaxKind::Softmax;
  Tensor y;  // the forward output, detached (saving `out` itself would be a cycle)
  const char* name() const override {
    return kind == SoftmaxKind::Softmax ? "SoftmaxBackward" : "LogSoftmaxBackward";
  }
  std::vector<Tensor> backward(const Tensor& g) override {
    const Tensor dy = grad_as(g, y.dtype());
    Tensor dx = Tensor::zeros(y.shape(), y.dtype());
    const int64_t cols = y.size(-1);
    const int64_t rows = cols == 0 ? 0 : y.numel() / cols;
    if (y.dtype() == DType::F32)
      backward_run<float>(kind, dx.data<float>(), dy.data<float>(), y.data<float>(), rows, cols);
    else
      backward_run<double>(kind, dx.data<double>(), dy.data<double>(), y.data<double>(), rows,
                           cols);
    return {dx};
  }
  void release() override { y = Tensor(); }
};

Tensor softmax_impl(const Tensor& x, SoftmaxKind kind) {
  const char* op = op_name(kind);
  ATTN_CHECK(x.defined(), op, "x is undefined");
  ATTN_CHECK(is_floating(x.dtype()), op, "x must be f32 or f64, got ", x.str());
  ATTN_CHECK(x.dim() >= 1, op, "x must have rank >= 1, got ", x.str());
  const Tensor xc = x.contiguous();
  const int64_t cols = x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  Tensor out = Tensor::empty(x.shape(), x.dtype());  // [..., C]
  if (x.dtype() == DType::F32)
    forward_run<float>(kind, out.data<float>(), xc.data<float>(), rows, cols);
  else
    forward_run<double>(kind, out.data<double>(), xc.data<double>(), rows, cols);
  if (needs_grad({&x})) {
    auto node = std::make_shared<SoftmaxBackward>();
    node->kind = kind;
    node->y = out.detach();
    attach_node(out, node, {x});
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x) { return softmax_impl(x, SoftmaxKind::Softmax); }

Tensor log_softmax(const Tensor& x) { return softmax_impl(x, SoftmaxKind::LogSoftmax); }

}  // namespace attn
