// attn/serve/metrics.h — what the server counts, as plain numbers: counters, gauges and
// cumulative histograms that the engine and the HTTP layer update, and their Prometheus text
// exposition (format 0.0.4) for GET /metrics. Thread-safe: one mutex per Metrics.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace attn::serve {

// A histogram with fixed upper bounds (Prometheus `le`), each count cumulative when rendered.
struct Histogram {
  std::vector<double> bounds;         // increasing upper bounds; +Inf is implicit
  std::vector<uint64_t> counts;       // per bucket (not cumulative), bounds.size() + 1 entries
  double sum = 0;
  uint64_t count = 0;

  explicit Histogram(std::vector<double> upper_bounds = {});
  void observe(double value);
};

// A consistent copy of the engine's numbers.
struct MetricsSnapshot {
  uint64_t requests_total = 0;           // submitted and accepted
  uint64_t requests_finished_total = 0;  // every choice ended (stop or length)
  uint64_t requests_cancelled_total = 0;
  uint64_t prompt_tokens_total = 0;
  uint64_t completion_tokens_total = 0;  // generated tokens, EOS excluded
  uint64_t steps_total = 0;              // decoding steps run
  int64_t queue_length = 0;              // requests waiting to join
  int64_t running_requests = 0;
  int64_t running_rows = 0;
  int64_t max_batch = 0;
  int64_t engine_threads = 0;            // OpenMP/BLAS threads the engine thread decodes with
  // The paged KV cache (0 with the contiguous one): the pool's blocks, those rows hold now,
  // those running requests have reserved (each its worst case), and the prompt positions that
  // joining requests took from a running request's blocks instead of computing them.
  int64_t kv_blocks = 0;
  int64_t kv_block_bytes = 0;           // bytes of one block (K and V, every layer): 0 contiguous
  std::string kv_dtype = "f32";         // the blocks' element type (--kv-dtype): f32 or bf16
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_reserved = 0;
  uint64_t prefix_shared_positions_total = 0;
  // Speculative decoding: rounds run (each one model pass), tokens drafted, and drafted tokens
  // the model confirmed.
  uint64_t speculative_rounds_total = 0;
  uint64_t draft_tokens_total = 0;
  uint64_t draft_accepted_total = 0;
  Histogram batch_rows;                  // rows per decoding step (occupancy)
  Histogram time_to_first_token_seconds; // submit -> first token (or first result for beam search)
  Histogram time_per_token_seconds;      // between consecutive tokens of a choice
  Histogram request_seconds;             // submit -> done
};

// Default bucket bounds of each histogram.
MetricsSnapshot empty_metrics(int64_t max_batch);

// GET /metrics: the engine's numbers and the HTTP responses sent, by status code, as
// Prometheus text format 0.0.4 (names prefixed attn_; # HELP and # TYPE before each metric's
// samples; histograms as cumulative _bucket{le} lines ending in le="+Inf", then _sum and
// _count). `model_loaded` is 0 while the model loads.
std::string prometheus_text(const MetricsSnapshot& m, const std::map<int, uint64_t>& responses_by_status,
                            bool model_loaded);

}  // namespace attn::serve
