// Positional encodings (paper §3.5): the sinusoid formula entry by entry, any length and
// offset, caching that never changes values, learned positions and their max_len error.
#include <gtest/gtest.h>

#include <cmath>

#include "attn/nn/positional.h"
#include "attn/ops/ops.h"
#include "support/expect_close.h"
#include "support/tolerances.h"

namespace attn::nn {
namespace {

TEST(SinusoidalPositionalEncoding, FollowsThePaperFormula) {
  const int64_t D = 8;
  Tensor pe = sinusoidal_table(50, D, DType::F64);
  ASSERT_EQ(pe.shape(), (Shape{50, D}));
  for (int64_t p : {0, 1, 7, 49})
    for (int64_t i = 0; i < D / 2; ++i) {
      const double angle = static_cast<double>(p) / std::pow(10000.0, 2.0 * static_cast<double>(i) / D);
      EXPECT_NEAR(pe.at({p, 2 * i}), std::sin(angle), 1e-15);
      EXPECT_NEAR(pe.at({p, 2 * i + 1}), std::cos(angle), 1e-15);
    }
  // Position 0 is [0, 1, 0, 1, ...].
  EXPECT_EQ(pe.at({0, 0}), 0.0);
  EXPECT_EQ(pe.at({0, 1}), 1.0);
}

TEST(SinusoidalPositionalEncoding, WorksForAnyLengthAndOffsetWithCachedValues) {
  SinusoidalPositionalEncoding pos(6, DType::F32);
  Tensor first = pos.table(10).clone();
  Tensor far = pos.table(3, 20000);  // far beyond any max_len; grows the cache
  EXPECT_TRUE(test::all_close(far, sinusoidal_table(3, 6, DType::F32, 20000), 0.0));
  EXPECT_TRUE(test::all_close(pos.table(10), first, 0.0));  // same values after growth
  EXPECT_TRUE(test::all_close(pos.table(4, 6), sinusoidal_table(10, 6, DType::F32).slice(0, 6, 10), 0.0));
  EXPECT_EQ(pos.num_parameters(), 0);
}

TEST(SinusoidalPositionalEncoding, OddWidthEndsWithASine) {
  Tensor pe = sinusoidal_table(4, 5, DType::F64);
  EXPECT_NEAR(pe.at({3, 4}), std::sin(3.0 / std::pow(10000.0, 4.0 / 5.0)), 1e-15);
}

TEST(PositionalEncoding, ForwardAddsTheTableToEveryBatchRow) {
  SinusoidalPositionalEncoding pos(4, DType::F64);
  Tensor x = Tensor::zeros({2, 3, 4}, DType::F64);
  Tensor y = pos.forward(x, 5);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t d = 0; d < 4; ++d) EXPECT_EQ(y.at({b, t, d}), pos.table(8).at({5 + t, d}));
  EXPECT_THROW(pos.forward(Tensor::zeros({2, 3, 5}, DType::F64)), Error);
}

TEST(LearnedPositionalEmbedding, IsATableBoundedByMaxLen) {
  Rng rng(1);
  LearnedPositionalEmbedding pos(8, 4, DType::F64, rng, 0.02);
  EXPECT_EQ(pos.named_parameters()[0].first, "weight");
  EXPECT_EQ(pos.num_parameters(), 32);
  EXPECT_TRUE(test::all_close(pos.table(3, 5), pos.weight().slice(0, 5, 8), 0.0));
  try {
    (void)pos.table(4, 5);
    FAIL() << "positions 5..8 exceed max_len 8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("position 8 is beyond max_len 8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pos.forward(Tensor::zeros({1, 9, 4}, DType::F64)), Error);
}

TEST(LearnedPositionalEmbedding, GradientReachesOnlyTheUsedRows) {
  Rng rng(2);
  LearnedPositionalEmbedding pos(6, 2, DType::F64, rng, 0.02);
  sum(pos.forward(Tensor::zeros({1, 2, 2}, DType::F64), 1)).backward();
  const auto g = pos.weight().grad().to_vector<double>();
  EXPECT_EQ(g, (std::vector<double>{0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0}));
}

TEST(PositionalKind, NamesRoundTripAndFactoryBuildsEachKind) {
  for (auto k : {PositionalKind::None, PositionalKind::Sinusoidal, PositionalKind::Learned, PositionalKind::Rope,
                 PositionalKind::Alibi})
    EXPECT_EQ(parse_positional_kind(positional_kind_name(k)), k);
  EXPECT_THROW(parse_positional_kind("rotary"), Error);
  Rng rng(3);
  EXPECT_EQ(make_positional(PositionalKind::None, 4, 4, DType::F32, rng, 0.1), nullptr);
  // RoPE and ALiBi act inside attention: nothing is added to the embeddings.
  EXPECT_EQ(make_positional(PositionalKind::Rope, 4, 4, DType::F32, rng, 0.1), nullptr);
  EXPECT_EQ(make_positional(PositionalKind::Alibi, 4, 4, DType::F32, rng, 0.1), nullptr);
  EXPECT_TRUE(is_absolute(PositionalKind::Learned) && is_absolute(PositionalKind::Sinusoidal));
  EXPECT_FALSE(is_absolute(PositionalKind::Rope) || is_absolute(PositionalKind::Alibi) || is_absolute(PositionalKind::None));
  EXPECT_NE(dynamic_cast<LearnedPositionalEmbedding*>(
                make_positional(PositionalKind::Learned, 4, 4, DType::F32, rng, 0.1).get()),
            nullptr);
}

TEST(PositionalEncoding, ForwardAtGivesEachRowItsOwnPositions) {
  Rng rng(4);
  LearnedPositionalEmbedding learned(6, 4, DType::F64, rng, 1.0);
  SinusoidalPositionalEncoding sinusoids(4, DType::F64);
  const Tensor x = Tensor::zeros({2, 3, 4}, DType::F64);
  const Tensor pos = Tensor::from_vector<int64_t>({0, 1, 2, 0, 0, 1}, {2, 3});
  for (const PositionalEncoding* pe : {static_cast<const PositionalEncoding*>(&learned),
                                       static_cast<const PositionalEncoding*>(&sinusoids)}) {
    const Tensor y = pe->forward_at(x, pos);
    EXPECT_TRUE(test::all_close(y.slice(0, 0, 1), pe->forward(x.slice(0, 0, 1)), 0.0));
    EXPECT_TRUE(test::all_close(y.slice(0, 1, 2).slice(1, 1, 3), pe->forward(x.slice(0, 1, 2).slice(1, 0, 2)), 0.0));
  }
  EXPECT_THROW(learned.forward_at(x, Tensor::from_vector<int64_t>({0, 1, 6, 0, 0, 0}, {2, 3})), Error);  // max_len 6
  EXPECT_THROW(learned.forward_at(x, Tensor::from_vector<int64_t>({0, -1, 2, 0, 0, 0}, {2, 3})), Error);
  EXPECT_THROW(learned.forward_at(x, Tensor::from_vector<int64_t>({0, 1, 2}, {3})), Error);  // not [B, T]
}

}  // namespace
}  // namespace attn::nn
