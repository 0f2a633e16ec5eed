// Greedy search (see greedy.h): the argmax chain per source, with finished rows dropped from
// the decoder's batch. Deliberately no length penalty and no batching tricks beyond reorder().
#include "attn/decode/greedy.h"

#include "search_common.h"

namespace attn::decode {

void validate(const GreedyOptions& options) {
  detail::check_limit_options("greedy_search", {options.bos, options.eos, options.pad, options.max_len, options.max_extra});
}

std::vector<Hypothesis> greedy_search(IncrementalDecoder& decoder, const Tensor& src_ids,
                                      const GreedyOptions& options) {
  const char* op = "greedy_search";
  const std::vector<int64_t> limit = detail::prepare(
      op, decoder, src_ids, {options.bos, options.eos, options.pad, options.max_len, options.max_extra});
  const int64_t v = decoder.vocab_size();
  const int64_t b = src_ids.size(0);
  std::vector<Hypothesis> out(static_cast<size_t>(b));
  if (b == 0) return out;

  decoder.start(src_ids);
  std::vector<int64_t> live(static_cast<size_t>(b));  // live row i decodes source live[i]
  for (int64_t i = 0; i < b; ++i) live[i] = i;
  std::vector<int64_t> last(static_cast<size_t>(b), options.bos);

  while (!live.empty()) {
    const int64_t n = static_cast<int64_t>(live.size());
    const std::vector<double> lp = detail::read_log_probs(op, decoder.step(detail::token_tensor(last)), n, v);
    std::vector<int64_t> keep_rows, keep_src, keep_last;
    for (int64_t r = 0; r < n; ++r) {
      const double* row = lp.data() + r * v;
      int64_t best = 0;  // strict > keeps the lower id on ties
      for (int64_t t = 1; t < v; ++t)
        if (row[t] > row[best]) best = t;
      Hypothesis& h = out[live[r]];
      h.logprob += row[best];
      h.score = h.logprob;
      if (best == options.eos) {
        h.finished = true;
        continue;
      }
      h.tokens.push_back(best);
      if (h.length() >= limit[live[r]]) continue;  // cut at the limit
      keep_rows.push_back(r);
      keep_src.push_back(live[r]);
      keep_last.push_back(best);
    }
    if (keep_rows.empty()) break;
    if (static_cast<int64_t>(keep_rows.size()) != n) decoder.reorder(keep_rows);  // drop finished rows
    live = std::move(keep_src);
    last = std::move(keep_last);
  }
  return out;
}

}  // namespace attn::decode
