// Linear: values against a brute-force loop, nn.Linear's initialisation bounds, a float64
// gradient check, and bad input.
#include <gtest/gtest.h>

#include <cmath>

#include "attn/nn/linear.h"
#include "nn_reference.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"
#include "support/tolerances.h"

namespace attn::nn {
namespace {

TEST(LinearLayer, MatchesBruteForceWithAndWithoutBias) {
  for (bool bias : {true, false}) {
    for (DType dtype : {DType::F32, DType::F64}) {
      Rng rng(1);
      Linear lin(5, 3, bias, dtype, rng);
      Tensor x = test::random_tensor({2, 4, 5}, 2, dtype);
      Tensor y = lin.forward(x);
      ASSERT_EQ(y.shape(), (Shape{2, 4, 3}));
      const auto ref = test::ref_linear(x.to_vector<double>(), 8, 5, lin.weight().to_vector<double>(),
                                        bias ? lin.bias().to_vector<double>() : test::Vec{}, 3);
      const double tol = dtype == DType::F32 ? test::kAbsF32 : test::kAbsF64;
      EXPECT_TRUE(test::all_close(y, Tensor::from_vector<double>(ref, {2, 4, 3}), tol));
      EXPECT_EQ(lin.num_parameters(), bias ? 18 : 15);
    }
  }
}

TEST(LinearLayer, InitialisesWithinOneOverSqrtFanIn) {
  Rng rng(9);
  Linear lin(16, 300, true, DType::F64, rng);
  const double bound = 1.0 / std::sqrt(16.0);
  double max_w = 0;
  for (double v : lin.weight().to_vector<double>()) max_w = std::max(max_w, std::fabs(v));
  EXPECT_LE(max_w, bound);
  EXPECT_GT(max_w, 0.9 * bound);  // actually spread over the interval
  for (double v : lin.bias().to_vector<double>()) EXPECT_LE(std::fabs(v), bound);
  // Same seed, same values.
  Rng rng2(9);
  Linear again(16, 300, true, DType::F64, rng2);
  EXPECT_TRUE(test::all_close(again.weight(), lin.weight(), 0.0));
}

TEST(LinearLayer, GradientsMatchFiniteDifferences) {
  Rng rng(4);
  Linear lin(4, 3, true, DType::F64, rng);
  Tensor x = test::random_tensor({2, 3, 4}, 5).set_requires_grad(true);
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>& in) { return lin.forward(in[0]); },
                              {x, lin.weight(), lin.bias()}));
}

TEST(LinearLayer, RejectsBadSizesAndInputs) {
  Rng rng(1);
  EXPECT_THROW(Linear(0, 3, true, DType::F32, rng), Error);
  EXPECT_THROW(Linear(3, 3, true, DType::I64, rng), Error);
  Linear lin(3, 2, true, DType::F32, rng);
  EXPECT_THROW(lin.forward(Tensor::zeros({2, 4})), Error);
  EXPECT_THROW(lin.forward(Tensor::zeros({2, 3}, DType::F64)), Error);
}

}  // namespace
}  // namespace attn::nn
