// The descendants of Eq. 1 inside scaled_dot_product_attention and the RoPE op: ALiBi slopes
// against the paper's formula (powers of two and the interleaving rule); ALiBi biases, grouped-
// query (and multi-query) K/V heads and sliding windows against a brute-force double loop, on
// both kernel pairs, with causal, bottom-right and padded cases; GQA equal to multi-head
// attention over repeated K/V heads, gradients included; the kernels directly with small tiles;
// rotary_embedding against its formula for both pairings, the seed's relative-position table,
// per-row positions; float64 gradient checks of each; and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attn/ops/ops.h"
#include "kernels/attention_flash.h"
#include "kernels/attention_naive.h"
#include "ops/attention_impl.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"

namespace attn {
namespace {

using detail::SdpaImpl;

Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::F64) {
  Rng rng(seed);
  return Tensor::randn(shape, rng, dtype);
}

// ---- ALiBi slopes ---------------------------------------------------------------------------

TEST(AlibiSlopes, PowersOfTwoAreTheGeometricSequenceTwoToTheMinusEightHOverN) {
  for (int64_t n : {1, 2, 4, 8, 16}) {
    const auto m = alibi_slopes(n);
    ASSERT_EQ(static_cast<int64_t>(m.size()), n);
    for (int64_t h = 0; h < n; ++h)
      EXPECT_DOUBLE_EQ(m[static_cast<size_t>(h)], std::pow(2.0, -8.0 * static_cast<double>(h + 1) / static_cast<double>(n)))
          << n << " heads, head " << h;
  }
  // The paper's example: 8 heads -> 1/2, 1/4, ..., 1/256.
  EXPECT_EQ(alibi_slopes(8), (std::vector<double>{0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625}));
}

TEST(AlibiSlopes, OtherCountsTakeThePowerOfTwoBelowThenEveryOtherSlopeOfTwiceIt) {
  // 6 heads: the 4-head slopes 2^-2, 2^-4, 2^-6, 2^-8, then 8-head slopes 0 and 2: 2^-1, 2^-3.
  EXPECT_EQ(alibi_slopes(6), (std::vector<double>{0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125}));
  // 12 heads: 8 slopes 2^-1 .. 2^-8, then 16-head slopes 0, 2, 4, 6: 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
  const auto m12 = alibi_slopes(12);
  ASSERT_EQ(m12.size(), 12u);
  for (int64_t h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(m12[static_cast<size_t>(h)], std::pow(2.0, -static_cast<double>(h + 1)));
  for (int64_t e = 0; e < 4; ++e)
    EXPECT_DOUBLE_EQ(m12[static_cast<size_t>(8 + e)], std::pow(2.0, -0.5 - static_cast<double>(2 * e) * 0.5));
  // 3 heads: 2^-4, 2^-8, then 4-head slope 0: 2^-2. 5 heads: 4 slopes + 8-head slope 0.
  EXPECT_EQ(alibi_slopes(3), (std::vector<double>{0.0625, 0.00390625, 0.25}));
  EXPECT_EQ(alibi_slopes(5).back(), 0.5);
  EXPECT_THROW(alibi_slopes(0), Error);
}

// ---- a brute-force reference for every variant ---------------------------------------------

struct Variant {
  bool causal = false;
  int64_t window = 0;
  bool alibi = false;
  std::vector<int64_t> pads;  // per batch row, the number of padded keys at the end
};

// q [B, H, Tq, Dh], k/v [B, Hkv, Tk, Dh/Dv] -> out [B, H, Tq, Dv], in double, one score at a time.
std::vector<double> reference(const Tensor& q, const Tensor& k, const Tensor& v, const Variant& var) {
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), Dh = q.size(3);
  const int64_t Hkv = k.size(1), Tk = k.size(2), Dv = v.size(3);
  const auto vq = q.to_vector<double>(), vk = k.to_vector<double>(), vv = v.to_vector<double>();
  const std::vector<double> slopes = alibi_slopes(H);
  std::vector<double> out(static_cast<size_t>(B * H * Tq * Dv), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / Hkv);  // the K/V head
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t self = i + Tk - Tq;
        std::vector<double> s(static_cast<size_t>(Tk), -std::numeric_limits<double>::infinity());
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Tk; ++j) {
          if (var.causal && j > self) continue;
          if (var.window > 0 && j <= self - var.window) continue;
          if (!var.pads.empty() && j >= Tk - var.pads[static_cast<size_t>(b)]) continue;
          double dot = 0;
          for (int64_t c = 0; c < Dh; ++c)
            dot += vq[static_cast<size_t>(((b * H + h) * Tq + i) * Dh + c)] * vk[static_cast<size_t>(((b * Hkv + g) * Tk + j) * Dh + c)];
          dot /= std::sqrt(static_cast<double>(Dh));
          if (var.alibi) dot -= slopes[static_cast<size_t>(h)] * std::fabs(static_cast<double>(self - j));
          s[static_cast<size_t>(j)] = dot;
          m = std::max(m, dot);
        }
        if (m == -std::numeric_limits<double>::infinity()) continue;  // fully masked: zeros
        double z = 0;
        for (double& x : s) z += (x = std::exp(x - m));
        for (int64_t j = 0; j < Tk; ++j)
          for (int64_t c = 0; c < Dv; ++c)
            out[static_cast<size_t>(((b * H + h) * Tq + i) * Dv + c)] +=
                s[static_cast<size_t>(j)] / z * vv[static_cast<size_t>(((b * Hkv + g) * Tk + j) * Dv + c)];
      }
    }
  return out;
}

SdpaOptions options_of(const Variant& var, int64_t H, int64_t Tk, DType dtype) {
  SdpaOptions o;
  o.causal = var.causal;
  o.window = var.window;
  if (var.alibi) o.alibi_slopes = Tensor::from_vector<double>(alibi_slopes(H), {H}).to(dtype);
  if (!var.pads.empty()) {
    std::vector<int> bits;
    for (int64_t p : var.pads)
      for (int64_t j = 0; j < Tk; ++j) bits.push_back(j >= Tk - p ? 1 : 0);
    o.key_padding_mask = Tensor::from_bools(bits, {static_cast<int64_t>(var.pads.size()), Tk});
  }
  return o;
}

std::string label(const Variant& var, int64_t Hkv, int64_t Tq, int64_t Tk) {
  return str_cat("causal ", var.causal, " window ", var.window, " alibi ", var.alibi, " pads ", var.pads.size(),
                 " Hkv ", Hkv, " Tq ", Tq, " Tk ", Tk);
}

TEST(AttentionVariants, AlibiGroupedHeadsAndWindowsMatchBruteForceOnBothKernels) {
  const std::vector<Variant> variants = {
      {false, 0, true, {}},      {true, 0, true, {}},  {true, 0, true, {0, 3}}, {true, 4, true, {}},
      {true, 5, false, {0, 2}},  {false, 0, false, {1, 0}}, {true, 0, false, {}}};
  int cases = 0;
  for (DType dtype : {DType::F32, DType::F64})
    for (int64_t Hkv : {4, 2, 1})
      for (auto [Tq, Tk] : {std::pair<int64_t, int64_t>{9, 9}, {3, 11}, {1, 7}})
        for (const Variant& var : variants)
          for (SdpaImpl impl : {SdpaImpl::Naive, SdpaImpl::Flash}) {
            const Tensor q = randn({2, 4, Tq, 6}, 1, dtype), k = randn({2, Hkv, Tk, 6}, 2, dtype);
            const Tensor v = randn({2, Hkv, Tk, 5}, 3, dtype);
            const Tensor out = detail::scaled_dot_product_attention_impl(q, k, v, options_of(var, 4, Tk, dtype), impl).out;
            const Tensor want = Tensor::from_vector<double>(reference(q, k, v, var), {2, 4, Tq, 5});
            EXPECT_TRUE(test::all_close(out, want, dtype == DType::F32 ? 2e-5 : 1e-12, 0, label(var, Hkv, Tq, Tk)))
                << (impl == SdpaImpl::Flash ? "flash" : "naive");
            ++cases;
          }
  EXPECT_EQ(cases, 2 * 3 * 3 * 7 * 2);
}

TEST(AttentionVariants, AlibiEqualsTheSameBiasGivenAsAFloatMask) {
  const int64_t H = 3, T = 6;
  const Tensor q = randn({1, H, T, 4}, 4), k = randn({1, H, T, 4}, 5), v = randn({1, H, T, 4}, 6);
  std::vector<double> bias;
  const auto m = alibi_slopes(H);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) bias.push_back(-m[static_cast<size_t>(h)] * std::fabs(static_cast<double>(i - j)));
  SdpaOptions with_mask;
  with_mask.attn_mask = Tensor::from_vector<double>(bias, {1, H, T, T});
  SdpaOptions with_alibi;
  with_alibi.alibi_slopes = Tensor::from_vector<double>(m, {H});
  const Tensor a = scaled_dot_product_attention(q, k, v, with_alibi).out;
  EXPECT_TRUE(test::all_close(a, scaled_dot_product_attention(q, k, v, with_mask).out, 1e-13));
  // Control: without the bias the output differs.
  EXPECT_FALSE(test::all_close(a, scaled_dot_product_attention(q, k, v).out, 1e-3));
  // The weights (naive path) carry the bias too: a far key gets less weight with ALiBi.
  with_alibi.need_weights = true;
  const Tensor w = scaled_dot_product_attention(q, k, v, with_alibi).weights;
  with_mask.need_weights = true;
  EXPECT_TRUE(test::all_close(w, scaled_dot_product_attention(q, k, v, with_mask).weights, 1e-13));
}

// K/V [B, Hkv, T, D] repeated to [B, H, T, D]: head h gets K/V head h / (H / Hkv).
Tensor repeat_heads(const Tensor& x, int64_t H) {
  const int64_t Hkv = x.size(1);
  std::vector<Tensor> heads;
  for (int64_t h = 0; h < H; ++h) heads.push_back(x.slice(1, h / (H / Hkv), h / (H / Hkv) + 1));
  return concat(heads, 1);  // [B, H, T, D]
}

TEST(AttentionVariants, GroupedQueryEqualsMultiHeadOverRepeatedKeyValueHeadsGradientsIncluded) {
  for (int64_t Hkv : {2, 1})
    for (SdpaImpl impl : {SdpaImpl::Naive, SdpaImpl::Flash}) {
      Tensor q = randn({2, 4, 7, 6}, 7).set_requires_grad(true);
      Tensor k = randn({2, Hkv, 7, 6}, 8).set_requires_grad(true);
      Tensor v = randn({2, Hkv, 7, 5}, 9).set_requires_grad(true);
      Tensor q2 = q.clone().set_requires_grad(true), k2 = k.clone().set_requires_grad(true);
      Tensor v2 = v.clone().set_requires_grad(true);
      SdpaOptions o = SdpaOptions::causal_mask();
      o.alibi_slopes = Tensor::from_vector<double>(alibi_slopes(4), {4});
      const Tensor w = randn({2, 4, 7, 5}, 10);
      const Tensor grouped = detail::scaled_dot_product_attention_impl(q, k, v, o, impl).out;
      const Tensor full =
          detail::scaled_dot_product_attention_impl(q2, repeat_heads(k2, 4), repeat_heads(v2, 4), o, impl).out;
      EXPECT_TRUE(test::all_close(grouped, full, 1e-13, 0, "out"));
      sum(mul(grouped, w)).backward();
      sum(mul(full, w)).backward();
      EXPECT_TRUE(test::all_close(q.grad(), q2.grad(), 1e-12, 0, "dq"));
      EXPECT_TRUE(test::all_close(k.grad(), k2.grad(), 1e-12, 0, "dk: the sum over the group"));
      EXPECT_TRUE(test::all_close(v.grad(), v2.grad(), 1e-12, 0, "dv: the sum over the group"));
    }
}

TEST(AttentionVariants, GradcheckAlibiGroupedHeadsAndWindowOnBothKernels) {
  for (SdpaImpl impl : {SdpaImpl::Naive, SdpaImpl::Flash})
    for (int64_t Hkv : {2, 1}) {
      Tensor q = randn({2, 4, 5, 3}, 11).set_requires_grad(true);
      Tensor k = randn({2, Hkv, 6, 3}, 12).set_requires_grad(true);
      Tensor v = randn({2, Hkv, 6, 2}, 13).set_requires_grad(true);
      Variant var{true, 3, true, {0, 1}};
      const SdpaOptions o = options_of(var, 4, 6, DType::F64);
      EXPECT_TRUE(test::gradcheck(
          [&](const std::vector<Tensor>& in) { return detail::scaled_dot_product_attention_impl(in[0], in[1], in[2], o, impl).out; },
          {q, k, v}))
          << (impl == SdpaImpl::Flash ? "flash" : "naive") << " Hkv " << Hkv;
    }
}

// The kernels directly with tiny tiles: flash against naive with ALiBi and grouped heads.
template <class T>
void kernels_agree_with_groups_and_alibi(double tol) {
  const int64_t B = 2, H = 4, Tq = 13, Tk = 17, Dh = 4, Dv = 3;
  for (int64_t Hkv : {4, 2, 1})
    for (bool causal : {false, true}) {
      Rng rng(20);
      auto draw = [&](int64_t n) {
        std::vector<T> x(static_cast<size_t>(n));
        for (T& e : x) e = static_cast<T>(rng.normal());
        return x;
      };
      const auto q = draw(B * H * Tq * Dh), k = draw(B * Hkv * Tk * Dh), v = draw(B * Hkv * Tk * Dv);
      const auto dout = draw(B * H * Tq * Dv);
      std::vector<T> slopes;
      for (double m : alibi_slopes(H)) slopes.push_back(static_cast<T>(m));
      kernels::AttentionMask<T> mask;
      mask.alibi = slopes.data();
      mask.causal = causal;
      const T scale = static_cast<T>(0.5);
      std::vector<T> out_n(static_cast<size_t>(B * H * Tq * Dv)), probs(static_cast<size_t>(B * H * Tq * Tk));
      std::vector<T> work(probs.size()), dq_n(q.size(), T(0)), dk_n(k.size(), T(0)), dv_n(v.size(), T(0));
      const kernels::AttentionDims dims{B, H, Hkv, Tq, Tk, Dh, Dv};
      const kernels::AttentionLayout packed = kernels::AttentionLayout::packed(dims);
      kernels::attention_naive_forward<T>(out_n.data(), probs.data(), nullptr, q.data(), k.data(), v.data(), mask,
                                          nullptr, dims, scale, packed);
      kernels::attention_naive_backward<T>(dq_n.data(), dk_n.data(), dv_n.data(), work.data(), dout.data(),
                                           probs.data(), nullptr, q.data(), k.data(), v.data(), dims, scale, packed,
                                           packed);
      for (kernels::FlashTiles tiles : {kernels::FlashTiles{1, 1}, kernels::FlashTiles{4, 3}, kernels::FlashTiles{64, 64}}) {
        std::vector<T> out_f(out_n.size()), lse(static_cast<size_t>(B * H * Tq));
        std::vector<T> dq_f(q.size(), T(0)), dk_f(k.size(), T(0)), dv_f(v.size(), T(0));
        kernels::attention_flash_forward<T>(out_f.data(), lse.data(), q.data(), k.data(), v.data(), mask, dims,
                                            scale, tiles, packed);
        kernels::attention_flash_backward<T>(dq_f.data(), dk_f.data(), dv_f.data(), dout.data(), out_f.data(),
                                             lse.data(), q.data(), k.data(), v.data(), mask, dims, scale, tiles,
                                             packed, packed);
        for (auto [got, want, name] : {std::tuple{&out_f, &out_n, "out"}, std::tuple{&dq_f, &dq_n, "dq"},
                                       std::tuple{&dk_f, &dk_n, "dk"}, std::tuple{&dv_f, &dv_n, "dv"}})
          for (size_t i = 0; i < got->size(); ++i)
            ASSERT_NEAR((*got)[i], (*want)[i], tol)
                << name << "[" << i << "] Hkv " << Hkv << " causal " << causal << " tiles " << tiles.q << "x" << tiles.k;
      }
    }
}

TEST(AttentionVariantsKernel, FlashMatchesNaiveWithGroupedHeadsAndAlibiAcrossTileEdges) {
  kernels_agree_with_groups_and_alibi<float>(2e-5);
  kernels_agree_with_groups_and_alibi<double>(1e-12);
}

TEST(AttentionVariants, RejectsHeadCountsThatDoNotDivideAndBadSlopes) {
  const Tensor q = randn({1, 4, 3, 2}, 1), kv3 = randn({1, 3, 3, 2}, 2), kv2 = randn({1, 2, 3, 2}, 3);
  EXPECT_THROW(scaled_dot_product_attention(q, kv3, kv3), Error);
  EXPECT_THROW(scaled_dot_product_attention(q, kv2, randn({1, 1, 3, 2}, 4)), Error);  // k and v heads differ
  SdpaOptions o;
  o.alibi_slopes = Tensor::from_vector<double>({0.5, 0.25}, {2});  // [2] for 4 heads
  EXPECT_THROW(scaled_dot_product_attention(q, kv2, kv2, o), Error);
  o.alibi_slopes = Tensor::from_vector<double>({0.5, 0.25, 0.1, 0.1}, {4}).to(DType::F32);  // dtype
  EXPECT_THROW(scaled_dot_product_attention(q, kv2, kv2, o), Error);
  o.alibi_slopes = Tensor::from_vector<double>({0.5, NAN, 0.1, 0.1}, {4});
  EXPECT_THROW(scaled_dot_product_attention(q, kv2, kv2, o), Error);
  try {
    scaled_dot_product_attention(q, kv3, kv3);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("divisor of H"), std::string::npos) << e.what();
  }
}

// ---- RoPE -----------------------------------------------------------------------------------

// x [Dh] at position p rotated pair by pair, in double (the formula of ops/attention.h).
std::vector<double> rotate(const std::vector<double>& x, double p, double theta, bool half) {
  const size_t n = x.size() / 2;
  std::vector<double> y(x.size());
  for (size_t i = 0; i < n; ++i) {
    const size_t a = half ? i : 2 * i, b = half ? i + n : 2 * i + 1;
    const double angle = p / std::pow(theta, 2.0 * static_cast<double>(i) / static_cast<double>(x.size()));
    y[a] = x[a] * std::cos(angle) - x[b] * std::sin(angle);
    y[b] = x[a] * std::sin(angle) + x[b] * std::cos(angle);
  }
  return y;
}

TEST(RotaryEmbedding, RotatesEachPairByPositionTimesThetaToTheMinusTwoIOverDForBothPairings) {
  for (RopePairing pairing : {RopePairing::Interleaved, RopePairing::Half})
    for (DType dtype : {DType::F32, DType::F64}) {
      const Tensor x = randn({2, 3, 5, 8}, 21, dtype);  // [B, H, T, Dh]
      const Tensor pos = Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 7, 9, 0, 100, 4}, {2, 5});
      RopeOptions o;
      o.pairing = pairing;
      o.theta = 500.0;
      const Tensor y = rotary_embedding(x, pos, o);
      std::vector<double> want;
      const auto vx = x.to_vector<double>();
      const auto vp = pos.to_vector<int64_t>();
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t h = 0; h < 3; ++h)
          for (int64_t t = 0; t < 5; ++t) {
            const auto first = vx.begin() + ((b * 3 + h) * 5 + t) * 8;
            const auto r = rotate(std::vector<double>(first, first + 8), static_cast<double>(vp[static_cast<size_t>(b * 5 + t)]),
                                  500.0, pairing == RopePairing::Half);
            want.insert(want.end(), r.begin(), r.end());
          }
      EXPECT_TRUE(test::all_close(y, Tensor::from_vector<double>(want, {2, 3, 5, 8}), dtype == DType::F32 ? 1e-5 : 1e-13, 0,
                                  rope_pairing_name(pairing)));
      // Position 0 is the identity; the norm of every pair is kept.
      EXPECT_TRUE(test::all_close(y.slice(0, 0, 1).slice(2, 0, 1), x.slice(0, 0, 1).slice(2, 0, 1), 1e-6));
    }
}

TEST(RotaryEmbedding, ScoresDependOnlyOnTheOffsetTheSeedTable) {
  // q at position m, k at position n: (3,1), (10,8), (52,50) share one score; (52,49) differs.
  for (RopePairing pairing : {RopePairing::Interleaved, RopePairing::Half}) {
    RopeOptions o;
    o.pairing = pairing;
    const Tensor q = randn({1, 1, 1, 32}, 22), k = randn({1, 1, 1, 32}, 23);
    auto score = [&](int64_t m, int64_t n) {
      const Tensor rq = rotary_embedding(q, Tensor::from_vector<int64_t>({m}, {1}), o);
      const Tensor rk = rotary_embedding(k, Tensor::from_vector<int64_t>({n}, {1}), o);
      return sum(mul(rq, rk)).item();
    };
    const double s31 = score(3, 1);
    EXPECT_NEAR(score(10, 8), s31, 1e-12) << rope_pairing_name(pairing);
    EXPECT_NEAR(score(52, 50), s31, 1e-12) << rope_pairing_name(pairing);
    EXPECT_GT(std::fabs(score(52, 49) - s31), 1e-3) << rope_pairing_name(pairing);
    // Without rotation the score does not see positions at all (control).
    EXPECT_GT(std::fabs(sum(mul(q, k)).item() - s31), 1e-3);
  }
}

TEST(RotaryEmbedding, SharedPositionsEqualPerRowPositionsAndPairingsDiffer) {
  const Tensor x = randn({2, 2, 4, 6}, 24);
  const Tensor shared = Tensor::from_vector<int64_t>({5, 6, 7, 8}, {4});
  const Tensor per_row = Tensor::from_vector<int64_t>({5, 6, 7, 8, 5, 6, 7, 8}, {2, 4});
  EXPECT_TRUE(test::all_close(rotary_embedding(x, shared), rotary_embedding(x, per_row), 0.0));
  RopeOptions half;
  half.pairing = RopePairing::Half;
  EXPECT_FALSE(test::all_close(rotary_embedding(x, shared), rotary_embedding(x, shared, half), 1e-3));
  EXPECT_EQ(parse_rope_pairing("half"), RopePairing::Half);
  EXPECT_EQ(parse_rope_pairing(rope_pairing_name(RopePairing::Interleaved)), RopePairing::Interleaved);
  EXPECT_THROW(parse_rope_pairing("neox"), Error);
}

TEST(RotaryEmbedding, GradientsMatchFiniteDifferencesForBothPairings) {
  for (RopePairing pairing : {RopePairing::Interleaved, RopePairing::Half}) {
    RopeOptions o;
    o.pairing = pairing;
    Tensor x = randn({2, 2, 3, 4}, 25).set_requires_grad(true);
    const Tensor pos = Tensor::from_vector<int64_t>({0, 3, 9, 2, 2, 40}, {2, 3});
    EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>& in) { return rotary_embedding(in[0], pos, o); }, {x}))
        << rope_pairing_name(pairing);
  }
}

TEST(RotaryEmbedding, RejectsOddHeadsNegativePositionsBadShapesAndTheta) {
  EXPECT_THROW(rotary_embedding(randn({1, 1, 2, 3}, 1), Tensor::from_vector<int64_t>({0, 1}, {2})), Error);
  EXPECT_THROW(rotary_embedding(randn({1, 1, 2, 4}, 1), Tensor::from_vector<int64_t>({0, -1}, {2})), Error);
  EXPECT_THROW(rotary_embedding(randn({1, 1, 2, 4}, 1), Tensor::from_vector<int64_t>({0, 1, 2}, {3})), Error);
  EXPECT_THROW(rotary_embedding(randn({1, 1, 2, 4}, 1), Tensor::from_vector<double>({0, 1}, {2})), Error);
  EXPECT_THROW(rotary_embedding(randn({1, 2, 4}, 1), Tensor::from_vector<int64_t>({0, 1}, {2})), Error);
  RopeOptions bad;
  bad.theta = 0.0;
  EXPECT_THROW(rotary_embedding(randn({1, 1, 2, 4}, 1), Tensor::from_vector<int64_t>({0, 1}, {2}), bad), Error);
}

}  // namespace
}  // namespace attn
