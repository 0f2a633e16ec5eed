// Sampling over a mock decoder: reproducible by seed, top_k = 1 and a tiny top_p are greedy,
// frequencies match the (tempered, filtered) distribution of a fixed context, a source's sample
// does not depend on the rest of the batch, and invalid options are errors naming the option.
#include "attn/decode/sampler.h"

#include <gtest/gtest.h>

#include <cmath>

#include "attn/decode/greedy.h"
#include "unit/decode/mock_decoder.h"

namespace attn::decode {
namespace {

using test::MockDecoder;

constexpr int64_t kPad = 0, kBos = 1, kEos = 2;

const std::vector<std::vector<int64_t>> kSources = {{3, 4}, {4, 4, 3}, {3}, {4, 3, 3, 4}, {5}, {6, 5}};

TEST(Sampler, IsReproducibleBySeed) {
  MockDecoder m(6, test::hash_logits(6, 3, kEos, 0.0), kPad);
  const Tensor src = test::padded_batch(kSources, kPad);
  SamplingOptions o{.temperature = 1.3, .top_k = 4, .top_p = 0.95, .seed = 123, .bos = kBos, .eos = kEos,
                    .pad = kPad, .max_extra = 6};
  const auto a = sample(m, src, o);
  const auto b = sample(m, src, o);
  o.seed = 124;
  const auto c = sample(m, src, o);
  bool any_differs = false;
  for (size_t s = 0; s < kSources.size(); ++s) {
    EXPECT_EQ(a[s].tokens, b[s].tokens);
    EXPECT_EQ(a[s].logprob, b[s].logprob);
    any_differs |= a[s].tokens != c[s].tokens;
    // logprob is the model's log-probability of what was drawn.
    std::vector<int64_t> prefix{kBos};
    double lp = 0;
    for (int64_t t : a[s].tokens) {
      lp += m.log_probs(kSources[s], prefix)[t];
      prefix.push_back(t);
    }
    if (a[s].finished) lp += m.log_probs(kSources[s], prefix)[kEos];
    EXPECT_NEAR(a[s].logprob, lp, 1e-12);
  }
  EXPECT_TRUE(any_differs) << "another seed should change some sample";
}

TEST(Sampler, TopKOneAndATinyTopPAreGreedy) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    MockDecoder m(6, test::hash_logits(6, seed, kEos, 0.4), kPad);
    const Tensor src = test::padded_batch(kSources, kPad);
    const auto greedy = greedy_search(m, src, GreedyOptions{.bos = kBos, .eos = kEos, .pad = kPad, .max_extra = 5});
    const auto k1 = sample(m, src, SamplingOptions{.temperature = 3.0, .top_k = 1, .seed = seed, .bos = kBos,
                                                   .eos = kEos, .pad = kPad, .max_extra = 5});
    const auto p0 = sample(m, src, SamplingOptions{.temperature = 0.7, .top_p = 1e-9, .seed = seed, .bos = kBos,
                                                   .eos = kEos, .pad = kPad, .max_extra = 5});
    for (size_t s = 0; s < kSources.size(); ++s) {
      EXPECT_EQ(k1[s].tokens, greedy[s].tokens) << "top_k 1, source " << s;
      EXPECT_EQ(p0[s].tokens, greedy[s].tokens) << "top_p 1e-9, source " << s;
      EXPECT_EQ(k1[s].finished, greedy[s].finished);
      EXPECT_NEAR(k1[s].logprob, greedy[s].logprob, 1e-12);
    }
  }
}

// Draws one token for each of n identical sources from the fixed distribution p and returns
// the frequency of every token.
std::vector<double> frequencies(const std::vector<double>& p, SamplingOptions o, int64_t n) {
  auto fixed = [p](const std::vector<int64_t>&, const std::vector<int64_t>&) {
    std::vector<double> l;
    for (double x : p) l.push_back(std::log(x));
    return l;
  };
  MockDecoder m(static_cast<int64_t>(p.size()), fixed);
  o.bos = 0;
  o.max_len = 1;
  const auto got = sample(m, Tensor::zeros({n, 1}, DType::I64), o);
  std::vector<double> f(p.size(), 0.0);
  for (const auto& h : got) f[h.tokens.at(0)] += 1.0 / static_cast<double>(n);
  return f;
}

// Frequencies within 5 standard errors of the expected probabilities (which sum to 1).
void expect_frequencies(const std::vector<double>& f, std::vector<double> want, int64_t n, const std::string& what) {
  double z = 0;
  for (double w : want) z += w;
  for (size_t t = 0; t < want.size(); ++t) {
    const double q = want[t] / z;
    const double se = std::sqrt(std::max(q * (1 - q), 1e-12) / static_cast<double>(n));
    EXPECT_NEAR(f[t], q, 5 * se + 1e-12) << what << " token " << t;
  }
}

TEST(Sampler, FrequenciesFollowTheFilteredDistribution) {
  const std::vector<double> p = {0.1, 0.05, 0.25, 0.2, 0.4};
  const int64_t n = 20000;
  expect_frequencies(frequencies(p, {.seed = 1}, n), p, n, "plain");
  std::vector<double> sharp, flat;  // p^(1/T)
  for (double x : p) sharp.push_back(std::pow(x, 2.0)), flat.push_back(std::pow(x, 0.5));
  expect_frequencies(frequencies(p, {.temperature = 0.5, .seed = 2}, n), sharp, n, "T 0.5");
  expect_frequencies(frequencies(p, {.temperature = 2.0, .seed = 3}, n), flat, n, "T 2");
  expect_frequencies(frequencies(p, {.top_k = 2, .seed = 4}, n), {0, 0, 0.25, 0, 0.4}, n, "top_k 2");
  // Nucleus: 0.4 < 0.6 <= 0.4 + 0.25, so {4, 2} are kept.
  expect_frequencies(frequencies(p, {.top_p = 0.6, .seed = 5}, n), {0, 0, 0.25, 0, 0.4}, n, "top_p 0.6");
  expect_frequencies(frequencies(p, {.top_p = 0.66, .seed = 6}, n), {0, 0, 0.25, 0.2, 0.4}, n, "top_p 0.66");
  // top_k first, then top_p on the renormalised survivors: {4, 2, 3} -> 0.4/0.85 < 0.5 <= 0.65/0.85.
  expect_frequencies(frequencies(p, {.top_k = 3, .top_p = 0.5, .seed = 7}, n), {0, 0, 0.25, 0, 0.4}, n,
                     "top_k 3 then top_p 0.5");
  // top_k beyond V keeps everything and draws exactly what top_k = 0 draws.
  EXPECT_EQ(frequencies(p, {.top_k = 9, .seed = 8}, 500), frequencies(p, {.seed = 8}, 500));
}

TEST(Sampler, ASourceSampleDoesNotDependOnTheRestOfTheBatch) {
  // Source [9] ends at once; [7] runs to the limit. Source 0's sample is the same beside either.
  auto base = test::hash_logits(6, 17, kEos, 0.0);
  auto logits = [base](const std::vector<int64_t>& src, const std::vector<int64_t>& prefix) {
    auto l = base(src, prefix);
    if (src[0] == 9) l[kEos] += 40.0;
    if (src[0] == 7) l[kEos] -= 40.0;
    return l;
  };
  MockDecoder m(6, logits, kPad);
  SamplingOptions o{.seed = 5, .bos = kBos, .eos = kEos, .pad = kPad, .max_extra = 8};
  const auto a = sample(m, test::padded_batch({{3, 4}, {9}}, kPad), o);
  EXPECT_EQ(m.rows_of(1).at(0), 1);
  EXPECT_EQ(m.rows_of(1).at(1), 0);  // the finished source left the batch
  const auto b = sample(m, test::padded_batch({{3, 4}, {7}}, kPad), o);
  EXPECT_EQ(a[0].tokens, b[0].tokens);
  EXPECT_EQ(a[0].logprob, b[0].logprob);
  EXPECT_EQ(b[1].tokens.size(), 9u);  // 1 + 8, never finished
}

TEST(Sampler, InvalidOptionsAreErrorsNamingTheOption) {
  MockDecoder m(5, test::hash_logits(5, 1), kPad);
  const Tensor src = test::padded_batch({{3, 4}}, kPad);
  auto expect_error = [&](const SamplingOptions& o, const std::string& names) {
    try {
      sample(m, src, o);
      ADD_FAILURE() << "expected an error naming " << names;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
  };
  expect_error({.temperature = 0.0, .bos = kBos}, "greedy");
  expect_error({.temperature = 0.0, .bos = kBos}, "temperature");
  expect_error({.temperature = -1.0, .bos = kBos}, "temperature");
  expect_error({.temperature = NAN, .bos = kBos}, "temperature");
  expect_error({.temperature = INFINITY, .bos = kBos}, "temperature");
  expect_error({.top_k = -1, .bos = kBos}, "top_k");
  expect_error({.top_p = 0.0, .bos = kBos}, "top_p");
  expect_error({.top_p = 1.5, .bos = kBos}, "top_p");
  expect_error({.top_p = NAN, .bos = kBos}, "top_p");
  expect_error({.bos = kBos, .max_len = 3, .max_extra = 3}, "max_len");
  expect_error({.bos = 9}, "bos");
  expect_error({.bos = kBos, .eos = -2}, "eos");
  EXPECT_THROW(validate(SamplingOptions{.temperature = 0.0}), Error);
  EXPECT_NO_THROW(validate(SamplingOptions{}));
}

}  // namespace
}  // namespace attn::decode
