// Sampling with temperature, top-k and top-p (see sampler.h). Each source owns an attn::Rng
// seeded from the options' seed, and draws one uniform number per generated token. The kept
// tokens are walked in ascending id order, so top_k = V and top_k = 0 draw the same samples.
#include "attn/decode/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "attn/core/rng.h"
#include "search_common.h"

namespace attn::decode {

void validate(const SamplingOptions& o) {
  const char* op = "sample";
  ATTN_CHECK(std::isfinite(o.temperature) && o.temperature > 0, op,
             "temperature must be finite and > 0, got ", o.temperature,
             " (for the limit temperature -> 0 use greedy_search)");
  ATTN_CHECK(o.top_k >= 0, op, "top_k must be >= 0 (0: no top-k filter), got ", o.top_k);
  ATTN_CHECK(o.top_p > 0 && o.top_p <= 1, op, "top_p must be in (0, 1] (1: no nucleus filter), got ", o.top_p);
  detail::check_limit_options(op, {o.bos, o.eos, o.pad, o.max_len, o.max_extra});
}

namespace {

// Draws one token from log-probabilities row[0, v) under the options' filters.
// `order` and `weight` are scratch buffers of size v.
int64_t draw(const double* row, int64_t v, const SamplingOptions& o, Rng& rng, std::vector<int64_t>& order,
             std::vector<double>& weight) {
  const double inv_t = 1.0 / o.temperature;
  double zmax = -INFINITY;  // the largest tempered log-probability, for a stable exp
  for (int64_t t = 0; t < v; ++t) zmax = std::max(zmax, row[t] * inv_t);
  ATTN_CHECK(zmax > -INFINITY, "sample", "every token has probability 0 (all log-probabilities are -inf)");
  for (int64_t t = 0; t < v; ++t) weight[t] = std::exp(row[t] * inv_t - zmax);  // unnormalised p^(1/T)

  const int64_t k = (o.top_k == 0 || o.top_k > v) ? v : o.top_k;
  if (k < v || o.top_p < 1) {
    // Most probable first, ties to the lower id; keep the first `keep` of that order.
    std::iota(order.begin(), order.end(), int64_t{0});
    auto before = [&](int64_t x, int64_t y) { return row[x] != row[y] ? row[x] > row[y] : x < y; };
    if (o.top_p < 1)
      std::sort(order.begin(), order.end(), before);
    else
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
    int64_t keep = k;
    if (o.top_p < 1) {
      double total = 0;
      for (int64_t j = 0; j < k; ++j) total += weight[order[j]];
      double mass = 0;  // the smallest prefix whose probability reaches top_p
      for (int64_t j = 0; j < k; ++j) {
        mass += weight[order[j]] / total;
        if (mass >= o.top_p) {
          keep = j + 1;
          break;
        }
      }
    }
    for (int64_t j = keep; j < v; ++j) weight[order[j]] = 0;  // filtered out
  }

  double total = 0;
  for (int64_t t = 0; t < v; ++t) total += weight[t];
  const double u = rng.uniform() * total;
  double acc = 0;
  int64_t last_positive = 0;
  for (int64_t t = 0; t < v; ++t) {
    if (weight[t] <= 0) continue;
    acc += weight[t];
    last_positive = t;
    if (u < acc) return t;
  }
  return last_positive;  // only reached through rounding at the top end
}

}  // namespace

std::vector<Hypothesis> sample(IncrementalDecoder& decoder, const Tensor& src_ids, const SamplingOptions& options) {
  const char* op = "sample";
  validate(options);
  const std::vector<int64_t> limit = detail::prepare(
      op, decoder, src_ids, {options.bos, options.eos, options.pad, options.max_len, options.max_extra});
  const int64_t v = decoder.vocab_size();
  const int64_t b = src_ids.size(0);
  std::vector<Hypothesis> out(static_cast<size_t>(b));
  if (b == 0) return out;

  Rng master(options.seed);  // one stream per source, independent of the batch's progress
  std::vector<Rng> rngs;
  for (int64_t s = 0; s < b; ++s) rngs.emplace_back(master.next_u64());

  decoder.start(src_ids);
  std::vector<int64_t> live(static_cast<size_t>(b));  // live row i samples source live[i]
  std::iota(live.begin(), live.end(), int64_t{0});
  std::vector<int64_t> last(static_cast<size_t>(b), options.bos);
  std::vector<int64_t> order(static_cast<size_t>(v));
  std::vector<double> weight(static_cast<size_t>(v));

  while (!live.empty()) {
    const int64_t n = static_cast<int64_t>(live.size());
    const std::vector<double> lp = detail::read_log_probs(op, decoder.step(detail::token_tensor(last)), n, v);
    std::vector<int64_t> keep_rows, keep_src, keep_last;
    for (int64_t r = 0; r < n; ++r) {
      const double* row = lp.data() + r * v;
      const int64_t s = live[r];
      const int64_t tok = draw(row, v, options, rngs[s], order, weight);
      Hypothesis& h = out[s];
      h.logprob += row[tok];
      h.score = h.logprob;
      if (tok == options.eos) {
        h.finished = true;
        continue;
      }
      h.tokens.push_back(tok);
      if (h.length() >= limit[s]) continue;  // cut at the limit
      keep_rows.push_back(r);
      keep_src.push_back(s);
      keep_last.push_back(tok);
    }
    if (keep_rows.empty()) break;
    if (static_cast<int64_t>(keep_rows.size()) != n) decoder.reorder(keep_rows);  // drop finished rows
    live = std::move(keep_src);
    last = std::move(keep_last);
  }
  return out;
}

}  // namespace attn::decode
