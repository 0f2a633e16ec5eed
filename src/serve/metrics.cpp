// serve/metrics.cpp — see attn/serve/metrics.h.
#include "attn/serve/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace attn::serve {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

void Histogram::observe(double value) {
  // The first bucket whose upper bound is >= value (Prometheus buckets are "le").
  const size_t i = static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
  ++counts[i];
  sum += value;
  ++count;
}

MetricsSnapshot empty_metrics(int64_t max_batch) {
  MetricsSnapshot m;
  m.max_batch = max_batch;
  std::vector<double> rows;
  for (int64_t r = 1; r < max_batch; r *= 2) rows.push_back(static_cast<double>(r));
  rows.push_back(static_cast<double>(max_batch));
  m.batch_rows = Histogram(rows);
  const std::vector<double> latency = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  m.time_to_first_token_seconds = Histogram(latency);
  m.time_per_token_seconds = Histogram(latency);
  m.request_seconds = Histogram({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120});
  return m;
}

namespace {

// A sample value: integers without a fraction, others with enough digits to read back.
std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n";
  out += "# TYPE " + name + " " + type + "\n";
}

void scalar(std::string& out, const std::string& name, const char* type, const char* help, double v) {
  header(out, name, type, help);
  out += name + " " + number(v) + "\n";
}

void histogram(std::string& out, const std::string& name, const char* help, const Histogram& h) {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += i < h.counts.size() ? h.counts[i] : 0;
    out += name + "_bucket{le=\"" + number(h.bounds[i]) + "\"} " + number(static_cast<double>(cumulative)) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + number(static_cast<double>(h.count)) + "\n";
  out += name + "_sum " + number(h.sum) + "\n";
  out += name + "_count " + number(static_cast<double>(h.count)) + "\n";
}

}  // namespace

std::string prometheus_text(const MetricsSnapshot& m, const std::map<int, uint64_t>& responses_by_status,
                            bool model_loaded) {
  std::string out;
  const auto d = [](auto v) { return static_cast<double>(v); };
  scalar(out, "attn_model_loaded", "gauge", "1 once the model is loaded and requests are served", model_loaded ? 1 : 0);
  scalar(out, "attn_requests_total", "counter", "completion requests accepted (one per prompt)", d(m.requests_total));
  scalar(out, "attn_requests_finished_total", "counter", "requests whose every choice ended (stop or length)",
         d(m.requests_finished_total));
  scalar(out, "attn_requests_cancelled_total", "counter", "requests cancelled (client gone, stop string, shutdown)",
         d(m.requests_cancelled_total));
  scalar(out, "attn_prompt_tokens_total", "counter", "prompt tokens of accepted requests", d(m.prompt_tokens_total));
  scalar(out, "attn_completion_tokens_total", "counter", "generated tokens, EOS excluded", d(m.completion_tokens_total));
  scalar(out, "attn_decode_steps_total", "counter", "decoding steps run", d(m.steps_total));
  scalar(out, "attn_queue_length", "gauge", "requests waiting to join the running batch", d(m.queue_length));
  scalar(out, "attn_running_requests", "gauge", "requests in the running batch", d(m.running_requests));
  scalar(out, "attn_running_rows", "gauge", "decoder rows in the running batch", d(m.running_rows));
  scalar(out, "attn_max_batch", "gauge", "decoder rows per step at most (--max-batch)", d(m.max_batch));
  scalar(out, "attn_engine_threads", "gauge", "OpenMP/BLAS threads the decoding engine runs on (--threads)",
         d(m.engine_threads));
  scalar(out, "attn_kv_blocks", "gauge", "blocks of the paged KV cache's pool (0: contiguous cache)", d(m.kv_blocks));
  scalar(out, "attn_kv_block_bytes", "gauge",
         "bytes of one KV cache block, K and V of every layer (0: contiguous cache; bf16 blocks take half)",
         d(m.kv_block_bytes));
  header(out, "attn_kv_cache_info", "gauge", "the KV cache's element type (--kv-dtype), as a label; always 1");
  out += "attn_kv_cache_info{dtype=\"" + m.kv_dtype + "\"} 1\n";
  scalar(out, "attn_kv_blocks_used", "gauge", "KV cache blocks that running rows hold", d(m.kv_blocks_used));
  scalar(out, "attn_kv_blocks_reserved", "gauge",
         "KV cache blocks reserved by running requests (each its worst case; a request joins when its own fits)",
         d(m.kv_blocks_reserved));
  scalar(out, "attn_prefix_shared_positions_total", "counter",
         "prompt positions taken from another request's KV cache blocks instead of computed",
         d(m.prefix_shared_positions_total));
  scalar(out, "attn_speculative_rounds_total", "counter",
         "speculative decoding rounds (one model pass checking the drafted tokens)", d(m.speculative_rounds_total));
  scalar(out, "attn_draft_tokens_total", "counter", "tokens drafted for speculative decoding", d(m.draft_tokens_total));
  scalar(out, "attn_draft_accepted_total", "counter", "drafted tokens the model confirmed", d(m.draft_accepted_total));
  histogram(out, "attn_batch_rows", "decoder rows per decoding step (batch occupancy)", m.batch_rows);
  histogram(out, "attn_time_to_first_token_seconds", "seconds from submission to a request's first token",
            m.time_to_first_token_seconds);
  histogram(out, "attn_time_per_token_seconds", "seconds between consecutive tokens of a choice",
            m.time_per_token_seconds);
  histogram(out, "attn_request_seconds", "seconds from submission to a request's end", m.request_seconds);
  header(out, "attn_http_responses_total", "counter", "HTTP responses sent, by status code");
  for (const auto& [status, count] : responses_by_status)
    out += "attn_http_responses_total{status=\"" + std::to_string(status) + "\"} " + number(d(count)) + "\n";
  return out;
}

}  // namespace attn::serve
