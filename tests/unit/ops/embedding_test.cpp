// embedding: rows gathered by ids of any shape, against a brute-force loop in f32 and f64;
// the scatter-add gradient (repeated ids accumulate) by gradcheck and by hand; bad ids,
// dtypes and shapes.
#include <gtest/gtest.h>

#include "attn/ops/ops.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"

namespace attn {
namespace {

class EmbeddingByDtype : public ::testing::TestWithParam<DType> {};

TEST_P(EmbeddingByDtype, RowsArePickedByIdsOfAnyShape) {
  const DType dt = GetParam();
  Rng rng(1);
  Tensor w = Tensor::randn({6, 4}, rng, dt);
  Tensor ids = Tensor::from_vector<int64_t>({5, 0, 2, 2, 1, 5}, {2, 3});
  Tensor y = embedding(w, ids);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(y.dtype(), dt);
  const auto vi = ids.to_vector<int64_t>();
  for (int64_t n = 0; n < 6; ++n)
    for (int64_t d = 0; d < 4; ++d)
      EXPECT_EQ(y.at({n / 3, n % 3, d}), w.at({vi[static_cast<size_t>(n)], d}));
}

TEST_P(EmbeddingByDtype, LargeLookupOnTheThreadedPathMatchesBruteForce) {
  const DType dt = GetParam();
  Rng rng(2);
  const int64_t V = 50, D = 64, N = 1000;
  Tensor w = Tensor::randn({V, D}, rng, dt);
  std::vector<int64_t> vi(N);
  for (auto& v : vi) v = static_cast<int64_t>(rng.below(V));
  Tensor y = embedding(w, Tensor::from_vector<int64_t>(vi, {N}));
  const auto vw = w.to_vector<double>(), vy = y.to_vector<double>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d)
      ASSERT_EQ(vy[static_cast<size_t>(n * D + d)], vw[static_cast<size_t>(vi[static_cast<size_t>(n)] * D + d)]);
}

INSTANTIATE_TEST_SUITE_P(Embedding, EmbeddingByDtype, ::testing::Values(DType::F32, DType::F64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Embedding, RankZeroIdsGiveOneRow) {
  Tensor w = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor y = embedding(w, Tensor::from_vector<int64_t>({1}, {}));
  EXPECT_EQ(y.shape(), (Shape{2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{3, 4}));
}

TEST(Embedding, GradientPassesGradcheck) {
  Rng rng(3);
  Tensor w = Tensor::randn({5, 3}, rng, DType::F64).set_requires_grad(true);
  Tensor ids = Tensor::from_vector<int64_t>({4, 1, 1, 0, 4, 4}, {3, 2});
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], ids); }, {w}));
}

TEST(Embedding, RepeatedIdsAccumulateAndUnusedRowsGetZero) {
  Tensor w = Tensor::zeros({4, 2}, DType::F64).set_requires_grad(true);
  Tensor ids = Tensor::from_vector<int64_t>({3, 0, 3}, {3});
  Tensor g = Tensor::from_vector<double>({1, 2, 10, 20, 100, 200}, {3, 2});
  embedding(w, ids).backward(g);
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{10, 20, 0, 0, 0, 0, 101, 202}));
}

TEST(Embedding, OutOfRangeIdsAreAnErrorNamingTheIdAndPosition) {
  Tensor w = Tensor::zeros({5, 3});
  try {
    (void)embedding(w, Tensor::from_vector<int64_t>({0, 1, 7, 2}, {2, 2}));
    FAIL() << "embedding should have thrown";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[embedding]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("id 7"), std::string::npos) << msg;
    EXPECT_NE(msg.find("position 2"), std::string::npos) << msg;
  }
  EXPECT_THROW((void)embedding(w, Tensor::from_vector<int64_t>({-1}, {1})), Error);
  EXPECT_THROW((void)embedding(w, Tensor::from_vector<int64_t>({5}, {1})), Error);
}

TEST(Embedding, BadDtypesAndShapesAreAnError) {
  Tensor w = Tensor::zeros({5, 3});
  EXPECT_THROW((void)embedding(w, Tensor::zeros({2}, DType::F32)), Error);  // float ids
  EXPECT_THROW((void)embedding(Tensor::zeros({5, 3}, DType::I64), Tensor::zeros({2}, DType::I64)), Error);
  EXPECT_THROW((void)embedding(Tensor::zeros({15}), Tensor::zeros({2}, DType::I64)), Error);  // 1-D weight
}

}  // namespace
}  // namespace attn
