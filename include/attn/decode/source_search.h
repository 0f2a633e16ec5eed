// attn/decode/source_search.h — one source's search, advanced one decoding step at a time by
// whoever runs the decoder: greedy search, sampling and beam search as per-source state machines
// over the rows they own. greedy_search, sample and beam_search (greedy.h, sampler.h,
// beam_search.h) drive one per source of a batch through run_searches(); the server's engine
// drives them over a running batch that sources join and leave (serve/engine.h). The rules of
// each search (ties, EOS, limits, fairseq's finishing rule, the early stop) live here once.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "attn/core/rng.h"
#include "attn/core/tensor.h"
#include "attn/decode/beam_search.h"
#include "attn/decode/greedy.h"
#include "attn/decode/hypothesis.h"
#include "attn/decode/incremental_decoder.h"
#include "attn/decode/sampler.h"

namespace attn::decode {

// One source's search over the decoder rows it owns. Its rows are consecutive in the decoder's
// batch, in the order of next_tokens(). A driver alternates: feed next_tokens() (with the other
// searches' tokens) to IncrementalDecoder::step, hand this search its rows' log-probabilities
// through advance(), and reorder the decoder with the parents advance() returns.
class SourceSearch {
 public:
  virtual ~SourceSearch() = default;

  // The token each of its rows feeds at the next step; its rows count = size(). Empty once done().
  // Before the first advance() a search owns one row, which feeds the `bos` it was made with.
  virtual const std::vector<int64_t>& next_tokens() const = 0;

  // log_probs: its rows' next-token log-probabilities, row-major [rows, v] (rows =
  // next_tokens().size() before the call; the pointer must hold rows * v values). Advances one
  // step and returns the parents of its rows after the step: new row i continues old row
  // parents[i] (an index among its old rows; may repeat), and parents.size() is the new
  // next_tokens().size(). Empty when the search has ended (done() is then true).
  // attn::Error, leaving the search as it was: advance() after done(), a null pointer, v < 1, a
  // v that differs from the first step's or does not hold the options' bos and eos, a NaN.
  virtual std::vector<int64_t> advance(const double* log_probs, int64_t v) = 0;

  virtual bool done() const = 0;

  // Its hypotheses, best first (beam search: up to n_best; greedy and sampling: one). Valid
  // once done(); before that, what it holds so far (a cancelled search's partial answer): the
  // chain so far, or beam search's finished and live hypotheses ranked together as at the limit.
  virtual std::vector<Hypothesis> results() const = 0;
};

// Greedy search and sampling: one row per source, one token per step.
class ChainSearch : public SourceSearch {
 public:
  // The token chosen by the last advance() (EOS included) and its log-probability; -1 before.
  int64_t last_token() const { return last_token_; }
  double last_logprob() const { return last_logprob_; }

 protected:
  int64_t last_token_ = -1;
  double last_logprob_ = 0;
};

// limit: length limit in generated tokens, EOS included (>= 1). The option structs' own
// bos/eos are used; their pad/max_len/max_extra are not (the limit is given). Bad options
// (bos < 0, eos < -1, limit < 1, and what validate() refuses for sampling and beam search) are
// attn::Error here; bos and eos are checked against the vocabulary at the first advance().
std::unique_ptr<ChainSearch> greedy_source(const GreedyOptions& options, int64_t limit);
// `rng`: the source's own generator stream (sample() seeds source s with the s-th draw of
// Rng(options.seed).next_u64()).
std::unique_ptr<ChainSearch> sampling_source(const SamplingOptions& options, int64_t limit, Rng rng);
std::unique_ptr<SourceSearch> beam_source(const BeamOptions& options, int64_t limit);

// Runs one search per source of src_ids (I64 [B, S]; searches[b] for source b) to the end:
// decoder.start(src_ids), then step / advance / reorder until every search is done. Each step
// feeds the running searches' next_tokens() in source order, hands each its rows and reorders
// the decoder with their parents (offset by their first rows), skipping reorder() when no row
// moved or left. Every search must be new (one row, not done); B = 0 does nothing. `op` names
// the caller in errors (the decoder's output: shape, NaN).
void run_searches(const char* op, IncrementalDecoder& decoder, const Tensor& src_ids,
                  const std::vector<SourceSearch*>& searches);

}  // namespace attn::decode
