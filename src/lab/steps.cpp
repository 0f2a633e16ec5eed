// `attn lab steps` and the figure of `attn lab scale`: Eq. 1 of the paper taken apart into its
// five steps with the library's own ops, then checked against the fused attention op, and the
// sqrt(D) saturation table drawn as a line chart.
#include "attn/lab/steps.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "attn/ops/ops.h"
#include "attn/report/figures.h"

namespace attn::lab {

namespace {

constexpr const char* kOp = "lab steps";

report::Matrix to_matrix(const Tensor& t) {
  return report::Matrix(t.to_vector<double>(), t.size(0), t.size(1));
}

// Draws [rows, cols] from N(0, 1) and rounds each value to one decimal.
Tensor rounded_normal(int64_t rows, int64_t cols, Rng& rng) {
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (double& x : v) x = std::round(rng.normal() * 10.0) / 10.0 + 0.0;  // + 0.0: no "-0.0"
  return Tensor::from_vector<double>(v, {rows, cols});  // [rows, cols]
}

void append_matrix(std::string& s, const std::string& title, const report::Matrix& m) {
  s += title + "\n";
  char cell[32];
  for (int64_t r = 0; r < m.rows; ++r) {
    s += "  [";
    for (int64_t c = 0; c < m.cols; ++c) {
      std::snprintf(cell, sizeof cell, "%8.3f", m.at(r, c));
      s += cell;
    }
    s += " ]\n";
  }
}

}  // namespace

StepsDemo steps_demo(const StepsOptions& o) {
  ATTN_CHECK(o.length > 0 && o.d_k > 0, kOp, "--length and --dk must be positive, got ", o.length, " and ", o.d_k);
  NoGradGuard no_grad;
  Rng rng(o.seed);
  const int64_t L = o.length, Dk = o.d_k;
  Tensor q = rounded_normal(L, Dk, rng);  // [L, d_k]
  Tensor k = rounded_normal(L, Dk, rng);  // [L, d_k]
  Tensor v = rounded_normal(L, Dk, rng);  // [L, d_k]
  Tensor scores = matmul(q, transpose(k, 0, 1));                     // [L, L]  step 2: Q K^T
  Tensor scaled = scale(scores, 1.0 / std::sqrt(static_cast<double>(Dk)));  // [L, L]  step 3: / sqrt(d_k)
  Tensor weights = softmax(scaled);                                  // [L, L]  step 4: softmax per row
  Tensor out = matmul(weights, v);                                   // [L, d_k] step 5: x V

  // The fused op on the same numbers, as [1, 1, L, d_k].
  const Shape four = {1, 1, L, Dk};
  Tensor fused = scaled_dot_product_attention(reshape(q, four), reshape(k, four), reshape(v, four)).out;
  StepsDemo d;
  d.q = to_matrix(q);
  d.k = to_matrix(k);
  d.v = to_matrix(v);
  d.scores = to_matrix(scores);
  d.scaled = to_matrix(scaled);
  d.weights = to_matrix(weights);
  d.out = to_matrix(out);
  const auto a = out.to_vector<double>(), b = fused.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) d.sdpa_max_diff = std::max(d.sdpa_max_diff, std::fabs(a[i] - b[i]));
  return d;
}

std::string format_steps_demo(const StepsDemo& d) {
  char line[512];
  std::snprintf(line, sizeof line, "Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V with L = %lld, d_k = %lld\n\n",
                static_cast<long long>(d.q.rows), static_cast<long long>(d.q.cols));
  std::string s = line;
  append_matrix(s, "step 1: Q, K, V (each row one token's query, key, value)\nQ", d.q);
  append_matrix(s, "K", d.k);
  append_matrix(s, "V", d.v);
  append_matrix(s, "\nstep 2: Q K^T (row i: how well query i matches each key)", d.scores);
  std::snprintf(line, sizeof line, "\nstep 3: Q K^T / sqrt(d_k) = Q K^T / %.3f (keeps the score variance near 1)",
                std::sqrt(static_cast<double>(d.q.cols)));
  append_matrix(s, line, d.scaled);
  append_matrix(s, "\nstep 4: softmax over each row (weights >= 0, each row sums to 1)", d.weights);
  append_matrix(s, "\nstep 5: weights x V (each output row is a weighted mean of the value rows)", d.out);
  std::snprintf(line, sizeof line, "\nthe fused scaled_dot_product_attention op gives the same output (max |diff| %.1e)\n",
                d.sdpa_max_diff);
  s += line;
  return s;
}

std::string steps_figure(const StepsDemo& d) {
  report::AttentionStepsFigure f;
  f.q = d.q, f.k = d.k, f.v = d.v;
  f.scores = d.scores, f.scaled = d.scaled, f.weights = d.weights, f.out = d.out;
  return report::attention_steps_figure(f);
}

std::string scale_figure(const std::vector<nn::ScaleRow>& rows) {
  report::Series unscaled, scaled;
  unscaled.name = "softmax(q k^T)";
  scaled.name = "softmax(q k^T / sqrt(D))";
  for (const nn::ScaleRow& r : rows) {
    const double x = std::log2(static_cast<double>(r.d));
    unscaled.x.push_back(x);
    unscaled.y.push_back(r.unscaled);
    scaled.x.push_back(x);
    scaled.y.push_back(r.scaled);
  }
  report::Panel p;
  p.title = "Mean largest attention weight per query";
  p.x_title = "log2 D";
  p.y_title = "mean max weight";
  p.series = {unscaled, scaled};
  p.y_min = 0.0;
  p.y_max = 1.0;
  report::LineChartOptions lo;
  lo.title = "Without 1/sqrt(D) the softmax saturates as D grows";
  return report::line_chart({p}, lo);
}

}  // namespace attn::lab
