// MixtureOfExperts: the dispatched layer against a dense reference that runs every expert on every
// token and weights it by the router (forward and gradients), float64 finite differences of the
// output and of the load-balancing loss, the loss against a hand computation, capacity drops in
// priority order, experts without tokens not running, parameter names, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "attn/nn/moe.h"
#include "attn/ops/ops.h"
#include "nn_reference.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"
#include "support/tolerances.h"

namespace attn::nn {
namespace {

MoEOptions small_options(DType dtype = DType::F64) {
  MoEOptions o;
  o.d_model = 6;
  o.d_ff = 8;
  o.n_experts = 4;
  o.top_k = 2;
  o.dtype = dtype;
  return o;
}

// The dense reference: every expert on every token, combined with gates G [N, E] that are zero
// outside each token's top-k (chosen here on the logits, ties to the lower index) and outside the
// routes kept under capacity (first choices before second choices, token order within).
Tensor dense_reference(MixtureOfExperts& moe, const Tensor& x) {
  const MoEOptions& o = moe.options();
  const int64_t D = o.d_model, E = o.n_experts, k = o.top_k, N = x.numel() / D;
  Tensor x2 = reshape(x, {N, D});
  Tensor logits = moe.router().forward(x2);  // [N, E]
  const auto lv = logits.to_vector<double>();
  std::vector<int64_t> choice(static_cast<size_t>(N * k));
  for (int64_t t = 0; t < N; ++t) {
    std::vector<int64_t> idx(static_cast<size_t>(E));
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
      return lv[static_cast<size_t>(t * E + a)] > lv[static_cast<size_t>(t * E + b)];
    });
    for (int64_t c = 0; c < k; ++c) choice[static_cast<size_t>(t * k + c)] = idx[static_cast<size_t>(c)];
  }
  const int64_t cap = moe.capacity(N);
  std::vector<double> chosen(static_cast<size_t>(N * E), 0.0), kept(static_cast<size_t>(N * E), 0.0);
  std::vector<int64_t> load(static_cast<size_t>(E), 0);
  for (int64_t c = 0; c < k; ++c)
    for (int64_t t = 0; t < N; ++t) {
      const int64_t e = choice[static_cast<size_t>(t * k + c)];
      chosen[static_cast<size_t>(t * E + e)] = 1.0;
      if (load[static_cast<size_t>(e)] < cap) {
        ++load[static_cast<size_t>(e)];
        kept[static_cast<size_t>(t * E + e)] = 1.0;
      }
    }
  Tensor chosen_t = Tensor::from_vector<double>(chosen, {N, E}).to(x.dtype());
  Tensor gates;  // [N, E]
  if (o.normalize_gates) {
    std::vector<double> bias(chosen.size());
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = chosen[i] > 0 ? 0.0 : -std::numeric_limits<double>::infinity();
    gates = softmax(add(logits, Tensor::from_vector<double>(bias, {N, E}).to(x.dtype())));
  } else {
    gates = mul(softmax(logits), chosen_t);
  }
  gates = mul(gates, Tensor::from_vector<double>(kept, {N, E}).to(x.dtype()));
  Tensor out;
  for (int64_t e = 0; e < E; ++e) {
    Tensor term = mul(slice(gates, 1, e, e + 1), moe.expert(e).forward(x2));  // [N, 1] * [N, D]
    out = out.defined() ? add(out, term) : term;
  }
  return reshape(out, x.shape());
}

// Every parameter's gradient after backward of sum(f * w), for one fixed random w.
std::vector<Tensor> gradients(MixtureOfExperts& moe, const Tensor& x, const Tensor& y, const Tensor& w) {
  moe.zero_grad();
  x.zero_grad();
  sum(mul(y, w)).backward();
  std::vector<Tensor> g = {x.grad()};
  for (const Tensor& p : moe.parameters()) g.push_back(p.grad());
  return g;
}

TEST(MixtureOfExperts, MatchesADenseReferenceThatRunsEveryExpert) {
  for (DType dtype : {DType::F64, DType::F32})
    for (bool normalize : {true, false})
      for (int64_t k : {1, 2, 3}) {
        MoEOptions o = small_options(dtype);
        o.normalize_gates = normalize;
        o.top_k = k;
        Rng rng(1);
        MixtureOfExperts moe(o, rng);
        Tensor x = test::random_tensor({2, 5, 6}, 2, dtype);
        NoGradGuard no_grad;
        const double tol = dtype == DType::F64 ? 1e-12 : test::kAbsF32;
        EXPECT_TRUE(test::all_close(moe.forward(x), dense_reference(moe, x), tol, 0,
                                    "k " + std::to_string(k) + (normalize ? ", renormalised" : ", raw")));
        EXPECT_EQ(moe.last_routing().dropped, 0);
      }
}

TEST(MixtureOfExperts, GradientsEqualTheDenseReferences) {
  for (bool normalize : {true, false}) {
    MoEOptions o = small_options();
    o.normalize_gates = normalize;
    o.capacity_factor = 0.75;  // some routes are dropped, in both
    Rng rng(3);
    MixtureOfExperts moe(o, rng);
    Tensor x = test::random_tensor({2, 6, 6}, 4).set_requires_grad(true);
    Tensor w = test::random_tensor({2, 6, 6}, 5);
    Tensor y = moe.forward(x);
    ASSERT_GT(moe.last_routing().dropped, 0);
    const auto sparse = gradients(moe, x, y, w);
    const auto dense = gradients(moe, x, dense_reference(moe, x), w);
    ASSERT_EQ(sparse.size(), dense.size());
    const auto names = moe.named_parameters();
    for (size_t i = 0; i < sparse.size(); ++i) {
      const std::string what = i == 0 ? "x" : names[i - 1].first;
      if (!sparse[i].defined()) {  // an expert with no kept token: zero in the dense reference
        for (double v : dense[i].to_vector<double>()) EXPECT_EQ(v, 0.0) << what;
        continue;
      }
      EXPECT_TRUE(test::all_close(sparse[i], dense[i], 1e-12, 0, what));
    }
  }
}

TEST(MixtureOfExperts, GradientsMatchFiniteDifferences) {
  for (bool normalize : {true, false}) {
    MoEOptions o = small_options();
    o.d_model = 3;
    o.d_ff = 4;
    o.n_experts = 3;
    o.normalize_gates = normalize;
    o.activation = Activation::GELU;
    Rng rng(6);
    MixtureOfExperts moe(o, rng);
    Tensor x = test::random_tensor({2, 4, 3}, 7).set_requires_grad(true);
    {
      NoGradGuard no_grad;
      moe.forward(x);
    }
    for (int64_t n : moe.last_routing().expert_tokens) ASSERT_GT(n, 0);  // every expert is exercised
    std::vector<Tensor> inputs = {x};
    for (const Tensor& p : moe.parameters()) inputs.push_back(p);
    EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>& in) { return moe.forward(in[0]); }, inputs))
        << (normalize ? "renormalised" : "raw");
    EXPECT_TRUE(test::gradcheck(
        [&](const std::vector<Tensor>& in) {
          moe.forward(in[0]);
          return moe.aux_loss();
        },
        {x, moe.router().weight()}))
        << "aux loss";
  }
}

TEST(MixtureOfExperts, LoadBalancingLossMatchesAHandComputation) {
  // Router = identity (D = E = 3), so the logits are the tokens themselves.
  MoEOptions o = small_options();
  o.d_model = 3;
  o.n_experts = 3;
  o.top_k = 1;
  Rng rng(8);
  MixtureOfExperts moe(o, rng);
  moe.router().weight().copy_from(Tensor::from_vector<double>({1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3}));
  const std::vector<double> logits = {2.0, 0.0, -1.0,   // -> expert 0
                                      0.5, 1.5, 0.0,    // -> expert 1
                                      3.0, 1.0, 1.0,    // -> expert 0
                                      0.0, 0.0, 0.25};  // -> expert 2
  moe.forward(Tensor::from_vector<double>(logits, {1, 4, 3}));
  double P[3] = {0, 0, 0};
  for (int t = 0; t < 4; ++t) {
    const double* r = &logits[static_cast<size_t>(3 * t)];
    const double z = std::exp(r[0]) + std::exp(r[1]) + std::exp(r[2]);
    for (int e = 0; e < 3; ++e) P[e] += std::exp(r[e]) / z / 4.0;
  }
  const double f[3] = {2.0 / 4, 1.0 / 4, 1.0 / 4};
  const double expected = 3.0 * (f[0] * P[0] + f[1] * P[1] + f[2] * P[2]);
  EXPECT_NEAR(moe.aux_loss().item(), expected, 1e-14);
  EXPECT_EQ(moe.last_routing().expert, (std::vector<int64_t>{0, 1, 0, 2}));
  for (int e = 0; e < 3; ++e) {
    EXPECT_NEAR(moe.last_routing().fraction[static_cast<size_t>(e)], f[e], 1e-15);
    EXPECT_NEAR(moe.last_routing().mean_prob[static_cast<size_t>(e)], P[e], 1e-15);
  }
  // Balanced routing with uniform probabilities gives 1; everything on one expert gives E.
  EXPECT_NEAR(load_balancing_loss(Tensor::full({6, 3}, 1.0 / 3, DType::F64), {1.0 / 3, 1.0 / 3, 1.0 / 3}).item(),
              1.0, 1e-15);
  EXPECT_NEAR(load_balancing_loss(Tensor::from_vector<double>({1, 0, 0, 1, 0, 0}, {2, 3}), {1, 0, 0}).item(), 3.0,
              1e-15);
}

TEST(MixtureOfExperts, CapacityDropsRoutesFirstChoicesFirst) {
  // E = 2, D = 2, router = identity: tokens 0, 1 prefer expert 0 then 1; tokens 2, 3 prefer 1 then 0.
  MoEOptions o = small_options();
  o.d_model = 2;
  o.n_experts = 2;
  o.top_k = 2;
  o.capacity_factor = 0.5;  // C = ceil(0.5 * 4 * 2 / 2) = 2
  Rng rng(9);
  MixtureOfExperts moe(o, rng);
  moe.router().weight().copy_from(Tensor::from_vector<double>({1, 0, 0, 1}, {2, 2}));
  Tensor x = Tensor::from_vector<double>({1, 0, 2, 0, 0, 1, 0, 2}, {4, 2});
  NoGradGuard no_grad;
  Tensor y = moe.forward(x);
  const MoERouting& r = moe.last_routing();
  EXPECT_EQ(moe.capacity(4), 2);
  EXPECT_EQ(r.capacity, 2);
  // Every first choice fits (2 per expert); every second choice finds its expert full.
  EXPECT_EQ(r.kept, (std::vector<uint8_t>{1, 0, 1, 0, 1, 0, 1, 0}));
  EXPECT_EQ(r.dropped, 4);
  EXPECT_EQ(r.expert_tokens, (std::vector<int64_t>{2, 2}));
  // A kept route contributes gate * expert(x), the dropped one nothing (gates not renormalised).
  Tensor e0 = moe.expert(0).forward(x), e1 = moe.expert(1).forward(x);
  for (int64_t t = 0; t < 4; ++t) {
    const double g = r.gate[static_cast<size_t>(2 * t)];
    EXPECT_LT(g, 1.0);
    Tensor want = scale(slice(t < 2 ? e0 : e1, 0, t, t + 1), g);
    EXPECT_TRUE(test::all_close(slice(y, 0, t, t + 1), want, 1e-12, 0, "token " + std::to_string(t)));
  }
}

TEST(MixtureOfExperts, TokensOverCapacityOutputZerosAndUnlimitedCapacityKeepsAll) {
  MoEOptions o = small_options();
  o.d_model = 2;
  o.top_k = 1;
  o.capacity_factor = 1.0;  // C = ceil(8 / 4) = 2
  Rng rng(10);
  MixtureOfExperts moe(o, rng);
  moe.router().weight().copy_from(Tensor::from_vector<double>({1, 1, 0, 0, 0, 0, 0, 0}, {4, 2}));
  Tensor x = test::random_tensor({8, 2}, 11);
  for (int64_t i = 0; i < 16; ++i) x.data<double>()[i] = std::fabs(x.data<double>()[i]) + 0.1;  // all to expert 0
  NoGradGuard no_grad;
  Tensor y = moe.forward(x);
  EXPECT_EQ(moe.last_routing().dropped, 6);
  EXPECT_TRUE(test::all_close(slice(y, 0, 0, 2), moe.expert(0).forward(slice(x, 0, 0, 2)), 1e-12, 0, "kept"));
  for (double v : slice(y, 0, 2, 8).to_vector<double>()) EXPECT_EQ(v, 0.0);
  MoEOptions unlimited = o;
  unlimited.capacity_factor = 0.0;
  Rng rng2(10);
  MixtureOfExperts all(unlimited, rng2);
  all.router().weight().copy_from(moe.router().weight());
  all.forward(x);
  EXPECT_EQ(all.last_routing().dropped, 0);
  EXPECT_EQ(all.last_routing().expert_tokens, (std::vector<int64_t>{8, 0, 0, 0}));
}

TEST(MixtureOfExperts, ExpertsWithoutTokensDoNotRun) {
  MoEOptions o = small_options();
  o.d_model = 2;
  o.top_k = 1;
  Rng rng(12);
  MixtureOfExperts moe(o, rng);
  moe.router().weight().copy_from(Tensor::from_vector<double>({0, 0, 0, 0, 1, 1, 0, 0}, {4, 2}));
  Tensor x = Tensor::full({3, 2}, 0.5, DType::F64).set_requires_grad(true);  // every token -> expert 2
  sum(moe.forward(x)).backward();
  for (int64_t e = 0; e < 4; ++e)
    EXPECT_EQ(moe.expert(e).linear1()->weight().grad().defined(), e == 2) << "expert " << e;
  // With top_k = 1 and renormalised gates the gate is always 1: the output gives the router a
  // gradient of exactly zero (it learns through aux_loss(), as documented).
  for (double g : moe.router().weight().grad().to_vector<double>()) EXPECT_EQ(g, 0.0);
}

TEST(MixtureOfExperts, KeepsTheInputShapeAndUsesTheseNames) {
  MoEOptions o = small_options(DType::F32);
  Rng rng(13);
  MixtureOfExperts moe(o, rng);
  EXPECT_EQ(moe.forward(Tensor::zeros({3, 2, 4, 6})).shape(), (Shape{3, 2, 4, 6}));
  EXPECT_EQ(moe.forward(Tensor::zeros({6})).shape(), (Shape{6}));
  const auto named = moe.named_parameters();
  ASSERT_EQ(named.size(), 1u + 4u * 4u);
  EXPECT_EQ(named[0].first + " " + shape_str(named[0].second.shape()), "router.weight [4, 6]");
  EXPECT_EQ(named[1].first + " " + shape_str(named[1].second.shape()), "experts.0.linear1.weight [8, 6]");
  EXPECT_EQ(named.back().first, "experts.3.linear2.bias");
}

TEST(MixtureOfExperts, RejectsBadOptionsAndInput) {
  Rng rng(14);
  auto with = [](auto change) {
    MoEOptions o = small_options();
    change(o);
    return o;
  };
  EXPECT_THROW(MixtureOfExperts(with([](MoEOptions& o) { o.top_k = 5; }), rng), Error);
  EXPECT_THROW(MixtureOfExperts(with([](MoEOptions& o) { o.top_k = 0; }), rng), Error);
  EXPECT_THROW(MixtureOfExperts(with([](MoEOptions& o) { o.n_experts = 0; }), rng), Error);
  EXPECT_THROW(MixtureOfExperts(with([](MoEOptions& o) { o.d_ff = 0; }), rng), Error);
  EXPECT_THROW(MixtureOfExperts(with([](MoEOptions& o) { o.dtype = DType::I64; }), rng), Error);
  EXPECT_THROW(MixtureOfExperts(with([](MoEOptions& o) { o.capacity_factor = std::nan(""); }), rng), Error);
  MixtureOfExperts moe(small_options(), rng);
  EXPECT_THROW(moe.forward(Tensor::zeros({2, 5}, DType::F64)), Error);  // D is 6
  EXPECT_THROW(moe.forward(Tensor::zeros({2, 6}, DType::F32)), Error);  // parameters are f64
  EXPECT_THROW(moe.forward(Tensor::zeros({0, 6}, DType::F64)), Error);  // no token
  EXPECT_THROW(moe.expert(4), Error);
  EXPECT_THROW(load_balancing_loss(Tensor::zeros({2, 3}, DType::F64), {0.5, 0.5}), Error);
}

}  // namespace
}  // namespace attn::nn
