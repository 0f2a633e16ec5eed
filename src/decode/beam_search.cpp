// Batched beam search with a GNMT or power length penalty (see beam_search.h; paper §6.1,
// tensor2tensor's beam_search.py): one beam_source per source (source_search.cpp holds the
// search), run by run_searches(). Rows of the decoder are the concatenation, in source order,
// of every running source's live hypotheses; stopped sources contribute none.
#include "attn/decode/beam_search.h"

#include <cmath>
#include <memory>

#include "attn/decode/source_search.h"
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
  ATTN_CHECK(o.beam >= 1 && o.beam <= kMaxBeam, op, "beam must be in [1, ", kMaxBeam, "], got ", o.beam);
  ATTN_CHECK(o.n_best >= 1 && o.n_best <= o.beam, op, "n_best must be in [1, beam = ", o.beam, "], got ", o.n_best);
  ATTN_CHECK(std::isfinite(o.alpha) && o.alpha >= 0, op, "alpha must be finite and >= 0, got ", o.alpha);
  detail::check_limit_options(op, {o.bos, o.eos, o.pad, o.max_len, o.max_extra, o.max_positions});
}

std::vector<std::vector<Hypothesis>> beam_search(IncrementalDecoder& decoder, const Tensor& src_ids,
                                                 const BeamOptions& options) {
  const char* op = "beam_search";
  validate(options);
  const std::vector<int64_t> limits = detail::prepare(
      op, decoder, src_ids,
      {options.bos, options.eos, options.pad, options.max_len, options.max_extra, options.max_positions});
  const int64_t b = src_ids.size(0);
  std::vector<std::unique_ptr<SourceSearch>> searches;
  std::vector<SourceSearch*> run;
  for (int64_t s = 0; s < b; ++s) {
    searches.push_back(beam_source(options, limits[s]));
    run.push_back(searches.back().get());
  }
  run_searches(op, decoder, src_ids, run);
  std::vector<std::vector<Hypothesis>> out;
  for (const auto& search : searches) out.push_back(search->results());
  return out;
}

}  // namespace attn::decode
