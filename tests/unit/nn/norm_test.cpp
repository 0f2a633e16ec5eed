// LayerNorm and RMSNorm layers: values against brute-force loops, names and defaults,
// float64 gradient checks, make_norm, and bad input.
#include <gtest/gtest.h>

#include "attn/nn/layer_norm.h"
#include "attn/nn/norm.h"
#include "attn/nn/rms_norm.h"
#include "nn_reference.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"
#include "support/tolerances.h"

namespace attn::nn {
namespace {

void randomise(const Tensor& p, uint64_t seed) {
  Tensor(p).copy_from(test::random_tensor(p.shape(), seed, p.dtype()));
}

TEST(LayerNormLayer, MatchesBruteForce) {
  for (DType dtype : {DType::F32, DType::F64}) {
    LayerNorm ln(6, 1e-5, dtype);
    randomise(ln.weight(), 1);
    randomise(ln.bias(), 2);
    Tensor x = test::random_tensor({2, 3, 6}, 3, dtype, 2.0);
    const auto ref = test::ref_norm(x.to_vector<double>(), 6, 6, ln.weight().to_vector<double>(),
                                    ln.bias().to_vector<double>(), 1e-5, false);
    EXPECT_TRUE(test::all_close(ln.forward(x), Tensor::from_vector<double>(ref, {2, 3, 6}),
                                dtype == DType::F32 ? test::kAbsF32 : test::kAbsF64));
  }
}

TEST(LayerNormLayer, StartsAsIdentityAffineWithPyTorchNames) {
  LayerNorm ln(4);
  EXPECT_EQ(ln.weight().to_vector<float>(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(ln.bias().to_vector<float>(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(ln.named_parameters()[0].first, "weight");
  EXPECT_EQ(ln.named_parameters()[1].first, "bias");
}

TEST(LayerNormLayer, GradientsMatchFiniteDifferences) {
  LayerNorm ln(5, 1e-5, DType::F64);
  randomise(ln.weight(), 4);
  randomise(ln.bias(), 5);
  Tensor x = test::random_tensor({3, 5}, 6).set_requires_grad(true);
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>& in) { return ln.forward(in[0]); },
                              {x, ln.weight(), ln.bias()}));
}

TEST(RMSNormLayer, MatchesBruteForce) {
  for (DType dtype : {DType::F32, DType::F64}) {
    RMSNorm rms(6, 1e-6, dtype);
    randomise(rms.weight(), 7);
    Tensor x = test::random_tensor({4, 6}, 8, dtype, 3.0);
    const auto ref = test::ref_norm(x.to_vector<double>(), 4, 6, rms.weight().to_vector<double>(), {}, 1e-6, true);
    EXPECT_TRUE(test::all_close(rms.forward(x), Tensor::from_vector<double>(ref, {4, 6}),
                                dtype == DType::F32 ? test::kAbsF32 : test::kAbsF64));
    EXPECT_EQ(rms.num_parameters(), 6);
  }
}

TEST(RMSNormLayer, GradientsMatchFiniteDifferences) {
  RMSNorm rms(5, 1e-5, DType::F64);
  randomise(rms.weight(), 9);
  Tensor x = test::random_tensor({2, 2, 5}, 10).set_requires_grad(true);
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>& in) { return rms.forward(in[0]); },
                              {x, rms.weight()}));
}

TEST(NormLayer, MakeNormBuildsTheNamedKind) {
  auto layer = make_norm(NormKind::Layer, 4, 1e-5, DType::F32);
  auto rms = make_norm(NormKind::RMS, 4, 1e-5, DType::F32);
  EXPECT_NE(dynamic_cast<LayerNorm*>(layer.get()), nullptr);
  EXPECT_NE(dynamic_cast<RMSNorm*>(rms.get()), nullptr);
  EXPECT_EQ(parse_norm_kind("rms"), NormKind::RMS);
  EXPECT_STREQ(norm_kind_name(NormKind::Layer), "layer");
  EXPECT_THROW(parse_norm_kind("batch"), Error);
}

TEST(NormLayer, RejectsBadSizesAndInputs) {
  EXPECT_THROW(LayerNorm(0), Error);
  EXPECT_THROW(LayerNorm(4, 0.0), Error);
  EXPECT_THROW(RMSNorm(4, -1.0), Error);
  EXPECT_THROW(LayerNorm(4).forward(Tensor::zeros({2, 5})), Error);
  EXPECT_THROW(RMSNorm(4).forward(Tensor::zeros({2, 3})), Error);
}

}  // namespace
}  // namespace attn::nn
