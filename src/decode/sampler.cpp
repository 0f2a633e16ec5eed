// Sampling with temperature, top-k and top-p (see sampler.h): one sampling_source per source of
// the batch, run by run_searches() (source_search.cpp holds the draw). Source s owns an
// attn::Rng seeded with the s-th next_u64() of Rng(seed), and draws one uniform number per
// generated token.
#include "attn/decode/sampler.h"

#include <cmath>
#include <memory>

#include "attn/core/rng.h"
#include "attn/decode/source_search.h"
#include "search_common.h"

namespace attn::decode {

void validate(const SamplingOptions& o) {
  const char* op = "sample";
  ATTN_CHECK(std::isfinite(o.temperature) && o.temperature > 0, op,
             "temperature must be finite and > 0, got ", o.temperature,
             " (for the limit temperature -> 0 use greedy_search)");
  ATTN_CHECK(o.top_k >= 0, op, "top_k must be >= 0 (0: no top-k filter), got ", o.top_k);
  ATTN_CHECK(o.top_p > 0 && o.top_p <= 1, op, "top_p must be in (0, 1] (1: no nucleus filter), got ", o.top_p);
  detail::check_limit_options(op, {o.bos, o.eos, o.pad, o.max_len, o.max_extra, o.max_positions});
}

std::vector<Hypothesis> sample(IncrementalDecoder& decoder, const Tensor& src_ids, const SamplingOptions& options) {
  const char* op = "sample";
  validate(options);
  const std::vector<int64_t> limit = detail::prepare(
      op, decoder, src_ids,
      {options.bos, options.eos, options.pad, options.max_len, options.max_extra, options.max_positions});
  const int64_t b = src_ids.size(0);
  Rng master(options.seed);  // one stream per source, independent of the batch's progress
  std::vector<std::unique_ptr<ChainSearch>> searches;
  std::vector<SourceSearch*> run;
  for (int64_t s = 0; s < b; ++s) {
    searches.push_back(sampling_source(options, limit[s], Rng(master.next_u64())));
    run.push_back(searches.back().get());
  }
  run_searches(op, decoder, src_ids, run);
  std::vector<Hypothesis> out;
  for (const auto& search : searches) out.push_back(std::move(search->results().front()));
  return out;
}

}  // namespace attn::decode
