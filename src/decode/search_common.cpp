// Shared checks and plumbing of the three searches (see search_common.h).
#include "search_common.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "attn/core/error.h"

namespace attn::decode::detail {

void check_limit_options(const char* op, const SearchLimits& limits) {
  ATTN_CHECK(!(limits.max_len && limits.max_extra), op,
             "max_len and max_extra are exclusive (max_len is absolute, max_extra is added to the source "
             "length); set one, got max_len ", *limits.max_len, " and max_extra ", *limits.max_extra);
  if (limits.max_len)
    ATTN_CHECK(*limits.max_len >= 1, op, "max_len must be >= 1, got ", *limits.max_len);
  if (limits.max_extra)
    ATTN_CHECK(*limits.max_extra >= 0, op, "max_extra must be >= 0, got ", *limits.max_extra);
  if (limits.max_positions)
    ATTN_CHECK(*limits.max_positions >= 1, op, "max_positions must be >= 1, got ", *limits.max_positions);
}

std::vector<int64_t> prepare(const char* op, const IncrementalDecoder& decoder, const Tensor& src_ids,
                             const SearchLimits& limits) {
  check_limit_options(op, limits);
  ATTN_CHECK(src_ids.defined(), op, "src_ids is undefined");
  ATTN_CHECK(src_ids.dtype() == DType::I64 && src_ids.dim() == 2, op, "src_ids must be i64 [B, S], got ",
             src_ids.str());
  const int64_t v = decoder.vocab_size();
  ATTN_CHECK(v >= 1, op, "the decoder's vocab_size must be >= 1, got ", v);
  ATTN_CHECK(limits.bos >= 0 && limits.bos < v, op, "bos must be a token id in [0, ", v, "), got ", limits.bos);
  ATTN_CHECK(limits.eos == -1 || (limits.eos >= 0 && limits.eos < v), op,
             "eos must be a token id in [0, ", v, ") or -1 (none), got ", limits.eos);

  const int64_t b = src_ids.size(0), s = src_ids.size(1);
  const std::vector<int64_t> ids = src_ids.to_vector<int64_t>();
  std::vector<int64_t> limit(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) {
    if (limits.max_len) {
      limit[i] = *limits.max_len;
    } else {
      int64_t len = 0;  // the source's length without its PAD tokens
      for (int64_t j = 0; j < s; ++j)
        if (limits.pad < 0 || ids[i * s + j] != limits.pad) ++len;
      limit[i] = len + limits.max_extra.value_or(50);
      ATTN_CHECK(limit[i] >= 1, op, "source ", i, " is empty and max_extra is 0: its length limit would be 0");
    }
    if (limits.max_positions) limit[i] = std::min(limit[i], *limits.max_positions);
  }
  return limit;
}

std::vector<double> read_log_probs(const char* op, const Tensor& log_probs, int64_t n, int64_t v) {
  ATTN_CHECK(log_probs.defined() && is_floating(log_probs.dtype()) && log_probs.dim() == 2 &&
                 log_probs.size(0) == n && log_probs.size(1) == v,
             op, "the decoder's step must return f32/f64 log-probabilities [", n, ", ", v, "], got ",
             log_probs.defined() ? log_probs.str() : std::string("undefined"));
  std::vector<double> values = log_probs.to_vector<double>();
  for (size_t i = 0; i < values.size(); ++i)
    ATTN_CHECK(!std::isnan(values[i]), op, "the decoder's step returned NaN at row ", static_cast<int64_t>(i) / v,
               ", token ", static_cast<int64_t>(i) % v);
  return values;
}

void sampling_weights(const double* row, int64_t v, double temperature, int64_t top_k, double top_p,
                      std::vector<int64_t>& order, std::vector<double>& weight) {
  order.resize(static_cast<size_t>(v));
  weight.resize(static_cast<size_t>(v));
  const double inv_t = 1.0 / temperature;
  double zmax = -INFINITY;  // the largest tempered log-probability, for a stable exp
  for (int64_t t = 0; t < v; ++t) zmax = std::max(zmax, row[t] * inv_t);
  ATTN_CHECK(zmax > -INFINITY, "sample", "every token has probability 0 (all log-probabilities are -inf)");
  for (int64_t t = 0; t < v; ++t) weight[t] = std::exp(row[t] * inv_t - zmax);  // unnormalised p^(1/T)

  const int64_t k = (top_k == 0 || top_k > v) ? v : top_k;
  if (k < v || top_p < 1) {
    // Most probable first, ties to the lower id; keep the first `keep` of that order.
    std::iota(order.begin(), order.end(), int64_t{0});
    auto before = [&](int64_t x, int64_t y) { return row[x] != row[y] ? row[x] > row[y] : x < y; };
    if (top_p < 1)
      std::sort(order.begin(), order.end(), before);
    else
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
    int64_t keep = k;
    if (top_p < 1) {
      double total = 0;
      for (int64_t j = 0; j < k; ++j) total += weight[order[j]];
      double mass = 0;  // the smallest prefix whose probability reaches top_p
      for (int64_t j = 0; j < k; ++j) {
        mass += weight[order[j]] / total;
        if (mass >= top_p) {
          keep = j + 1;
          break;
        }
      }
    }
    for (int64_t j = keep; j < v; ++j) weight[order[j]] = 0;  // filtered out
  }
}

Tensor token_tensor(const std::vector<int64_t>& tokens) {
  return Tensor::from_vector<int64_t>(tokens, {static_cast<int64_t>(tokens.size())});  // [N]
}

}  // namespace attn::decode::detail
