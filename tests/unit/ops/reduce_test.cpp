// Reductions: sum and mean of all elements and sum over one dimension, against brute-force
// double loops in f32 and f64, float64 gradient checks, and bad input.
#include <gtest/gtest.h>

#include "attn/ops/ops.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"
#include "support/tolerances.h"

namespace attn {
namespace {

using test::all_close;
using test::gradcheck;

// Brute-force sum over dimension `dim` of a contiguous tensor, in double.
Tensor sum_dim_reference(const Tensor& x, int64_t dim, bool keepdim) {
  const Shape& s = x.shape();
  const auto v = x.to_vector<double>();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= s[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(dim) + 1; i < s.size(); ++i) inner *= s[i];
  const int64_t n = s[static_cast<size_t>(dim)];
  std::vector<double> out(static_cast<size_t>(outer * inner), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = 0; i < inner; ++i)
        out[static_cast<size_t>(o * inner + i)] += v[static_cast<size_t>((o * n + k) * inner + i)];
  Shape os = s;
  if (keepdim)
    os[static_cast<size_t>(dim)] = 1;
  else
    os.erase(os.begin() + dim);
  return Tensor::from_vector<double>(out, os);
}

class ReduceByDtype : public ::testing::TestWithParam<DType> {};

TEST_P(ReduceByDtype, SumAndMeanOfAllElementsMatchBruteForce) {
  const DType dt = GetParam();
  Rng rng(1);
  Tensor x = Tensor::randn({3, 4, 5}, rng, dt);
  double ref = 0;
  for (double v : x.to_vector<double>()) ref += v;
  Tensor s = sum(x), m = mean(x);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(m.dim(), 0);
  EXPECT_EQ(s.dtype(), dt);
  const double t = dt == DType::F32 ? test::kAbsF32 : test::kAbsF64;
  EXPECT_NEAR(s.item(), ref, t);
  EXPECT_NEAR(m.item(), ref / 60, t);
}

TEST_P(ReduceByDtype, SumOverEachDimensionMatchesBruteForce) {
  const DType dt = GetParam();
  Rng rng(2);
  Tensor x = Tensor::randn({3, 4, 5}, rng, dt);
  const double t = dt == DType::F32 ? test::kAbsF32 : test::kAbsF64;
  for (int64_t d = 0; d < 3; ++d)
    for (bool keep : {false, true}) {
      SCOPED_TRACE(testing::Message() << "dim " << d << " keepdim " << keep);
      EXPECT_TRUE(all_close(sum(x, d, keep), sum_dim_reference(x, d, keep), t));
    }
  EXPECT_TRUE(all_close(sum(x, -1), sum_dim_reference(x, 2, false), t, 0, "negative dim"));
}

TEST_P(ReduceByDtype, LargeSumsOnTheThreadedPathMatchBruteForce) {
  const DType dt = GetParam();
  Rng rng(3);
  Tensor x = Tensor::randn({70, 80, 90}, rng, dt);
  const double t = dt == DType::F32 ? 1e-4 : 1e-9;
  for (int64_t d = 0; d < 3; ++d)
    EXPECT_TRUE(all_close(sum(x, d), sum_dim_reference(x, d, false), t)) << "dim " << d;
  double ref = 0;
  for (double v : x.to_vector<double>()) ref += v;
  EXPECT_NEAR(sum(x).item(), ref, t);
}

INSTANTIATE_TEST_SUITE_P(Reduce, ReduceByDtype, ::testing::Values(DType::F32, DType::F64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Reduce, FloatSumAccumulatesInDouble) {
  // 2^24 + 1 is not a float: a float accumulator would stop growing at 2^24.
  const int64_t n = (1 << 24) + 64;
  Tensor x = Tensor::ones({n}, DType::F32);
  EXPECT_EQ(sum(x).item(), static_cast<double>(n));
}

TEST(Reduce, StridedInputIsSummedCorrectly) {
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);  // [3, 2]
  EXPECT_EQ(sum(x, 1).to_vector<double>(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(sum(x, 0).to_vector<double>(), (std::vector<double>{6, 15}));
}

TEST(Reduce, SumOfRankZeroAndOfEmptyTensors) {
  EXPECT_EQ(sum(Tensor::scalar(2.5, DType::F64)).item(), 2.5);
  EXPECT_EQ(sum(Tensor::zeros({0, 3})).item(), 0.0);
  EXPECT_EQ(sum(Tensor::zeros({0, 3}), 0).shape(), (Shape{3}));
}

TEST(Reduce, GradientsPassGradcheck) {
  Rng rng(4);
  Tensor x = Tensor::randn({3, 4, 5}, rng, DType::F64).set_requires_grad(true);
  auto check = [&](std::function<Tensor(const Tensor&)> f) {
    return gradcheck([&](const std::vector<Tensor>& in) { return f(in[0]); }, {x});
  };
  EXPECT_TRUE(check([](const Tensor& t) { return sum(t); }));
  EXPECT_TRUE(check([](const Tensor& t) { return mean(t); }));
  for (int64_t d = -3; d < 3; ++d)
    for (bool keep : {false, true})
      EXPECT_TRUE(check([&](const Tensor& t) { return sum(t, d, keep); })) << d << " " << keep;
}

TEST(Reduce, MeanGradientIsOneOverN) {
  Tensor x = Tensor::zeros({2, 5}, DType::F64).set_requires_grad(true);
  mean(x).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>(10, 0.1));
}

TEST(Reduce, BadDimensionOrDtypeIsAnError) {
  Tensor x = Tensor::zeros({2, 3});
  EXPECT_THROW((void)sum(x, 2), Error);
  EXPECT_THROW((void)sum(x, -3), Error);
  EXPECT_THROW((void)sum(Tensor::zeros({2}, DType::I64)), Error);
  EXPECT_THROW((void)mean(Tensor::zeros({2}, DType::Bool)), Error);
  EXPECT_THROW((void)sum(Tensor::zeros({2}, DType::I64), 0), Error);
}

}  // namespace
}  // namespace attn
