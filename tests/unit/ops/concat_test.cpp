// concat and split: values against brute-force index loops in f32 and f64, float64 gradient
// checks (through concat, and through split's slice views), round trips, and bad input.
#include <gtest/gtest.h>

#include "attn/ops/ops.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"

namespace attn {
namespace {

using test::gradcheck;

// Brute force: out[..., j, ...] = xs[i][..., j - off_i, ...] for the input i owning j.
std::vector<double> concat_reference(const std::vector<Tensor>& xs, int64_t dim) {
  Shape out = xs[0].shape();
  out[static_cast<size_t>(dim)] = 0;
  for (const auto& x : xs) out[static_cast<size_t>(dim)] += x.size(dim);
  std::vector<double> values;
  const int64_t n = shape_numel(out);
  for (int64_t flat = 0; flat < n; ++flat) {
    std::vector<int64_t> idx(out.size());
    int64_t rem = flat;
    for (size_t d = out.size(); d-- > 0;) {
      idx[d] = rem % out[d];
      rem /= out[d];
    }
    int64_t j = idx[static_cast<size_t>(dim)];
    size_t i = 0;
    while (j >= xs[i].size(dim)) j -= xs[i++].size(dim);
    idx[static_cast<size_t>(dim)] = j;
    values.push_back(xs[i].at(idx));
  }
  return values;
}

class ConcatByDtype : public ::testing::TestWithParam<DType> {};

TEST_P(ConcatByDtype, ConcatAlongEachDimensionMatchesBruteForce) {
  const DType dt = GetParam();
  Rng rng(1);
  for (int64_t dim = 0; dim < 3; ++dim) {
    SCOPED_TRACE(testing::Message() << "dim " << dim);
    Shape s1 = {2, 3, 4}, s2 = s1, s3 = s1;
    s2[static_cast<size_t>(dim)] = 1;
    s3[static_cast<size_t>(dim)] = 5;
    std::vector<Tensor> xs = {Tensor::randn(s1, rng, dt), Tensor::randn(s2, rng, dt),
                              Tensor::randn(s3, rng, dt)};
    Tensor y = concat(xs, dim);
    Shape expected = s1;
    expected[static_cast<size_t>(dim)] = s1[static_cast<size_t>(dim)] + 1 + 5;
    EXPECT_EQ(y.shape(), expected);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_EQ(y.to_vector<double>(), concat_reference(xs, dim));
  }
}

TEST_P(ConcatByDtype, SplitPiecesAreViewsThatConcatBackToTheInput) {
  const DType dt = GetParam();
  Rng rng(2);
  Tensor x = Tensor::randn({3, 7, 2}, rng, dt);
  std::vector<Tensor> parts = split(x, {2, 0, 5}, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(parts[1].shape(), (Shape{3, 0, 2}));
  EXPECT_EQ(parts[2].shape(), (Shape{3, 5, 2}));
  EXPECT_EQ(parts[2].storage(), x.storage());
  EXPECT_EQ(parts[2].at({1, 4, 1}), x.at({1, 6, 1}));
  EXPECT_EQ(concat(parts, -2).to_vector<double>(), x.to_vector<double>());
}

INSTANTIATE_TEST_SUITE_P(Concat, ConcatByDtype, ::testing::Values(DType::F32, DType::F64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Concat, StridedInputsAndIntegerTensorsAreCopiedCorrectly) {
  Tensor a = Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2}).transpose(0, 1);  // [[1,3],[2,4]]
  Tensor b = Tensor::from_vector<double>({5, 6}, {2, 1});
  EXPECT_EQ(concat({a, b}, 1).to_vector<double>(), (std::vector<double>{1, 3, 5, 2, 4, 6}));
  Tensor i = Tensor::from_vector<int64_t>({1, 2}, {2});
  Tensor j = Tensor::from_vector<int64_t>({3}, {1});
  EXPECT_EQ(concat({i, j}, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
}

TEST(Concat, GradientsPassGradcheck) {
  Rng rng(3);
  for (int64_t dim : {0, 1, -1}) {
    SCOPED_TRACE(dim);
    Tensor a = Tensor::randn({2, 3, 2}, rng, DType::F64).set_requires_grad(true);
    Tensor b = Tensor::randn({2, 3, 2}, rng, DType::F64).set_requires_grad(true);
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return concat({in[0], in[1], in[0]}, dim); },
                          {a, b}));
  }
}

TEST(Concat, OnlyInputsThatNeedGradGetOne) {
  Tensor a = Tensor::ones({2}, DType::F64).set_requires_grad(true);
  Tensor b = Tensor::ones({3}, DType::F64);
  Tensor w = Tensor::from_vector<double>({1, 2, 3, 4, 5}, {5});
  sum(mul(concat({a, b}, 0), w)).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 2}));
  EXPECT_FALSE(b.grad().defined());
}

TEST(Concat, SplitGradientsPassGradcheck) {
  Rng rng(4);
  Tensor x = Tensor::randn({4, 6}, rng, DType::F64).set_requires_grad(true);
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        auto p = split(in[0], {1, 3, 2}, 1);
        return concat({mul(p[2], p[2]), p[0], scale(p[1], 3.0)}, 1);
      },
      {x}));
}

TEST(Concat, BadInputIsAnError) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({2, 4});
  EXPECT_THROW((void)concat({}, 0), Error);
  EXPECT_THROW((void)concat({a, b}, 0), Error);                         // dim 1 disagrees
  EXPECT_THROW((void)concat({a, Tensor::zeros({2, 3, 1})}, 0), Error);  // rank differs
  EXPECT_THROW((void)concat({a, Tensor::zeros({2, 3}, DType::F64)}, 0), Error);
  EXPECT_THROW((void)concat({a, a}, 2), Error);
  EXPECT_NO_THROW((void)concat({a, b}, 1));
  EXPECT_THROW((void)split(a, {1, 1}, 1), Error);   // sums to 2, not 3
  EXPECT_THROW((void)split(a, {4, -1}, 1), Error);  // negative size
  EXPECT_THROW((void)split(a, {3}, 2), Error);
}

}  // namespace
}  // namespace attn
