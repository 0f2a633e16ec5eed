// FeedForward (paper §3.3): linear2(phi(linear1(x))) against brute force for each activation,
// nn.TransformerEncoderLayer's names, a float64 gradient check, and activation names; the gated
// SwiGLU FFN (gate and up halves of linear1) against brute force, its shapes, its gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/nn/feed_forward.h"
#include "attn/nn/quantize.h"
#include "attn/ops/ops.h"
#include "attn/ops/quantize.h"
#include "nn_reference.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"

namespace attn::nn {
namespace {

double phi(Activation a, double x) {
  switch (a) {
    case Activation::ReLU: return x > 0 ? x : 0;
    case Activation::GELU: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::GELUTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::SwiGLU: break;  // gated, not element-wise: see the SwiGLU tests
  }
  return x;
}

// With int8 or bf16 weights and no dropout, the ReLU runs in linear1's product as it stores,
// and bf16 hidden rows go to linear2 in bf16 (quantized_feed_forward): the output's bits are
// those of the separate ops.
TEST(FeedForward, QuantizedReluInTheProductGivesTheBitsOfTheSeparateOps) {
  for (Quantization q : {Quantization::Int8, Quantization::BF16}) {
    SCOPED_TRACE(static_cast<int>(q));
    for (int64_t d_ff : {64, 40}) {  // 40: bf16 hidden rows padded to their row stride
      for (int64_t rows : {40, 3}) {  // 3 x 40 rows: the packed panels on AVX-512; 3 x 3: the row kernels
        SCOPED_TRACE(testing::Message() << "d_ff " << d_ff << " rows " << rows);
        Rng rng(7);
        FeedForward ff(32, d_ff, Activation::ReLU, 0.1, DType::F32, rng);
        quantize_module(ff, q);
        ff.eval();
        NoGradGuard no_grad;
        const Tensor x = Tensor::randn({3, rows, 32}, rng);
        const Linear& l1 = *ff.linear1();
        const Linear& l2 = *ff.linear2();
        const Tensor hidden = quantized_linear(x, l1.weight(), l1.weight_scale(), l1.bias());
        const Tensor want = quantized_linear(relu(hidden), l2.weight(), l2.weight_scale(), l2.bias());
        const Tensor got = ff.forward(x);
        ASSERT_EQ(got.shape(), want.shape());
        const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
        EXPECT_EQ(std::memcmp(g.data(), w.data(), g.size() * sizeof(float)), 0);
        // Control: without the ReLU the result differs (linear1 has negative outputs).
        const Tensor linear_only = quantized_linear(hidden, l2.weight(), l2.weight_scale(), l2.bias());
        EXPECT_NE(got.to_vector<float>(), linear_only.to_vector<float>());
        // The op itself, on a wrong input: an error naming it.
        EXPECT_THROW(quantized_feed_forward(Tensor::randn({2, 31}, rng), l1.weight(), l1.weight_scale(), l1.bias(),
                                            l2.weight(), l2.weight_scale(), l2.bias()),
                     Error);
        // and a second bias of the first product's width.
        EXPECT_THROW(quantized_feed_forward(x, l1.weight(), l1.weight_scale(), l1.bias(), l2.weight(),
                                            l2.weight_scale(), l1.bias()),
                     Error);
      }
    }
  }
}

TEST(FeedForward, MatchesBruteForceForEachActivation) {
  for (Activation a : {Activation::ReLU, Activation::GELU, Activation::GELUTanh}) {
    Rng rng(1);
    FeedForward ff(4, 10, a, 0.0, DType::F64, rng);
    Tensor x = test::random_tensor({2, 3, 4}, 2);
    test::Vec h = test::ref_linear(x.to_vector<double>(), 6, 4, ff.linear1()->weight().to_vector<double>(),
                                   ff.linear1()->bias().to_vector<double>(), 10);
    for (double& v : h) v = phi(a, v);
    const test::Vec ref = test::ref_linear(h, 6, 10, ff.linear2()->weight().to_vector<double>(),
                                           ff.linear2()->bias().to_vector<double>(), 4);
    EXPECT_TRUE(test::all_close(ff.forward(x), Tensor::from_vector<double>(ref, {2, 3, 4}), 1e-12, 0,
                                activation_name(a)));
  }
}

TEST(FeedForward, UsesTransformerEncoderLayerNames) {
  Rng rng(3);
  FeedForward ff(8, 32, Activation::ReLU, 0.1, DType::F32, rng);
  std::vector<std::string> names;
  for (auto& [n, t] : ff.named_parameters()) names.push_back(n + " " + shape_str(t.shape()));
  EXPECT_EQ(names, (std::vector<std::string>{"linear1.weight [32, 8]", "linear1.bias [32]", "linear2.weight [8, 32]",
                                             "linear2.bias [8]"}));
}

TEST(FeedForward, GradientsMatchFiniteDifferences) {
  for (Activation a : {Activation::GELU, Activation::GELUTanh, Activation::ReLU}) {
    Rng rng(4);
    FeedForward ff(3, 5, a, 0.0, DType::F64, rng);
    Tensor x = test::random_tensor({2, 2, 3}, 5).set_requires_grad(true);
    EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>& in) { return ff.forward(in[0]); },
                                {x, ff.linear1()->weight(), ff.linear1()->bias(), ff.linear2()->weight(),
                                 ff.linear2()->bias()}))
        << activation_name(a);
  }
}

TEST(FeedForward, DropoutBetweenTheLayersOnlyInTraining) {
  Rng rng(6);
  FeedForward ff(4, 64, Activation::ReLU, 0.5, DType::F64, rng);
  Tensor x = test::random_tensor({1, 4, 4}, 7);
  ff.eval();
  Tensor a = ff.forward(x);
  EXPECT_TRUE(test::all_close(ff.forward(x), a, 0.0));
  ff.train();
  EXPECT_FALSE(test::all_close(ff.forward(x), a, 1e-6));
}

TEST(Activation, NamesRoundTrip) {
  for (Activation a : {Activation::ReLU, Activation::GELU, Activation::GELUTanh})
    EXPECT_EQ(parse_activation(activation_name(a)), a);
  EXPECT_THROW(parse_activation("swish"), Error);
}

TEST(FeedForward, SwiGLUMultipliesTheSiluOfTheGateHalfByTheUpHalf) {
  Rng rng(6);
  FeedForward ff(4, 5, Activation::SwiGLU, 0.0, DType::F64, rng);
  EXPECT_EQ(ff.linear1()->weight().shape(), (Shape{10, 4}));  // [2F, D]: gate rows, then up rows
  EXPECT_EQ(ff.linear2()->weight().shape(), (Shape{4, 5}));   // [D, F]
  EXPECT_EQ(ff.num_parameters(), 3 * 4 * 5 + 10 + 4);
  Tensor x = test::random_tensor({2, 3, 4}, 7);
  const test::Vec h = test::ref_linear(x.to_vector<double>(), 6, 4, ff.linear1()->weight().to_vector<double>(),
                                       ff.linear1()->bias().to_vector<double>(), 10);
  test::Vec gated(6 * 5);
  for (int64_t n = 0; n < 6; ++n)
    for (int64_t f = 0; f < 5; ++f) {
      const double g = h[static_cast<size_t>(n * 10 + f)], up = h[static_cast<size_t>(n * 10 + 5 + f)];
      gated[static_cast<size_t>(n * 5 + f)] = g / (1.0 + std::exp(-g)) * up;
    }
  const test::Vec ref = test::ref_linear(gated, 6, 5, ff.linear2()->weight().to_vector<double>(),
                                         ff.linear2()->bias().to_vector<double>(), 4);
  EXPECT_TRUE(test::all_close(ff.forward(x), Tensor::from_vector<double>(ref, {2, 3, 4}), 1e-12));
  // Control: swapping the halves (up first) gives something else.
  const Tensor hidden = Tensor::from_vector<double>(h, {6, 10});
  const Tensor swapped = concat({hidden.slice(1, 5, 10), hidden.slice(1, 0, 5)}, 1);
  EXPECT_FALSE(test::all_close(swiglu(swapped), Tensor::from_vector<double>(gated, {6, 5}), 1e-6));
  EXPECT_TRUE(test::all_close(swiglu(hidden), Tensor::from_vector<double>(gated, {6, 5}), 1e-13));
}

TEST(FeedForward, SwiGLUGradientsMatchFiniteDifferences) {
  Rng rng(8);
  FeedForward ff(3, 4, Activation::SwiGLU, 0.0, DType::F64, rng);
  Tensor x = test::random_tensor({2, 2, 3}, 9).set_requires_grad(true);
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>& in) { return ff.forward(in[0]); },
                              {x, ff.linear1()->weight(), ff.linear1()->bias(), ff.linear2()->weight(),
                               ff.linear2()->bias()}));
}

TEST(FeedForward, SwiGLUIsNotAnElementWiseActivation) {
  EXPECT_EQ(parse_activation("swiglu"), Activation::SwiGLU);
  EXPECT_STREQ(activation_name(Activation::SwiGLU), "swiglu");
  EXPECT_TRUE(is_gated(Activation::SwiGLU));
  EXPECT_FALSE(is_gated(Activation::GELU));
  EXPECT_THROW(apply_activation(Activation::SwiGLU, test::random_tensor({2, 4}, 1)), Error);
  EXPECT_THROW(swiglu(test::random_tensor({2, 5}, 1)), Error);  // odd width: no halves
}

}  // namespace
}  // namespace attn::nn
