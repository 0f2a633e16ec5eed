// MultiHeadAttention: PyTorch names and the 4D^2 + 4D parameter count for any H; head
// split/join layout; self- and cross-attention (different lengths) against a brute-force
// double loop with causal, key-padding, boolean, float and 3-D masks; per-head weights;
// dropout on the weights in training only; attention capture; float64 gradient checks; bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attn/nn/attention.h"
#include "attn/ops/ops.h"
#include "nn_reference.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"
#include "support/tolerances.h"

namespace attn::nn {
namespace {

using test::Vec;

// Gives the attention non-trivial biases (they start at zero) so the test sees them.
void randomise_biases(MultiHeadAttention& mha, uint64_t seed) {
  Tensor(mha.in_proj_bias()).copy_from(test::random_tensor(mha.in_proj_bias().shape(), seed, mha.in_proj_bias().dtype()));
  Tensor(mha.out_proj().bias()).copy_from(test::random_tensor({mha.d_model()}, seed + 1, mha.in_proj_bias().dtype()));
}

Vec reference(MultiHeadAttention& mha, const Tensor& q, const Tensor& kv,
              const std::function<bool(int64_t, int64_t, int64_t, int64_t)>& masked,
              const std::function<double(int64_t, int64_t, int64_t, int64_t)>& additive = {},
              Vec* weights = nullptr) {
  return test::ref_mha(q.to_vector<double>(), kv.to_vector<double>(), kv.to_vector<double>(), q.size(0), q.size(1),
                       kv.size(1), mha.d_model(), mha.n_heads(), mha.in_proj_weight().to_vector<double>(),
                       mha.in_proj_bias().to_vector<double>(), mha.out_proj().weight().to_vector<double>(),
                       mha.out_proj().bias().to_vector<double>(), masked, additive, weights);
}

TEST(MultiHeadAttention, HasPyTorchNamesAndFourDSquaredPlusFourDParametersForAnyH) {
  for (int64_t H : {1, 2, 4, 8}) {
    Rng rng(1);
    MultiHeadAttention mha(32, H, 0.0, DType::F32, rng);
    EXPECT_EQ(mha.num_parameters(), 4 * 32 * 32 + 4 * 32) << H;
  }
  Rng rng(1);
  MultiHeadAttention mha(8, 2, 0.0, DType::F32, rng);
  std::vector<std::string> names;
  for (auto& [n, t] : mha.named_parameters()) names.push_back(n + " " + shape_str(t.shape()));
  EXPECT_EQ(names, (std::vector<std::string>{"in_proj_weight [24, 8]", "in_proj_bias [24]",
                                             "out_proj.weight [8, 8]", "out_proj.bias [8]"}));
  // nn.MultiheadAttention's init: zero biases, xavier in_proj within sqrt(6 / (D + 3D)).
  for (float b : mha.in_proj_bias().to_vector<float>()) EXPECT_EQ(b, 0.0f);
  for (float b : mha.out_proj().bias().to_vector<float>()) EXPECT_EQ(b, 0.0f);
  for (float w : mha.in_proj_weight().to_vector<float>()) EXPECT_LE(std::fabs(w), std::sqrt(6.0 / 32.0));
}

TEST(MultiHeadAttention, SplitHeadsTransposesRatherThanReshapes) {
  Rng rng(1);
  MultiHeadAttention mha(6, 3, 0.0, DType::F64, rng);
  Tensor x = test::random_tensor({2, 4, 6}, 3);
  Tensor heads = mha.split_heads(x);
  ASSERT_EQ(heads.shape(), (Shape{2, 3, 4, 2}));
  // head h of token t holds features h*Dh .. h*Dh+Dh-1 of that token.
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t t = 0; t < 4; ++t)
        for (int64_t d = 0; d < 2; ++d) EXPECT_EQ(heads.at({b, h, t, d}), x.at({b, t, h * 2 + d}));
  EXPECT_TRUE(test::all_close(mha.join_heads(heads), x, 0.0));
}

TEST(MultiHeadAttention, SelfAttentionMatchesBruteForceWithAndWithoutCausalMask) {
  for (DType dtype : {DType::F32, DType::F64}) {
    for (bool causal : {false, true}) {
      Rng rng(2);
      MultiHeadAttention mha(8, 2, 0.0, dtype, rng);
      randomise_biases(mha, 3);
      Tensor x = test::random_tensor({2, 5, 8}, 4, dtype);
      AttentionMasks masks;
      masks.causal = causal;
      Tensor y = mha.forward(x, x, x, masks);
      const Vec ref = reference(mha, x, x, [&](int64_t, int64_t, int64_t i, int64_t j) { return causal && j > i; });
      EXPECT_TRUE(test::all_close(y, Tensor::from_vector<double>(ref, {2, 5, 8}),
                                  dtype == DType::F32 ? 1e-5 : 1e-12));
    }
  }
}

TEST(MultiHeadAttention, CrossAttentionWithDifferentLengthsAndKeyPaddingMatchesBruteForce) {
  Rng rng(5);
  MultiHeadAttention mha(12, 3, 0.0, DType::F64, rng);
  randomise_biases(mha, 6);
  Tensor q = test::random_tensor({2, 3, 12}, 7);
  Tensor mem = test::random_tensor({2, 6, 12}, 8);
  // Row 0 has 4 real keys, row 1 all 6.
  Tensor pad = Tensor::from_bools({0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0}, {2, 6});
  AttentionMasks masks;
  masks.key_padding_mask = pad;
  AttentionOutput out = mha.forward_with_weights(q, mem, mem, masks);
  Vec ref_w;
  const Vec ref = reference(mha, q, mem, [&](int64_t b, int64_t, int64_t, int64_t j) { return b == 0 && j >= 4; }, {}, &ref_w);
  EXPECT_TRUE(test::all_close(out.out, Tensor::from_vector<double>(ref, {2, 3, 12}), 1e-12));
  ASSERT_EQ(out.weights.shape(), (Shape{2, 3, 3, 6}));
  EXPECT_TRUE(test::all_close(out.weights, Tensor::from_vector<double>(ref_w, {2, 3, 3, 6}), 1e-12));
  EXPECT_EQ(out.weights.at({0, 1, 2, 5}), 0.0);  // PAD keys get exactly zero weight
  EXPECT_FALSE(out.weights.requires_grad());
}

TEST(MultiHeadAttention, BooleanFloatAndThreeDimensionalMasksAgree) {
  Rng rng(9);
  const int64_t B = 2, T = 4, H = 2;
  MultiHeadAttention mha(4, H, 0.0, DType::F64, rng);
  randomise_biases(mha, 10);
  Tensor x = test::random_tensor({B, T, 4}, 11);
  // Hide key j from query i when (i + j) % 3 == 0 (query 0 still sees keys 1 and 2).
  std::vector<int> bits;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) bits.push_back((i + j) % 3 == 0 ? 1 : 0);
  const auto hidden = [&](int64_t, int64_t, int64_t i, int64_t j) { return (i + j) % 3 == 0; };
  const Tensor expected = Tensor::from_vector<double>(reference(mha, x, x, hidden), {B, T, 4});

  AttentionMasks boolean;
  boolean.attn_mask = Tensor::from_bools(bits, {T, T});
  EXPECT_TRUE(test::all_close(mha.forward(x, x, x, boolean), expected, 1e-12, 0, "bool [T, T]"));

  std::vector<double> additive;
  for (int b : bits) additive.push_back(b ? -std::numeric_limits<double>::infinity() : 0.0);
  AttentionMasks floating;
  floating.attn_mask = Tensor::from_vector<double>(additive, {T, T});
  EXPECT_TRUE(test::all_close(mha.forward(x, x, x, floating), expected, 1e-12, 0, "float [T, T]"));

  std::vector<int> repeated;
  for (int64_t k = 0; k < B * H; ++k) repeated.insert(repeated.end(), bits.begin(), bits.end());
  AttentionMasks three_d;
  three_d.attn_mask = Tensor::from_bools(repeated, {B * H, T, T});
  EXPECT_TRUE(test::all_close(mha.forward(x, x, x, three_d), expected, 1e-12, 0, "bool [B*H, T, T]"));

  // A finite additive mask shifts scores, as PyTorch adds it.
  std::vector<double> bias;
  for (int64_t i = 0; i < T * T; ++i) bias.push_back(0.3 * static_cast<double>(i % 5) - 0.5);
  AttentionMasks shifted;
  shifted.attn_mask = Tensor::from_vector<double>(bias, {T, T});
  const Vec ref = reference(mha, x, x, {}, [&](int64_t, int64_t, int64_t i, int64_t j) { return bias[static_cast<size_t>(i * T + j)]; });
  EXPECT_TRUE(test::all_close(mha.forward(x, x, x, shifted), Tensor::from_vector<double>(ref, {B, T, 4}), 1e-12));
}

TEST(MultiHeadAttention, FloatKeyPaddingMaskIsAddedLikeABooleanOne) {
  Rng rng(12);
  MultiHeadAttention mha(4, 2, 0.0, DType::F64, rng);
  Tensor x = test::random_tensor({2, 3, 4}, 13);
  const double inf = std::numeric_limits<double>::infinity();
  AttentionMasks as_bool, as_float;
  as_bool.key_padding_mask = Tensor::from_bools({0, 0, 1, 0, 0, 0}, {2, 3});
  as_float.key_padding_mask = Tensor::from_vector<double>({0, 0, -inf, 0, 0, 0}, {2, 3});
  as_float.causal = as_bool.causal = true;
  EXPECT_TRUE(test::all_close(mha.forward(x, x, x, as_float), mha.forward(x, x, x, as_bool), 1e-12));
}

TEST(MultiHeadAttention, DropoutActsOnWeightsInTrainingOnly) {
  Rng rng(14);
  MultiHeadAttention mha(8, 2, 0.5, DType::F64, rng);
  Tensor x = test::random_tensor({1, 6, 8}, 15);
  mha.eval();
  Tensor a = mha.forward(x, x, x), b = mha.forward(x, x, x);
  EXPECT_TRUE(test::all_close(a, b, 0.0));
  Rng rng0(14);
  MultiHeadAttention no_dropout(8, 2, 0.0, DType::F64, rng0);
  EXPECT_TRUE(test::all_close(a, no_dropout.forward(x, x, x), 1e-12)) << "same seed, same weights";
  mha.train();
  EXPECT_FALSE(test::all_close(mha.forward(x, x, x), a, 1e-6));
}

TEST(MultiHeadAttention, CaptureKeepsTheLastWeightsPerHead) {
  Rng rng(16);
  MultiHeadAttention mha(8, 4, 0.0, DType::F32, rng);
  Tensor x = test::random_tensor({2, 3, 8}, 17, DType::F32);
  mha.forward(x, x, x);
  EXPECT_FALSE(mha.last_attention().defined());
  mha.set_capture_attention(true);
  AttentionMasks causal;
  causal.causal = true;
  mha.forward(x, x, x, causal);
  ASSERT_EQ(mha.last_attention().shape(), (Shape{2, 4, 3, 3}));
  EXPECT_EQ(mha.last_attention().at({1, 2, 0, 1}), 0.0);
  double row = 0;
  for (int64_t j = 0; j < 3; ++j) row += mha.last_attention().at({1, 2, 2, j});
  EXPECT_NEAR(row, 1.0, 1e-6);
  auto captured = captured_attention(mha);
  ASSERT_EQ(captured.size(), 1u);
  EXPECT_EQ(captured[0].first, "");
}

TEST(MultiHeadAttention, SelfAttentionGradientsMatchFiniteDifferencesWithMasks) {
  Rng rng(18);
  MultiHeadAttention mha(6, 2, 0.0, DType::F64, rng);
  randomise_biases(mha, 19);
  Tensor x = test::random_tensor({2, 4, 6}, 20).set_requires_grad(true);
  AttentionMasks masks;
  masks.causal = true;
  masks.key_padding_mask = Tensor::from_bools({0, 0, 0, 1, 0, 1, 0, 0}, {2, 4});
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], in[0], masks); },
                              {x, mha.in_proj_weight(), mha.in_proj_bias(), mha.out_proj().weight(),
                               mha.out_proj().bias()}));
}

TEST(MultiHeadAttention, CrossAttentionGradientsMatchFiniteDifferencesWithMasks) {
  Rng rng(21);
  MultiHeadAttention mha(6, 3, 0.0, DType::F64, rng);
  randomise_biases(mha, 22);
  Tensor q = test::random_tensor({2, 2, 6}, 23).set_requires_grad(true);
  Tensor mem = test::random_tensor({2, 5, 6}, 24).set_requires_grad(true);
  AttentionMasks masks;
  masks.key_padding_mask = Tensor::from_bools({0, 0, 0, 1, 1, 0, 0, 0, 0, 0}, {2, 5});
  masks.attn_mask = Tensor::from_bools({0, 1, 0, 0, 0, 0, 0, 0, 1, 0}, {2, 5});
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[1], in[1], masks); },
                              {q, mem, mha.in_proj_weight(), mha.in_proj_bias(), mha.out_proj().weight(),
                               mha.out_proj().bias()}));
}

TEST(MultiHeadAttention, RejectsBadShapesDtypesAndConfigurations) {
  Rng rng(25);
  EXPECT_THROW(MultiHeadAttention(10, 3, 0.0, DType::F32, rng), Error);  // 10 % 3 != 0
  EXPECT_THROW(MultiHeadAttention(8, 0, 0.0, DType::F32, rng), Error);
  EXPECT_THROW(MultiHeadAttention(8, 2, 1.0, DType::F32, rng), Error);
  MultiHeadAttention mha(8, 2, 0.0, DType::F32, rng);
  Tensor x = Tensor::zeros({2, 3, 8});
  EXPECT_THROW(mha.forward(Tensor::zeros({2, 3, 6}), x, x), Error);
  EXPECT_THROW(mha.forward(x, Tensor::zeros({1, 3, 8}), Tensor::zeros({1, 3, 8})), Error);
  EXPECT_THROW(mha.forward(x, x, Tensor::zeros({2, 4, 8})), Error);
  EXPECT_THROW(mha.forward(x, x, x.to(DType::F64)), Error);
  AttentionMasks bad_kpm;
  bad_kpm.key_padding_mask = Tensor::from_bools({0, 0}, {1, 2});
  EXPECT_THROW(mha.forward(x, x, x, bad_kpm), Error);
  AttentionMasks bad_3d;
  bad_3d.attn_mask = Tensor::from_bools(std::vector<int>(27, 0), {3, 3, 3});
  EXPECT_THROW(mha.forward(x, x, x, bad_3d), Error);
}

}  // namespace
}  // namespace attn::nn
