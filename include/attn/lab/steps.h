// attn/lab/steps.h — `attn lab steps` and `attn lab scale`: paper §3.2.1, Eq. 1 worked
// through on small matrices (seed 001's five-step example, L = 4 and d_k = 4): Q, K, V, then
// Q K^T, divided by sqrt(d_k), softmax per row, times V, each printed as a matrix and drawn; and
// the figure of the sqrt(D) saturation table (nn/experiments.h computes the table).
// Not here: masks (lab/symmetry.h), multi-head projections, gradients.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/nn/experiments.h"
#include "attn/report/matrix.h"

namespace attn::lab {

struct StepsOptions {
  int64_t length = 4;  // L queries and L keys
  int64_t d_k = 4;
  uint64_t seed = 0;
};

// Every intermediate of softmax(Q K^T / sqrt(d_k)) V.
struct StepsDemo {
  report::Matrix q, k, v;  // [L, d_k], N(0, 1) draws rounded to one decimal (easy to redo by hand)
  report::Matrix scores;   // Q K^T [L, L]
  report::Matrix scaled;   // Q K^T / sqrt(d_k)
  report::Matrix weights;  // softmax of each row of `scaled`
  report::Matrix out;      // weights V [L, d_k]
  double sdpa_max_diff = 0;  // max |out - scaled_dot_product_attention(Q, K, V)|: the fused op agrees
};

// Computes each step with the library's ops (matmul, scale, softmax) in float64 and compares the
// result with the fused op. Errors (attn::Error) for non-positive sizes.
StepsDemo steps_demo(const StepsOptions& options);

// The steps as labelled matrices, three decimals.
std::string format_steps_demo(const StepsDemo& demo);

// The seven matrices as annotated heatmaps side by side (SVG).
std::string steps_figure(const StepsDemo& demo);

// The saturation table as a line chart: mean largest weight against log2 D, unscaled and scaled.
std::string scale_figure(const std::vector<nn::ScaleRow>& rows);

}  // namespace attn::lab
