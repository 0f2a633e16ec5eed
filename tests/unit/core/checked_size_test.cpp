// Overflow-checked size arithmetic (core/shape.h): checked_mul / checked_add / checked_numel /
// checked_nbytes refuse a product that does not fit in int64 by name, and tensors are made
// through them, so a shape such as [2^62, 4] (a config.json vocabulary of 2^62 with d_model 4)
// is an attn::Error naming the shape instead of a wrapped element count. Controls: the
// largest products that fit are returned exactly, and the unchecked shape_numel does wrap
// for the same shape (what the checked one guards against).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "attn/core/shape.h"
#include "attn/core/tensor.h"
#include "support/error_of.h"

namespace attn {
using test::error_of;
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(CheckedSize, MulAndAddReturnExactResultsThatFit) {
  EXPECT_EQ(checked_mul(0, kMax, "t", "x"), 0);
  EXPECT_EQ(checked_mul(1, kMax, "t", "x"), kMax);
  EXPECT_EQ(checked_mul(int64_t{1} << 31, int64_t{1} << 31, "t", "x"), int64_t{1} << 62);
  EXPECT_EQ(checked_mul(3037000499, 3037000499, "t", "x"), int64_t{9223372030926249001});  // floor(sqrt(max))^2
  EXPECT_EQ(checked_add(kMax - 1, 1, "t", "x"), kMax);
}

TEST(CheckedSize, MulAndAddRefuseOverflowNamingTheOperands) {
  const std::string e = error_of([] { checked_mul(int64_t{1} << 62, 4, "config", "the vocabulary"); });
  EXPECT_NE(e.find("[config] the vocabulary overflows int64: 4611686018427387904 x 4"), std::string::npos) << e;
  EXPECT_THROW(checked_mul(3037000500, 3037000500, "t", "x"), Error);
  EXPECT_THROW(checked_add(kMax, 1, "t", "x"), Error);
  EXPECT_THROW(checked_mul(-1, 2, "t", "x"), Error);
  EXPECT_THROW(checked_add(-1, 2, "t", "x"), Error);
}

TEST(CheckedSize, NumelRefusesOverflowAndNegativeDimensions) {
  EXPECT_EQ(checked_numel({}, "t"), 1);
  EXPECT_EQ(checked_numel({2, 3, 4}, "t"), 24);
  EXPECT_EQ(checked_numel({0, kMax, kMax}, "t"), 0);  // an empty dimension first: no product overflows
  const std::string e = error_of([] { checked_numel({int64_t{1} << 62, 4}, "tensor"); });
  EXPECT_NE(e.find("[tensor] the element count of shape [4611686018427387904, 4] overflows int64"),
            std::string::npos)
      << e;
  EXPECT_THROW(checked_numel({2, -1}, "t"), Error);
  EXPECT_EQ(checked_nbytes({1000, 1000}, 8, "t"), 8000000);
  EXPECT_THROW(checked_nbytes({int64_t{1} << 61, 1}, 8, "t"), Error);  // the elements fit, the bytes do not
}

TEST(CheckedSizeControl, TheUncheckedElementCountWrapsForTheSameShape) {
  // What checked_numel stands guard against: the unchecked product of [2^61, 8] wraps to 0
  // (computed in unsigned arithmetic here, where wrapping is defined).
  uint64_t n = 1;
  for (const int64_t d : Shape{int64_t{1} << 61, 8}) n *= static_cast<uint64_t>(d);
  EXPECT_EQ(n, 0u);
}

TEST(CheckedSize, TensorsRefuseShapesWhoseBytesOverflow) {
  const std::string e = error_of([] { Tensor::zeros({int64_t{1} << 62, 4}, DType::F32); });
  EXPECT_NE(e.find("overflows int64"), std::string::npos) << e;
  EXPECT_THROW(Tensor::empty({int64_t{1} << 60, 16}, DType::F32), Error);
  EXPECT_THROW(Tensor::empty({3, -2}, DType::F32), Error);
  EXPECT_EQ(Tensor::zeros({3, 0}, DType::F32).numel(), 0);
}

}  // namespace
}  // namespace attn
