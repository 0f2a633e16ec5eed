// Linear attention (Katharopoulos et al. 2020): the O(T) op against its quadratic form written as
// a double loop (with and without the causal mask, bottom-right alignment, key padding), float64
// gradient checks of the op and the layer, cached and recurrent decoding against the full causal
// forward, MultiHeadAttention's parameter names, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attn/nn/attention.h"
#include "attn/nn/linear_attention.h"
#include "attn/ops/ops.h"
#include "nn_reference.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"
#include "support/tolerances.h"

namespace attn::nn {
namespace {

double phi(double x) { return x > 0 ? x + 1 : std::exp(x); }

// The quadratic form: w_ij = phi(q_i) . phi(k_j) over the keys query i sees,
// out_i = sum_j w_ij v_j / sum_j w_ij (zeros when it sees none). q [B, H, Tq, Dk] etc.
Tensor quadratic_reference(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                           const std::vector<int>& padding = {}) {
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), Dk = q.size(3), Tk = k.size(2), Dv = v.size(3);
  const auto qv = q.to_vector<double>(), kv = k.to_vector<double>(), vv = v.to_vector<double>();
  std::vector<double> out(static_cast<size_t>(B * H * Tq * Dv), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        double total = 0;
        std::vector<double> acc(static_cast<size_t>(Dv), 0.0);
        for (int64_t j = 0; j < Tk; ++j) {
          if (causal && j > i + (Tk - Tq)) continue;
          if (!padding.empty() && padding[static_cast<size_t>(b * Tk + j)]) continue;
          double w = 0;
          for (int64_t a = 0; a < Dk; ++a)
            w += phi(qv[static_cast<size_t>(((b * H + h) * Tq + i) * Dk + a)]) *
                 phi(kv[static_cast<size_t>(((b * H + h) * Tk + j) * Dk + a)]);
          total += w;
          for (int64_t c = 0; c < Dv; ++c) acc[static_cast<size_t>(c)] += w * vv[static_cast<size_t>(((b * H + h) * Tk + j) * Dv + c)];
        }
        for (int64_t c = 0; c < Dv; ++c)
          out[static_cast<size_t>(((b * H + h) * Tq + i) * Dv + c)] = total > 0 ? acc[static_cast<size_t>(c)] / total : 0.0;
      }
  return Tensor::from_vector<double>(out, {B, H, Tq, Dv});
}

TEST(LinearAttentionOp, FeatureMapIsEluPlusOne) {
  EXPECT_DOUBLE_EQ(linear_attention_feature(2.0), 3.0);
  EXPECT_DOUBLE_EQ(linear_attention_feature(0.0), 1.0);
  EXPECT_DOUBLE_EQ(linear_attention_feature(-1.5), std::exp(-1.5));
}

TEST(LinearAttentionOp, MatchesItsQuadraticFormWithoutAMask) {
  Tensor q = test::random_tensor({2, 3, 4, 5}, 1);
  Tensor k = test::random_tensor({2, 3, 6, 5}, 2);
  Tensor v = test::random_tensor({2, 3, 6, 3}, 3);
  EXPECT_TRUE(test::all_close(linear_attention(q, k, v), quadratic_reference(q, k, v, false), 1e-12, 0, "non-causal"));
}

TEST(LinearAttentionOp, CausalMatchesTheQuadraticFormUnderACausalMask) {
  Tensor q = test::random_tensor({2, 2, 7, 4}, 4);
  Tensor k = test::random_tensor({2, 2, 7, 4}, 5);
  Tensor v = test::random_tensor({2, 2, 7, 6}, 6);
  LinearAttentionOptions o;
  o.causal = true;
  EXPECT_TRUE(test::all_close(linear_attention(q, k, v, o), quadratic_reference(q, k, v, true), 1e-12, 0, "causal"));
  // Fewer queries than keys: bottom-right alignment, query i sees keys j <= i + 3.
  Tensor q3 = test::random_tensor({2, 2, 4, 4}, 7);
  EXPECT_TRUE(test::all_close(linear_attention(q3, k, v, o), quadratic_reference(q3, k, v, true), 1e-12, 0,
                              "causal, Tq < Tk"));
}

TEST(LinearAttentionOp, CausalOutputDoesNotDependOnLaterKeys) {
  Tensor q = test::random_tensor({1, 2, 6, 4}, 8);
  Tensor k = test::random_tensor({1, 2, 6, 4}, 9);
  Tensor v = test::random_tensor({1, 2, 6, 4}, 10);
  LinearAttentionOptions o;
  o.causal = true;
  Tensor a = linear_attention(q, k, v, o);
  Tensor k2 = k.clone(), v2 = v.clone();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t d = 0; d < 4; ++d) {
      k2.data<double>()[(h * 6 + 4) * 4 + d] += 3.0;  // change position 4 only
      v2.data<double>()[(h * 6 + 4) * 4 + d] -= 2.0;
    }
  Tensor b = linear_attention(q, k2, v2, o);
  EXPECT_TRUE(test::all_close(slice(b, 2, 0, 4), slice(a, 2, 0, 4), 0.0, 0, "positions before 4"));
  EXPECT_GT(test::max_abs_diff(slice(b, 2, 4, 6), slice(a, 2, 4, 6)), 1e-3);
}

TEST(LinearAttentionOp, KeyPaddingRemovesKeysAndAFullyPaddedRowGivesZeros) {
  Tensor q = test::random_tensor({2, 2, 3, 4}, 11);
  Tensor k = test::random_tensor({2, 2, 5, 4}, 12);
  Tensor v = test::random_tensor({2, 2, 5, 3}, 13);
  const std::vector<int> pad = {0, 0, 1, 0, 1,   // batch 0: keys 2 and 4 are padding
                                1, 1, 1, 1, 1};  // batch 1: every key is padding
  LinearAttentionOptions o;
  o.key_padding_mask = Tensor::from_bools(pad, {2, 5});
  Tensor out = linear_attention(q, k, v, o);
  EXPECT_TRUE(test::all_close(out, quadratic_reference(q, k, v, false, pad), 1e-12, 0, "padding"));
  for (double x : slice(out, 0, 1, 2).to_vector<double>()) EXPECT_EQ(x, 0.0);
  o.causal = true;  // and with the causal mask on top
  EXPECT_TRUE(test::all_close(linear_attention(q, k, v, o), quadratic_reference(q, k, v, true, pad), 1e-12, 0,
                              "padding + causal"));
}

TEST(LinearAttentionOp, Float32AgreesWithFloat64) {
  Tensor q = test::random_tensor({2, 2, 9, 8}, 14);
  Tensor k = test::random_tensor({2, 2, 9, 8}, 15);
  Tensor v = test::random_tensor({2, 2, 9, 8}, 16);
  for (bool causal : {false, true}) {
    LinearAttentionOptions o;
    o.causal = causal;
    Tensor f64 = linear_attention(q, k, v, o);
    Tensor f32 = linear_attention(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), o);
    EXPECT_EQ(f32.dtype(), DType::F32);
    EXPECT_TRUE(test::all_close(f32, f64, test::kAbsF32, 1e-5, causal ? "causal" : "non-causal"));
  }
}

TEST(LinearAttentionOp, GradientsMatchFiniteDifferences) {
  for (bool causal : {false, true})
    for (int64_t Tq : {5, 3}) {
      Tensor q = test::random_tensor({2, 2, Tq, 3}, 17).set_requires_grad(true);
      Tensor k = test::random_tensor({2, 2, 5, 3}, 18).set_requires_grad(true);
      Tensor v = test::random_tensor({2, 2, 5, 2}, 19).set_requires_grad(true);
      LinearAttentionOptions o;
      o.causal = causal;
      o.key_padding_mask = Tensor::from_bools({0, 1, 0, 0, 0, 0, 0, 0, 1, 0}, {2, 5});
      EXPECT_TRUE(test::gradcheck(
          [&](const std::vector<Tensor>& in) { return linear_attention(in[0], in[1], in[2], o); }, {q, k, v}))
          << "causal " << causal << ", Tq " << Tq;
    }
}

TEST(LinearAttentionOp, RejectsBadShapesAndDtypes) {
  Tensor q = test::random_tensor({1, 2, 3, 4}, 20);
  Tensor k = test::random_tensor({1, 2, 5, 4}, 21);
  Tensor v = test::random_tensor({1, 2, 5, 3}, 22);
  EXPECT_THROW(linear_attention(reshape(q, {2, 3, 4}), k, v), Error);                 // rank 3
  EXPECT_THROW(linear_attention(q, test::random_tensor({1, 2, 5, 3}, 23), v), Error);  // Dk differs
  EXPECT_THROW(linear_attention(q, k, test::random_tensor({1, 2, 4, 3}, 24)), Error);  // Tk differs
  EXPECT_THROW(linear_attention(q, test::random_tensor({1, 3, 5, 4}, 25), v), Error);  // H differs
  EXPECT_THROW(linear_attention(q.to(DType::F32), k, v), Error);                        // mixed dtypes
  EXPECT_THROW(linear_attention(Tensor::zeros({1, 2, 3, 4}, DType::I64), k, v), Error);
  LinearAttentionOptions o;
  o.key_padding_mask = Tensor::from_bools({0, 0, 0, 0}, {1, 4});  // Tk is 5
  EXPECT_THROW(linear_attention(q, k, v, o), Error);
  o.key_padding_mask = Tensor::zeros({1, 5}, DType::F64);  // not bool
  EXPECT_THROW(linear_attention(q, k, v, o), Error);
}

// ---- the layer --------------------------------------------------------------------------

TEST(LinearAttention, HasMultiHeadAttentionsParameterNamesAndShapes) {
  Rng r1(1), r2(1);
  LinearAttention lin(8, 2, DType::F32, r1);
  MultiHeadAttention mha(8, 2, 0.0, DType::F32, r2);
  std::vector<std::string> a, b;
  for (auto& [n, t] : lin.named_parameters()) a.push_back(n + " " + shape_str(t.shape()));
  for (auto& [n, t] : mha.named_parameters()) b.push_back(n + " " + shape_str(t.shape()));
  EXPECT_EQ(a, b);
  EXPECT_EQ(lin.num_parameters(), 4 * 8 * 8 + 4 * 8);
}

TEST(LinearAttention, MatchesProjectionsAroundTheQuadraticForm) {
  Rng rng(2);
  const int64_t B = 2, T = 5, S = 4, D = 6, H = 2;
  LinearAttention lin(D, H, DType::F64, rng);
  Tensor x = test::random_tensor({B, T, D}, 3);
  Tensor mem = test::random_tensor({B, S, D}, 4);
  const auto w = lin.in_proj_weight().to_vector<double>(), bias = lin.in_proj_bias().to_vector<double>();
  auto project = [&](const Tensor& in, int64_t part) {
    const int64_t n = in.numel() / D;
    const test::Vec wp(w.begin() + part * D * D, w.begin() + (part + 1) * D * D);
    const test::Vec bp(bias.begin() + part * D, bias.begin() + (part + 1) * D);
    Tensor flat = Tensor::from_vector<double>(test::ref_linear(in.to_vector<double>(), n, D, wp, bp, D), in.shape());
    return transpose(reshape(flat, {in.size(0), in.size(1), H, D / H}), 1, 2).contiguous();  // [B, H, T, Dh]
  };
  for (bool causal : {false, true}) {
    const Tensor& kv_in = causal ? x : mem;
    Tensor heads = quadratic_reference(project(x, 0), project(kv_in, 1), project(kv_in, 2), causal);  // [B, H, T, Dh]
    Tensor joined = reshape(transpose(heads, 1, 2).contiguous(), {B * T, D});
    Tensor expected = Tensor::from_vector<double>(
        test::ref_linear(joined.to_vector<double>(), B * T, D, lin.out_proj().weight().to_vector<double>(),
                         lin.out_proj().bias().to_vector<double>(), D),
        {B, T, D});
    AttentionMasks m;
    m.causal = causal;
    EXPECT_TRUE(test::all_close(lin.forward(x, kv_in, kv_in, m), expected, 1e-12, 0,
                                causal ? "causal self-attention" : "cross-attention"));
  }
}

TEST(LinearAttention, GradientsMatchFiniteDifferences) {
  Rng rng(5);
  LinearAttention lin(4, 2, DType::F64, rng);
  Tensor x = test::random_tensor({2, 3, 4}, 6).set_requires_grad(true);
  AttentionMasks m;
  m.causal = true;
  m.key_padding_mask = Tensor::from_bools({0, 0, 0, 0, 0, 1}, {2, 3});
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>& in) { return lin.forward(in[0], in[0], in[0], m); },
                              {x, lin.in_proj_weight(), lin.in_proj_bias(), lin.out_proj().weight(),
                               lin.out_proj().bias()}));
}

TEST(LinearAttention, CachedAndRecurrentStepsEqualTheCausalForward) {
  Rng rng(7);
  const int64_t N = 2, T = 6, D = 8;
  LinearAttention lin(D, 2, DType::F64, rng);
  lin.eval();
  Tensor x = test::random_tensor({N, T, D}, 8);
  NoGradGuard no_grad;
  AttentionMasks m;
  m.causal = true;
  Tensor full = lin.forward(x, x, x, m);  // [N, T, D]
  SelfKV cache;
  LinearAttentionState state;
  for (int64_t t = 0; t < T; ++t) {
    Tensor xt = slice(x, 1, t, t + 1).contiguous();  // [N, 1, D]
    Tensor want = slice(full, 1, t, t + 1);
    EXPECT_TRUE(test::all_close(lin.forward_cached(xt, cache, AttentionMasks{}), want, 1e-12, 0,
                                "cached step " + std::to_string(t)));
    // The step's query over every cached key and value, as cross-attention: the same.
    EXPECT_TRUE(test::all_close(lin.forward_cached(xt, CrossKV{cache.k, cache.v}, Tensor()), want, 1e-12, 0,
                                "cached cross step " + std::to_string(t)));
    EXPECT_TRUE(test::all_close(lin.forward_cached(xt, state), want, 1e-12, 0,
                                "recurrent step " + std::to_string(t)));
  }
  // The first 4 positions in one call, then the last 2 in one call: the same outputs.
  SelfKV chunked;
  EXPECT_TRUE(test::all_close(lin.forward_cached(slice(x, 1, 0, 4), chunked, AttentionMasks{}), slice(full, 1, 0, 4),
                              1e-12, 0, "first chunk"));
  EXPECT_TRUE(test::all_close(lin.forward_cached(slice(x, 1, 4, T), chunked, AttentionMasks{}), slice(full, 1, 4, T),
                              1e-12, 0, "continuation"));
  EXPECT_EQ(chunked.k.size(2), T);
  EXPECT_EQ(cache.k.size(2), T);                                  // the K/V cache grows with T
  EXPECT_EQ(state.kv.shape(), (Shape{N, 2, 4, 4}));                // the state does not
  EXPECT_EQ(state.steps, T);
}

TEST(LinearAttention, RejectsMasksItCannotApplyAndBadInput) {
  Rng rng(9);
  LinearAttention lin(4, 2, DType::F32, rng);
  Tensor x = Tensor::zeros({1, 3, 4});
  AttentionMasks m;
  m.attn_mask = Tensor::from_bools({0, 1, 0, 0, 0, 0, 0, 0, 0}, {3, 3});
  EXPECT_THROW(lin.forward(x, x, x, m), Error);
  AttentionMasks f;
  f.key_padding_mask = Tensor::zeros({1, 3});  // float padding
  EXPECT_THROW(lin.forward(x, x, x, f), Error);
  EXPECT_THROW(lin.forward(Tensor::zeros({1, 3, 5}), x, x), Error);           // wrong D
  EXPECT_THROW(lin.forward(x.to(DType::F64), x, x), Error);                   // wrong dtype
  EXPECT_THROW(lin.forward(x, Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 3, 4})), Error);  // batch differs
  EXPECT_THROW(LinearAttention(6, 4, DType::F32, rng), Error);                // 6 % 4 != 0
  LinearAttentionState state;
  EXPECT_THROW(lin.forward_cached(Tensor::zeros({1, 1, 4}), state), Error);  // grad mode on
}

}  // namespace
}  // namespace attn::nn
