// The short-sequence attention pair (kernels/attention_short, paper §3.2.1) and the vector
// kernels it is built from (tile_nt, tile_nn, softmax_rows, softmax_grad_rows), on every ISA
// this CPU runs. The tile products and softmax rows are checked against double loops (with
// sentinels after every output row and NaN in the padding of every input row); the pair
// against the float64 naive kernel on the same inputs, for every mask kind, dropout,
// grouped-query heads, the split-head layout of a fused projection, and lengths on both sides
// of the vector widths. The op-level choice of the kernel is tested in attention_flash_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/core/rng.h"
#include "attn/ops/ops.h"
#include "kernels/attention_naive.h"
#include "kernels/attention_rows.h"
#include "kernels/attention_short.h"
#include "ops/attention_impl.h"
#include "attention_kernel_util.h"
#include "simd_test_util.h"

namespace attn::test {
namespace {

using kernels::simd::IsaGuard;
using kernels::simd::isa_name;
using kernels::simd::supported_isas;
using kernels::simd::vector_kernels;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kSentinel = Guarded::kSentinel;

// A [rows, cols] matrix with leading dimension ld > cols: the padding holds `pad`.
std::vector<float> matrix(int64_t rows, int64_t cols, int64_t ld, Rng& rng, float pad) {
  std::vector<float> m(static_cast<size_t>(rows * ld), pad);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) m[static_cast<size_t>(i * ld + j)] = static_cast<float>(rng.normal());
  return m;
}

// Every entry of c outside the [rows, cols] block (leading dimension ld) is still the sentinel.
bool padding_intact(const std::vector<float>& c, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = cols; j < ld; ++j)
      if (c[static_cast<size_t>(i * ld + j)] != kSentinel) return false;
  return true;
}

const std::vector<int64_t> kSizes = {1, 3, 8, 9, 16, 17, 33};

TEST(AttentionShortTiles, TileNtIsTheProductWithATransposeOnEveryIsa) {
  Rng rng(11);
  for (Isa isa : supported_isas()) {
    const auto& vk = vector_kernels(isa);
    for (int64_t M : kSizes)
      for (int64_t N : kSizes)
        for (int64_t K : {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{20}, int64_t{300}}) {
          const int64_t lda = K + 3, ldb = K + 5, ldc = N + 2;
          const auto a = matrix(M, K, lda, rng, kNaN), b = matrix(N, K, ldb, rng, kNaN);
          std::vector<float> c(static_cast<size_t>(M * ldc), kSentinel);
          vk.tile_nt(c.data(), ldc, a.data(), lda, b.data(), ldb, M, N, K, 0.5f);
          ASSERT_TRUE(padding_intact(c, M, N, ldc)) << isa_name(isa) << " M " << M << " N " << N << " K " << K;
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              double want = 0, mag = 0;
              for (int64_t t = 0; t < K; ++t) {
                const double p = static_cast<double>(a[static_cast<size_t>(i * lda + t)]) *
                                 b[static_cast<size_t>(j * ldb + t)];
                want += p;
                mag += std::fabs(p);
              }
              ASSERT_NEAR(c[static_cast<size_t>(i * ldc + j)], 0.5 * want, 1e-6 * mag + 1e-30)
                  << isa_name(isa) << " M " << M << " N " << N << " K " << K << " at " << i << "," << j;
            }
        }
  }
}

TEST(AttentionShortTiles, TileNnWritesOrAddsTheProductOfAOrItsTransposeOnEveryIsa) {
  Rng rng(12);
  for (Isa isa : supported_isas()) {
    const auto& vk = vector_kernels(isa);
    for (int64_t M : kSizes)
      for (int64_t N : kSizes)
        for (int64_t K : {int64_t{1}, int64_t{9}, int64_t{17}})
          for (bool trans : {false, true})
            for (bool acc : {false, true}) {
              // A(i, t) = a[i * lda + t], or a[t * lda + i] when trans.
              const int64_t lda = (trans ? M : K) + 2, ldb = N + 3, ldc = N + 4;
              const auto a = trans ? matrix(K, M, lda, rng, kNaN) : matrix(M, K, lda, rng, kNaN);
              const auto b = matrix(K, N, ldb, rng, kNaN);
              std::vector<float> c0 = matrix(M, N, ldc, rng, kSentinel);
              if (!acc)  // written: NaN in c must not reach the result
                for (int64_t i = 0; i < M; ++i)
                  for (int64_t j = 0; j < N; ++j) c0[static_cast<size_t>(i * ldc + j)] = kNaN;
              std::vector<float> c = c0;
              vk.tile_nn(c.data(), ldc, a.data(), lda, trans, b.data(), ldb, M, N, K, -1.5f, acc);
              const std::string where = std::string(isa_name(isa)) + " M " + std::to_string(M) + " N " +
                                        std::to_string(N) + " K " + std::to_string(K) +
                                        (trans ? " trans" : "") + (acc ? " acc" : "");
              ASSERT_TRUE(padding_intact(c, M, N, ldc)) << where;
              for (int64_t i = 0; i < M; ++i)
                for (int64_t j = 0; j < N; ++j) {
                  double want = 0, mag = 0;
                  for (int64_t t = 0; t < K; ++t) {
                    const float ait = trans ? a[static_cast<size_t>(t * lda + i)] : a[static_cast<size_t>(i * lda + t)];
                    const double p = static_cast<double>(ait) * b[static_cast<size_t>(t * ldb + j)];
                    want += p;
                    mag += std::fabs(p);
                  }
                  want *= -1.5;
                  const double before = c0[static_cast<size_t>(i * ldc + j)];
                  if (acc) want += before;
                  ASSERT_NEAR(c[static_cast<size_t>(i * ldc + j)], want, 2e-6 * (mag + std::fabs(want)) + 1e-30)
                      << where << " at " << i << "," << j;
                }
            }
  }
}

// The tile products' contract, bit for bit: each output is one float chain of FMAs over t in
// order (the scalar build's fma is a product and a sum, two roundings), then alpha, then (tile_nn
// with accumulate) the old value added. Every row count from 1 to 40 runs, so every pass height
// (up to 16 rows at once, passes of 8 above) and every tail is covered; K <= 256 (tile_nt's
// transposed blocks, 16 x 16 register blocks on AVX-512, with a partial last block).
TEST(AttentionShortTiles, TileProductsAreOneFmaChainPerOutputForEveryRowCount) {
  Rng rng(14);
  for (Isa isa : supported_isas()) {
    const auto& vk = vector_kernels(isa);
    auto chain = [isa](const float* a, int64_t a_step, const float* b, int64_t b_step, int64_t K) {
      float s = 0.0f;
      for (int64_t t = 0; t < K; ++t) {
        if (isa == Isa::Scalar) {
          volatile float p = a[t * a_step] * b[t * b_step];  // rounded on its own
          s = s + p;
        } else {
          s = std::fma(a[t * a_step], b[t * b_step], s);
        }
      }
      return s;
    };
    for (int64_t M = 1; M <= 40; ++M)
      for (int64_t N : {int64_t{5}, int64_t{16}, int64_t{21}})
        for (int64_t K : {int64_t{7}, int64_t{16}, int64_t{37}}) {
          const std::string where = std::string(isa_name(isa)) + " M " + std::to_string(M) + " N " + std::to_string(N) +
                                    " K " + std::to_string(K);
          {  // tile_nt: c[i, j] = 0.5 <a_i, b_j>
            const int64_t lda = K + 1, ldb = K + 2, ldc = N + 1;
            const auto a = matrix(M, K, lda, rng, kNaN), b = matrix(N, K, ldb, rng, kNaN);
            std::vector<float> c(static_cast<size_t>(M * ldc), kSentinel);
            vk.tile_nt(c.data(), ldc, a.data(), lda, b.data(), ldb, M, N, K, 0.5f);
            ASSERT_TRUE(padding_intact(c, M, N, ldc)) << where;
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j) {
                const float want =
                    0.5f * chain(&a[static_cast<size_t>(i * lda)], 1, &b[static_cast<size_t>(j * ldb)], 1, K);
                ASSERT_EQ(c[static_cast<size_t>(i * ldc + j)], want) << where << " tile_nt at " << i << "," << j;
              }
          }
          for (bool trans : {false, true}) {  // tile_nn, accumulating: c[i, :] += -1.5 A(i, :) b
            const int64_t lda = (trans ? M : K) + 3, ldb = N + 2, ldc = N + 3;
            const auto a = trans ? matrix(K, M, lda, rng, kNaN) : matrix(M, K, lda, rng, kNaN);
            const auto b = matrix(K, N, ldb, rng, kNaN);
            const std::vector<float> c0 = matrix(M, N, ldc, rng, kSentinel);
            std::vector<float> c = c0;
            vk.tile_nn(c.data(), ldc, a.data(), lda, trans, b.data(), ldb, M, N, K, -1.5f, true);
            ASSERT_TRUE(padding_intact(c, M, N, ldc)) << where;
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j) {
                const float* ai = trans ? &a[static_cast<size_t>(i)] : &a[static_cast<size_t>(i * lda)];
                const float s = chain(ai, trans ? lda : 1, &b[static_cast<size_t>(j)], ldb, K);
                const float want = c0[static_cast<size_t>(i * ldc + j)] + -1.5f * s;
                ASSERT_EQ(c[static_cast<size_t>(i * ldc + j)], want)
                    << where << (trans ? " trans" : "") << " tile_nn at " << i << "," << j;
              }
          }
        }
  }
}

// Rows of n scores (some -inf, one row all -inf), ld apart, against a double softmax.
TEST(AttentionShortTiles, SoftmaxRowsMatchDoubleWithMaskedEntriesAndEmptyRows) {
  Rng rng(13);
  for (Isa isa : supported_isas()) {
    const auto& vk = vector_kernels(isa);
    for (int64_t n : {1, 2, 7, 9, 15, 16, 17, 32, 33, 70}) {
      const int64_t rows = 5, ls = n + 3, lp = n + 1;
      std::vector<float> s = matrix(rows, n, ls, rng, kNaN), d = matrix(rows, n, lp, rng, kNaN);
      for (int64_t j = 0; j < n; ++j) s[static_cast<size_t>(2 * ls + j)] = -kInf;      // row 2: all masked
      for (int64_t j = 0; j < n; j += 3) s[static_cast<size_t>(4 * ls + j)] = -kInf;   // row 4: some
      for (int64_t j = 0; j < n; ++j) d[static_cast<size_t>(j)] = j % 4 == 0 ? 0.0f : 1.25f;
      for (bool with_d : {false, true}) {
        std::vector<float> p(static_cast<size_t>(rows * lp), kSentinel), pd = p;
        vk.softmax_rows(p.data(), lp, s.data(), ls, with_d ? pd.data() : nullptr, with_d ? d.data() : nullptr,
                        rows, n);
        const std::string where = std::string(isa_name(isa)) + " n " + std::to_string(n);
        ASSERT_TRUE(padding_intact(p, rows, n, lp)) << where;
        if (with_d) {
          ASSERT_TRUE(padding_intact(pd, rows, n, lp)) << where;
        }
        for (int64_t i = 0; i < rows; ++i) {
          double m = -kInf, sum = 0;
          for (int64_t j = 0; j < n; ++j) m = std::max(m, static_cast<double>(s[static_cast<size_t>(i * ls + j)]));
          for (int64_t j = 0; j < n; ++j) sum += std::exp(s[static_cast<size_t>(i * ls + j)] - m);
          for (int64_t j = 0; j < n; ++j) {
            // A row with every entry -inf (row 2; row 4 when n = 1) has probabilities 0.
            const double want = m == -kInf ? 0.0 : std::exp(s[static_cast<size_t>(i * ls + j)] - m) / sum;
            const float got = p[static_cast<size_t>(i * lp + j)];
            ASSERT_NEAR(got, want, 2e-7 + 4e-7 * want) << where << " row " << i << " col " << j;
            if (with_d) {
              ASSERT_EQ(pd[static_cast<size_t>(i * lp + j)], got * d[static_cast<size_t>(i * lp + j)]) << where;
            }
          }
        }
      }
    }
  }
}

// The short-row path sets probabilities below exp(-87) to exactly 0 (documented); larger
// ones keep their value.
TEST(AttentionShortTiles, ShortRowsFlushOnlyProbabilitiesBelowExpMinus87) {
  for (Isa isa : supported_isas()) {
    const auto& vk = vector_kernels(isa);
    const std::vector<float> s = {0.0f, -86.0f, -88.0f, -200.0f};
    std::vector<float> p(4, kSentinel);
    vk.softmax_rows(p.data(), 4, s.data(), 4, nullptr, nullptr, 1, 4);
    EXPECT_GT(p[1], 0.0f) << isa_name(isa);
    EXPECT_NEAR(p[1], std::exp(-86.0), 1e-43) << isa_name(isa);
    EXPECT_EQ(p[3], 0.0f) << isa_name(isa);
    EXPECT_LE(p[2], std::exp(-87.0)) << isa_name(isa);
    if (isa != Isa::Scalar) {
      EXPECT_EQ(p[2], 0.0f) << isa_name(isa);  // a row of <= W entries
    }
  }
}

TEST(AttentionShortTiles, SoftmaxGradRowsIsTheJacobianThroughTheDropoutScale) {
  Rng rng(14);
  for (Isa isa : supported_isas()) {
    const auto& vk = vector_kernels(isa);
    for (int64_t n : {1, 5, 9, 16, 17, 40}) {
      const int64_t rows = 4, ld = n + 7;
      const std::vector<float> g0 = matrix(rows, n, ld, rng, kSentinel);
      std::vector<float> p(static_cast<size_t>(rows * n)), d(p.size());
      for (float& x : p) x = static_cast<float>(rng.uniform());
      for (size_t e = 0; e < d.size(); ++e) d[e] = e % 3 == 0 ? 0.0f : 2.0f;
      for (bool with_d : {false, true}) {
        std::vector<float> g = g0;
        vk.softmax_grad_rows(g.data(), ld, p.data(), with_d ? d.data() : nullptr, rows, n);
        ASSERT_TRUE(padding_intact(g, rows, n, ld)) << isa_name(isa);
        for (int64_t i = 0; i < rows; ++i) {
          auto gd = [&](int64_t j) {
            return static_cast<double>(g0[static_cast<size_t>(i * ld + j)]) *
                   (with_d ? d[static_cast<size_t>(i * n + j)] : 1.0f);
          };
          double dot = 0;
          for (int64_t j = 0; j < n; ++j) dot += gd(j) * p[static_cast<size_t>(i * n + j)];
          for (int64_t j = 0; j < n; ++j) {
            const double want = p[static_cast<size_t>(i * n + j)] * (gd(j) - dot);
            ASSERT_NEAR(g[static_cast<size_t>(i * ld + j)], want, 1e-5 * (1 + std::fabs(dot)))
                << isa_name(isa) << " n " << n << " row " << i << " col " << j;
          }
        }
      }
    }
  }
}

// ---- the kernel pair against the float64 naive pair ---------------------------------------

using Dims = AttnDims;

// The layouts of the call: packed, or q, k, v as the split heads of one fused [B, T, 3, H, D]
// projection (self-attention shapes only) with out and the gradients of the same kind.
kernels::AttentionLayout layout_of(const Dims& s, bool split) {
  if (!split) return kernels::AttentionLayout::packed(s);
  const int64_t row = 3 * s.H * s.Dh;  // H == Hkv, Tq == Tk, Dh == Dv
  const kernels::HeadLayout qkv{s.Tq * row, s.Dh, row};
  return {qkv, qkv, qkv, kernels::HeadLayout::split(s.H, s.Tq, s.Dv)};
}

// Largest scaled error of the float32 short pair (active ISA), or with `rows` of the vector-row
// pair (attention_rows.h), over out, probs, dq, dk, dv, against the float64 naive pair on the
// same inputs; `scale` lets a test break the float32 run.
double short_error(const Dims& s, int kind, bool dropout, bool split, float scale_factor = 1.0f,
                   bool rows = false) {
  const kernels::AttentionLayout L = layout_of(s, split);
  // One buffer per operand, large enough for either layout (split: q, k, v interleaved in one).
  const int64_t nq = s.B * s.H * s.Tq, nk = s.B * s.Hkv * s.Tk;
  const int64_t nqkv = split ? s.B * s.Tq * 3 * s.H * s.Dh : 0;
  const auto qkv = normals(std::max<int64_t>(nqkv, 1), 5);
  const auto q0 = normals(nq * s.Dh, 1), k0 = normals(nk * s.Dh, 2), v0 = normals(nk * s.Dv, 3);
  const auto dout = normals(nq * s.Dv, 4);
  const float* q = split ? qkv.data() : q0.data();
  const float* k = split ? qkv.data() + s.H * s.Dh : k0.data();
  const float* v = split ? qkv.data() + 2 * s.H * s.Dh : v0.data();
  Masks m;
  make_masks(m, s, kind);
  std::vector<float> ds32;
  if (dropout) {
    Rng rng(77);
    for (int64_t e = 0; e < s.B * s.H * s.Tq * s.Tk; ++e) ds32.push_back(rng.uniform() < 0.2 ? 0.0f : 1.25f);
  }
  const auto ds64 = widen(ds32);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.Dh));

  const size_t n_in = split ? qkv.size() : 0;
  const auto qkv64 = widen(qkv), q64 = widen(q0), k64 = widen(k0), v64 = widen(v0);
  const double* q6 = split ? qkv64.data() : q64.data();
  const double* k6 = split ? qkv64.data() + s.H * s.Dh : k64.data();
  const double* v6 = split ? qkv64.data() + 2 * s.H * s.Dh : v64.data();
  const auto dout64 = widen(dout);
  const size_t n_out = static_cast<size_t>(nq * s.Dv), n_p = static_cast<size_t>(nq * s.Tk);
  std::vector<double> out64(n_out), probs64(n_p), work64(n_p);
  std::vector<double> dqkv64(n_in), dq64(q0.size()), dk64(k0.size()), dv64(v0.size());
  double* dq6 = split ? dqkv64.data() : dq64.data();
  double* dk6 = split ? dqkv64.data() + s.H * s.Dh : dk64.data();
  double* dv6 = split ? dqkv64.data() + 2 * s.H * s.Dh : dv64.data();
  kernels::attention_naive_forward<double>(out64.data(), probs64.data(), work64.data(), q6, k6, v6, m.m64,
                                           dropout ? ds64.data() : nullptr, s, scale, L);
  kernels::attention_naive_backward<double>(dq6, dk6, dv6, work64.data(), dout64.data(), probs64.data(),
                                            dropout ? ds64.data() : nullptr, q6, k6, v6, s, scale, L, L);

  // Outputs start as NaN: whatever the kernels do not write shows up.
  std::vector<float> out(n_out, kNaN), probs(n_p, kNaN), work(n_p, kNaN);
  std::vector<float> dqkv(n_in, kNaN), dq(q0.size(), kNaN), dk(k0.size(), kNaN), dv(v0.size(), kNaN);
  float* dq3 = split ? dqkv.data() : dq.data();
  float* dk3 = split ? dqkv.data() + s.H * s.Dh : dk.data();
  float* dv3 = split ? dqkv.data() + 2 * s.H * s.Dh : dv.data();
  const float sc = static_cast<float>(scale) * scale_factor;
  const float* ds = dropout ? ds32.data() : nullptr;
  if (rows) {
    kernels::attention_rows_forward(out.data(), probs.data(), work.data(), q, k, v, m.m32, ds, s, sc, L);
    kernels::attention_rows_backward(dq3, dk3, dv3, work.data(), dout.data(), probs.data(), ds, q, k, v, s, sc, L,
                                     L);
  } else {
    kernels::attention_short_forward(out.data(), probs.data(), work.data(), q, k, v, m.m32, ds, s, sc, L);
    kernels::attention_short_backward(dq3, dk3, dv3, work.data(), dout.data(), probs.data(), ds, q, k, v, s, sc, L,
                                      L);
  }
  double err = std::max(scaled_error(out, out64), scaled_error(probs, probs64));
  if (split) return std::max(err, scaled_error(dqkv, dqkv64));
  return std::max({err, scaled_error(dq, dq64), scaled_error(dk, dk64), scaled_error(dv, dv64)});
}

constexpr double kTol = 2e-5;


TEST(AttentionShort, EveryIsaAgreesWithTheFloat64NaiveKernelForEveryMaskKind) {
  const std::vector<Dims> shapes = {{2, 4, 4, 9, 9, 16, 16},    // the demo's self-attention
                                    {2, 4, 2, 9, 10, 16, 16},   // grouped-query, Tq < Tk
                                    {2, 2, 1, 7, 3, 5, 11},     // Tq > Tk: causal empties rows
                                    {1, 2, 2, 17, 17, 20, 7},   // past one AVX-512 register
                                    {1, 1, 1, 32, 32, 33, 33},  // the largest short length
                                    {1, 1, 1, 1, 1, 1, 1}};
  for (Isa isa : supported_isas()) {
    IsaGuard guard(isa);
    for (const Dims& s : shapes)
      for (int kind = 0; kind < kMaskKinds; ++kind)
        for (bool dropout : {false, true}) {
          const double err = short_error(s, kind, dropout, false);
          EXPECT_LE(err, kTol) << isa_name(isa) << ", " << describe(s) << ", mask " << mask_name(kind)
                               << (dropout ? ", dropout" : "");
        }
  }
}

TEST(AttentionShort, SplitHeadsOfAFusedProjectionAreReadAndWrittenInPlace) {
  for (Isa isa : supported_isas()) {
    IsaGuard guard(isa);
    for (const Dims& s : {Dims{2, 4, 4, 9, 9, 16, 16}, Dims{1, 3, 3, 20, 20, 8, 8}})
      for (int kind : {kNone, kCausal, kPadding}) {
        const double err = short_error(s, kind, true, true);
        EXPECT_LE(err, kTol) << isa_name(isa) << ", " << describe(s) << ", mask " << mask_name(kind);
      }
  }
}

// The comparison can fail: a run with a different scale is far off.
TEST(AttentionShort, TheComparisonDetectsAWrongResult) {
  EXPECT_GT(short_error({2, 4, 4, 9, 9, 16, 16}, kNone, true, false, 1.5f), kTol * 100);
}

TEST(AttentionShort, SequencesLongerThanTheLimitAreRefused) {
  const int64_t T = kernels::kShortAttentionMaxT + 1;
  std::vector<float> x(static_cast<size_t>(T * T), 0.0f);
  kernels::AttentionMask<float> none;
  EXPECT_THROW(kernels::attention_short_forward(x.data(), x.data(), nullptr, x.data(), x.data(), x.data(), none,
                                                nullptr, {1, 1, 1, T, 1, 1, 1}, 1.0f,
                                                kernels::AttentionLayout::packed({1, 1, 1, T, 1, 1, 1})),
               Error);
}

// ---- the vector-row pair (longer sequences) ---------------------------------------------------

TEST(AttentionRows, EveryIsaAgreesWithTheFloat64NaiveKernelForEveryMaskKind) {
  const std::vector<Dims> shapes = {{1, 2, 2, 33, 33, 16, 16},   // just past the short kernel
                                    {2, 4, 2, 40, 45, 16, 16},   // grouped-query, Tq < Tk
                                    {1, 2, 1, 50, 20, 24, 8},    // Tq > Tk: causal empties rows
                                    {1, 2, 2, 129, 129, 64, 64}, // the base layer's heads, one past 128
                                    {1, 1, 1, 1, 1, 1, 1},       // rows of one entry
                                    {1, 1, 1, 3, 70, 5, 9}};     // long rows, few of them
  for (Isa isa : supported_isas()) {
    IsaGuard guard(isa);
    for (const Dims& s : shapes)
      for (int kind = 0; kind < kMaskKinds; ++kind)
        for (bool dropout : {false, true}) {
          const double err = short_error(s, kind, dropout, false, 1.0f, true);
          EXPECT_LE(err, kTol) << isa_name(isa) << ", " << describe(s) << ", mask " << mask_name(kind)
                               << (dropout ? ", dropout" : "");
        }
  }
}

TEST(AttentionRows, SplitHeadsOfAFusedProjectionAreReadAndWrittenInPlace) {
  for (Isa isa : supported_isas()) {
    IsaGuard guard(isa);
    for (const Dims& s : {Dims{2, 4, 4, 40, 40, 16, 16}, Dims{1, 3, 3, 65, 65, 8, 8}})
      for (int kind : {kNone, kCausal, kPadding}) {
        const double err = short_error(s, kind, true, true, 1.0f, true);
        EXPECT_LE(err, kTol) << isa_name(isa) << ", " << describe(s) << ", mask " << mask_name(kind);
      }
  }
}

// The comparison can fail for this pair too: a run with a different scale is far off.
TEST(AttentionRows, TheComparisonDetectsAWrongResult) {
  EXPECT_GT(short_error({2, 4, 4, 40, 40, 16, 16}, kNone, true, false, 1.5f, true), kTol * 100);
}

// ---- through the op --------------------------------------------------------------------------

// The op with dropout (the training path) and need_weights, on the kernel pair `impl` and forced
// onto the naive one, with the same generator state: the same mask is drawn, and outputs and
// gradients agree. q, k, v [3, 4, T, 16].
void expect_op_with_dropout_matches_the_naive_kernel(int64_t T, detail::SdpaImpl impl) {
  for (bool causal : {false, true}) {
    Rng init(9);
    const Tensor q = Tensor::randn({3, 4, T, 16}, init), k = Tensor::randn({3, 4, T, 16}, init);
    const Tensor v = Tensor::randn({3, 4, T, 16}, init), g = Tensor::randn({3, 4, T, 16}, init);
    auto run = [&](detail::SdpaImpl which) {
      Rng rng(5);
      SdpaOptions o;
      o.dropout_p = 0.25;
      o.rng = &rng;
      o.causal = causal;
      o.need_weights = true;
      std::vector<Tensor> x = {q.clone().set_requires_grad(true), k.clone().set_requires_grad(true),
                               v.clone().set_requires_grad(true)};
      const SdpaResult r = detail::scaled_dot_product_attention_impl(x[0], x[1], x[2], o, which);
      sum(mul(r.out, g)).backward();
      return std::vector<Tensor>{r.out, r.weights, x[0].grad(), x[1].grad(), x[2].grad()};
    };
    const auto a = run(impl), b = run(detail::SdpaImpl::Naive);
    const char* names[] = {"out", "weights", "dq", "dk", "dv"};
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(close_rel(a[i].to_vector<float>(), b[i].to_vector<float>(), 1e-5, 1e-6, names[i]))
          << "T " << T << (causal ? ", causal" : ", full");
  }
}

TEST(AttentionShort, TheOpWithDropoutMatchesTheNaiveKernel) {
  expect_op_with_dropout_matches_the_naive_kernel(9, detail::SdpaImpl::Short);
}

// The vector-row pair, at lengths past the short kernel's, where the op chooses it by itself.
TEST(AttentionRows, TheOpWithDropoutMatchesTheNaiveKernel) {
  for (int64_t T : {kernels::kShortAttentionMaxT + 1, int64_t{41}})
    expect_op_with_dropout_matches_the_naive_kernel(T, detail::SdpaImpl::Auto);
}

}  // namespace
}  // namespace attn::test
