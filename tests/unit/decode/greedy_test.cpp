// Greedy search against a brute-force argmax chain over a mock decoder; finished rows leave the
// batch; per-source limits; ties; a source alone equals the source inside a batch; option errors.
#include "attn/decode/greedy.h"

#include <gtest/gtest.h>

#include "unit/decode/mock_decoder.h"

namespace attn::decode {
namespace {

using test::MockDecoder;

constexpr int64_t kPad = 0, kBos = 1, kEos = 2;

// The argmax chain of the mock's model for one source (PAD removed), up to `limit` tokens.
Hypothesis argmax_chain(const MockDecoder& m, const std::vector<int64_t>& src, int64_t limit, int64_t eos) {
  Hypothesis h;
  std::vector<int64_t> prefix{kBos};
  while (true) {
    const auto lp = m.log_probs(src, prefix);
    int64_t best = 0;
    for (int64_t t = 1; t < static_cast<int64_t>(lp.size()); ++t)
      if (lp[t] > lp[best]) best = t;
    h.logprob += lp[best];
    if (best == eos) {
      h.finished = true;
      break;
    }
    h.tokens.push_back(best);
    prefix.push_back(best);
    if (static_cast<int64_t>(h.tokens.size()) >= limit) break;
  }
  h.score = h.logprob;
  return h;
}

const std::vector<std::vector<int64_t>> kSources = {{3, 4, 5}, {4}, {5, 3, 3, 4, 4}, {3, 3}};

TEST(GreedySearch, EqualsTheArgmaxChainOfEverySource) {
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    MockDecoder m(5, test::hash_logits(5, seed, kEos, 0.3), kPad);
    GreedyOptions o{.bos = kBos, .eos = kEos, .pad = kPad, .max_extra = 4};
    const auto got = greedy_search(m, test::padded_batch(kSources, kPad), o);
    ASSERT_EQ(got.size(), kSources.size());
    for (size_t s = 0; s < kSources.size(); ++s) {
      const Hypothesis want = argmax_chain(m, kSources[s], static_cast<int64_t>(kSources[s].size()) + 4, kEos);
      EXPECT_EQ(got[s].tokens, want.tokens) << "seed " << seed << " source " << s;
      EXPECT_EQ(got[s].finished, want.finished);
      EXPECT_NEAR(got[s].logprob, want.logprob, 1e-12);
      EXPECT_EQ(got[s].score, got[s].logprob);
    }
  }
}

TEST(GreedySearch, FinishedRowsDropOutOfTheBatch) {
  // Source [s] emits EOS after exactly s tokens: the decoder sees B, B-1, ... rows.
  auto logits = [](const std::vector<int64_t>& src, const std::vector<int64_t>& prefix) {
    std::vector<double> l(5, 0.0);
    const bool end = static_cast<int64_t>(prefix.size()) - 1 == src[0];
    l[end ? kEos : 3] = 5.0;
    return l;
  };
  MockDecoder m(5, logits);
  const auto got = greedy_search(m, test::padded_batch({{0}, {1}, {2}, {3}}, -1),
                                 GreedyOptions{.bos = kBos, .eos = kEos, .max_len = 10});
  const std::vector<std::vector<int64_t>> want_trace = {{0, 1, 2, 3}, {1, 2, 3}, {2, 3}, {3}};
  EXPECT_EQ(m.trace, want_trace);
  for (int64_t s = 0; s < 4; ++s) {
    EXPECT_EQ(got[s].tokens, std::vector<int64_t>(static_cast<size_t>(s), 3));
    EXPECT_TRUE(got[s].finished);
  }
}

TEST(GreedySearch, CutsAtTheLimitWithAndWithoutPadding) {
  auto never_eos = [](const std::vector<int64_t>&, const std::vector<int64_t>&) {
    return std::vector<double>{0.0, 0.0, -9.0, 1.0};
  };
  MockDecoder m(4, never_eos, kPad);
  const Tensor src = test::padded_batch({{3, 3, 3}, {3}}, kPad);
  auto got = greedy_search(m, src, GreedyOptions{.bos = kBos, .eos = kEos, .pad = kPad, .max_extra = 2});
  EXPECT_EQ(got[0].tokens.size(), 5u);  // 3 source tokens + 2
  EXPECT_EQ(got[1].tokens.size(), 3u);  // 1 + 2: PAD does not count
  EXPECT_FALSE(got[0].finished);
  EXPECT_EQ(m.rows_of(1), (std::vector<int64_t>{1, 1, 1, 0, 0}));
  got = greedy_search(m, src, GreedyOptions{.bos = kBos, .eos = kEos, .pad = kPad, .max_len = 2});
  EXPECT_EQ(got[0].tokens, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(got[1].tokens, (std::vector<int64_t>{3, 3}));
  // Without max_len/max_extra the limit is the source length + 50 (the paper's).
  got = greedy_search(m, src, GreedyOptions{.bos = kBos, .eos = kEos, .pad = kPad});
  EXPECT_EQ(got[0].tokens.size(), 53u);
  EXPECT_EQ(got[1].tokens.size(), 51u);
}

TEST(GreedySearch, TiesGoToTheLowerTokenIdAndNoEosRunsToTheLimit) {
  auto uniform = [](const std::vector<int64_t>&, const std::vector<int64_t>&) { return std::vector<double>(4, 0.0); };
  MockDecoder m(4, uniform);
  const auto got = greedy_search(m, test::padded_batch({{3}}, -1), GreedyOptions{.bos = kBos, .max_len = 3});
  EXPECT_EQ(got[0].tokens, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_NEAR(got[0].logprob, 3 * std::log(0.25), 1e-12);
  // EOS id 0 wins the tie at once: an empty, finished hypothesis.
  const auto eos0 = greedy_search(m, test::padded_batch({{3}}, -1), GreedyOptions{.bos = kBos, .eos = 0, .max_len = 3});
  EXPECT_TRUE(eos0[0].tokens.empty());
  EXPECT_TRUE(eos0[0].finished);
}

TEST(GreedySearch, ASourceAloneDecodesAsInsideABatch) {
  MockDecoder m(5, test::hash_logits(5, 7, kEos, 0.2), kPad, DType::F32);
  GreedyOptions o{.bos = kBos, .eos = kEos, .pad = kPad, .max_extra = 3};
  const auto batch = greedy_search(m, test::padded_batch(kSources, kPad), o);
  for (size_t s = 0; s < kSources.size(); ++s) {
    const auto alone = greedy_search(m, test::padded_batch({kSources[s]}, kPad), o);
    EXPECT_EQ(alone[0].tokens, batch[s].tokens) << "source " << s;
    EXPECT_EQ(alone[0].logprob, batch[s].logprob);
    EXPECT_EQ(alone[0].finished, batch[s].finished);
  }
}

TEST(GreedySearch, RejectsBadOptionsAndBadDecoderOutput) {
  MockDecoder m(5, test::hash_logits(5, 1), kPad);
  const Tensor src = test::padded_batch({{3, 4}}, kPad);
  EXPECT_THROW(greedy_search(m, src, GreedyOptions{.eos = kEos}), Error);             // bos unset
  EXPECT_THROW(greedy_search(m, src, GreedyOptions{.bos = 5, .eos = kEos}), Error);   // bos >= V
  EXPECT_THROW(greedy_search(m, src, GreedyOptions{.bos = kBos, .eos = 7}), Error);   // eos >= V
  EXPECT_THROW(greedy_search(m, src, GreedyOptions{.bos = kBos, .max_len = 0}), Error);
  EXPECT_THROW(greedy_search(m, src, GreedyOptions{.bos = kBos, .max_extra = -1}), Error);
  try {
    greedy_search(m, src, GreedyOptions{.bos = kBos, .max_len = 5, .max_extra = 5});
    FAIL() << "max_len with max_extra should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_extra"), std::string::npos) << e.what();
  }
  EXPECT_THROW(validate(GreedyOptions{.bos = kBos, .max_len = 5, .max_extra = 5}), Error);
  EXPECT_THROW(greedy_search(m, Tensor::zeros({1, 2}), GreedyOptions{.bos = kBos}), Error);  // f32 ids
  EXPECT_THROW(greedy_search(m, Tensor::from_vector<int64_t>({3, 4}, {2}), GreedyOptions{.bos = kBos}), Error);
  m.bad_shape = true;
  EXPECT_THROW(greedy_search(m, src, GreedyOptions{.bos = kBos}), Error);
  m.bad_shape = false;
  m.nan_output = true;
  EXPECT_THROW(greedy_search(m, src, GreedyOptions{.bos = kBos}), Error);
}

}  // namespace
}  // namespace attn::decode
