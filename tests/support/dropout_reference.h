// The dropout mask written from its definition (docs/conventions.md), one element at a time, for
// the tests that check the kernel, the dropout op and attention dropout against it: eight lanes,
// lane l = Rng(parent.next_u64()) with the seeds drawn in lane order (lane_order[l] says which
// of the 8 seeds lane l gets: the identity for the definition, a permutation for controls);
// group g (elements 4g..4g+3) is decided by lane g % 8's (g / 8)-th draw (taking the groups in
// order gives each lane its draws in order), element 4g + f by bits 16f..16f+15 of that draw,
// kept when the field >= t.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/core/rng.h"

namespace attn::test {

inline std::vector<uint8_t> reference_keep(int64_t n, uint32_t t, Rng& parent,
                                           const std::vector<int>& lane_order = {0, 1, 2, 3, 4, 5, 6, 7}) {
  uint64_t seeds[8];
  for (uint64_t& s : seeds) s = parent.next_u64();
  std::vector<Rng> lanes;
  for (int l = 0; l < 8; ++l) lanes.emplace_back(seeds[lane_order[static_cast<size_t>(l)]]);
  std::vector<uint8_t> keep(static_cast<size_t>(n));
  uint64_t r = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = i / 4;
    if (i % 4 == 0) r = lanes[static_cast<size_t>(g % 8)].next_u64();
    const uint64_t field = (r >> (16 * (i % 4))) & 0xFFFF;
    keep[static_cast<size_t>(i)] = field >= t ? 1 : 0;
  }
  return keep;
}

}  // namespace attn::test
