// Brute-force double-precision references for the nn tests: nn.Linear, LayerNorm, RMSNorm
// and nn.MultiheadAttention written as plain loops over std::vector<double>, independent of
// the ops under test. Shapes are passed explicitly; everything is row-major.
#pragma once

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "attn/core/rng.h"
#include "attn/core/tensor.h"

namespace attn::test {

using Vec = std::vector<double>;

inline Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = DType::F64, double std = 1.0) {
  Rng rng(seed);
  return Tensor::randn(shape, rng, dtype, 0.0, std);
}

// y[n, o] = sum_i x[n, i] w[o, i] + b[o]; x is [N, In], w [Out, In], b [Out] (may be empty).
inline Vec ref_linear(const Vec& x, int64_t N, int64_t in, const Vec& w, const Vec& b, int64_t out) {
  Vec y(static_cast<size_t>(N * out));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
      for (int64_t i = 0; i < in; ++i) s += x[static_cast<size_t>(n * in + i)] * w[static_cast<size_t>(o * in + i)];
      y[static_cast<size_t>(n * out + o)] = s;
    }
  return y;
}

// Row-wise LayerNorm (biased variance) or RMSNorm over D; b empty for RMSNorm.
inline Vec ref_norm(const Vec& x, int64_t N, int64_t D, const Vec& w, const Vec& b, double eps, bool rms) {
  Vec y(x.size());
  for (int64_t n = 0; n < N; ++n) {
    const double* r = &x[static_cast<size_t>(n * D)];
    double mean = 0, sq = 0;
    for (int64_t i = 0; i < D; ++i) mean += r[i] / static_cast<double>(D);
    if (rms) mean = 0;
    for (int64_t i = 0; i < D; ++i) sq += (r[i] - mean) * (r[i] - mean) / static_cast<double>(D);
    const double inv = 1.0 / std::sqrt(sq + eps);
    for (int64_t i = 0; i < D; ++i)
      y[static_cast<size_t>(n * D + i)] =
          (r[i] - mean) * inv * w[static_cast<size_t>(i)] + (b.empty() ? 0.0 : b[static_cast<size_t>(i)]);
  }
  return y;
}

// nn.MultiheadAttention (batch-first, no dropout): query [B, Tq, D], key/value [B, Tk, D].
// masked(b, h, i, j) says whether key j is hidden from query i; `additive` (optional) adds a
// float to the score. A query with no visible key outputs zeros before out_proj (as the op).
// Returns the output [B, Tq, D]; the weights [B, H, Tq, Tk] go to *weights when given.
inline Vec ref_mha(const Vec& query, const Vec& key, const Vec& value, int64_t B, int64_t Tq, int64_t Tk,
                   int64_t D, int64_t H, const Vec& in_w, const Vec& in_b, const Vec& out_w, const Vec& out_b,
                   const std::function<bool(int64_t, int64_t, int64_t, int64_t)>& masked,
                   const std::function<double(int64_t, int64_t, int64_t, int64_t)>& additive = {},
                   Vec* weights = nullptr) {
  const int64_t Dh = D / H;
  auto rows = [&](int64_t part) {
    return std::pair<Vec, Vec>{Vec(in_w.begin() + part * D * D, in_w.begin() + (part + 1) * D * D),
                               Vec(in_b.begin() + part * D, in_b.begin() + (part + 1) * D)};
  };
  auto [wq, bq] = rows(0);
  auto [wk, bk] = rows(1);
  auto [wv, bv] = rows(2);
  const Vec q = ref_linear(query, B * Tq, D, wq, bq, D);
  const Vec k = ref_linear(key, B * Tk, D, wk, bk, D);
  const Vec v = ref_linear(value, B * Tk, D, wv, bv, D);
  Vec concat(static_cast<size_t>(B * Tq * D), 0.0);
  if (weights) weights->assign(static_cast<size_t>(B * H * Tq * Tk), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        Vec s(static_cast<size_t>(Tk), -std::numeric_limits<double>::infinity());
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Tk; ++j) {
          if (masked && masked(b, h, i, j)) continue;
          double dot = 0;
          for (int64_t d = 0; d < Dh; ++d)
            dot += q[static_cast<size_t>((b * Tq + i) * D + h * Dh + d)] * k[static_cast<size_t>((b * Tk + j) * D + h * Dh + d)];
          s[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(Dh)) + (additive ? additive(b, h, i, j) : 0.0);
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;  // no visible key: zeros
        double z = 0;
        for (auto& e : s) z += (e = std::exp(e - mx));
        for (int64_t j = 0; j < Tk; ++j) {
          const double p = s[static_cast<size_t>(j)] / z;
          if (weights) (*weights)[static_cast<size_t>(((b * H + h) * Tq + i) * Tk + j)] = p;
          for (int64_t d = 0; d < Dh; ++d)
            concat[static_cast<size_t>((b * Tq + i) * D + h * Dh + d)] += p * v[static_cast<size_t>((b * Tk + j) * D + h * Dh + d)];
        }
      }
  return ref_linear(concat, B * Tq, D, out_w, out_b, D);
}

}  // namespace attn::test
