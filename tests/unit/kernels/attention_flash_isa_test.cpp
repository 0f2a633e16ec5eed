// The tiled attention kernels (kernels/attention_flash, paper §3.2.1) in float32 under every
// ISA this CPU runs (IsaGuard, as ATTN_ISA would): their row loops go through the vector
// kernels, so each ISA's max / exp / rescale / dS is checked end to end against the naive
// kernel in float64 on the same inputs, for every mask kind (causal, padding, sliding window,
// additive bias with -inf entries, ALiBi), grouped-query heads, lengths that are not a
// multiple of the tile, both the default tiles and small odd ones, query counts on both sides
// of the kernels' switch to a transposed K/V copy (32), and the backward split across threads.
// Not here: the op layer and gradchecks (tests/unit/ops/attention_flash_test.cpp).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attn/core/rng.h"
#include "kernels/attention_flash.h"
#include "kernels/attention_naive.h"
#include "kernels/simd/isa.h"
#include "attention_kernel_util.h"

namespace attn {
namespace {

using test::AttnDims;
using test::describe;
using test::kMaskKinds;
using test::make_masks;
using test::mask_name;
using test::Masks;
using test::normals;
using test::scaled_error;
using test::widen;

using kernels::simd::Isa;

// Runs the float32 flash pair under the active ISA and the float64 naive pair; returns the
// largest scaled error over out, dq, dk, dv, and checks lse's -inf markers agree.
double flash_error(const AttnDims& s, int kind, kernels::FlashTiles tiles) {
  const int64_t nq = s.B * s.H * s.Tq, nk = s.B * s.Hkv * s.Tk;
  const auto q = normals(nq * s.Dh, 1), k = normals(nk * s.Dh, 2), v = normals(nk * s.Dv, 3);
  const auto dout = normals(nq * s.Dv, 4);
  Masks m;
  make_masks(m, s, kind);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.Dh));

  std::vector<double> out64(static_cast<size_t>(nq * s.Dv)), probs(static_cast<size_t>(nq * s.Tk));
  std::vector<double> work(probs.size()), dq64(q.size()), dk64(k.size()), dv64(v.size());
  const auto q64 = widen(q), k64 = widen(k), v64 = widen(v), dout64 = widen(dout);
  kernels::attention_naive_forward<double>(out64.data(), probs.data(), nullptr, q64.data(), k64.data(),
                                           v64.data(), m.m64, nullptr, s, scale, kernels::AttentionLayout::packed(s));
  kernels::attention_naive_backward<double>(dq64.data(), dk64.data(), dv64.data(), work.data(),
                                            dout64.data(), probs.data(), nullptr, q64.data(), k64.data(),
                                            v64.data(), s, scale, kernels::AttentionLayout::packed(s),
                                            kernels::AttentionLayout::packed(s));

  std::vector<float> out(out64.size(), 7.0f), lse(static_cast<size_t>(nq), 7.0f);
  std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
  const float sc = static_cast<float>(scale);
  kernels::attention_flash_forward<float>(out.data(), lse.data(), q.data(), k.data(), v.data(), m.m32, s, sc,
                                          tiles, kernels::AttentionLayout::packed(s));
  kernels::attention_flash_backward<float>(dq.data(), dk.data(), dv.data(), dout.data(), out.data(),
                                           lse.data(), q.data(), k.data(), v.data(), m.m32, s, sc, tiles,
                                           kernels::AttentionLayout::packed(s), kernels::AttentionLayout::packed(s));
  // A row is empty (lse = -inf) exactly when its naive probabilities are all 0.
  for (int64_t r = 0; r < nq; ++r) {
    double row_sum = 0;
    for (int64_t j = 0; j < s.Tk; ++j) row_sum += probs[static_cast<size_t>(r * s.Tk + j)];
    EXPECT_EQ(std::isinf(lse[static_cast<size_t>(r)]) && lse[static_cast<size_t>(r)] < 0, row_sum == 0.0)
        << "row " << r;
  }
  return std::max({scaled_error(out, out64), scaled_error(dq, dq64), scaled_error(dk, dk64),
                   scaled_error(dv, dv64)});
}

// Float32 rounding over rows of up to 150 keys (the float32 naive kernel's own error is of
// the same order); a wrong lane, tail or rescale gives errors of order 0.1 to 1.
constexpr double kTol = 2e-5;

TEST(AttentionFlashIsa, EveryIsaAgreesWithTheFloat64NaiveKernelForEveryMaskKind) {
  const std::vector<AttnDims> shapes = {{2, 4, 4, 37, 37, 20, 12},    // one tile at the defaults
                                     {2, 4, 2, 13, 37, 16, 16},    // grouped-query, Tq < Tk
                                     {1, 2, 1, 37, 13, 8, 24},     // Tq > Tk: causal empties rows
                                     {1, 2, 2, 150, 150, 17, 9}};  // crosses the default tiles
  const std::vector<kernels::FlashTiles> tile_sets = {{}, {7, 19}};
  for (Isa isa : kernels::simd::supported_isas()) {
    kernels::simd::IsaGuard guard(isa);
    for (const AttnDims& s : shapes)
      for (int kind = 0; kind < kMaskKinds; ++kind)
        for (const auto& tiles : tile_sets) {
          const double err = flash_error(s, kind, tiles);
          EXPECT_LE(err, kTol) << kernels::simd::isa_name(isa) << ", " << describe(s) << ", mask "
                               << mask_name(kind) << ", tiles " << tiles.q << "x" << tiles.k;
        }
  }
}

// One K/V head and more threads than heads: the backward splits key tiles across threads, each
// with a private dQ; once with few queries (K, V used as stored), once with many (transposed).
TEST(AttentionFlashIsa, BackwardSplitAcrossThreadsAgreesOnEveryIsa) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(3);
  const std::vector<AttnDims> shapes = {{1, 2, 1, 20, 150, 16, 16}, {1, 1, 1, 150, 150, 17, 9}};
  for (Isa isa : kernels::simd::supported_isas()) {
    kernels::simd::IsaGuard guard(isa);
    for (const AttnDims& s : shapes)
      for (int kind = 0; kind < kMaskKinds; ++kind) {
        const double err = flash_error(s, kind, {16, 32});
        EXPECT_LE(err, kTol) << kernels::simd::isa_name(isa) << ", " << describe(s) << ", mask "
                             << mask_name(kind);
      }
  }
  omp_set_num_threads(before);
}

// The comparison above can fail: a flash result for a different scale is far off.
TEST(AttentionFlashIsa, TheComparisonDetectsAWrongResult) {
  const AttnDims s{1, 2, 2, 37, 37, 8, 8};
  const int64_t n = s.B * s.H * s.Tq * s.Dh;
  const auto q = normals(n, 1), k = normals(n, 2), v = normals(n, 3);
  kernels::AttentionMask<float> none;
  std::vector<float> a(static_cast<size_t>(n)), b(a.size()), lse(static_cast<size_t>(s.B * s.H * s.Tq));
  kernels::attention_flash_forward<float>(a.data(), lse.data(), q.data(), k.data(), v.data(), none, s, 0.35f,
                                          {}, kernels::AttentionLayout::packed(s));
  kernels::attention_flash_forward<float>(b.data(), lse.data(), q.data(), k.data(), v.data(), none, s, 0.5f,
                                          {}, kernels::AttentionLayout::packed(s));
  EXPECT_GT(scaled_error(a, widen(b)), kTol * 100);
}

}  // namespace
}  // namespace attn
