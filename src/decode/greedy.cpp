// Greedy search (see greedy.h): one greedy_source per source of the batch, run by
// run_searches(), which drops finished rows from the decoder's batch (source_search.cpp holds
// the search itself). Deliberately no length penalty and no batching tricks beyond reorder().
#include "attn/decode/greedy.h"

#include <memory>

#include "attn/decode/source_search.h"
#include "search_common.h"

namespace attn::decode {

void validate(const GreedyOptions& options) {
  detail::check_limit_options("greedy_search", {options.bos, options.eos, options.pad, options.max_len,
                                                options.max_extra, options.max_positions});
}

std::vector<Hypothesis> greedy_search(IncrementalDecoder& decoder, const Tensor& src_ids,
                                      const GreedyOptions& options) {
  const char* op = "greedy_search";
  const std::vector<int64_t> limit = detail::prepare(
      op, decoder, src_ids,
      {options.bos, options.eos, options.pad, options.max_len, options.max_extra, options.max_positions});
  const int64_t b = src_ids.size(0);
  std::vector<std::unique_ptr<ChainSearch>> searches;
  std::vector<SourceSearch*> run;
  for (int64_t s = 0; s < b; ++s) {
    searches.push_back(greedy_source(options, limit[s]));
    run.push_back(searches.back().get());
  }
  run_searches(op, decoder, src_ids, run);
  std::vector<Hypothesis> out;
  for (const auto& search : searches) out.push_back(std::move(search->results().front()));
  return out;
}

}  // namespace attn::decode
