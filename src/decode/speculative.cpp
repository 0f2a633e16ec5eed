// Speculative decoding (see speculative.h): one driver for the greedy and the sampling rule and
// for both drafters (a draft model, prompt lookup). Every live row emits the same number of
// tokens per round, so that the target's and the draft's caches keep one length for the batch:
// the target has been fed each row's output but its last token x, the draft a prefix of that.
#include "attn/decode/speculative.h"

#include <algorithm>
#include <cmath>

#include "attn/core/error.h"
#include "attn/core/rng.h"
#include "attn/ops/batch_invariant.h"
#include "search_common.h"

namespace attn::decode {

namespace {

constexpr const char* kOp = "speculative";

// The most probable token of one row [v]; ties: the lower id (greedy_source's rule).
int64_t argmax(const double* row, int64_t v) {
  int64_t best = 0;
  for (int64_t t = 1; t < v; ++t)
    if (row[t] > row[best]) best = t;
  return best;
}

// Draws from unnormalised weights [v] (total > 0) with one uniform number, walking the ids in
// ascending order, as sampling_source draws.
int64_t draw(const std::vector<double>& weight, Rng& rng) {
  double total = 0;
  for (double w : weight) total += w;
  const double u = rng.uniform() * total;
  double acc = 0;
  int64_t last_positive = 0;
  for (size_t t = 0; t < weight.size(); ++t) {
    if (weight[t] <= 0) continue;
    acc += weight[t];
    last_positive = static_cast<int64_t>(t);
    if (u < acc) return last_positive;
  }
  return last_positive;  // only reached through rounding at the top end
}

// One source's state: its output so far, its length limit, its generator and its source tokens.
struct Row {
  int64_t limit = 0;
  Hypothesis h;
  std::vector<int64_t> seq;  // the emitted tokens but EOS (= h.tokens); the last one is x
  std::vector<int64_t> src;  // the source row without PAD (prompt lookup's context starts with it)
  Rng rng;
  bool done = false;
};

// The run: greedy (sampling null) or sampling, with a draft model (draft non-null) or prompt
// lookup (draft null).
std::vector<Hypothesis> run(IncrementalDecoder& target, IncrementalDecoder* draft, const Tensor& src_ids,
                            const detail::SearchLimits& limits, const SamplingOptions* sampling,
                            const SpeculativeOptions& options, SpeculativeStats* stats_out) {
  validate(options);
  if (sampling != nullptr) validate(*sampling);
  const std::vector<int64_t> limit = detail::prepare(kOp, target, src_ids, limits);
  const int64_t v = target.vocab_size();
  if (draft != nullptr)
    ATTN_CHECK(draft->vocab_size() == v, kOp, "the draft model's vocabulary has ", draft->vocab_size(),
               " tokens and the target's ", v, ": speculative decoding needs the same vocabulary (the same ids)");
  const int64_t b = src_ids.size(0), s = src_ids.size(1);
  if (b == 0) return {};
  BatchInvariantGuard invariant(options.batch_invariant);
  SpeculativeStats stats;

  std::vector<Row> rows(static_cast<size_t>(b));
  {
    const std::vector<int64_t> ids = src_ids.to_vector<int64_t>();
    Rng master(sampling != nullptr ? sampling->seed : 0);  // one stream per source, as sample() seeds
    for (int64_t r = 0; r < b; ++r) {
      Row& row = rows[static_cast<size_t>(r)];
      row.limit = limit[static_cast<size_t>(r)];
      if (sampling != nullptr) row.rng = Rng(master.next_u64());
      for (int64_t j = 0; j < s; ++j) {
        const int64_t id = ids[static_cast<size_t>(r * s + j)];
        if (limits.pad < 0 || id != limits.pad) row.src.push_back(id);
      }
    }
  }
  std::vector<int64_t> live(static_cast<size_t>(b));  // live row i is rows[live[i]]
  for (int64_t r = 0; r < b; ++r) live[static_cast<size_t>(r)] = r;

  std::vector<int64_t> order;
  std::vector<double> pw, qw;  // scratch [v]: filtered weights of p and q
  // The filtered, normalised distribution of one row of log-probabilities into `out` [v].
  auto filtered = [&](const double* row, std::vector<double>& out) {
    detail::sampling_weights(row, v, sampling->temperature, sampling->top_k, sampling->top_p, order, out);
    double total = 0;
    for (double w : out) total += w;
    for (double& w : out) w /= total;
  };
  // The token a row takes from one row of the target's log-probabilities (greedy or a draw).
  auto choose = [&](const double* row, Rng& rng) {
    if (sampling == nullptr) return argmax(row, v);
    filtered(row, pw);
    return draw(pw, rng);
  };
  // Appends one token to a row (its target log-probability `lp`), as a chain search does: EOS
  // or the length limit ends the row. Returns whether the row goes on.
  auto emit = [&](Row& row, int64_t tok, double lp) {
    row.h.logprob += lp;
    row.h.score = row.h.logprob;
    ++stats.generated;
    if (tok == limits.eos) {
      row.h.finished = true;
      row.done = true;
      return false;
    }
    row.h.tokens.push_back(tok);
    row.seq.push_back(tok);
    if (row.h.length() >= row.limit) row.done = true;
    return !row.done;
  };
  // Drops finished rows from both decoders (reorder with the live ones).
  auto drop_finished = [&]() {
    std::vector<int64_t> keep, next;
    for (size_t i = 0; i < live.size(); ++i)
      if (!rows[static_cast<size_t>(live[i])].done) {
        keep.push_back(static_cast<int64_t>(i));
        next.push_back(live[i]);
      }
    if (keep.size() != live.size() && !keep.empty()) {
      target.reorder(keep);
      if (draft != nullptr) draft->reorder(keep);
    }
    live = std::move(next);
  };

  // The first token: one plain step of each model (BOS; a decoder-only model's prompt).
  target.start(src_ids);
  if (draft != nullptr) draft->start(src_ids);
  {
    const Tensor bos = detail::token_tensor(std::vector<int64_t>(static_cast<size_t>(b), limits.bos));
    const std::vector<double> lp = detail::read_log_probs(kOp, target.step(bos), b, v);  // [B, V]
    ++stats.target_passes;
    stats.target_rows += b;
    if (draft != nullptr) {
      draft->step(bos);  // the draft's cache now holds what the target's holds
      ++stats.draft_passes;
    }
    for (int64_t r = 0; r < b; ++r) {
      Row& row = rows[static_cast<size_t>(r)];
      const double* p = lp.data() + r * v;
      const int64_t tok = choose(p, row.rng);
      emit(row, tok, p[tok]);
    }
  }
  drop_finished();

  const int64_t K = options.draft_tokens;
  int64_t draft_fed = 0;  // the output tokens the draft's cache holds (a prefix of every row's seq)
  std::vector<int64_t> drafts, prop_len, accepted, own;
  std::vector<double> q;  // sampling with a draft model: the draft's filtered q, [n, k, V]
  while (!live.empty()) {
    const int64_t n = static_cast<int64_t>(live.size());
    const int64_t g = static_cast<int64_t>(rows[static_cast<size_t>(live[0])].seq.size());  // every live row's
    // Draft tokens this round: K, fewer near a row's limit (a round yields up to k + 1 tokens,
    // and positions past the limit are never fed, so learned positions stay in range).
    int64_t k = K;
    for (int64_t r : live) k = std::min(k, rows[static_cast<size_t>(r)].limit - g - 1);
    k = std::max<int64_t>(k, 0);

    // 1. Draft: k tokens per row (drafts [n, k]); prop_len[i] of them are proposals (lookup may
    //    propose fewer; the rest is filler that is never accepted).
    drafts.assign(static_cast<size_t>(n * k), 0);
    prop_len.assign(static_cast<size_t>(n), k);
    if (draft != nullptr && k >= 1) {
      q.assign(sampling != nullptr ? static_cast<size_t>(n * k * v) : 0, 0.0);
      // The output tokens the draft has not seen, x included: [n, w].
      const int64_t w = g - draft_fed;
      std::vector<int64_t> chunk(static_cast<size_t>(n * w));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < w; ++j)
          chunk[static_cast<size_t>(i * w + j)] = rows[static_cast<size_t>(live[i])].seq[static_cast<size_t>(draft_fed + j)];
      Tensor out = draft->step_many(Tensor::from_vector<int64_t>(chunk, {n, w}));  // [n, w, V]
      ++stats.draft_passes;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t cols = out.size(1);
        const std::vector<double> lq =
            detail::read_log_probs(kOp, out.reshape({n * cols, v}), n * cols, v);  // [n * cols, V]
        std::vector<int64_t> next(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          const double* row = lq.data() + (i * cols + cols - 1) * v;  // the last column's distribution
          int64_t tok;
          if (sampling == nullptr) {
            tok = argmax(row, v);
          } else {
            filtered(row, qw);
            tok = draw(qw, rows[static_cast<size_t>(live[i])].rng);
            std::copy(qw.begin(), qw.end(), q.begin() + (i * k + j) * v);
          }
          drafts[static_cast<size_t>(i * k + j)] = tok;
          next[static_cast<size_t>(i)] = tok;
        }
        if (j + 1 < k) {
          out = draft->step_many(Tensor::from_vector<int64_t>(next, {n, 1}));  // [n, 1, V]
          ++stats.draft_passes;
        }
      }
    } else if (draft == nullptr && k >= 1) {
      int64_t longest = 0;
      std::vector<std::vector<int64_t>> props(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        const Row& row = rows[static_cast<size_t>(live[i])];
        std::vector<int64_t> context = row.src;
        context.insert(context.end(), row.seq.begin(), row.seq.end());
        props[i] = lookup_draft(context, k, options.ngram_max, options.ngram_min);
        // Ids outside the target vocabulary (a source vocabulary that differs) end a proposal.
        for (size_t j = 0; j < props[i].size(); ++j)
          if (props[i][j] < 0 || props[i][j] >= v) {
            props[i].resize(j);
            break;
          }
        longest = std::max<int64_t>(longest, static_cast<int64_t>(props[i].size()));
      }
      k = longest;  // no row proposes anything: a plain step
      drafts.assign(static_cast<size_t>(n * k), 0);
      for (int64_t i = 0; i < n; ++i) {
        prop_len[static_cast<size_t>(i)] = static_cast<int64_t>(props[i].size());
        for (int64_t j = 0; j < k; ++j)
          drafts[static_cast<size_t>(i * k + j)] =
              j < prop_len[i] ? props[i][j] : (prop_len[i] > 0 ? props[i].back() : rows[static_cast<size_t>(live[i])].seq.back());
      }
    }

    // 2. Verify: the target scores x, d_1 .. d_k of every row in one pass -> lp [n, k + 1, V],
    //    position j the distribution of the token after x, d_1 .. d_j.
    std::vector<int64_t> verify(static_cast<size_t>(n * (k + 1)));
    for (int64_t i = 0; i < n; ++i) {
      verify[static_cast<size_t>(i * (k + 1))] = rows[static_cast<size_t>(live[i])].seq.back();
      for (int64_t j = 0; j < k; ++j)
        verify[static_cast<size_t>(i * (k + 1) + 1 + j)] = drafts[static_cast<size_t>(i * k + j)];
    }
    const Tensor scored = target.step_many(Tensor::from_vector<int64_t>(verify, {n, k + 1}));  // [n, k+1, V]
    ++stats.target_passes;
    stats.target_rows += n;
    const std::vector<double> lp =
        detail::read_log_probs(kOp, scored.reshape({n * (k + 1), v}), n * (k + 1), v);  // [n * (k+1), V]
    auto p_at = [&](int64_t i, int64_t j) { return lp.data() + (i * (k + 1) + j) * v; };

    // 3. Accept: accepted[i] draft tokens of row i pass the rule; own[i] is its token at
    //    position accepted[i] (the target's correction, or the bonus when all passed).
    accepted.assign(static_cast<size_t>(n), 0);
    own.assign(static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < n; ++i) {
      Row& row = rows[static_cast<size_t>(live[i])];
      const int64_t m = prop_len[static_cast<size_t>(i)];
      int64_t a = 0;
      if (sampling == nullptr) {
        while (a < m && drafts[static_cast<size_t>(i * k + a)] == argmax(p_at(i, a), v)) ++a;
        a = std::clamp<int64_t>(a + options.test_accept_offset, 0, k);
        own[static_cast<size_t>(i)] = argmax(p_at(i, a), v);
      } else {
        bool rejected = false;
        while (a < m) {
          const int64_t d = drafts[static_cast<size_t>(i * k + a)];
          filtered(p_at(i, a), pw);
          // q: the draft's filtered distribution, or prompt lookup's point mass on d.
          const double qd = draft != nullptr ? q[static_cast<size_t>((i * k + a) * v + d)] : 1.0;
          if (row.rng.uniform() * qd < pw[static_cast<size_t>(d)]) {  // probability min(1, p(d) / q(d))
            ++a;
            continue;
          }
          // Rejected: draw from norm(max(0, p - q)).
          double total = 0;
          for (int64_t t = 0; t < v; ++t) {
            const double qt = draft != nullptr ? q[static_cast<size_t>((i * k + a) * v + t)] : (t == d ? 1.0 : 0.0);
            pw[static_cast<size_t>(t)] = std::max(0.0, pw[static_cast<size_t>(t)] - qt);
            total += pw[static_cast<size_t>(t)];
          }
          if (!(total > 0) || options.test_residual_from_p) filtered(p_at(i, a), pw);  // p == q up to rounding: p
          own[static_cast<size_t>(i)] = draw(pw, row.rng);
          rejected = true;
          break;
        }
        if (!rejected) own[static_cast<size_t>(i)] = choose(p_at(i, a), row.rng);  // the bonus token from p
      }
      accepted[static_cast<size_t>(i)] = a;
      stats.drafted += m;
      stats.accepted += std::min(a, m);
    }
    // The batch keeps the fewest any row accepted; a row that accepted more takes its next
    // accepted draft token as its own (it passed the rule, so it is a correct next token).
    int64_t kept = k;
    for (int64_t a : accepted) kept = std::min(kept, a);

    // 4. Emit the kept draft tokens + one own token per row.
    for (int64_t i = 0; i < n; ++i) {
      Row& row = rows[static_cast<size_t>(live[i])];
      for (int64_t j = 0; j <= kept; ++j) {
        const bool from_draft = j < kept || accepted[static_cast<size_t>(i)] > kept;
        const int64_t tok = from_draft ? drafts[static_cast<size_t>(i * k + j)] : own[static_cast<size_t>(i)];
        if (!emit(row, tok, p_at(i, j)[tok])) break;
      }
    }

    // 5. Take the rejected positions back: the target keeps x, d_1 .. d_kept; the draft keeps
    //    what it was fed of the new output (it was fed the output from draft_fed on and
    //    d_1 .. d_{k-1}).
    target.rollback(k - kept);
    if (draft != nullptr && k >= 1) {
      const int64_t fed = g + k - 1;                   // output tokens in the draft's cache now
      const int64_t keep = std::min(fed, g + kept);    // those that agree with the new output
      draft->rollback(fed - keep);
      draft_fed = keep;
    }
    drop_finished();
  }

  std::vector<Hypothesis> out;
  out.reserve(rows.size());
  for (Row& row : rows) out.push_back(std::move(row.h));
  if (stats_out != nullptr) *stats_out = stats;
  return out;
}

}  // namespace

void validate(const SpeculativeOptions& o) {
  ATTN_CHECK(o.draft_tokens >= 1, kOp, "the draft tokens per round must be >= 1, got ", o.draft_tokens);
  ATTN_CHECK(o.ngram_min >= 1 && o.ngram_max >= o.ngram_min, kOp,
             "prompt lookup's n-gram sizes need 1 <= ngram_min <= ngram_max, got ", o.ngram_min, " and ", o.ngram_max);
}

std::vector<int64_t> lookup_draft(const std::vector<int64_t>& context, int64_t count, int64_t ngram_max,
                                  int64_t ngram_min) {
  const int64_t len = static_cast<int64_t>(context.size());
  for (int64_t n = std::min(ngram_max, len - 1); n >= ngram_min && n >= 1; --n) {
    // The last n tokens start at len - n; an earlier occurrence starts at st < len - n.
    for (int64_t st = len - n - 1; st >= 0; --st) {
      if (!std::equal(context.begin() + st, context.begin() + st + n, context.begin() + (len - n))) continue;
      const int64_t from = st + n, to = std::min(len, from + count);
      return std::vector<int64_t>(context.begin() + from, context.begin() + to);
    }
  }
  return {};
}

std::vector<Hypothesis> speculative_greedy(IncrementalDecoder& target, IncrementalDecoder& draft,
                                           const Tensor& src_ids, const GreedyOptions& greedy,
                                           const SpeculativeOptions& options, SpeculativeStats* stats) {
  return run(target, &draft, src_ids, {greedy.bos, greedy.eos, greedy.pad, greedy.max_len, greedy.max_extra, greedy.max_positions},
             nullptr, options, stats);
}

std::vector<Hypothesis> speculative_sample(IncrementalDecoder& target, IncrementalDecoder& draft,
                                           const Tensor& src_ids, const SamplingOptions& sampling,
                                           const SpeculativeOptions& options, SpeculativeStats* stats) {
  return run(target, &draft, src_ids,
             {sampling.bos, sampling.eos, sampling.pad, sampling.max_len, sampling.max_extra, sampling.max_positions}, &sampling, options,
             stats);
}

std::vector<Hypothesis> lookup_greedy(IncrementalDecoder& target, const Tensor& src_ids, const GreedyOptions& greedy,
                                      const SpeculativeOptions& options, SpeculativeStats* stats) {
  return run(target, nullptr, src_ids, {greedy.bos, greedy.eos, greedy.pad, greedy.max_len, greedy.max_extra, greedy.max_positions},
             nullptr, options, stats);
}

std::vector<Hypothesis> lookup_sample(IncrementalDecoder& target, const Tensor& src_ids,
                                      const SamplingOptions& sampling, const SpeculativeOptions& options,
                                      SpeculativeStats* stats) {
  return run(target, nullptr, src_ids,
             {sampling.bos, sampling.eos, sampling.pad, sampling.max_len, sampling.max_extra, sampling.max_positions}, &sampling, options,
             stats);
}

}  // namespace attn::decode
