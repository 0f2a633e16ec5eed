// Property (seed 000): without positional information self-attention is permutation-equivariant,
// f(PX) = P f(X), mean pooling makes it invariant, and adding the sinusoids of paper §3.5 breaks
// both (by more than 0.05). For one MHA layer (the seed's D=32, 4 heads, T=10), encoder stacks,
// the encoder-only model (none vs sinusoidal vs learned), and attention over a memory.
// Equalities within 1e-5 (f32) / 1e-12 (f64): permuted keys are summed in another order.
#include <gtest/gtest.h>

#include <numeric>

#include "attn/models/encoder_only.h"
#include "attn/nn/attention.h"
#include "attn/nn/decoder.h"
#include "attn/nn/encoder.h"
#include "attn/nn/positional.h"
#include "property_util.h"
#include "support/expect_close.h"

namespace attn {
namespace {

constexpr double kBroken = 0.05;

class Permutation : public ::testing::TestWithParam<DType> {};

// A fixed permutation of 0..T-1 that moves every position (a shuffle, then rotated if needed).
std::vector<int64_t> derangement(int64_t T, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(T));
  std::iota(p.begin(), p.end(), 0);
  Rng rng(seed);
  for (int64_t i = T - 1; i > 0; --i) std::swap(p[static_cast<size_t>(i)], p[rng.below(static_cast<uint64_t>(i + 1))]);
  for (int64_t i = 0; i < T; ++i)
    if (p[static_cast<size_t>(i)] == i) std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>((i + 1) % T)]);
  return p;
}

// x [B, T, D] -> mean over T, [B, 1, D].
Tensor mean_pool(const Tensor& x) { return scale(sum(x, 1, true), 1.0 / static_cast<double>(x.size(1))); }

Tensor with_sinusoids(const Tensor& x) {
  return add(x, nn::sinusoidal_table(x.size(1), x.size(2), x.dtype()));  // [B, T, D] + [T, D]
}

// Checks, for f: [B, T, D] -> [B, T, D], equivariance and pooled invariance without positions,
// and that both fail once sinusoids are added to the input.
template <class F>
void check_symmetry(F f, const Tensor& x, const std::vector<int64_t>& perm, const std::string& what) {
  const double tol = props::reshape_tolerance(x.dtype());
  NoGradGuard no_grad;
  Tensor px = props::permute_positions(x, perm);
  EXPECT_TRUE(test::all_close(f(px), props::permute_positions(f(x), perm), tol, 0, what + ": f(PX) = P f(X)"));
  EXPECT_TRUE(test::all_close(mean_pool(f(px)), mean_pool(f(x)), tol, 0, what + ": mean f(PX) = mean f(X)"));
  // With positions: f(PX + PE) != P f(X + PE), and the pooled outputs differ.
  EXPECT_GT(test::max_abs_diff(f(with_sinusoids(px)), props::permute_positions(f(with_sinusoids(x)), perm)), kBroken)
      << what << ": adding PE should break equivariance";
  EXPECT_GT(test::max_abs_diff(mean_pool(f(with_sinusoids(px))), mean_pool(f(with_sinusoids(x)))), kBroken)
      << what << ": adding PE should break pooled invariance";
}

TEST_P(Permutation, SelfAttentionWithoutPositionsIsEquivariantAndPooledInvariant) {
  const DType dtype = GetParam();
  Rng rng(31);
  nn::MultiHeadAttention mha(32, 4, 0.0, dtype, rng);
  Tensor x = props::randn({2, 10, 32}, 1, dtype);
  check_symmetry([&](const Tensor& in) { return mha.forward(in, in, in); }, x, derangement(10, 2),
                 "multi-head self-attention");
}

TEST_P(Permutation, EncoderStackWithoutPositionsIsEquivariantPostAndPreNorm) {
  const DType dtype = GetParam();
  for (bool norm_first : {false, true}) {
    Rng rng(32);
    nn::Encoder encoder(props::small_layer(dtype, norm_first), 2, true, rng);
    encoder.eval();
    Tensor x = props::randn({2, 9, 16}, 3, dtype);
    check_symmetry([&](const Tensor& in) { return encoder.forward(in); }, x, derangement(9, 4),
                   norm_first ? "pre-norm encoder" : "post-norm encoder");
  }
}

TEST_P(Permutation, EncoderOnlyModelIsEquivariantExactlyWhenItHasNoPositions) {
  const DType dtype = GetParam();
  const int64_t T = 8;
  std::vector<int64_t> tokens = props::random_tokens(2 * T, 5);
  const std::vector<int64_t> perm = derangement(T, 6);
  std::vector<int64_t> permuted(tokens.size());
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < T; ++i)
      permuted[static_cast<size_t>(b * T + i)] = tokens[static_cast<size_t>(b * T + perm[static_cast<size_t>(i)])];
  Tensor a = props::ids(tokens, 2, T), pa = props::ids(permuted, 2, T);
  for (auto kind : {nn::PositionalKind::None, nn::PositionalKind::Sinusoidal, nn::PositionalKind::Learned}) {
    models::ModelConfig c = props::small_config(models::Arch::EncoderOnly, dtype, true);
    c.positional = kind;
    models::EncoderOnlyModel model(c);
    model.eval();
    NoGradGuard no_grad;
    const double diff = test::max_abs_diff(model.encode(pa), props::permute_positions(model.encode(a), perm));
    const double pooled = test::max_abs_diff(mean_pool(model.encode(pa)), mean_pool(model.encode(a)));
    if (kind == nn::PositionalKind::None) {
      EXPECT_LE(diff, props::reshape_tolerance(dtype)) << "no positions: encode(P ids) = P encode(ids)";
      EXPECT_LE(pooled, props::reshape_tolerance(dtype)) << "no positions: pooled invariance";
    } else {
      EXPECT_GT(diff, kBroken) << nn::positional_kind_name(kind) << " positions should break equivariance";
      EXPECT_GT(pooled, kBroken) << nn::positional_kind_name(kind) << " positions should break pooled invariance";
    }
  }
}

TEST_P(Permutation, AttentionOverAMemoryIgnoresTheMemoryOrder) {
  // Keys and values are a set: reordering the encoder output leaves a decoder's output as is
  // (the decoder still has no positions of its own here, so only the memory is permuted).
  const DType dtype = GetParam();
  Rng rng(33);
  nn::Decoder decoder(props::small_layer(dtype), 2, true, rng);
  decoder.eval();
  Tensor y = props::randn({2, 5, 16}, 7, dtype);
  Tensor memory = props::randn({2, 7, 16}, 8, dtype);
  nn::AttentionMasks causal;
  causal.causal = true;
  NoGradGuard no_grad;
  EXPECT_TRUE(test::all_close(decoder.forward(y, props::permute_positions(memory, derangement(7, 9)), causal),
                              decoder.forward(y, memory, causal), props::reshape_tolerance(dtype), 0,
                              "decoder over a permuted memory"));
  // Adding positions to the memory makes its order matter.
  EXPECT_GT(test::max_abs_diff(decoder.forward(y, with_sinusoids(props::permute_positions(memory, derangement(7, 9))), causal),
                               decoder.forward(y, with_sinusoids(memory), causal)),
            kBroken);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Permutation, ::testing::Values(DType::F32, DType::F64),
                         [](const ::testing::TestParamInfo<DType>& info) { return props::dtype_label(info.param); });

}  // namespace
}  // namespace attn
