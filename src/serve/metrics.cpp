// serve/metrics.cpp — see attn/serve/metrics.h.
#include "attn/serve/metrics.h"

#include <algorithm>

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

}  // namespace attn::serve
