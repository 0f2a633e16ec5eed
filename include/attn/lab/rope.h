// attn/lab/rope.h — `attn lab rope`: rotary position embedding (Su et al., RoFormer; seeds 000 and
// 003) turns absolute positions into relative ones. Rotating q at position m and k at position n
// by angles m*theta_i and n*theta_i (theta_i = base^(-2i/D)) gives (R_m q).(R_n k) = q . R_{n-m} k,
// so the score depends only on the offset m - n: the seed's (3,1), (10,8), (52,50) give one score
// and (52,49) another. The rotation is the library's rotary_embedding op (ops/attention.h), with
// either pairing: interleaved (2i, 2i+1), as the seed writes it, or half (i, i + D/2).
// Not here: attention itself (only q.k scores), RoPE inside a model (nn/attention.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attn/ops/attention.h"
#include "attn/report/matrix.h"

namespace attn::lab {

struct RopeTableOptions {
  int64_t dim = 32;  // D, even (the seed's D = 32)
  double base = 10000.0;
  RopePairing pairing = RopePairing::Interleaved;
  uint64_t seed = 0;  // q and k ~ N(0, 1), drawn in float64 (q first)
  // (query position m, key position n); empty = the seed's (3,1), (10,8), (52,50), (52,49).
  std::vector<std::pair<int64_t, int64_t>> pairs{};
  int64_t grid = 16;  // the figure's scores for m, n in [0, grid); 0 = none
};

struct RopeRow {
  int64_t query_pos = 0, key_pos = 0;
  double score = 0;  // (R_m q) . (R_n k)
};

struct RopeTable {
  std::vector<double> q, k;  // [D] the two vectors
  double unrotated = 0;      // q . k
  std::vector<RopeRow> rows;
  report::Matrix grid;  // [grid, grid]: entry (m, n) = (R_m q) . (R_n k), constant along diagonals
};

// Errors (attn::Error) for an odd or non-positive dim, negative positions or grid, or a base <= 0.
RopeTable rope_table(const RopeTableOptions& options);
std::string format_rope_table(const RopeTable& table, const RopeTableOptions& options);
std::string rope_figure(const RopeTable& table, const RopeTableOptions& options);

}  // namespace attn::lab
