// dropout: inverted dropout (§5.4, applied to sub-layer outputs and embedding sums) with its
// backward node, which reuses the saved keep-mask. Identity (x itself, no copy, no node) when
// not training or p == 0; p outside [0, 1) is an error even then. Not here: the module
// wrapper with its own Rng (nn/dropout.h) and dropout on attention weights (ops/attention).
#include "attn/ops/ops.h"
#include "kernels/dropout.h"

namespace attn {

namespace {

struct DropoutBackward : Node {
  Tensor keep;  // bool [n], from the storage cache like any tensor (no fresh pages per step)
  double p = 0;
  const char* name() const override { return "DropoutBackward"; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    NoGradGuard guard;
    const Tensor g = g_in.contiguous();
    Tensor dx = Tensor::empty(g.shape(), g.dtype());  // every element written by the kernel
    if (g.dtype() == DType::F32)
      kernels::dropout_backward_write<float>(dx.data<float>(), g.data<float>(), keep_data(),
                                             static_cast<float>(1.0 / (1.0 - p)), g.numel());
    else
      kernels::dropout_backward_write<double>(dx.data<double>(), g.data<double>(), keep_data(),
                                              1.0 / (1.0 - p), g.numel());
    return {dx};
  }
  void release() override { keep = Tensor(); }
  const uint8_t* keep_data() const { return static_cast<const uint8_t*>(keep.raw_data()); }
};

}  // namespace

Tensor dropout(const Tensor& x_in, double p, bool training, Rng& rng) {
  ATTN_CHECK(x_in.defined(), "dropout", "undefined input tensor");
  ATTN_CHECK(is_floating(x_in.dtype()), "dropout", "expected f32 or f64, got ", x_in.str());
  ATTN_CHECK(p >= 0.0 && p < 1.0, "dropout", "p = ", p, " is outside [0, 1) for ", x_in.str());
  if (!training || p == 0.0) return x_in;
  const Tensor x = x_in.contiguous();
  const int64_t n = x.numel();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  Tensor keep = Tensor::empty({n}, DType::Bool);  // [n], every byte written by the mask draw
  auto* keep_p = static_cast<uint8_t*>(keep.raw_data());
  if (x.dtype() == DType::F32)
    kernels::dropout_forward<float>(out.data<float>(), keep_p, x.data<float>(), n, p, rng);
  else
    kernels::dropout_forward<double>(out.data<double>(), keep_p, x.data<double>(), n, p, rng);
  if (needs_grad({&x})) {
    auto node = std::make_shared<DropoutBackward>();
    node->keep = std::move(keep);
    node->p = p;
    attach_node(out, node, {x});
  }
  return out;
}

}  // namespace attn
