// Beam search against two brute-force references over a mock decoder: the exhaustive list of all
// sequences up to the limit (exact whenever the beam can hold every prefix), and a naive,
// unbatched beam search that runs to the limit without early stopping (any beam). Also: beam 1
// is greedy, finished sources drop out, batch = alone, ties, penalties and option errors.
#include "attn/decode/beam_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "attn/decode/greedy.h"
#include "unit/decode/mock_decoder.h"

namespace attn::decode {
namespace {

using test::MockDecoder;

constexpr int64_t kPad = 0, kBos = 1, kEos = 2;

// The penalties, written out again rather than calling the library.
double penalty(LengthPenalty kind, double alpha, int64_t len) {
  return kind == LengthPenalty::Gnmt ? std::pow((5.0 + static_cast<double>(len)) / 6.0, alpha)
                                     : std::pow(static_cast<double>(len), alpha);
}

bool ranks_before(const Hypothesis& a, const Hypothesis& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.tokens != b.tokens) return a.tokens < b.tokens;
  return a.finished && !b.finished;
}

// Every sequence the search could return: non-EOS tokens then EOS within `limit` tokens, or
// `limit` non-EOS tokens (cut). Ranked by score; the best n_best.
std::vector<Hypothesis> exhaustive(const MockDecoder& m, const std::vector<int64_t>& src, int64_t limit,
                                   const BeamOptions& o) {
  std::vector<Hypothesis> all;
  std::function<void(std::vector<int64_t>&, double)> walk = [&](std::vector<int64_t>& tokens, double lp) {
    std::vector<int64_t> prefix{kBos};
    prefix.insert(prefix.end(), tokens.begin(), tokens.end());
    const auto next = m.log_probs(src, prefix);
    const int64_t len = static_cast<int64_t>(tokens.size()) + 1;
    for (int64_t t = 0; t < m.vocab_size(); ++t) {
      const double l = lp + next[t];
      if (t == o.eos) {
        all.push_back({tokens, l, l / penalty(o.length_penalty, o.alpha, len), true});
      } else if (len == limit) {
        std::vector<int64_t> cut = tokens;
        cut.push_back(t);
        all.push_back({cut, l, l / penalty(o.length_penalty, o.alpha, len), false});
      } else {
        tokens.push_back(t);
        walk(tokens, l);
        tokens.pop_back();
      }
    }
  };
  std::vector<int64_t> empty;
  walk(empty, 0.0);
  std::sort(all.begin(), all.end(), ranks_before);
  all.resize(std::min<size_t>(all.size(), static_cast<size_t>(o.n_best)));
  return all;
}

// Beam search the obvious way: one source, all candidates sorted, every finished hypothesis
// kept, always run to the limit.
std::vector<Hypothesis> naive_beam(const MockDecoder& m, const std::vector<int64_t>& src, int64_t limit,
                                   const BeamOptions& o) {
  struct Cand {
    double lp;
    size_t parent;
    int64_t token;
  };
  std::vector<std::pair<std::vector<int64_t>, double>> live = {{{}, 0.0}};
  std::vector<Hypothesis> finished;
  for (int64_t t = 1; t <= limit && !live.empty(); ++t) {
    std::vector<Cand> cands;
    for (size_t i = 0; i < live.size(); ++i) {
      std::vector<int64_t> prefix{kBos};
      prefix.insert(prefix.end(), live[i].first.begin(), live[i].first.end());
      const auto next = m.log_probs(src, prefix);
      for (int64_t v = 0; v < m.vocab_size(); ++v) cands.push_back({live[i].second + next[v], i, v});
    }
    std::sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
      if (a.lp != b.lp) return a.lp > b.lp;
      if (a.parent != b.parent) return a.parent < b.parent;
      return a.token < b.token;
    });
    cands.resize(std::min<size_t>(cands.size(), static_cast<size_t>(2 * o.beam)));
    std::vector<std::pair<std::vector<int64_t>, double>> next_live;
    for (size_t r = 0; r < cands.size(); ++r) {
      const Cand& c = cands[r];
      if (c.token == o.eos) {
        if (static_cast<int64_t>(r) < o.beam)  // fairseq: only EOS within the top `beam` finishes
          finished.push_back({live[c.parent].first, c.lp, c.lp / penalty(o.length_penalty, o.alpha, t), true});
      } else if (static_cast<int64_t>(next_live.size()) < o.beam) {
        auto tokens = live[c.parent].first;
        tokens.push_back(c.token);
        next_live.push_back({tokens, c.lp});
      }
    }
    live = std::move(next_live);
    if (t == limit)
      for (const auto& [tokens, lp] : live)
        finished.push_back({tokens, lp, lp / penalty(o.length_penalty, o.alpha, limit), false});
  }
  std::sort(finished.begin(), finished.end(), ranks_before);
  finished.resize(std::min<size_t>(finished.size(), static_cast<size_t>(o.n_best)));
  return finished;
}

void expect_same(const std::vector<Hypothesis>& got, const std::vector<Hypothesis>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << what << " rank " << i;
    EXPECT_EQ(got[i].finished, want[i].finished) << what << " rank " << i;
    EXPECT_NEAR(got[i].logprob, want[i].logprob, 1e-12) << what << " rank " << i;
    EXPECT_NEAR(got[i].score, want[i].score, 1e-12) << what << " rank " << i;
  }
}

const std::vector<std::vector<int64_t>> kSources = {{3, 4}, {4, 4, 3}, {3}, {4, 3, 3, 4}};

struct PenaltyCase {
  LengthPenalty kind;
  double alpha;
};
const std::vector<PenaltyCase> kPenalties = {
    {LengthPenalty::Gnmt, 0.6}, {LengthPenalty::Gnmt, 2.0}, {LengthPenalty::Power, 1.0}, {LengthPenalty::Power, 0.0}};

TEST(BeamSearch, EqualsExhaustiveSearchWhenTheBeamHoldsEveryCandidate) {
  int checked = 0;
  for (int64_t v : {3, 4, 5})
    for (int64_t beam = 1; beam <= 12; ++beam) {
      // The longest limit L with V (V - 1)^(L - 2) <= beam: before the last step every candidate
      // ranks within the top `beam`, so nothing is pruned and every EOS candidate finishes.
      int64_t limit = 1;
      for (int64_t c = v; c <= beam; c *= v - 1) ++limit;
      for (const PenaltyCase& pc : kPenalties)
        for (int64_t n_best = 1; n_best <= beam; ++n_best)
          for (uint64_t seed : {11u, 12u}) {
            MockDecoder m(v, test::hash_logits(v, seed, kEos, 0.5), kPad);
            BeamOptions o{.beam = beam, .alpha = pc.alpha, .length_penalty = pc.kind, .n_best = n_best,
                          .bos = kBos, .eos = kEos, .pad = kPad, .max_len = limit};
            const auto got = beam_search(m, test::padded_batch(kSources, kPad), o);
            ASSERT_EQ(got.size(), kSources.size());
            for (size_t s = 0; s < kSources.size(); ++s) {
              expect_same(got[s], exhaustive(m, kSources[s], limit, o),
                          str_cat("V ", v, " beam ", beam, " L ", limit, " ", length_penalty_name(pc.kind), " alpha ",
                                  pc.alpha, " n_best ", n_best, " source ", s));
              ++checked;
            }
          }
    }
  EXPECT_GT(checked, 1000);
}

TEST(BeamSearch, EqualsANaiveUnbatchedBeamSearchForNarrowBeams) {
  for (int64_t beam = 1; beam <= 4; ++beam)
    for (const PenaltyCase& pc : kPenalties)
      for (uint64_t seed : {21u, 22u, 23u}) {
        MockDecoder m(5, test::hash_logits(5, seed, kEos, 0.0), kPad);
        BeamOptions o{.beam = beam, .alpha = pc.alpha, .length_penalty = pc.kind, .n_best = beam,
                      .bos = kBos, .eos = kEos, .pad = kPad, .max_extra = 3};
        const auto got = beam_search(m, test::padded_batch(kSources, kPad), o);
        for (size_t s = 0; s < kSources.size(); ++s)
          expect_same(got[s], naive_beam(m, kSources[s], static_cast<int64_t>(kSources[s].size()) + 3, o),
                      str_cat("beam ", beam, " ", length_penalty_name(pc.kind), " alpha ", pc.alpha, " seed ", seed,
                              " source ", s));
      }
}

TEST(BeamSearch, EarlyStoppingSkipsStepsWithoutChangingTheResult) {
  // EOS is likely, so sources collect `beam` finished hypotheses long before the limit of 30;
  // with the paper's alpha 0.6 or no penalty the bound lets them stop early (a strong penalty
  // such as GNMT alpha 2 makes the bound too loose to stop before the limit here).
  for (const PenaltyCase& pc : kPenalties) {
    MockDecoder m(5, test::hash_logits(5, 5, kEos, 2.5), kPad);
    BeamOptions o{.beam = 4, .alpha = pc.alpha, .length_penalty = pc.kind, .n_best = 4,
                  .bos = kBos, .eos = kEos, .pad = kPad, .max_len = 30};
    const auto got = beam_search(m, test::padded_batch(kSources, kPad), o);
    if (pc.alpha == 0.6 || pc.alpha == 0.0) {
      EXPECT_LT(m.trace.size(), 15u) << length_penalty_name(pc.kind) << " alpha " << pc.alpha;
    }
    for (size_t s = 0; s < kSources.size(); ++s)
      expect_same(got[s], naive_beam(m, kSources[s], 30, o), str_cat("source ", s));
  }
}

TEST(BeamSearch, BeamOneWithoutPenaltyEqualsGreedy) {
  for (LengthPenalty kind : {LengthPenalty::Gnmt, LengthPenalty::Power})
    for (uint64_t seed : {31u, 32u, 33u}) {
      MockDecoder m(5, test::hash_logits(5, seed, kEos, 0.3), kPad);
      const Tensor src = test::padded_batch(kSources, kPad);
      const auto beam = beam_search(m, src, BeamOptions{.beam = 1, .alpha = 0.0, .length_penalty = kind,
                                                        .bos = kBos, .eos = kEos, .pad = kPad, .max_extra = 5});
      const auto greedy = greedy_search(m, src, GreedyOptions{.bos = kBos, .eos = kEos, .pad = kPad, .max_extra = 5});
      for (size_t s = 0; s < kSources.size(); ++s) {
        ASSERT_EQ(beam[s].size(), 1u);
        EXPECT_EQ(beam[s][0].tokens, greedy[s].tokens) << "seed " << seed << " source " << s;
        EXPECT_EQ(beam[s][0].finished, greedy[s].finished);
        EXPECT_NEAR(beam[s][0].logprob, greedy[s].logprob, 1e-12);
      }
    }
}

TEST(BeamSearch, FinishedSourcesDropOutAndASourceAloneDecodesAsInABatch) {
  // Source [9] ends almost surely at once; the others run longer.
  const std::vector<std::vector<int64_t>> sources = {{3, 4}, {9}, {4, 4, 3}};
  auto base = test::hash_logits(5, 41, kEos, 0.0);
  auto logits = [base](const std::vector<int64_t>& src, const std::vector<int64_t>& prefix) {
    auto l = base(src, prefix);
    if (src[0] == 9) l[kEos] += 30.0;
    return l;
  };
  for (const PenaltyCase& pc : kPenalties) {
    MockDecoder m(5, logits, kPad);
    BeamOptions o{.beam = 3, .alpha = pc.alpha, .length_penalty = pc.kind, .n_best = 2,
                  .bos = kBos, .eos = kEos, .pad = kPad, .max_extra = 4};
    const auto batch = beam_search(m, test::padded_batch(sources, kPad), o);
    const auto batch_trace = m;
    size_t batch_steps = m.trace.size();
    for (size_t s = 0; s < sources.size(); ++s) {
      MockDecoder alone_m(5, logits, kPad);
      const auto alone = beam_search(alone_m, test::padded_batch({sources[s]}, kPad), o);
      expect_same(batch[s], alone[0], str_cat(length_penalty_name(pc.kind), " source ", s));
      // The rows the decoder saw for this source are exactly those it sees alone, then none.
      std::vector<int64_t> want = alone_m.rows_of(0);
      want.resize(batch_steps, 0);
      EXPECT_EQ(batch_trace.rows_of(static_cast<int64_t>(s)), want) << "source " << s;
      EXPECT_LE(*std::max_element(want.begin(), want.end()), 3);
    }
    // The quick source stops well before the others.
    const auto quick = batch_trace.rows_of(1);
    EXPECT_EQ(quick.back(), 0);
  }
}

TEST(BeamSearch, BreaksTiesTowardsLowerRowsAndTokens) {
  auto uniform = [](const std::vector<int64_t>&, const std::vector<int64_t>&) { return std::vector<double>(4, 0.0); };
  MockDecoder m(4, uniform);
  const Tensor src = test::padded_batch({{3}}, -1);
  // No EOS: every sequence of length 3 ties; the lexicographically smallest come first.
  const auto got = beam_search(m, src, BeamOptions{.beam = 3, .alpha = 0.0, .n_best = 3, .bos = kBos, .max_len = 3});
  ASSERT_EQ(got[0].size(), 3u);
  EXPECT_EQ(got[0][0].tokens, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(got[0][1].tokens, (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(got[0][2].tokens, (std::vector<int64_t>{0, 0, 2}));
  const auto again = beam_search(m, src, BeamOptions{.beam = 3, .alpha = 0.0, .n_best = 3, .bos = kBos, .max_len = 3});
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(again[0][i].tokens, got[0][i].tokens);
}

TEST(BeamSearch, LengthPenaltiesFollowGnmtAndFairseq) {
  EXPECT_DOUBLE_EQ(length_penalty(LengthPenalty::Gnmt, 0.6, 1), 1.0);
  EXPECT_DOUBLE_EQ(length_penalty(LengthPenalty::Gnmt, 0.6, 7), std::pow(2.0, 0.6));
  EXPECT_DOUBLE_EQ(length_penalty(LengthPenalty::Power, 0.6, 7), std::pow(7.0, 0.6));
  EXPECT_DOUBLE_EQ(length_penalty(LengthPenalty::Power, 0.0, 7), 1.0);
  EXPECT_EQ(parse_length_penalty("gnmt"), LengthPenalty::Gnmt);
  EXPECT_EQ(parse_length_penalty("power"), LengthPenalty::Power);
  EXPECT_STREQ(length_penalty_name(LengthPenalty::Power), "power");
  EXPECT_THROW(parse_length_penalty("wu"), Error);
  EXPECT_THROW(length_penalty(LengthPenalty::Gnmt, 0.6, 0), Error);
  // Defaults are the paper's: beam 4, alpha 0.6, GNMT.
  const BeamOptions d;
  EXPECT_EQ(d.beam, 4);
  EXPECT_EQ(d.alpha, 0.6);
  EXPECT_EQ(d.length_penalty, LengthPenalty::Gnmt);
}

TEST(BeamSearch, RejectsBadOptions) {
  MockDecoder m(5, test::hash_logits(5, 1), kPad);
  const Tensor src = test::padded_batch({{3, 4}}, kPad);
  auto expect_error = [&](const BeamOptions& o, const std::string& names) {
    try {
      beam_search(m, src, o);
      ADD_FAILURE() << "expected an error naming " << names;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
  };
  expect_error(BeamOptions{.beam = 0, .bos = kBos}, "beam");
  expect_error(BeamOptions{.n_best = 0, .bos = kBos}, "n_best");
  expect_error(BeamOptions{.beam = 2, .n_best = 3, .bos = kBos}, "n_best");
  expect_error(BeamOptions{.alpha = -0.1, .bos = kBos}, "alpha");
  expect_error(BeamOptions{.alpha = NAN, .bos = kBos}, "alpha");
  expect_error(BeamOptions{.bos = -1}, "bos");
  expect_error(BeamOptions{.bos = kBos, .eos = 5}, "eos");
  expect_error(BeamOptions{.bos = kBos, .max_len = 4, .max_extra = 2}, "max_extra");
  expect_error(BeamOptions{.bos = kBos, .max_len = 0}, "max_len");
  EXPECT_THROW(validate(BeamOptions{.beam = 0}), Error);
  EXPECT_NO_THROW(validate(BeamOptions{}));
  EXPECT_THROW(beam_search(m, Tensor::zeros({1, 2}), BeamOptions{.bos = kBos}), Error);
  m.bad_shape = true;
  EXPECT_THROW(beam_search(m, src, BeamOptions{.bos = kBos}), Error);
}

}  // namespace
}  // namespace attn::decode
