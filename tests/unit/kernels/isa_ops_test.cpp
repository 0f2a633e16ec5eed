// The public ops whose float32 kernels run on the vector kernels (softmax, log_softmax,
// cross_entropy, layer_norm, rms_norm, gelu in both forms, relu, add/sub/mul with and without
// broadcasting, scale), run under every ISA this CPU supports (IsaGuard, as ATTN_ISA would)
// and compared, forward and backward, with the same op in float64 (the plain loops with
// std::exp/std::erf). Odd last dimensions exercise the tails; one large case runs threaded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/ops/ops.h"
#include "kernels/simd/isa.h"
#include "support/tolerances.h"

namespace attn {
namespace {

using kernels::simd::Isa;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct OpCase {
  std::string name;
  Fn f;
  std::vector<Shape> shapes;  // the differentiable inputs
  double input_scale = 1.0;
};

Tensor targets_for(int64_t N, int64_t V) {
  std::vector<int64_t> t(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) t[static_cast<size_t>(n)] = n % 5 == 3 ? -100 : (n * 7) % V;
  return Tensor::from_vector<int64_t>(t, {N});
}

std::vector<OpCase> cases() {
  std::vector<OpCase> out;
  auto one = [](auto op) { return [op](const std::vector<Tensor>& x) { return op(x[0]); }; };
  out.push_back({"softmax", one([](const Tensor& x) { return softmax(x); }), {{5, 37}}, 3.0});
  out.push_back({"log_softmax", one([](const Tensor& x) { return log_softmax(x); }), {{5, 37}}, 3.0});
  out.push_back({"relu", one([](const Tensor& x) { return relu(x); }), {{7, 19}}});
  out.push_back({"gelu", one([](const Tensor& x) { return gelu(x); }), {{7, 19}}, 2.0});
  out.push_back({"gelu_tanh", one([](const Tensor& x) { return gelu(x, GeluApprox::Tanh); }), {{7, 19}}, 2.0});
  out.push_back({"scale", one([](const Tensor& x) { return scale(x, -0.7); }), {{3, 23}}});
  out.push_back({"add", [](const std::vector<Tensor>& x) { return add(x[0], x[1]); }, {{4, 21}, {4, 21}}});
  out.push_back({"sub row", [](const std::vector<Tensor>& x) { return sub(x[0], x[1]); }, {{4, 21}, {21}}});
  out.push_back({"mul row", [](const std::vector<Tensor>& x) { return mul(x[0], x[1]); }, {{21}, {4, 21}}});
  out.push_back({"mul", [](const std::vector<Tensor>& x) { return mul(x[0], x[1]); }, {{3, 2, 9}, {3, 2, 9}}});
  out.push_back({"layer_norm",
                 [](const std::vector<Tensor>& x) { return layer_norm(x[0], x[1], x[2], 1e-5); },
                 {{6, 33}, {33}, {33}}, 2.0});
  out.push_back({"layer_norm threaded",
                 [](const std::vector<Tensor>& x) { return layer_norm(x[0], x[1], x[2], 1e-5); },
                 {{300, 130}, {130}, {130}}});
  out.push_back({"rms_norm", [](const std::vector<Tensor>& x) { return rms_norm(x[0], x[1], 1e-6); },
                 {{6, 33}, {33}}, 2.0});
  const Tensor targets = targets_for(9, 13);
  out.push_back({"cross_entropy",
                 [targets](const std::vector<Tensor>& x) { return cross_entropy(x[0], targets, -100, 0.1); },
                 {{9, 13}}, 3.0});
  const Tensor big_targets = targets_for(400, 101);
  out.push_back({"cross_entropy threaded",
                 [big_targets](const std::vector<Tensor>& x) {
                   return cross_entropy(x[0], big_targets, -100, 0.1);
                 },
                 {{400, 101}}, 3.0});
  out.push_back({"softmax threaded", one([](const Tensor& x) { return softmax(x); }), {{64, 515}}, 3.0});
  return out;
}

// Runs f on inputs of `dtype` made from the float64 values, and returns the output followed
// by each input's gradient of sum(f(x) * w).
std::vector<Tensor> forward_backward(const OpCase& c, const std::vector<Tensor>& values,
                                     const Tensor& w, DType dtype) {
  std::vector<Tensor> inputs;
  for (const Tensor& v : values) {
    Tensor t = v.to(dtype).clone();
    t.set_requires_grad(true);
    inputs.push_back(t);
  }
  Tensor y = c.f(inputs);
  Tensor loss = sum(mul(y, w.to(dtype)));
  loss.backward();
  std::vector<Tensor> out = {y.detach()};
  for (const Tensor& t : inputs) out.push_back(t.grad());
  return out;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::fabs(v));
  return m;
}

TEST(IsaOps, EveryIsaMatchesFloat64ForwardAndBackward) {
  for (const OpCase& c : cases()) {
    SCOPED_TRACE(c.name);
    Rng rng(11);
    std::vector<Tensor> values;
    for (const Shape& s : c.shapes) values.push_back(Tensor::randn(s, rng, DType::F64, 0.0, c.input_scale));
    Tensor probe;
    {
      NoGradGuard ng;
      probe = c.f(values);
    }
    const Tensor w = Tensor::randn(probe.shape(), rng, DType::F64);
    const auto ref = forward_backward(c, values, w, DType::F64);
    for (Isa isa : kernels::simd::supported_isas()) {
      kernels::simd::IsaGuard guard(isa);
      SCOPED_TRACE(kernels::simd::isa_name(isa));
      const auto got = forward_backward(c, values, w, DType::F32);
      ASSERT_EQ(got.size(), ref.size());
      for (size_t i = 0; i < got.size(); ++i) {
        // Outputs within float32's 1e-5; gradients within 1e-4 of their largest element.
        const double tol = i == 0 ? test::kAbsF32 * std::max(1.0, max_abs(ref[i]))
                                  : test::kRelGrad * std::max(1.0, max_abs(ref[i]));
        const auto a = got[i].to_vector<double>(), b = ref[i].to_vector<double>();
        ASSERT_EQ(a.size(), b.size());
        double worst = 0;
        for (size_t j = 0; j < a.size(); ++j) worst = std::max(worst, std::fabs(a[j] - b[j]));
        EXPECT_LE(worst, tol) << (i == 0 ? "output" : "gradient of input " + std::to_string(i - 1));
      }
    }
  }
}

}  // namespace
}  // namespace attn
