// Embedding layer: row lookup, initialisation std, weight tying, and bad ids.
#include <gtest/gtest.h>

#include <cmath>

#include "attn/nn/embedding.h"
#include "support/expect_close.h"

namespace attn::nn {
namespace {

TEST(EmbeddingLayer, PicksRowsOfTheTable) {
  Rng rng(1);
  Embedding emb(5, 3, DType::F32, rng);
  Tensor ids = Tensor::from_vector<int64_t>({4, 0, 4, 2}, {2, 2});
  Tensor out = emb.forward(ids);
  ASSERT_EQ(out.shape(), (Shape{2, 2, 3}));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t d = 0; d < 3; ++d)
        EXPECT_EQ(out.at({b, t, d}), emb.weight().at({ids.to_vector<int64_t>()[static_cast<size_t>(b * 2 + t)], d}));
  EXPECT_EQ(emb.named_parameters()[0].first, "weight");
}

TEST(EmbeddingLayer, InitialisesWithTheRequestedStd) {
  Rng rng(2);
  Embedding emb(400, 50, DType::F64, rng, 0.125);
  double sq = 0;
  const auto w = emb.weight().to_vector<double>();
  for (double v : w) sq += v * v;
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(w.size())), 0.125, 0.005);
}

TEST(EmbeddingLayer, TiedTableIsTheSameTensor) {
  Rng rng(3);
  Embedding a(6, 4, DType::F32, rng), b(6, 4, DType::F32, rng);
  b.tie_weight(a.weight());
  EXPECT_TRUE(b.weight().same(a.weight()));
  Embedding c(7, 4, DType::F32, rng);
  EXPECT_THROW(c.tie_weight(a.weight()), Error);
}

TEST(EmbeddingLayer, RejectsOutOfRangeAndNonIntegerIds) {
  Rng rng(4);
  Embedding emb(5, 3, DType::F32, rng);
  EXPECT_THROW(emb.forward(Tensor::from_vector<int64_t>({5}, {1})), Error);
  EXPECT_THROW(emb.forward(Tensor::from_vector<int64_t>({-1}, {1})), Error);
  EXPECT_THROW(emb.forward(Tensor::zeros({2})), Error);
  EXPECT_THROW(Embedding(0, 3, DType::F32, rng), Error);
}

}  // namespace
}  // namespace attn::nn
