// Tensor basics: construction, views and their gradients, error messages.
#include <gtest/gtest.h>

#include "attn/ops/ops.h"
#include "support/expect_close.h"

namespace attn {
namespace {

TEST(Tensor, FromVectorRoundTripsAndReportsShape) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.numel(), 6);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(t.str(), "f32[2, 3]");
}

TEST(Tensor, TransposeIsAStridedViewAndContiguousCopies) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  Tensor c = tt.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Tensor, SliceAndReshapeShareStorage) {
  Tensor t = Tensor::from_vector<double>({0, 1, 2, 3, 4, 5, 6, 7}, {2, 4});
  Tensor s = t.slice(1, 1, 3);
  EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{1, 2, 5, 6}));
  Tensor r = t.reshape({4, -1});
  EXPECT_EQ(r.shape(), (Shape{4, 2}));
  EXPECT_EQ(r.storage(), t.storage());
}

TEST(Tensor, ViewGradientsFlowBackToTheLeaf) {
  Tensor x = Tensor::from_vector<double>({0, 1, 2, 3, 4, 5}, {2, 3});
  x.set_requires_grad(true);
  // y = x^T[1:3, :] reshaped; every element of x except column 0 reaches y once.
  Tensor y = x.transpose(0, 1).slice(0, 1, 3).reshape({4});
  y.backward(Tensor::ones({4}, DType::F64));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 1, 1, 0, 1, 1}));
}

TEST(Tensor, ErrorsNameTheOpAndShapes) {
  Tensor t = Tensor::zeros({2, 3});
  try {
    (void)t.reshape({4, 2});
    FAIL() << "reshape should have thrown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[reshape]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32[2, 3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)t.slice(1, 2, 5), Error);
  EXPECT_THROW((void)t.transpose(0, 2), Error);
  EXPECT_THROW((void)t.data<double>(), Error);
  EXPECT_THROW(Tensor().shape(), Error);
}

TEST(Tensor, NumelIsTheProductOfTheDimensionsForEveryRank) {
  EXPECT_EQ(Tensor::scalar(2.0).numel(), 1);
  EXPECT_EQ(Tensor::zeros({7}).numel(), 7);
  EXPECT_EQ(Tensor::zeros({2, 3, 4, 5}).numel(), 120);
  EXPECT_EQ(Tensor::zeros({3, 0, 2}).numel(), 0);
  EXPECT_EQ(Tensor::zeros({2, 3}).transpose(0, 1).slice(0, 1, 3).numel(), 4);
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({6, 1, 3}), 18);
}

TEST(Tensor, EveryAccessorOfAnUndefinedTensorIsAnErrorNamingIt) {
  const Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(t.str(), "undefined");
  try {
    (void)t.numel();
    FAIL() << "numel of an undefined tensor should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("undefined tensor"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)t.dtype(), Error);
  EXPECT_THROW((void)t.dim(), Error);
  EXPECT_THROW((void)t.strides(), Error);
  EXPECT_THROW((void)t.requires_grad(), Error);
  EXPECT_THROW((void)t.grad_fn(), Error);
  EXPECT_THROW((void)t.is_contiguous(), Error);
}

TEST(Tensor, BackwardWithoutGradIsAnError) {
  Tensor t = Tensor::zeros({1});
  EXPECT_THROW(t.backward(), Error);
}

TEST(Rng, SameSeedSameStreamAndUniformInRange) {
  Rng a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
  EXPECT_NE(a.next_u64(), c.next_u64());
  for (int i = 0; i < 1000; ++i) {
    const double u = a.uniform();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
    EXPECT_LT(a.below(7), 7u);
  }
}

}  // namespace
}  // namespace attn
