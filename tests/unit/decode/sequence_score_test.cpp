// decode/sequence_score: how one output scores against its reference (the tokens, then the EOS
// position), the counts summed over outputs, and the greedy limit scoring needs. Training's
// validation and `attn eval` both count with these.
#include "attn/decode/sequence_score.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace attn::decode {
namespace {

TEST(SequenceScore, CountsTokensAndTheEosPosition) {
  const std::vector<int64_t> ref = {5, 6, 7};
  auto hyp = [](std::vector<int64_t> t, bool finished) {
    Hypothesis h;
    h.tokens = std::move(t);
    h.finished = finished;
    return h;
  };
  SequenceScore s = score_sequence(ref, hyp({5, 6, 7}, true));
  EXPECT_EQ(s.positions, 4);
  EXPECT_EQ(s.right, 4);
  EXPECT_TRUE(s.exact);
  s = score_sequence(ref, hyp({5, 6}, true));  // too short: misses 7, and EOS came early
  EXPECT_EQ(s.right, 2);
  EXPECT_FALSE(s.exact);
  s = score_sequence(ref, hyp({5, 6, 7, 8}, true));  // too long: the EOS position holds 8
  EXPECT_EQ(s.right, 3);
  EXPECT_FALSE(s.exact);
  s = score_sequence(ref, hyp({5, 6, 7}, false));  // cut at the limit without EOS
  EXPECT_EQ(s.right, 3);
  EXPECT_FALSE(s.exact);
  s = score_sequence(ref, hyp({5, 9, 7}, true));
  EXPECT_EQ(s.right, 3);
  EXPECT_FALSE(s.exact);
}

TEST(SequenceScore, AccuracyCountsSumScoresAndTheLimitIsTheLongestReferencePlusEos) {
  AccuracyCounts c;
  c.add({4, 4, true});
  c.add({1, 3, false});
  EXPECT_EQ(c.right, 5);
  EXPECT_EQ(c.positions, 7);
  EXPECT_EQ(c.exact, 1);
  EXPECT_EQ(c.sequences, 2);
  EXPECT_DOUBLE_EQ(c.token_acc(), 5.0 / 7.0);
  EXPECT_DOUBLE_EQ(c.exact_acc(), 0.5);
  EXPECT_EQ(scoring_max_len({{1, 2}, {3, 4, 5, 6}, {}}), 5);
  EXPECT_EQ(scoring_max_len({{}}), 1);
}

}  // namespace
}  // namespace attn::decode
