// Element-wise ops: add/sub/mul with broadcasting, scale and the activations, against
// brute-force double loops in f32 and f64, float64 gradient checks (broadcast gradients
// included), and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numbers>

#include "attn/ops/ops.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"
#include "support/tolerances.h"

namespace attn {
namespace {

using test::all_close;
using test::gradcheck;

double tol(DType d) { return d == DType::F32 ? test::kAbsF32 : test::kAbsF64; }

// Brute-force NumPy broadcasting: pads both shapes with leading 1s and reads each operand
// at the output index with broadcast dimensions pinned to 0.
Tensor broadcast_reference(const Tensor& a, const Tensor& b,
                           const std::function<double(double, double)>& f) {
  const size_t rank = std::max(a.shape().size(), b.shape().size());
  auto pad = [&](const Shape& s) {
    Shape r(rank - s.size(), 1);
    r.insert(r.end(), s.begin(), s.end());
    return r;
  };
  const Shape pa = pad(a.shape()), pb = pad(b.shape());
  Shape out(rank);
  for (size_t d = 0; d < rank; ++d) out[d] = std::max(pa[d], pb[d]);
  const int64_t n = shape_numel(out);
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t flat = 0; flat < n; ++flat) {
    std::vector<int64_t> idx(rank), ia, ib;
    int64_t rem = flat;
    for (size_t d = rank; d-- > 0;) {
      idx[d] = rem % out[d];
      rem /= out[d];
    }
    for (size_t d = rank - a.shape().size(); d < rank; ++d) ia.push_back(pa[d] == 1 ? 0 : idx[d]);
    for (size_t d = rank - b.shape().size(); d < rank; ++d) ib.push_back(pb[d] == 1 ? 0 : idx[d]);
    values[static_cast<size_t>(flat)] = f(a.at(ia), b.at(ib));
  }
  return Tensor::from_vector<double>(values, out);
}

Tensor unary_reference(const Tensor& x, const std::function<double(double)>& f) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e = f(e);
  return Tensor::from_vector<double>(v, x.shape());
}

double gelu_exact(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}
double silu_ref(double x) { return x / (1 + std::exp(-x)); }

Tensor leaf(const Shape& shape, uint64_t seed) {
  Rng rng(seed);
  return Tensor::randn(shape, rng, DType::F64).set_requires_grad(true);
}

struct ShapePair {
  Shape a, b;
};

const std::vector<ShapePair> kBroadcastCases = {
    {{2, 3, 4}, {2, 3, 4}},  // equal shapes
    {{2, 3, 4}, {4}},        // b repeated over leading dimensions
    {{4}, {2, 3, 4}},        // a repeated
    {{2, 3, 4}, {3, 4}},     // b a longer suffix
    {{2, 1, 4}, {3, 1}},     // both broadcast: general path
    {{2, 3}, {1}},           // scalar-like [1]
    {{}, {2, 3}},            // rank 0
    {{3, 1}, {1, 4}},        // outer product
    {{2, 3, 4}, {2, 1, 4}},  // middle dimension broadcast
};

class ElementwiseByDtype : public ::testing::TestWithParam<DType> {};

TEST_P(ElementwiseByDtype, AddSubMulMatchBruteForceForEveryBroadcastCase) {
  const DType dt = GetParam();
  Rng rng(7);
  for (const auto& c : kBroadcastCases) {
    SCOPED_TRACE(shape_str(c.a) + " with " + shape_str(c.b));
    Tensor a = Tensor::randn(c.a, rng, dt);
    Tensor b = Tensor::randn(c.b, rng, dt);
    Tensor s = add(a, b), d = sub(a, b), m = mul(a, b);
    EXPECT_EQ(s.dtype(), dt);
    EXPECT_TRUE(all_close(s, broadcast_reference(a, b, std::plus<double>()), tol(dt), 0, "add"));
    EXPECT_TRUE(all_close(d, broadcast_reference(a, b, std::minus<double>()), tol(dt), 0, "sub"));
    EXPECT_TRUE(
        all_close(m, broadcast_reference(a, b, std::multiplies<double>()), tol(dt), 0, "mul"));
  }
}

TEST_P(ElementwiseByDtype, LargeRowBroadcastMatchesBruteForceOnTheThreadedPath) {
  const DType dt = GetParam();
  Rng rng(11);
  Tensor a = Tensor::randn({4, 96, 130}, rng, dt);  // 49,920 elements: above the threshold
  Tensor b = Tensor::randn({130}, rng, dt);
  EXPECT_TRUE(all_close(mul(a, b), broadcast_reference(a, b, std::multiplies<double>()), tol(dt)));
  EXPECT_TRUE(all_close(sub(b, a), broadcast_reference(b, a, std::minus<double>()), tol(dt)));
  EXPECT_TRUE(all_close(add(a, a), broadcast_reference(a, a, std::plus<double>()), tol(dt)));
}

TEST_P(ElementwiseByDtype, StridedInputsAreReadCorrectly) {
  const DType dt = GetParam();
  Rng rng(3);
  Tensor a = Tensor::randn({4, 3}, rng, dt).transpose(0, 1);  // [3, 4], not contiguous
  Tensor b = Tensor::randn({3, 8}, rng, dt).slice(1, 2, 6);   // [3, 4], not contiguous
  ASSERT_FALSE(a.is_contiguous());
  EXPECT_TRUE(all_close(add(a, b), broadcast_reference(a, b, std::plus<double>()), tol(dt)));
  EXPECT_TRUE(all_close(relu(a), unary_reference(a, [](double x) { return x > 0 ? x : 0; }), tol(dt)));
}

TEST_P(ElementwiseByDtype, ScaleAndActivationsMatchBruteForce) {
  const DType dt = GetParam();
  Rng rng(5);
  Tensor x = Tensor::randn({3, 5, 7}, rng, dt, 0, 2);
  const double t = tol(dt);
  EXPECT_TRUE(all_close(scale(x, -1.5), unary_reference(x, [](double v) { return -1.5 * v; }), t, 0, "scale"));
  EXPECT_TRUE(all_close(relu(x), unary_reference(x, [](double v) { return v > 0 ? v : 0; }), t, 0, "relu"));
  EXPECT_TRUE(all_close(gelu(x), unary_reference(x, gelu_exact), t, 0, "gelu"));
  EXPECT_TRUE(all_close(gelu(x, GeluApprox::Tanh), unary_reference(x, gelu_tanh), t, 0, "gelu_tanh"));
  EXPECT_TRUE(all_close(silu(x), unary_reference(x, silu_ref), t, 0, "silu"));
  EXPECT_TRUE(all_close(tanh_op(x), unary_reference(x, [](double v) { return std::tanh(v); }), t, 0, "tanh"));
}

TEST_P(ElementwiseByDtype, ActivationsOnTheThreadedPathMatchBruteForce) {
  const DType dt = GetParam();
  Rng rng(9);
  Tensor x = Tensor::randn({40000}, rng, dt, 0, 3);
  const double t = tol(dt);
  EXPECT_TRUE(all_close(gelu(x), unary_reference(x, gelu_exact), t));
  EXPECT_TRUE(all_close(silu(x), unary_reference(x, silu_ref), t));
  EXPECT_TRUE(all_close(scale(x, 0.25), unary_reference(x, [](double v) { return 0.25 * v; }), t));
}

INSTANTIATE_TEST_SUITE_P(Elementwise, ElementwiseByDtype,
                         ::testing::Values(DType::F32, DType::F64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Elementwise, GeluTanhDiffersFromExactGelu) {
  Tensor x = Tensor::from_vector<double>({1.5}, {1});
  EXPECT_GT(std::fabs(gelu(x).item() - gelu(x, GeluApprox::Tanh).item()), 1e-5);
}

TEST(Elementwise, ActivationsAreFiniteForLargeInputs) {
  Tensor x = Tensor::from_vector<float>({-200.f, -50.f, 50.f, 200.f}, {4});
  for (const Tensor& y : {gelu(x), gelu(x, GeluApprox::Tanh), silu(x), tanh_op(x)})
    for (float v : y.to_vector<float>()) EXPECT_TRUE(std::isfinite(v)) << v;
}

TEST(Elementwise, BinaryGradientsPassGradcheckForEveryBroadcastCase) {
  uint64_t seed = 100;
  for (const auto& c : kBroadcastCases) {
    SCOPED_TRACE(shape_str(c.a) + " with " + shape_str(c.b));
    for (auto op : {add, sub, mul}) {
      Tensor a = leaf(c.a, seed++), b = leaf(c.b, seed++);
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return op(in[0], in[1]); }, {a, b}));
    }
  }
}

TEST(Elementwise, BroadcastGradientIsSummedToTheInputShape) {
  Tensor a = Tensor::ones({2, 3, 4}, DType::F64).set_requires_grad(true);
  Tensor b = Tensor::ones({4}, DType::F64).set_requires_grad(true);
  sum(add(a, b)).backward();
  ASSERT_EQ(b.grad().shape(), (Shape{4}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{6, 6, 6, 6}));
  EXPECT_EQ(a.grad().to_vector<double>(), std::vector<double>(24, 1.0));
}

TEST(Elementwise, LargeBroadcastGradientMatchesBruteForce) {
  Rng rng(21);
  Tensor a = Tensor::randn({300, 130}, rng, DType::F64).set_requires_grad(true);
  Tensor b = Tensor::randn({130}, rng, DType::F64).set_requires_grad(true);
  Tensor g = Tensor::randn({300, 130}, rng, DType::F64);
  mul(a, b).backward(g);
  std::vector<double> db(130, 0.0), da(300 * 130);
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>(), vg = g.to_vector<double>();
  for (size_t o = 0; o < 300; ++o)
    for (size_t i = 0; i < 130; ++i) {
      db[i] += vg[o * 130 + i] * va[o * 130 + i];
      da[o * 130 + i] = vg[o * 130 + i] * vb[i];
    }
  EXPECT_TRUE(all_close(b.grad(), Tensor::from_vector<double>(db, {130}), 1e-10));
  EXPECT_TRUE(all_close(a.grad(), Tensor::from_vector<double>(da, {300, 130}), 1e-12));
}

TEST(Elementwise, SameInputOnBothSidesGetsBothGradients) {
  Tensor x = leaf({3, 4}, 31);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return mul(in[0], in[0]); }, {x}));
}

TEST(Elementwise, UnaryGradientsPassGradcheck) {
  // Values kept away from relu's kink at 0, where central differences are meaningless.
  Tensor x = Tensor::from_vector<double>({-2.1, -0.7, -0.2, 0.3, 0.9, 1.7, 2.6, -3.2}, {2, 4});
  x.set_requires_grad(true);
  using F = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<const char*, F>> ops = {
      {"scale", [](const Tensor& t) { return scale(t, 0.37); }},
      {"relu", [](const Tensor& t) { return relu(t); }},
      {"gelu", [](const Tensor& t) { return gelu(t); }},
      {"gelu_tanh", [](const Tensor& t) { return gelu(t, GeluApprox::Tanh); }},
      {"silu", [](const Tensor& t) { return silu(t); }},
      {"tanh", [](const Tensor& t) { return tanh_op(t); }},
  };
  for (const auto& op : ops) {
    SCOPED_TRACE(op.first);
    const auto& f = op.second;  // a plain reference: lambdas capture no structured bindings before C++20
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return f(in[0]); }, {x}));
  }
}

TEST(Elementwise, ReluGradientAtZeroIsZero) {
  Tensor x = Tensor::from_vector<double>({-1, 0, 1}, {3});
  x.set_requires_grad(true);
  sum(relu(x)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0, 1}));
}

TEST(Elementwise, NoGradModeRecordsNothing) {
  Tensor a = leaf({2, 2}, 1), b = leaf({2}, 2);
  NoGradGuard guard;
  EXPECT_FALSE(add(a, b).requires_grad());
  EXPECT_FALSE(gelu(a).requires_grad());
}

TEST(Elementwise, ShapesThatDoNotBroadcastAreAnError) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  EXPECT_THROW((void)add(a, b), Error);
  EXPECT_THROW((void)sub(a, Tensor::zeros({3, 2})), Error);
  EXPECT_THROW((void)mul(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 3})), Error);
  try {
    (void)add(a, b);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[add]"), std::string::npos) << e.what();
  }
}

TEST(Elementwise, MixedOrNonFloatingDtypesAreAnError) {
  Tensor f = Tensor::zeros({2}, DType::F32), d = Tensor::zeros({2}, DType::F64);
  Tensor i = Tensor::zeros({2}, DType::I64);
  EXPECT_THROW((void)add(f, d), Error);
  EXPECT_THROW((void)mul(d, f), Error);
  EXPECT_THROW((void)sub(i, i), Error);
  EXPECT_THROW((void)relu(i), Error);
  EXPECT_THROW((void)scale(Tensor::zeros({2}, DType::Bool), 2.0), Error);
  EXPECT_THROW((void)gelu(Tensor()), Error);
}

}  // namespace
}  // namespace attn
