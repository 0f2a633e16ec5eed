// `attn lab rope`: the relative-position table of rotary embeddings, computed with the library's
// rotary_embedding op: q is rotated to every query position and k to every key position in one
// call each, and the scores are their dot products.
#include "attn/lab/rope.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "attn/ops/ops.h"
#include "attn/report/figures.h"

namespace attn::lab {

namespace {

constexpr const char* kOp = "lab rope";

// `v` [D] at each of `positions`, rotated: [1, 1, P, D].
Tensor rotated_copies(const std::vector<double>& v, const std::vector<int64_t>& positions,
                      const RopeTableOptions& o) {
  const int64_t P = static_cast<int64_t>(positions.size()), D = static_cast<int64_t>(v.size());
  std::vector<double> rows;
  rows.reserve(static_cast<size_t>(P * D));
  for (int64_t p = 0; p < P; ++p) rows.insert(rows.end(), v.begin(), v.end());
  RopeOptions rope;
  rope.theta = o.base;
  rope.pairing = o.pairing;
  return rotary_embedding(Tensor::from_vector<double>(rows, {1, 1, P, D}),  // [1, 1, P, D]
                          Tensor::from_vector<int64_t>(positions, {P}), rope);
}

}  // namespace

RopeTable rope_table(const RopeTableOptions& o) {
  ATTN_CHECK(o.dim > 0 && o.dim % 2 == 0, kOp, "--dim must be even and positive, got ", o.dim);
  ATTN_CHECK(o.base > 0 && std::isfinite(o.base), kOp, "--base must be positive, got ", o.base);
  ATTN_CHECK(o.grid >= 0, kOp, "--grid must not be negative, got ", o.grid);
  std::vector<std::pair<int64_t, int64_t>> pairs = o.pairs;
  if (pairs.empty()) pairs = {{3, 1}, {10, 8}, {52, 50}, {52, 49}};
  for (const auto& [m, n] : pairs)
    ATTN_CHECK(m >= 0 && n >= 0, kOp, "positions must not be negative, got (", m, ", ", n, ")");
  NoGradGuard no_grad;
  Rng rng(o.seed);
  RopeTable t;
  t.q.resize(static_cast<size_t>(o.dim));
  t.k.resize(static_cast<size_t>(o.dim));
  for (double& v : t.q) v = rng.normal();
  for (double& v : t.k) v = rng.normal();
  for (size_t i = 0; i < t.q.size(); ++i) t.unrotated += t.q[i] * t.k[i];

  std::vector<int64_t> ms, ns;
  for (const auto& [m, n] : pairs) {
    ms.push_back(m);
    ns.push_back(n);
  }
  const auto qr = rotated_copies(t.q, ms, o).to_vector<double>();  // [P * D]
  const auto kr = rotated_copies(t.k, ns, o).to_vector<double>();  // [P * D]
  for (size_t p = 0; p < pairs.size(); ++p) {
    double s = 0;
    for (int64_t d = 0; d < o.dim; ++d) s += qr[p * static_cast<size_t>(o.dim) + static_cast<size_t>(d)] *
                                            kr[p * static_cast<size_t>(o.dim) + static_cast<size_t>(d)];
    t.rows.push_back({pairs[p].first, pairs[p].second, s});
  }
  if (o.grid > 0) {
    std::vector<int64_t> positions(static_cast<size_t>(o.grid));
    for (int64_t i = 0; i < o.grid; ++i) positions[static_cast<size_t>(i)] = i;
    Tensor qg = rotated_copies(t.q, positions, o);        // [1, 1, G, D]
    Tensor kg = rotated_copies(t.k, positions, o);        // [1, 1, G, D]
    Tensor scores = matmul(qg, transpose(kg, 2, 3));      // [1, 1, G, G]
    t.grid = report::Matrix(scores.to_vector<double>(), o.grid, o.grid);
  }
  return t;
}

std::string format_rope_table(const RopeTable& t, const RopeTableOptions& o) {
  char line[512];
  std::snprintf(line, sizeof line,
                "RoPE, D = %lld, base %g, %s pairs; q, k ~ N(0, 1) (seed %llu), q.k without rotation = %.4f\n\n",
                static_cast<long long>(o.dim), o.base,
                o.pairing == RopePairing::Interleaved ? "interleaved (2i, 2i+1)" : "half-split (i, i + D/2)",
                static_cast<unsigned long long>(o.seed), t.unrotated);
  std::string s = line;
  s += "  query m   key n   m - n   (R_m q).(R_n k)\n";
  for (const RopeRow& r : t.rows) {
    std::snprintf(line, sizeof line, "  %7lld   %5lld   %5lld   %15.4f\n", static_cast<long long>(r.query_pos),
                  static_cast<long long>(r.key_pos), static_cast<long long>(r.query_pos - r.key_pos), r.score);
    s += line;
  }
  s += "\nThe rotations compose, R_m^T R_n = R_{n-m}: pairs with the same offset m - n get the same score,\n"
       "whatever their absolute positions, and the rotation keeps each vector's length.\n";
  return s;
}

std::string rope_figure(const RopeTable& t, const RopeTableOptions& o) {
  ATTN_CHECK(!t.grid.empty(), kOp, "the table has no grid to draw (grid size 0)");
  report::HeatmapOptions h;
  h.title = std::string("RoPE scores, ") + rope_pairing_name(o.pairing) + " pairs: constant diagonals";
  h.x_title = "key position n";
  h.y_title = "query position m";
  h.palette = report::Palette::Diverging;
  double top = 1e-12;
  for (double v : t.grid.values) top = std::max(top, std::fabs(v));
  h.vmin = -top;
  h.vmax = top;
  h.colorbar_title = "(R_m q).(R_n k)";
  return report::heatmap(t.grid, h);
}

}  // namespace attn::lab
