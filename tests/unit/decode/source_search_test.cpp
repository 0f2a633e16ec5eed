// The per-source searches of source_search.h: a search fed its rows by hand (no decoder) ends
// as it does inside run_searches() beside other sources and other kinds of search; beam 1 is
// greedy; a sampling_source with the s-th stream of Rng(seed) is sample()'s source s; a chain
// reports each step's token; run_searches() reorders only when rows change; misuse is an error.
#include "attn/decode/source_search.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "unit/decode/mock_decoder.h"

namespace attn::decode {
namespace {

using test::MockDecoder;

constexpr int64_t kPad = 0, kBos = 1, kEos = 2, kV = 6;

const std::vector<std::vector<int64_t>> kSources = {{3, 4}, {4, 4, 3}, {3}, {4, 3, 3, 4}, {5}};

// Runs `search` to its end without a decoder: each step hands it the mock model's
// log-probabilities after each of its rows' prefixes (BOS first) and moves the prefixes as its
// parents say. follow_parents = false is the control: row i keeps prefix i (mod the old rows).
void run_alone(SourceSearch& search, const MockDecoder& m, const std::vector<int64_t>& src,
               bool follow_parents = true) {
  std::vector<std::vector<int64_t>> prefixes(1);  // one row, nothing fed yet
  while (!search.done()) {
    const std::vector<int64_t>& next = search.next_tokens();
    ASSERT_EQ(next.size(), prefixes.size());
    std::vector<double> rows;  // [rows, V]
    for (size_t i = 0; i < next.size(); ++i) {
      prefixes[i].push_back(next[i]);
      const auto lp = m.log_probs(src, prefixes[i]);
      rows.insert(rows.end(), lp.begin(), lp.end());
    }
    const std::vector<int64_t> parents = search.advance(rows.data(), m.vocab_size());
    std::vector<std::vector<int64_t>> moved;
    for (size_t i = 0; i < parents.size(); ++i)
      moved.push_back(prefixes[follow_parents ? static_cast<size_t>(parents[i]) : i % prefixes.size()]);
    prefixes = std::move(moved);
  }
}

void expect_same(const std::vector<Hypothesis>& a, const std::vector<Hypothesis>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << what << " hypothesis " << i;
    EXPECT_EQ(a[i].logprob, b[i].logprob) << what << " hypothesis " << i;
    EXPECT_EQ(a[i].score, b[i].score) << what << " hypothesis " << i;
    EXPECT_EQ(a[i].finished, b[i].finished) << what << " hypothesis " << i;
  }
}

bool differs(const std::vector<Hypothesis>& a, const std::vector<Hypothesis>& b) {
  if (a.size() != b.size()) return true;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].tokens != b[i].tokens || a[i].logprob != b[i].logprob || a[i].finished != b[i].finished) return true;
  return false;
}

// The search of source s in the mixed batch below: greedy, beam 3, sampling, beam 2, greedy.
std::unique_ptr<SourceSearch> mixed_search(size_t s, int64_t limit) {
  switch (s % 5) {
    case 0:
    case 4:
      return greedy_source(GreedyOptions{.bos = kBos, .eos = kEos}, limit);
    case 1:
      return beam_source(BeamOptions{.beam = 3, .n_best = 2, .bos = kBos, .eos = kEos}, limit);
    case 2:
      return sampling_source(SamplingOptions{.top_k = 4, .bos = kBos, .eos = kEos}, limit, Rng(99 + s));
    default:
      return beam_source(BeamOptions{.beam = 2, .alpha = 1.0, .bos = kBos, .eos = kEos}, limit);
  }
}

TEST(SourceSearch, ASearchFedByHandEndsAsInsideRunSearchesBesideOtherSearches) {
  bool control_differs = false;
  for (uint64_t seed : {1u, 2u, 3u, 4u, 5u}) {
    MockDecoder m(kV, test::hash_logits(kV, seed, kEos, 0.4), kPad);
    std::vector<std::unique_ptr<SourceSearch>> batch;
    std::vector<SourceSearch*> run;
    for (size_t s = 0; s < kSources.size(); ++s) {
      batch.push_back(mixed_search(s, 2 + static_cast<int64_t>(s) * 2));
      run.push_back(batch.back().get());
    }
    run_searches("test", m, test::padded_batch(kSources, kPad), run);
    for (size_t s = 0; s < kSources.size(); ++s) {
      ASSERT_TRUE(batch[s]->done());
      auto alone = mixed_search(s, 2 + static_cast<int64_t>(s) * 2);
      run_alone(*alone, m, kSources[s]);
      const std::string what = "seed " + std::to_string(seed) + " source " + std::to_string(s);
      expect_same(alone->results(), batch[s]->results(), what);
      // Control: a driver that loses track of the rows gets another beam result somewhere.
      auto lost = mixed_search(s, 2 + static_cast<int64_t>(s) * 2);
      run_alone(*lost, m, kSources[s], /*follow_parents=*/false);
      control_differs |= differs(lost->results(), batch[s]->results());
    }
  }
  EXPECT_TRUE(control_differs) << "ignoring the parents should change some beam result";
}

TEST(SourceSearch, BeamOneWithoutPenaltyIsGreedyAndBeamTwoIsNot) {
  bool beam_two_differs = false;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    MockDecoder m(kV, test::hash_logits(kV, seed, kEos, 0.2), kPad);
    for (size_t s = 0; s < kSources.size(); ++s) {
      const int64_t limit = 3 + static_cast<int64_t>(s);
      auto greedy = greedy_source(GreedyOptions{.bos = kBos, .eos = kEos}, limit);
      auto beam1 = beam_source(BeamOptions{.beam = 1, .alpha = 0.0, .bos = kBos, .eos = kEos}, limit);
      auto beam2 = beam_source(BeamOptions{.beam = 2, .alpha = 0.0, .bos = kBos, .eos = kEos}, limit);
      run_alone(*greedy, m, kSources[s]);
      run_alone(*beam1, m, kSources[s]);
      run_alone(*beam2, m, kSources[s]);
      expect_same(beam1->results(), greedy->results(), "seed " + std::to_string(seed) + " source " + std::to_string(s));
      beam_two_differs |= differs(beam2->results(), greedy->results());
    }
  }
  EXPECT_TRUE(beam_two_differs) << "control: a wider beam should find another answer somewhere";
}

TEST(SourceSearch, ASamplingSourceWithTheSthStreamIsSamplesSourceS) {
  MockDecoder m(kV, test::hash_logits(kV, 11, kEos, 0.3), kPad);
  const SamplingOptions o{.temperature = 1.2, .top_k = 5, .top_p = 0.9, .seed = 77, .bos = kBos, .eos = kEos,
                          .pad = kPad, .max_len = 7};
  const auto want = sample(m, test::padded_batch(kSources, kPad), o);
  auto stream = [&](size_t s) {  // the s-th draw of Rng(seed)
    Rng master(o.seed);
    for (size_t i = 0; i < s; ++i) master.next_u64();
    return Rng(master.next_u64());
  };
  bool wrong_stream_differs = false;
  for (size_t s = 0; s < kSources.size(); ++s) {
    auto search = sampling_source(o, 7, stream(s));
    run_alone(*search, m, kSources[s]);
    expect_same(search->results(), {want[s]}, "source " + std::to_string(s));
    // Control: the next source's stream samples something else somewhere.
    auto other = sampling_source(o, 7, stream(s + 1));
    run_alone(*other, m, kSources[s]);
    wrong_stream_differs |= differs(other->results(), {want[s]});
  }
  EXPECT_TRUE(wrong_stream_differs);
}

TEST(SourceSearch, AChainReportsTheTokenOfEachStepEosIncluded) {
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    MockDecoder m(kV, test::hash_logits(kV, seed, kEos, 1.0), kPad);
    for (int which = 0; which < 2; ++which) {
      auto search = which == 0 ? greedy_source(GreedyOptions{.bos = kBos, .eos = kEos}, 6)
                               : sampling_source(SamplingOptions{.bos = kBos, .eos = kEos}, 6, Rng(seed));
      EXPECT_EQ(search->last_token(), -1);
      EXPECT_EQ(search->last_logprob(), 0.0);
      std::vector<int64_t> seen, prefix{kBos};
      double sum = 0;
      while (!search->done()) {
        const auto lp = m.log_probs(kSources[0], prefix);
        search->advance(lp.data(), kV);
        seen.push_back(search->last_token());
        EXPECT_EQ(search->last_logprob(), lp[search->last_token()]);
        sum += search->last_logprob();
        prefix.push_back(search->last_token());
      }
      const Hypothesis h = search->results().at(0);
      std::vector<int64_t> want = h.tokens;
      if (h.finished) want.push_back(kEos);  // the EOS step is reported too
      EXPECT_EQ(seen, want) << "seed " << seed;
      EXPECT_EQ(sum, h.logprob);
    }
  }
}

TEST(SourceSearch, RunSearchesReordersOnlyWhenRowsChange) {
  auto never_eos = [](const std::vector<int64_t>&, const std::vector<int64_t>&) {
    return std::vector<double>{0.0, 0.0, -9.0, 1.0};
  };
  MockDecoder m(4, never_eos);
  auto run_greedy = [&](int64_t limit0, int64_t limit1) {
    auto a = greedy_source(GreedyOptions{.bos = kBos, .eos = kEos}, limit0);
    auto b = greedy_source(GreedyOptions{.bos = kBos, .eos = kEos}, limit1);
    m.reorders = 0;
    run_searches("test", m, test::padded_batch({{3}, {3}}, -1), {a.get(), b.get()});
    EXPECT_EQ(a->results().at(0).tokens.size(), static_cast<size_t>(limit0));
    EXPECT_EQ(b->results().at(0).tokens.size(), static_cast<size_t>(limit1));
  };
  run_greedy(3, 3);  // both rows stay until both end together
  EXPECT_EQ(m.reorders, 0);
  EXPECT_EQ(m.trace, (std::vector<std::vector<int64_t>>{{0, 1}, {0, 1}, {0, 1}}));
  run_greedy(1, 3);  // control: source 0 leaves after one step
  EXPECT_EQ(m.reorders, 1);
  EXPECT_EQ(m.trace, (std::vector<std::vector<int64_t>>{{0, 1}, {1}, {1}}));
}

TEST(SourceSearch, ResultsBeforeTheEndAreTheBestSoFar) {
  MockDecoder m(kV, test::hash_logits(kV, 5, kEos, -0.5), kPad);
  auto greedy = greedy_source(GreedyOptions{.bos = kBos, .eos = kEos}, 5);
  ASSERT_EQ(greedy->results().size(), 1u);
  EXPECT_TRUE(greedy->results()[0].tokens.empty());
  auto beam = beam_source(BeamOptions{.beam = 3, .n_best = 2, .bos = kBos, .eos = kEos}, 5);
  EXPECT_EQ(beam->next_tokens(), (std::vector<int64_t>{kBos}));
  ASSERT_EQ(beam->results().size(), 1u);  // the empty prefix
  const auto lp = m.log_probs(kSources[0], {kBos});
  const auto parents = beam->advance(lp.data(), kV);
  ASSERT_FALSE(beam->done());
  EXPECT_EQ(parents, (std::vector<int64_t>{0, 0, 0}));  // three live rows, all from the one row
  const auto partial = beam->results();
  ASSERT_EQ(partial.size(), 2u);  // n_best
  EXPECT_GE(partial[0].score, partial[1].score);
  for (const Hypothesis& h : partial) {
    EXPECT_EQ(h.length(), 1);
    EXPECT_EQ(h.score, h.logprob / length_penalty(LengthPenalty::Gnmt, 0.6, 1));
  }
}

TEST(SourceSearch, MisuseIsAnError) {
  MockDecoder m(kV, test::hash_logits(kV, 3), kPad);
  const auto lp = m.log_probs(kSources[0], {kBos});  // [V]
  // Advancing an ended search; the control advances the same search while it runs.
  auto once = greedy_source(GreedyOptions{.bos = kBos, .eos = kEos}, 1);
  EXPECT_NO_THROW(once->advance(lp.data(), kV));
  ASSERT_TRUE(once->done());
  EXPECT_TRUE(once->next_tokens().empty());
  EXPECT_THROW(once->advance(lp.data(), kV), Error);
  auto beam_once = beam_source(BeamOptions{.beam = 2, .bos = kBos, .eos = kEos}, 1);
  EXPECT_NO_THROW(beam_once->advance(lp.data(), kV));
  ASSERT_TRUE(beam_once->done());
  EXPECT_THROW(beam_once->advance(lp.data(), kV), Error);
  // A vocabulary that changes between steps or is too small for bos/eos, no rows, a NaN; each
  // refused step leaves the search as it was, so the controls between them still advance it.
  const std::vector<double> row = {-3.0, -3.0, -3.0, -0.2, -3.0, -3.0};  // token 3, never EOS
  auto chain = greedy_source(GreedyOptions{.bos = kBos, .eos = kEos}, 5);
  EXPECT_THROW(chain->advance(row.data(), 2), Error);  // eos 2 is not in a vocabulary of 2
  EXPECT_THROW(chain->advance(row.data(), 0), Error);
  EXPECT_THROW(chain->advance(nullptr, kV), Error);
  EXPECT_NO_THROW(chain->advance(row.data(), kV));
  EXPECT_THROW(chain->advance(row.data(), kV - 1), Error);  // v changed
  std::vector<double> nan_row = row;
  nan_row[4] = NAN;
  EXPECT_THROW(chain->advance(nan_row.data(), kV), Error);
  EXPECT_NO_THROW(chain->advance(row.data(), kV));
  EXPECT_EQ(chain->results().at(0).tokens, (std::vector<int64_t>{3, 3}));
  // Bad construction.
  EXPECT_THROW(greedy_source(GreedyOptions{.bos = kBos}, 0), Error);
  EXPECT_THROW(greedy_source(GreedyOptions{.eos = kEos}, 3), Error);  // bos unset
  EXPECT_THROW(greedy_source(GreedyOptions{.bos = kBos, .eos = -2}, 3), Error);
  EXPECT_THROW(sampling_source(SamplingOptions{.temperature = 0.0, .bos = kBos}, 3, Rng(1)), Error);
  EXPECT_THROW(beam_source(BeamOptions{.beam = 2, .n_best = 3, .bos = kBos}, 3), Error);
  EXPECT_THROW(beam_source(BeamOptions{.bos = kBos}, 0), Error);
  // run_searches: one fresh search per source.
  const Tensor src = test::padded_batch({{3}, {4}}, kPad);
  auto a = greedy_source(GreedyOptions{.bos = kBos, .eos = kEos}, 3);
  auto b = greedy_source(GreedyOptions{.bos = kBos, .eos = kEos}, 3);
  EXPECT_THROW(run_searches("test", m, src, {a.get()}), Error);
  EXPECT_THROW(run_searches("test", m, src, {a.get(), nullptr}), Error);
  EXPECT_THROW(run_searches("test", m, src, {a.get(), once.get()}), Error);  // once has ended
  auto branched = beam_source(BeamOptions{.beam = 2, .bos = kBos, .eos = kEos}, 3);
  branched->advance(lp.data(), kV);  // two rows now
  EXPECT_THROW(run_searches("test", m, src, {a.get(), branched.get()}), Error);
  EXPECT_NO_THROW(run_searches("test", m, src, {a.get(), b.get()}));
  EXPECT_TRUE(a->done() && b->done());
}

}  // namespace
}  // namespace attn::decode
