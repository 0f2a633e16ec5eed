// dropout: inverted dropout (§5.4, applied to sub-layer outputs and embedding sums) with its
// backward node, which reuses the saved keep-mask; and two fused forms that draw the same mask
// and give the same bits as their compositions in one pass: dropout_add (the residual
// connection of §3.1 around a dropped-out sub-layer output) and relu_dropout (the FFN's inner
// activation, §3.3). Identity (x itself, no copy, no node) when not training or p == 0; p
// outside [0, 1) is an error even then. Not here: the module wrapper with its own Rng
// (nn/dropout.h) and dropout on attention weights (ops/attention).
#include <utility>

#include "attn/ops/ops.h"
#include "kernels/dropout.h"

namespace attn {

namespace {

void check_p(const char* op, double p, const Tensor& x) {
  ATTN_CHECK(p >= 0.0 && p < 1.0, op, "p = ", p, " is outside [0, 1) for ", x.str());
}

void check_floating(const char* op, const Tensor& x) {
  ATTN_CHECK(x.defined(), op, "undefined input tensor");
  ATTN_CHECK(is_floating(x.dtype()), op, "expected f32 or f64, got ", x.str());
}

// dx = keep ? g * scale : 0 with scale = 1 / (1 - p), g contiguous: dropout's gradient from the
// saved mask, written into fresh storage (every element written by the kernel).
Tensor masked_grad(const Tensor& g, const Tensor& keep, double p) {
  Tensor dx = Tensor::empty(g.shape(), g.dtype());
  const auto* k = static_cast<const uint8_t*>(keep.raw_data());
  if (g.dtype() == DType::F32)
    kernels::dropout_backward_write<float>(dx.data<float>(), g.data<float>(), k,
                                           static_cast<float>(1.0 / (1.0 - p)), g.numel());
  else
    kernels::dropout_backward_write<double>(dx.data<double>(), g.data<double>(), k, 1.0 / (1.0 - p),
                                            g.numel());
  return dx;
}

// A fresh output of x's shape and a fresh mask [n] (every byte written by the mask draw), with
// kernel(out, keep, x) run on x's (contiguous) data in its dtype.
template <class Kernel>
std::pair<Tensor, Tensor> masked_forward(const Tensor& x, Kernel&& kernel) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  Tensor keep = Tensor::empty({x.numel()}, DType::Bool);  // [n]
  auto* k = static_cast<uint8_t*>(keep.raw_data());
  if (x.dtype() == DType::F32)
    kernel(out.data<float>(), k, x.data<float>());
  else
    kernel(out.data<double>(), k, x.data<double>());
  return {out, keep};
}

struct DropoutBackward : Node {
  Tensor keep;  // bool [n], from the storage cache like any tensor (no fresh pages per step)
  double p = 0;
  const char* name() const override { return "DropoutBackward"; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    NoGradGuard guard;
    const Tensor g = g_in.contiguous();
    return {masked_grad(g, keep, p)};
  }
  void release() override { keep = Tensor(); }
};

// out = residual + keep * x * scale: d residual = g, handed on as it is (the tape copies or adds
// it where it must, as for a view's gradient), and dx = keep ? g * scale : 0 from the saved mask.
struct DropoutAddBackward : Node {
  Tensor keep;  // bool [n]
  double p = 0;
  const char* name() const override { return "DropoutAddBackward"; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    NoGradGuard guard;
    const Tensor g = g_in.contiguous();
    const Tensor dx = inputs[1].requires_grad() ? masked_grad(g, keep, p) : Tensor();
    return {inputs[0].requires_grad() ? g : Tensor(), dx};
  }
  void release() override { keep = Tensor(); }
};

// y = keep * relu(x) * scale: dx = y > 0 ? g * scale : 0 (kernels/dropout.h). The node saves the
// output, not x and the mask: y > 0 holds exactly where the gradient flows, and the output is
// kept alive anyway by the layer that reads it (the FFN's second linear map saves its input),
// so the node holds no memory of its own; saving x would keep one more [..., F] tensor alive
// until the backward, and the mask n more bytes.
struct ReluDropoutBackward : Node {
  Tensor y;  // the forward's output, detached (no reference cycle)
  double p = 0;
  const char* name() const override { return "ReluDropoutBackward"; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    NoGradGuard guard;
    const Tensor g = g_in.contiguous();
    Tensor dx = Tensor::empty(g.shape(), g.dtype());  // every element written by the kernel
    if (g.dtype() == DType::F32)
      kernels::relu_dropout_backward_write<float>(dx.data<float>(), g.data<float>(), y.data<float>(),
                                                  static_cast<float>(1.0 / (1.0 - p)), g.numel());
    else
      kernels::relu_dropout_backward_write<double>(dx.data<double>(), g.data<double>(), y.data<double>(),
                                                   1.0 / (1.0 - p), g.numel());
    return {dx};
  }
  void release() override { y = Tensor(); }
};

}  // namespace

Tensor dropout(const Tensor& x_in, double p, bool training, Rng& rng) {
  check_floating("dropout", x_in);
  check_p("dropout", p, x_in);
  if (!training || p == 0.0) return x_in;
  const Tensor x = x_in.contiguous();
  auto [out, keep] = masked_forward(x, [&](auto* o, uint8_t* k, const auto* xs) {
    kernels::dropout_forward(o, k, xs, x.numel(), p, rng);
  });
  if (needs_grad({&x})) {
    auto node = std::make_shared<DropoutBackward>();
    node->keep = std::move(keep);
    node->p = p;
    attach_node(out, node, {x});
  }
  return out;
}

Tensor dropout_add(const Tensor& residual_in, const Tensor& x_in, double p, bool training, Rng& rng) {
  check_floating("dropout_add", residual_in);
  check_floating("dropout_add", x_in);
  ATTN_CHECK(residual_in.dtype() == x_in.dtype(), "dropout_add", "dtypes differ: residual ", residual_in.str(),
             " and x ", x_in.str());
  ATTN_CHECK(residual_in.shape() == x_in.shape(), "dropout_add", "residual ", residual_in.str(), " and x ",
             x_in.str(), " must have the same shape");
  check_p("dropout_add", p, x_in);
  if (!training || p == 0.0) return add(residual_in, x_in);
  const Tensor residual = residual_in.contiguous();
  const Tensor x = x_in.contiguous();
  const int64_t n = x.numel();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  Tensor keep = Tensor::empty({n}, DType::Bool);  // [n], every byte written by the mask draw
  auto* keep_p = static_cast<uint8_t*>(keep.raw_data());
  if (x.dtype() == DType::F32)
    kernels::dropout_add_forward<float>(out.data<float>(), keep_p, residual.data<float>(), x.data<float>(), n, p,
                                        rng);
  else
    kernels::dropout_add_forward<double>(out.data<double>(), keep_p, residual.data<double>(), x.data<double>(), n,
                                         p, rng);
  if (needs_grad({&residual, &x})) {
    auto node = std::make_shared<DropoutAddBackward>();
    if (x.requires_grad()) node->keep = std::move(keep);  // only dx reads the mask
    node->p = p;
    attach_node(out, node, {residual, x});
  }
  return out;
}

Tensor relu_dropout(const Tensor& x_in, double p, bool training, Rng& rng) {
  check_floating("relu_dropout", x_in);
  check_p("relu_dropout", p, x_in);
  if (!training || p == 0.0) return relu(x_in);
  const Tensor x = x_in.contiguous();
  // The mask is scratch here: the backward reads the output.
  Tensor out = masked_forward(x, [&](auto* o, uint8_t* k, const auto* xs) {
                       kernels::relu_dropout_forward(o, k, xs, x.numel(), p, rng);
                     }).first;
  if (needs_grad({&x})) {
    auto node = std::make_shared<ReluDropoutBackward>();
    node->y = out.detach();
    node->p = p;
    attach_node(out, node, {x});
  }
  return out;
}

}  // namespace attn
