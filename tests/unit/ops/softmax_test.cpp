// softmax and log_softmax: values against a brute-force double loop (including large
// logits and the parallel path), float64 gradient checks, fully and partly -inf rows
// (zeros / -inf, zero gradient, no NaN), and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attn/ops/ops.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"
#include "support/tolerances.h"

namespace attn {
namespace {

const DType kDtypes[] = {DType::F32, DType::F64};
constexpr double kInf = std::numeric_limits<double>::infinity();

double tol(DType dt) { return dt == DType::F32 ? test::kAbsF32 : test::kAbsF64; }

// Row-wise softmax (log_softmax when `log`) over the last dimension, in double, written
// straight from the definition with the row max subtracted.
Tensor reference(const Tensor& x, bool log) {
  const auto v = x.to_vector<double>();
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  std::vector<double> out(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = -kInf;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, v[static_cast<size_t>(r * cols + c)]);
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(v[static_cast<size_t>(r * cols + c)] - m);
    for (int64_t c = 0; c < cols; ++c) {
      const double z = v[static_cast<size_t>(r * cols + c)] - m;
      out[static_cast<size_t>(r * cols + c)] = log ? z - std::log(s) : std::exp(z) / s;
    }
  }
  return Tensor::from_vector<double>(out, x.shape());
}

bool has_nan(const Tensor& t) {
  for (double v : t.to_vector<double>())
    if (std::isnan(v)) return true;
  return false;
}

TEST(Softmax, MatchesBruteForceForSoftmaxAndLogSoftmax) {
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Rng rng(1);
    Tensor x = Tensor::randn({3, 4, 7}, rng, dt, 0.0, 3.0);
    EXPECT_TRUE(test::all_close(softmax(x), reference(x, false), tol(dt), 0, "softmax"));
    EXPECT_TRUE(test::all_close(log_softmax(x), reference(x, true), tol(dt), tol(dt), "log_softmax"));
  }
}

TEST(Softmax, LargeLogitsDoNotOverflow) {
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    // exp(1000) overflows in both dtypes: only a max-subtracted kernel gets these right.
    Tensor x = Tensor::from_vector<double>({1000, 999, 998, -1000, -1001, -999}, {2, 3}).to(dt);
    Tensor y = softmax(x);
    EXPECT_FALSE(has_nan(y));
    EXPECT_TRUE(test::all_close(y, reference(x, false), tol(dt), 0, "softmax"));
    EXPECT_TRUE(test::all_close(log_softmax(x), reference(x, true), tol(dt), tol(dt), "log_softmax"));
  }
}

TEST(Softmax, LargeInputsTakeTheParallelPathAndStillMatch) {
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Rng rng(2);
    Tensor x = Tensor::randn({64, 1024}, rng, dt, 0.0, 2.0);
    EXPECT_TRUE(test::all_close(softmax(x), reference(x, false), tol(dt), 0, "softmax"));
    EXPECT_TRUE(test::all_close(log_softmax(x), reference(x, true), tol(dt), tol(dt), "log_softmax"));
  }
}

TEST(Softmax, GradcheckSoftmax) {
  Rng rng(3);
  Tensor x = Tensor::randn({2, 3, 5}, rng, DType::F64);
  x.set_requires_grad(true);
  EXPECT_TRUE(test::gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0]); }, {x}));
}

TEST(Softmax, GradcheckLogSoftmax) {
  Rng rng(4);
  Tensor x = Tensor::randn({4, 6}, rng, DType::F64);
  x.set_requires_grad(true);
  EXPECT_TRUE(test::gradcheck([](const std::vector<Tensor>& in) { return log_softmax(in[0]); }, {x}));
}

TEST(Softmax, GradcheckThroughAStridedInput) {
  Rng rng(5);
  Tensor x = Tensor::randn({5, 3}, rng, DType::F64);
  x.set_requires_grad(true);
  EXPECT_TRUE(test::gradcheck(
      [](const std::vector<Tensor>& in) { return softmax(in[0].transpose(0, 1)); }, {x}));
}

TEST(Softmax, FullyMaskedRowGivesZerosAndZeroGradientWithoutNaN) {
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = Tensor::from_vector<double>({1, 2, 3, -kInf, -kInf, -kInf}, {2, 3}).to(dt);
    x.set_requires_grad(true);
    Tensor y = softmax(x);
    EXPECT_FALSE(has_nan(y));
    EXPECT_TRUE(test::all_close(y.slice(0, 1, 2), Tensor::zeros({1, 3}, dt), 0, 0, "masked row"));
    EXPECT_TRUE(test::all_close(y.slice(0, 0, 1), reference(x.slice(0, 0, 1), false), tol(dt), 0,
                                "normal row"));
    y.backward(Tensor::from_vector<double>({1, -2, 3, 4, 5, 6}, {2, 3}).to(dt));
    Tensor g = x.grad();
    EXPECT_FALSE(has_nan(g));
    EXPECT_TRUE(test::all_close(g.slice(0, 1, 2), Tensor::zeros({1, 3}, dt), 0, 0, "masked grad"));
  }
}

TEST(Softmax, FullyMaskedRowGivesMinusInfinityForLogSoftmaxWithZeroGradient) {
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = Tensor::from_vector<double>({-kInf, -kInf, 0.5, 1.5}, {2, 2}).to(dt);
    x.set_requires_grad(true);
    Tensor y = log_softmax(x);
    EXPECT_FALSE(has_nan(y));
    EXPECT_EQ(y.at({0, 0}), -kInf);
    EXPECT_EQ(y.at({0, 1}), -kInf);
    EXPECT_NEAR(y.at({1, 1}), reference(x, true).at({1, 1}), tol(dt));
    y.backward(Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2}).to(dt));
    Tensor g = x.grad();
    EXPECT_FALSE(has_nan(g));
    EXPECT_EQ(g.at({0, 0}), 0.0);
    EXPECT_EQ(g.at({0, 1}), 0.0);
    // The live row: dx = dy - softmax * sum(dy).
    const double p0 = 1 / (1 + std::exp(1.0));
    EXPECT_NEAR(g.at({1, 0}), 3 - p0 * 7, tol(dt));
    EXPECT_NEAR(g.at({1, 1}), 4 - (1 - p0) * 7, tol(dt));
  }
}

TEST(Softmax, PartlyMaskedRowsPutZeroWeightOnMaskedEntries) {
  Rng rng(6);
  Tensor x = Tensor::randn({3, 4}, rng, DType::F64);
  double* p = x.data<double>();
  p[1] = -kInf;  // row 0: one entry masked
  p[8] = p[10] = p[11] = -kInf;  // row 2: only entry 1 alive
  Tensor y = softmax(x);
  EXPECT_EQ(y.at({0, 1}), 0.0);
  EXPECT_NEAR(y.at({2, 1}), 1.0, 1e-15);
  EXPECT_TRUE(test::all_close(y, reference(x, false), test::kAbsF64, 0, "masked entries"));
  // The finite-difference check still holds: a masked entry has no influence.
  x.set_requires_grad(true);
  EXPECT_TRUE(test::gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0]); }, {x}));
}

TEST(Softmax, BadInputIsAnError) {
  EXPECT_THROW((void)softmax(Tensor::zeros({2, 3}, DType::I64)), Error);
  EXPECT_THROW((void)log_softmax(Tensor::zeros({2, 3}, DType::Bool)), Error);
  EXPECT_THROW((void)softmax(Tensor::scalar(1.0)), Error);
  EXPECT_THROW((void)log_softmax(Tensor()), Error);
}

}  // namespace
}  // namespace attn
