// Batched beam search with a GNMT or power length penalty (see beam_search.h; paper §6.1,
// tensor2tensor's beam_search.py). Rows of the decoder are the concatenation, in source order,
// of every running source's live hypotheses; stopped sources contribute none.
// Deliberately simple bookkeeping: each hypothesis carries its token vector (outputs are short).
#include "attn/decode/beam_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "search_common.h"

namespace attn::decode {

const char* length_penalty_name(LengthPenalty kind) {
  return kind == LengthPenalty::Gnmt ? "gnmt" : "power";
}

LengthPenalty parse_length_penalty(const std::string& name) {
  if (name == "gnmt") return LengthPenalty::Gnmt;
  if (name == "power") return LengthPenalty::Power;
  fail("length_penalty", "unknown length penalty \"", name, "\" (expected gnmt or power)");
}

double length_penalty(LengthPenalty kind, double alpha, int64_t length) {
  ATTN_CHECK(length >= 1, "length_penalty", "length must be >= 1, got ", length);
  const double len = static_cast<double>(length);
  return kind == LengthPenalty::Gnmt ? std::pow((5.0 + len) / 6.0, alpha) : std::pow(len, alpha);
}

void validate(const BeamOptions& o) {
  const char* op = "beam_search";
  ATTN_CHECK(o.beam >= 1, op, "beam must be >= 1, got ", o.beam);
  ATTN_CHECK(o.n_best >= 1 && o.n_best <= o.beam, op, "n_best must be in [1, beam = ", o.beam, "], got ", o.n_best);
  ATTN_CHECK(std::isfinite(o.alpha) && o.alpha >= 0, op, "alpha must be finite and >= 0, got ", o.alpha);
  detail::check_limit_options(op, {o.bos, o.eos, o.pad, o.max_len, o.max_extra});
}

namespace {

struct Live {
  std::vector<int64_t> tokens;  // generated so far (no BOS)
  double logprob = 0;
};

// One expansion: live hypothesis `parent` (index within its source) extended by `token`.
struct Candidate {
  double logprob;
  int64_t parent;
  int64_t token;
};

// Candidate order: higher log-probability, then the lower row, then the lower token id.
bool candidate_before(const Candidate& a, const Candidate& b) {
  if (a.logprob != b.logprob) return a.logprob > b.logprob;
  if (a.parent != b.parent) return a.parent < b.parent;
  return a.token < b.token;
}

// Final order: higher score, then the lexicographically smaller tokens, then finished first.
bool hypothesis_before(const Hypothesis& a, const Hypothesis& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.tokens != b.tokens) return a.tokens < b.tokens;
  return a.finished && !b.finished;
}

struct SourceState {
  int64_t limit = 0;                 // length limit in generated tokens
  std::vector<Live> live;            // at most beam, best first
  std::vector<Hypothesis> finished;  // at most beam, best first
  bool done = false;
};

}  // namespace

std::vector<std::vector<Hypothesis>> beam_search(IncrementalDecoder& decoder, const Tensor& src_ids,
                                                 const BeamOptions& options) {
  const char* op = "beam_search";
  validate(options);
  const std::vector<int64_t> limits = detail::prepare(
      op, decoder, src_ids, {options.bos, options.eos, options.pad, options.max_len, options.max_extra});
  const int64_t v = decoder.vocab_size();
  const int64_t b = src_ids.size(0);
  const int64_t beam = options.beam;
  const int64_t per_row = std::min<int64_t>(2 * beam, v);  // candidates kept from each live row
  auto penalty = [&](int64_t len) { return length_penalty(options.length_penalty, options.alpha, len); };

  std::vector<std::vector<Hypothesis>> out(static_cast<size_t>(b));
  if (b == 0) return out;
  std::vector<SourceState> state(static_cast<size_t>(b));
  for (int64_t s = 0; s < b; ++s) {
    state[s].limit = limits[s];
    state[s].live.push_back(Live{});  // the BOS prefix, row s after start()
  }

  decoder.start(src_ids);
  std::vector<int64_t> last(static_cast<size_t>(b), options.bos);
  std::vector<int64_t> order(static_cast<size_t>(v));  // scratch: token ids of one row, sorted
  std::vector<Candidate> cands;
  for (int64_t t = 1;; ++t) {  // t = length of the hypotheses after this step
    const int64_t n = static_cast<int64_t>(last.size());
    const std::vector<double> lp = detail::read_log_probs(op, decoder.step(detail::token_tensor(last)), n, v);
    std::vector<int64_t> rows, next_last;  // the decoder's rows for the next step
    int64_t offset = 0;                    // this source's first row in the current step
    for (int64_t s = 0; s < b; ++s) {
      SourceState& st = state[s];
      if (st.done) continue;
      const int64_t k = static_cast<int64_t>(st.live.size());

      // 1. The top 2*beam expansions of this source: the best 2*beam of each row suffice.
      cands.clear();
      for (int64_t i = 0; i < k; ++i) {
        const double* row = lp.data() + (offset + i) * v;
        std::iota(order.begin(), order.end(), int64_t{0});
        std::partial_sort(order.begin(), order.begin() + per_row, order.end(), [&](int64_t x, int64_t y) {
          return row[x] != row[y] ? row[x] > row[y] : x < y;
        });
        for (int64_t j = 0; j < per_row; ++j)
          cands.push_back({st.live[i].logprob + row[order[j]], i, order[j]});
      }
      const int64_t top = std::min<int64_t>(2 * beam, static_cast<int64_t>(cands.size()));
      std::partial_sort(cands.begin(), cands.begin() + top, cands.end(), candidate_before);

      // 2. EOS candidates among the best `beam` finish (fairseq's rule: those ranked below
      //    are dropped, so beam 1 is greedy); the best `beam` others stay live.
      std::vector<Live> next;
      for (int64_t c = 0; c < top; ++c) {
        const Candidate& cd = cands[c];
        const Live& parent = st.live[cd.parent];
        if (cd.token == options.eos) {
          if (c < beam) st.finished.push_back(Hypothesis{parent.tokens, cd.logprob, cd.logprob / penalty(t), true});
        } else if (static_cast<int64_t>(next.size()) < beam) {
          Live l{parent.tokens, cd.logprob};
          l.tokens.push_back(cd.token);
          next.push_back(std::move(l));
          rows.push_back(offset + cd.parent);
        }
      }
      std::sort(st.finished.begin(), st.finished.end(), hypothesis_before);
      if (static_cast<int64_t>(st.finished.size()) > beam) st.finished.resize(static_cast<size_t>(beam));
      offset += k;

      // 3. Stop at the limit (rank finished and live together), or when no live hypothesis can
      //    beat the beam-th finished one: its log-probability only falls, and the penalty grows
      //    with length (alpha >= 0), so lp / penalty(limit) bounds every future score.
      bool stop = false;
      std::vector<Hypothesis> ranked;
      if (t >= st.limit || next.empty()) {
        ranked = std::move(st.finished);
        for (Live& l : next) {
          const double score = l.logprob / penalty(t);
          ranked.push_back(Hypothesis{std::move(l.tokens), l.logprob, score, false});
        }
        std::sort(ranked.begin(), ranked.end(), hypothesis_before);
        stop = true;
      } else if (static_cast<int64_t>(st.finished.size()) == beam &&
                 st.finished.back().score > next.front().logprob / penalty(st.limit)) {
        ranked = std::move(st.finished);
        stop = true;
      }
      if (stop) {
        rows.resize(rows.size() - next.size());  // this source's new rows are the last ones
        if (static_cast<int64_t>(ranked.size()) > options.n_best) ranked.resize(static_cast<size_t>(options.n_best));
        out[s] = std::move(ranked);
        st.done = true;
        st.live.clear();
        continue;
      }
      for (const Live& l : next) next_last.push_back(l.tokens.back());
      st.live = std::move(next);
    }
    if (rows.empty()) break;
    decoder.reorder(rows);
    last = std::move(next_last);
  }
  return out;
}

}  // namespace attn::decode
