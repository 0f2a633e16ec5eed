// ops/layer_norm.cpp — layer_norm and rms_norm over the last dimension, with backward nodes.
// The normalisation of §3.1's "LayerNorm(x + Sublayer(x))" (nn.LayerNorm semantics) and the
// RMSNorm variant. Checks and dtype dispatch; the math and its derivation are in
// kernels/layer_norm.cpp and docs/derivations/layer_norm.md. Not done here: normalising
// over more than the last dimension (nn.LayerNorm's multi-dim normalized_shape).
#include "attn/ops/ops.h"
#include "kernels/layer_norm.h"

namespace attn {

namespace {

// The incoming gradient as a contiguous tensor of the forward dtype.
Tensor grad_as(const Tensor& g, DType dtype) {
  NoGradGuard guard;
  return g.dtype() == dtype ? contiguous(g) : g.to(dtype);
}

template <class T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// Checks x [..., D] and the optional per-feature parameters p [D]; returns D.
int64_t check_norm_inputs(const char* op, const Tensor& x, const Tensor& w, const Tensor& b,
                          double eps) {
  ATTN_CHECK(x.defined(), op, "x is undefined");
  ATTN_CHECK(is_floating(x.dtype()), op, "x must be f32 or f64, got ", x.str());
  ATTN_CHECK(x.dim() >= 1, op, "x must have rank >= 1, got ", x.str());
  const int64_t D = x.size(-1);
  for (const Tensor* p : {&w, &b}) {
    if (!p->defined()) continue;
    const char* what = p == &w ? "w" : "b";
    ATTN_CHECK(p->dtype() == x.dtype(), op, "dtypes differ: x ", x.str(), ", ", what, " ",
               p->str());
    ATTN_CHECK(p->dim() == 1 && p->size(0) == D, op, what, " must be [", D, "] for x ", x.str(),
               ", got ", p->str());
  }
  ATTN_CHECK(eps >= 0, op, "eps must be >= 0, got ", eps);
  return D;
}

int64_t rows_of(const Tensor& x) {
  const int64_t D = x.size(-1);
  return D == 0 ? 0 : x.numel() / D;
}

struct LayerNormBackward : Node {
  Tensor x, w;       // contiguous inputs (w undefined without an affine scale)
  Tensor mean, rstd;  // [rows] statistics saved by the forward
  const char* name() const override { return "LayerNormBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    const Tensor dy = grad_as(g, x.dtype());
    const int64_t D = x.size(-1), rows = rows_of(x);
    Tensor dx, dw, db;
    if (inputs[0].requires_grad()) dx = Tensor::zeros(x.shape(), x.dtype());
    if (inputs[1].defined() && inputs[1].requires_grad()) dw = Tensor::zeros({D}, x.dtype());
    if (inputs[2].defined() && inputs[2].requires_grad()) db = Tensor::zeros({D}, x.dtype());
    if (x.dtype() == DType::F32)
      kernels::layer_norm_backward<float>(ptr_or_null<float>(dx), ptr_or_null<float>(dw),
                                          ptr_or_null<float>(db), dy.data<float>(),
                                          x.data<float>(), ptr_or_null<float>(w),
                                          mean.data<float>(), rstd.data<float>(), rows, D);
    else
      kernels::layer_norm_backward<double>(ptr_or_null<double>(dx), ptr_or_null<double>(dw),
                                           ptr_or_null<double>(db), dy.data<double>(),
                                           x.data<double>(), ptr_or_null<double>(w),
                                           mean.data<double>(), rstd.data<double>(), rows, D);
    return {dx, dw, db};
  }
  void release() override {
    x = w = mean = rstd = Tensor();
  }
};

struct RmsNormBackward : Node {
  Tensor x, w;  // contiguous inputs (w may be undefined)
  Tensor rstd;  // [rows]
  const char* name() const override { return "RmsNormBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    const Tensor dy = grad_as(g, x.dtype());
    const int64_t D = x.size(-1), rows = rows_of(x);
    Tensor dx, dw;
    if (inputs[0].requires_grad()) dx = Tensor::zeros(x.shape(), x.dtype());
    if (inputs[1].defined() && inputs[1].requires_grad()) dw = Tensor::zeros({D}, x.dtype());
    if (x.dtype() == DType::F32)
      kernels::rms_norm_backward<float>(ptr_or_null<float>(dx), ptr_or_null<float>(dw),
                                        dy.data<float>(), x.data<float>(), ptr_or_null<float>(w),
                                        rstd.data<float>(), rows, D);
    else
      kernels::rms_norm_backward<double>(ptr_or_null<double>(dx), ptr_or_null<double>(dw),
                                         dy.data<double>(), x.data<double>(),
                                         ptr_or_null<double>(w), rstd.data<double>(), rows, D);
    return {dx, dw};
  }
  void release() override { x = w = rstd = Tensor(); }
};

}  // namespace

namespace {

// The forward pass of layer_norm over x, or over x + r when r is defined (r of x's shape and
// dtype): the output, the statistics and the contiguous x and w the backward node keeps.
struct LayerNormForward {
  Tensor out, mean, rstd, xc, wc;
};

template <class T>
void run_layer_norm(LayerNormForward& f, const Tensor& rc, const Tensor& bc, int64_t rows, int64_t D, double eps) {
  if (rc.defined())
    kernels::add_layer_norm_forward<T>(f.out.data<T>(), f.mean.data<T>(), f.rstd.data<T>(), f.xc.data<T>(),
                                       rc.data<T>(), ptr_or_null<T>(f.wc), ptr_or_null<T>(bc), rows, D, eps);
  else
    kernels::layer_norm_forward<T>(f.out.data<T>(), f.mean.data<T>(), f.rstd.data<T>(), f.xc.data<T>(),
                                   ptr_or_null<T>(f.wc), ptr_or_null<T>(bc), rows, D, eps);
}

LayerNormForward layer_norm_forward_of(const char* op, const Tensor& x, const Tensor& r, const Tensor& w,
                                       const Tensor& b, double eps) {
  const int64_t D = check_norm_inputs(op, x, w, b, eps);
  const int64_t rows = rows_of(x);
  LayerNormForward f;
  f.xc = x.contiguous();
  f.wc = w.defined() ? w.contiguous() : Tensor();
  const Tensor bc = b.defined() ? b.contiguous() : Tensor();
  const Tensor rc = r.defined() ? r.contiguous() : Tensor();
  f.out = Tensor::empty(x.shape(), x.dtype());  // [..., D]
  f.mean = Tensor::empty({rows}, x.dtype());    // [rows]
  f.rstd = Tensor::empty({rows}, x.dtype());    // [rows]
  if (x.dtype() == DType::F32)
    run_layer_norm<float>(f, rc, bc, rows, D, eps);
  else
    run_layer_norm<double>(f, rc, bc, rows, D, eps);
  return f;
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  LayerNormForward f = layer_norm_forward_of("layer_norm", x, Tensor(), w, b, eps);
  if (needs_grad({&x, &w, &b})) {
    auto node = std::make_shared<LayerNormBackward>();
    node->x = f.xc.detach();
    node->w = f.wc.defined() ? f.wc.detach() : Tensor();
    node->mean = f.mean;
    node->rstd = f.rstd;
    attach_node(f.out, node, {x, w, b});
  }
  return f.out;
}

Tensor add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& w, const Tensor& b, double eps) {
  ATTN_CHECK(x.defined() && r.defined(), "add_layer_norm", "x and r must be defined");
  if (needs_grad({&x, &r, &w, &b}) || x.shape() != r.shape() || x.dtype() != r.dtype())
    return layer_norm(add(x, r), w, b, eps);
  return layer_norm_forward_of("add_layer_norm", x, r, w, b, eps).out;  // [..., D]
}

Tensor rms_norm(const Tensor& x, const Tensor& w, double eps) {
  const int64_t D = check_norm_inputs("rms_norm", x, w, Tensor(), eps);
  const int64_t rows = rows_of(x);
  const Tensor xc = x.contiguous();
  const Tensor wc = w.defined() ? w.contiguous() : Tensor();
  Tensor out = Tensor::empty(x.shape(), x.dtype());  // [..., D]
  Tensor rstd = Tensor::empty({rows}, x.dtype());    // [rows]
  if (x.dtype() == DType::F32)
    kernels::rms_norm_forward<float>(out.data<float>(), rstd.data<float>(), xc.data<float>(),
                                     ptr_or_null<float>(wc), rows, D, eps);
  else
    kernels::rms_norm_forward<double>(out.data<double>(), rstd.data<double>(), xc.data<double>(),
                                      ptr_or_null<double>(wc), rows, D, eps);
  if (needs_grad({&x, &w})) {
    auto node = std::make_shared<RmsNormBackward>();
    node->x = xc.detach();
    node->w = wc.defined() ? wc.detach() : Tensor();
    node->rstd = rstd;
    attach_node(out, node, {x, w});
  }
  return out;
}

}  // namespace attn
