// Element-wise ops: add, sub, mul (NumPy broadcasting), scale, relu, gelu, silu, tanh_op,
// and their backward nodes. Residual connections (§3.1) and the FFN activation (§3.3).
// Broadcast gradients are summed back to each input's shape by the backward kernel.
// Deliberately absent: in-place variants and integer arithmetic.
#include "attn/ops/ops.h"
#include "kernels/elementwise.h"

namespace attn {

namespace {

void check_floating(const char* op, const Tensor& x) {
  ATTN_CHECK(x.defined(), op, "undefined input tensor");
  ATTN_CHECK(is_floating(x.dtype()), op, "expected f32 or f64, got ", x.str());
}

void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  check_floating(op, a);
  check_floating(op, b);
  ATTN_CHECK(a.dtype() == b.dtype(), op, "dtypes differ: ", a.str(), " and ", b.str());
}

// Calls f(T{}) with T = float or double according to dtype.
template <class F>
void dispatch_floating(DType dtype, F&& f) {
  if (dtype == DType::F32)
    f(float{});
  else
    f(double{});
}

// ---- binary ---------------------------------------------------------------------------------

struct BinaryBackward : Node {
  kernels::BinaryOp op = kernels::BinaryOp::Add;
  kernels::BroadcastPlan plan;
  const char* name() const override {
    switch (op) {
      case kernels::BinaryOp::Add: return "AddBackward";
      case kernels::BinaryOp::Sub: return "SubBackward";
      case kernels::BinaryOp::Mul: return "MulBackward";
    }
    return "BinaryBackward";
  }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    NoGradGuard guard;
    const Tensor& a = inputs[0];
    const Tensor& b = inputs[1];
    const Tensor g = g_in.contiguous();
    Tensor da, db;
    if (a.requires_grad()) da = Tensor::zeros(a.shape(), a.dtype());
    if (b.requires_grad()) db = Tensor::zeros(b.shape(), b.dtype());
    const bool is_mul = op == kernels::BinaryOp::Mul;
    dispatch_floating(g.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::binary_backward<T>(op, da.defined() ? da.data<T>() : nullptr,
                                  db.defined() ? db.data<T>() : nullptr, g.data<T>(),
                                  is_mul ? a.data<T>() : nullptr, is_mul ? b.data<T>() : nullptr,
                                  plan);
    });
    return {da, db};
  }
};

Tensor binary(const char* op_name, kernels::BinaryOp op, const Tensor& a_in, const Tensor& b_in) {
  check_pair(op_name, a_in, b_in);
  kernels::BroadcastPlan plan = kernels::plan_broadcast(a_in.shape(), b_in.shape(), op_name);
  const Tensor a = a_in.contiguous();
  const Tensor b = b_in.contiguous();
  Tensor out = Tensor::empty(plan.out_shape, a.dtype());
  dispatch_floating(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::binary_forward<T>(op, out.data<T>(), a.data<T>(), b.data<T>(), plan);
  });
  if (needs_grad({&a, &b})) {
    auto node = std::make_shared<BinaryBackward>();
    node->op = op;
    node->plan = std::move(plan);
    attach_node(out, node, {a, b});
  }
  return out;
}

// ---- scale --------------------------------------------------------------------------------

struct ScaleBackward : Node {
  double s = 1;
  const char* name() const override { return "ScaleBackward"; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    NoGradGuard guard;
    const Tensor g = g_in.contiguous();
    Tensor dx = Tensor::zeros(g.shape(), g.dtype());
    dispatch_floating(g.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::scale_backward<T>(dx.data<T>(), g.data<T>(), static_cast<T>(s), g.numel());
    });
    return {dx};
  }
};

// ---- unary activations ----------------------------------------------------------------------

enum class Unary : uint8_t { Relu, Gelu, GeluTanh, Silu, Tanh };

struct UnaryBackward : Node {
  Unary kind = Unary::Relu;
  Tensor saved;  // the input x, or for tanh the output y (detached: no reference cycle)
  const char* name() const override {
    switch (kind) {
      case Unary::Relu: return "ReluBackward";
      case Unary::Gelu:
      case Unary::GeluTanh: return "GeluBackward";
      case Unary::Silu: return "SiluBackward";
      case Unary::Tanh: return "TanhBackward";
    }
    return "UnaryBackward";
  }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    NoGradGuard guard;
    const Tensor g = g_in.contiguous();
    Tensor dx = Tensor::zeros(saved.shape(), saved.dtype());
    const int64_t n = g.numel();
    dispatch_floating(g.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* pdx = dx.data<T>();
      const T* pg = g.data<T>();
      const T* ps = saved.data<T>();
      switch (kind) {
        case Unary::Relu: kernels::relu_backward<T>(pdx, pg, ps, n); break;
        case Unary::Gelu: kernels::gelu_backward<T>(pdx, pg, ps, n); break;
        case Unary::GeluTanh: kernels::gelu_tanh_backward<T>(pdx, pg, ps, n); break;
        case Unary::Silu: kernels::silu_backward<T>(pdx, pg, ps, n); break;
        case Unary::Tanh: kernels::tanh_backward<T>(pdx, pg, ps, n); break;
      }
    });
    return {dx};
  }
  void release() override { saved = Tensor(); }
};

Tensor unary(const char* op_name, Unary kind, const Tensor& x_in) {
  check_floating(op_name, x_in);
  const Tensor x = x_in.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  const int64_t n = x.numel();
  dispatch_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* po = out.data<T>();
    const T* px = x.data<T>();
    switch (kind) {
      case Unary::Relu: kernels::relu_forward<T>(po, px, n); break;
      case Unary::Gelu: kernels::gelu_forward<T>(po, px, n); break;
      case Unary::GeluTanh: kernels::gelu_tanh_forward<T>(po, px, n); break;
      case Unary::Silu: kernels::silu_forward<T>(po, px, n); break;
      case Unary::Tanh: kernels::tanh_forward<T>(po, px, n); break;
    }
  });
  if (needs_grad({&x})) {
    auto node = std::make_shared<UnaryBackward>();
    node->kind = kind;
    node->saved = kind == Unary::Tanh ? out.detach() : x.detach();
    attach_node(out, node, {x});
  }
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary("add", kernels::BinaryOp::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary("sub", kernels::BinaryOp::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary("mul", kernels::BinaryOp::Mul, a, b); }

Tensor scale(const Tensor& x_in, double s) {
  check_floating("scale", x_in);
  const Tensor x = x_in.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::scale_forward<T>(out.data<T>(), x.data<T>(), static_cast<T>(s), x.numel());
  });
  if (needs_grad({&x})) {
    auto node = std::make_shared<ScaleBackward>();
    node->s = s;
    attach_node(out, node, {x});
  }
  return out;
}

Tensor relu(const Tensor& x) { return unary("relu", Unary::Relu, x); }
Tensor gelu(const Tensor& x, GeluApprox approx) {
  return unary("gelu", approx == GeluApprox::Tanh ? Unary::GeluTanh : Unary::Gelu, x);
}
Tensor silu(const Tensor& x) { return unary("silu", Unary::Silu, x); }
Tensor tanh_op(const Tensor& x) { return unary("tanh_op", Unary::Tanh, x); }

}  // namespace attn
