// add_layer_norm: the bits of layer_norm(add(x, r)) in float32 and float64, with and without
// the affine part, for widths with vector tails and row counts on one thread and over the
// threads; with a gradient to record it is the two ops (same values, same gradients); shapes
// that broadcast take the two ops too. nn::Norm::forward_residual: a post-norm layer's output
// in eval mode equals the unfused composition bit for bit, and in training mode uses the
// dropout (the same masks as dropout.add_to). Controls: x alone normalised, or x + r with r's
// last row changed, gives other bits.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/core/rng.h"
#include "attn/nn/dropout.h"
#include "attn/nn/layer_norm.h"
#include "attn/ops/ops.h"

namespace attn {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.numel()) * dtype_size(x.dtype())) == 0;
}

TEST(AddLayerNorm, TheBitsOfAddThenLayerNorm) {
  Rng rng(4);
  for (DType dt : {DType::F32, DType::F64})
    for (int64_t D : {1, 7, 64, 513})
      for (int64_t rows : {1, 3, 300}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dt) << " D " << D << " rows " << rows);
        const Tensor x = Tensor::randn({rows, D}, rng).to(dt), r = Tensor::randn({rows, D}, rng).to(dt);
        const Tensor w = Tensor::randn({D}, rng).to(dt), b = Tensor::randn({D}, rng).to(dt);
        for (int affine = 0; affine < 4; ++affine) {
          const Tensor wa = affine & 1 ? w : Tensor(), ba = affine & 2 ? b : Tensor();
          const Tensor got = add_layer_norm(x, r, wa, ba, 1e-5);
          EXPECT_TRUE(same_bits(got, layer_norm(add(x, r), wa, ba, 1e-5))) << affine;
          if (D > 1) {  // control: r left out (at D = 1 every row normalises to b)
            EXPECT_FALSE(same_bits(got, layer_norm(x, wa, ba, 1e-5)));
          }
        }
        if (rows > 1 && D > 1) {  // control: one changed row of r changes that row only, so the test sees rows
          std::vector<double> v = r.to(DType::F64).to_vector<double>();
          for (int64_t c = 0; c < D; ++c) v[static_cast<size_t>((rows - 1) * D + c)] *= 2.0;
          const Tensor r2 = Tensor::from_vector<double>(v, {rows, D}).to(dt);
          EXPECT_FALSE(same_bits(add_layer_norm(x, r2, w, b, 1e-5), layer_norm(add(x, r), w, b, 1e-5)));
        }
      }
}

TEST(AddLayerNorm, WithAGradientOrABroadcastItIsTheTwoOps) {
  Rng rng(5);
  Tensor x = Tensor::randn({4, 9}, rng), r = Tensor::randn({4, 9}, rng);
  const Tensor w = Tensor::randn({9}, rng), b = Tensor::randn({9}, rng);
  x.set_requires_grad(true);
  const Tensor g = Tensor::randn({4, 9}, rng);
  add_layer_norm(x, r, w, b, 1e-5).backward(g);
  const Tensor fused_grad = x.grad().clone();
  x.zero_grad();
  layer_norm(add(x, r), w, b, 1e-5).backward(g);
  EXPECT_TRUE(same_bits(fused_grad, x.grad()));
  // r [9] broadcasts over x's rows.
  NoGradGuard no_grad;
  const Tensor row = Tensor::randn({9}, rng);
  EXPECT_TRUE(same_bits(add_layer_norm(x, row, w, b, 1e-5), layer_norm(add(x, row), w, b, 1e-5)));
}

TEST(AddLayerNorm, NormForwardResidualFusesOnlyWithoutDropout) {
  Rng rng(6);
  nn::LayerNorm norm(16);
  nn::Dropout drop(0.3, 11), twin(0.3, 11);
  const Tensor x = Tensor::randn({5, 16}, rng), s = Tensor::randn({5, 16}, rng);
  NoGradGuard no_grad;
  drop.eval();
  EXPECT_TRUE(same_bits(norm.forward_residual(x, s, drop), norm.forward(add(x, s))));
  drop.train();
  twin.train();
  const Tensor trained = norm.forward_residual(x, s, drop);
  EXPECT_TRUE(same_bits(trained, norm.forward(twin.add_to(x, s))));  // the same mask draw
  EXPECT_FALSE(same_bits(trained, norm.forward(add(x, s))));         // control: it dropped something
}

}  // namespace
}  // namespace attn
