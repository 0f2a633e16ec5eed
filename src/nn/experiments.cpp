// The sqrt(D) saturation experiment of seed 000 (paper §3.2.1): the largest softmax weight per
// query with and without the 1/sqrt(D) scale, computed with the library's own attention op so
// that the table also checks the op's default scale. No gradients are recorded.
#include "attn/nn/experiments.h"

#include <algorithm>
#include <cstdio>

#include "attn/ops/ops.h"

namespace attn::nn {
namespace {

// weights [N, 1, T, T] -> the mean over the N*T rows of each row's largest entry.
double mean_row_max(const Tensor& weights) {
  const int64_t cols = weights.size(-1);
  const auto w = weights.to_vector<double>();
  const int64_t rows = static_cast<int64_t>(w.size()) / cols;
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const auto first = w.begin() + r * cols;
    total += *std::max_element(first, first + cols);
  }
  return total / static_cast<double>(rows);
}

}  // namespace

ScaleRow saturation_row(int64_t d, int64_t seq_len, int64_t trials, uint64_t seed) {
  ATTN_CHECK(d > 0 && seq_len > 0 && trials > 0, "saturation_row", "sizes must be positive, got d ", d,
             ", seq_len ", seq_len, ", trials ", trials);
  NoGradGuard no_grad;
  Rng rng(seed);
  const Shape shape = {trials, 1, seq_len, d};
  Tensor q = Tensor::randn(shape, rng, DType::F64);                      // [N, 1, T, D]
  Tensor k = Tensor::randn(shape, rng, DType::F64);                      // [N, 1, T, D]
  Tensor v = Tensor::zeros({trials, 1, seq_len, 1}, DType::F64);         // [N, 1, T, 1]; only weights matter

  ScaleRow row;
  row.d = d;
  row.seq_len = seq_len;
  row.trials = trials;

  // Var(q·k) over every raw score, as the seed prints it (about D for unit-variance entries).
  const auto scores = matmul(q, transpose(k, 2, 3)).to_vector<double>();  // [N, 1, T, T]
  double mean = 0;
  for (double s : scores) mean += s;
  mean /= static_cast<double>(scores.size());
  double var = 0;
  for (double s : scores) var += (s - mean) * (s - mean);
  row.score_variance = var / static_cast<double>(scores.size());

  SdpaOptions unscaled;
  unscaled.scale = 1.0;  // softmax(q k^T): no 1/sqrt(D)
  unscaled.need_weights = true;
  row.unscaled = mean_row_max(scaled_dot_product_attention(q, k, v, unscaled).weights);  // [N, 1, T, T]

  SdpaOptions scaled;  // scale 0 = the default 1/sqrt(D)
  scaled.need_weights = true;
  row.scaled = mean_row_max(scaled_dot_product_attention(q, k, v, scaled).weights);  // [N, 1, T, T]
  return row;
}

std::vector<ScaleRow> saturation_table(const std::vector<int64_t>& dims, int64_t seq_len, int64_t trials,
                                       uint64_t seed) {
  std::vector<ScaleRow> rows;
  rows.reserve(dims.size());
  for (int64_t d : dims) rows.push_back(saturation_row(d, seq_len, trials, seed));
  return rows;
}

std::string format_saturation_table(const std::vector<ScaleRow>& rows) {
  std::string out = "     D    Var(q.k)   max weight, unscaled   max weight, 1/sqrt(D)\n";
  char line[128];
  for (const ScaleRow& r : rows) {
    std::snprintf(line, sizeof line, "%6lld  %10.1f   %20.3f   %21.3f\n", static_cast<long long>(r.d),
                  r.score_variance, r.unscaled, r.scaled);
    out += line;
  }
  return out;
}

}  // namespace attn::nn
