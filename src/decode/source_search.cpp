// The per-source searches (see source_search.h): greedy search and sampling as one-row chains,
// beam search as a source's live and finished hypotheses, and run_searches(), the driver that
// runs one search per source of a batch over one IncrementalDecoder. Every rule of the three
// searches lives here; greedy_search, sample and beam_search only check options, compute the
// length limits and build the searches.
// Deliberately simple bookkeeping: each beam hypothesis carries its token vector (outputs are short).
#include "attn/decode/source_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "attn/core/error.h"
#include "search_common.h"

namespace attn::decode {

namespace {

// The checks of every advance(): a search that still runs, a row pointer, a vocabulary that
// holds the search's ids and does not change between steps (`vocab`: 0 before the first step,
// then the first step's v), and no NaN among its rows' n * v values.
void check_advance(const char* op, bool done, const double* log_probs, int64_t n, int64_t v, int64_t& vocab,
                   int64_t bos, int64_t eos) {
  ATTN_CHECK(!done, op, "advance() on a search that has ended");
  ATTN_CHECK(log_probs != nullptr, op, "advance() needs its rows' log-probabilities, got a null pointer");
  ATTN_CHECK(v >= 1, op, "the vocabulary size must be >= 1, got ", v);
  if (vocab == 0) {
    ATTN_CHECK(bos < v, op, "bos ", bos, " is not a token id of a vocabulary of ", v);
    ATTN_CHECK(eos < v, op, "eos ", eos, " is not a token id of a vocabulary of ", v);
    vocab = v;
  }
  ATTN_CHECK(v == vocab, op, "the vocabulary size changed between steps: ", vocab, " then ", v);
  for (int64_t i = 0; i < n * v; ++i)
    ATTN_CHECK(!std::isnan(log_probs[i]), op, "log-probability NaN at row ", i / v, ", token ", i % v);
}

void check_ids(const char* op, int64_t bos, int64_t eos, int64_t limit) {
  ATTN_CHECK(bos >= 0, op, "bos must be a token id (>= 0), got ", bos);
  ATTN_CHECK(eos >= -1, op, "eos must be a token id or -1 (none), got ", eos);
  ATTN_CHECK(limit >= 1, op, "the length limit must be >= 1, got ", limit);
}

// One row, one token per step: the token chosen by choose(), until EOS or the limit.
class ChainSource : public ChainSearch {
 public:
  ChainSource(const char* op, int64_t bos, int64_t eos, int64_t limit)
      : op_(op), bos_(bos), eos_(eos), limit_(limit), next_{bos} {
    check_ids(op, bos, eos, limit);
  }

  const std::vector<int64_t>& next_tokens() const override { return next_; }
  bool done() const override { return next_.empty(); }
  std::vector<Hypothesis> results() const override { return {h_}; }

  std::vector<int64_t> advance(const double* log_probs, int64_t v) override {
    check_advance(op_, done(), log_probs, 1, v, vocab_, bos_, eos_);
    const int64_t tok = choose(log_probs, v);
    last_token_ = tok;
    last_logprob_ = log_probs[tok];
    h_.logprob += log_probs[tok];
    h_.score = h_.logprob;
    if (tok == eos_) {
      h_.finished = true;
      next_.clear();
      return {};
    }
    h_.tokens.push_back(tok);
    if (h_.length() >= limit_) {  // cut at the limit
      next_.clear();
      return {};
    }
    next_[0] = tok;
    return {0};
  }

 protected:
  // The token taken from one row of log-probabilities [v] (no NaN).
  virtual int64_t choose(const double* row, int64_t v) = 0;

 private:
  const char* op_;
  int64_t bos_, eos_, limit_;
  int64_t vocab_ = 0;
  std::vector<int64_t> next_;  // [1] while running, [] once done
  Hypothesis h_;
};

// Greedy: the most probable token; strict > keeps the lower id on ties.
class GreedySource final : public ChainSource {
 public:
  GreedySource(const GreedyOptions& o, int64_t limit) : ChainSource("greedy_source", o.bos, o.eos, limit) {}

 protected:
  int64_t choose(const double* row, int64_t v) override {
    int64_t best = 0;
    for (int64_t t = 1; t < v; ++t)
      if (row[t] > row[best]) best = t;
    return best;
  }
};

// Sampling with temperature, top-k and top-p from the source's own generator, one uniform
// number per token. The kept tokens are walked in ascending id order, so top_k = V and
// top_k = 0 draw the same samples.
class SamplingSource final : public ChainSource {
 public:
  SamplingSource(const SamplingOptions& o, int64_t limit, Rng rng)
      : ChainSource("sampling_source", o.bos, o.eos, limit), o_(o), rng_(rng) {
    validate(o);
  }

 protected:
  int64_t choose(const double* row, int64_t v) override {
    detail::sampling_weights(row, v, o_.temperature, o_.top_k, o_.top_p, order_, weight_);
    double total = 0;
    for (int64_t t = 0; t < v; ++t) total += weight_[t];
    const double u = rng_.uniform() * total;
    double acc = 0;
    int64_t last_positive = 0;
    for (int64_t t = 0; t < v; ++t) {
      if (weight_[t] <= 0) continue;
      acc += weight_[t];
      last_positive = t;
      if (u < acc) return t;
    }
    return last_positive;  // only reached through rounding at the top end
  }

 private:
  SamplingOptions o_;
  Rng rng_;
  std::vector<int64_t> order_;  // scratch [v]: token ids, most probable first
  std::vector<double> weight_;  // scratch [v]: unnormalised filtered probabilities
};

// Beam search (beam_search.h): a source's live hypotheses (its rows, best first) and its
// finished ones, one expansion per step.
class BeamSource final : public SourceSearch {
 public:
  BeamSource(const BeamOptions& o, int64_t limit) : o_(o), limit_(limit), next_{o.bos} {
    validate(o);
    check_ids(kOp, o.bos, o.eos, limit);
    live_.push_back(Live{});  // the BOS prefix, the search's one row before the first step
  }

  const std::vector<int64_t>& next_tokens() const override { return next_; }
  bool done() const override { return done_; }

  std::vector<Hypothesis> results() const override {
    if (done_) return results_;
    // A search stopped early: its finished and live hypotheses ranked together, as at the limit.
    std::vector<Hypothesis> ranked = finished_;
    for (const Live& l : live_)
      ranked.push_back(Hypothesis{l.tokens, l.logprob, t_ >= 1 ? l.logprob / penalty(t_) : 0.0, false});
    return rank(std::move(ranked));
  }

  std::vector<int64_t> advance(const double* log_probs, int64_t v) override {
    const int64_t k = static_cast<int64_t>(live_.size());
    check_advance(kOp, done_, log_probs, k, v, vocab_, o_.bos, o_.eos);
    const int64_t t = ++t_;  // the length of the hypotheses after this step
    const int64_t beam = o_.beam;
    const int64_t per_row = std::min<int64_t>(2 * beam, v);  // candidates kept from each live row
    order_.resize(static_cast<size_t>(v));

    // 1. The top 2*beam expansions of this source: the best 2*beam of each row suffice.
    cands_.clear();
    for (int64_t i = 0; i < k; ++i) {
      const double* row = log_probs + i * v;
      std::iota(order_.begin(), order_.end(), int64_t{0});
      std::partial_sort(order_.begin(), order_.begin() + per_row, order_.end(), [&](int64_t x, int64_t y) {
        return row[x] != row[y] ? row[x] > row[y] : x < y;
      });
      for (int64_t j = 0; j < per_row; ++j) cands_.push_back({live_[i].logprob + row[order_[j]], i, order_[j]});
    }
    const int64_t top = std::min<int64_t>(2 * beam, static_cast<int64_t>(cands_.size()));
    std::partial_sort(cands_.begin(), cands_.begin() + top, cands_.end(), candidate_before);

    // 2. EOS candidates among the best `beam` finish (fairseq's rule: those ranked below are
    //    dropped, so beam 1 is greedy); the best `beam` others stay live.
    std::vector<Live> next;
    std::vector<int64_t> parents;  // the row each new live hypothesis continues
    for (int64_t c = 0; c < top; ++c) {
      const Candidate& cd = cands_[c];
      const Live& parent = live_[cd.parent];
      if (cd.token == o_.eos) {
        if (c < beam) finished_.push_back(Hypothesis{parent.tokens, cd.logprob, cd.logprob / penalty(t), true});
      } else if (static_cast<int64_t>(next.size()) < beam) {
        Live l{parent.tokens, cd.logprob};
        l.tokens.push_back(cd.token);
        next.push_back(std::move(l));
        parents.push_back(cd.parent);
      }
    }
    std::sort(finished_.begin(), finished_.end(), hypothesis_before);
    if (static_cast<int64_t>(finished_.size()) > beam) finished_.resize(static_cast<size_t>(beam));

    // 3. Stop at the limit (rank finished and live together), or when no live hypothesis can
    //    beat the beam-th finished one: its log-probability only falls, and the penalty grows
    //    with length (alpha >= 0), so lp / penalty(limit) bounds every future score.
    if (t >= limit_ || next.empty()) {
      std::vector<Hypothesis> ranked = std::move(finished_);
      for (Live& l : next) {
        const double score = l.logprob / penalty(t);
        ranked.push_back(Hypothesis{std::move(l.tokens), l.logprob, score, false});
      }
      std::sort(ranked.begin(), ranked.end(), hypothesis_before);
      return stop(std::move(ranked));
    }
    if (static_cast<int64_t>(finished_.size()) == beam &&
        finished_.back().score > next.front().logprob / penalty(limit_))
      return stop(std::move(finished_));

    next_.clear();
    for (const Live& l : next) next_.push_back(l.tokens.back());
    live_ = std::move(next);
    return parents;
  }

 private:
  static constexpr const char* kOp = "beam_source";

  struct Live {
    std::vector<int64_t> tokens;  // generated so far (no BOS)
    double logprob = 0;
  };

  // One expansion: live hypothesis `parent` (its row within the source) extended by `token`.
  struct Candidate {
    double logprob;
    int64_t parent;
    int64_t token;
  };

  // Candidate order: higher log-probability, then the lower row, then the lower token id.
  static bool candidate_before(const Candidate& a, const Candidate& b) {
    if (a.logprob != b.logprob) return a.logprob > b.logprob;
    if (a.parent != b.parent) return a.parent < b.parent;
    return a.token < b.token;
  }

  // Final order: higher score, then the lexicographically smaller tokens, then finished first.
  static bool hypothesis_before(const Hypothesis& a, const Hypothesis& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.tokens != b.tokens) return a.tokens < b.tokens;
    return a.finished && !b.finished;
  }

  double penalty(int64_t len) const { return length_penalty(o_.length_penalty, o_.alpha, len); }

  // Sorts (unless sorted) and keeps the n_best first.
  std::vector<Hypothesis> rank(std::vector<Hypothesis> ranked) const {
    std::sort(ranked.begin(), ranked.end(), hypothesis_before);
    if (static_cast<int64_t>(ranked.size()) > o_.n_best) ranked.resize(static_cast<size_t>(o_.n_best));
    return ranked;
  }

  // Ends the search with `ranked` (sorted, best first) as its answer; no rows are left.
  std::vector<int64_t> stop(std::vector<Hypothesis> ranked) {
    if (static_cast<int64_t>(ranked.size()) > o_.n_best) ranked.resize(static_cast<size_t>(o_.n_best));
    results_ = std::move(ranked);
    done_ = true;
    live_.clear();
    finished_.clear();
    next_.clear();
    return {};
  }

  BeamOptions o_;
  int64_t limit_;                     // length limit in generated tokens
  int64_t t_ = 0;                     // steps taken = the live hypotheses' length
  int64_t vocab_ = 0;                 // v of the first step (0 before)
  std::vector<int64_t> next_;         // the last token of each live hypothesis
  std::vector<Live> live_;            // at most beam, best first
  std::vector<Hypothesis> finished_;  // at most beam, best first
  std::vector<Hypothesis> results_;   // the answer, once done
  bool done_ = false;
  std::vector<int64_t> order_;    // scratch [v]: token ids of one row, sorted
  std::vector<Candidate> cands_;  // scratch: this step's expansions
};

}  // namespace

std::unique_ptr<ChainSearch> greedy_source(const GreedyOptions& options, int64_t limit) {
  return std::make_unique<GreedySource>(options, limit);
}

std::unique_ptr<ChainSearch> sampling_source(const SamplingOptions& options, int64_t limit, Rng rng) {
  return std::make_unique<SamplingSource>(options, limit, rng);
}

std::unique_ptr<SourceSearch> beam_source(const BeamOptions& options, int64_t limit) {
  return std::make_unique<BeamSource>(options, limit);
}

void run_searches(const char* op, IncrementalDecoder& decoder, const Tensor& src_ids,
                  const std::vector<SourceSearch*>& searches) {
  ATTN_CHECK(src_ids.defined() && src_ids.dtype() == DType::I64 && src_ids.dim() == 2, op,
             "src_ids must be i64 [B, S], got ", src_ids.defined() ? src_ids.str() : std::string("undefined"));
  const int64_t b = static_cast<int64_t>(searches.size());
  ATTN_CHECK(src_ids.size(0) == b, op, "one search per source: ", src_ids.size(0), " sources, ", b, " searches");
  for (int64_t s = 0; s < b; ++s) {
    ATTN_CHECK(searches[s] != nullptr, op, "search ", s, " is null");
    ATTN_CHECK(!searches[s]->done() && searches[s]->next_tokens().size() == 1, op, "search ", s,
               " has already run (a search starts with one row)");
  }
  if (b == 0) return;

  decoder.start(src_ids);  // row s belongs to source s
  const int64_t v = decoder.vocab_size();
  std::vector<int64_t> tokens, rows, owned;
  while (true) {
    // The rows of the running searches, in source order; owned[s]: search s's row count.
    tokens.clear();
    owned.assign(static_cast<size_t>(b), 0);
    for (int64_t s = 0; s < b; ++s) {
      if (searches[s]->done()) continue;
      const std::vector<int64_t>& next = searches[s]->next_tokens();
      tokens.insert(tokens.end(), next.begin(), next.end());
      owned[s] = static_cast<int64_t>(next.size());
    }
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n == 0) break;
    const std::vector<double> lp = detail::read_log_probs(op, decoder.step(detail::token_tensor(tokens)), n, v);

    // Each search advances over its rows; its new rows continue old rows offset + parent.
    rows.clear();
    int64_t offset = 0;  // the search's first row in this step
    for (int64_t s = 0; s < b; ++s) {
      if (owned[s] == 0) continue;
      const std::vector<int64_t> parents = searches[s]->advance(lp.data() + offset * v, v);
      ATTN_CHECK(parents.size() == searches[s]->next_tokens().size(), op, "search ", s, " returned ",
                 parents.size(), " parents for its ", searches[s]->next_tokens().size(), " new rows");
      for (int64_t p : parents) {
        ATTN_CHECK(p >= 0 && p < owned[s], op, "search ", s, " returned parent ", p, " outside its ", owned[s],
                   " rows");
        rows.push_back(offset + p);
      }
      offset += owned[s];
    }
    if (rows.empty()) break;  // every search has ended
    bool same = static_cast<int64_t>(rows.size()) == n;
    for (int64_t i = 0; same && i < n; ++i) same = rows[i] == i;
    if (!same) decoder.reorder(rows);  // drop, keep or duplicate rows; unchanged rows need no call
  }
}

}  // namespace attn::decode
