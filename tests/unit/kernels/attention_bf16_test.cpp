// kernels/attention_bf16.h: attention with bf16 products on AMX tiles, against a float64
// reference of the same rounding (q, k, v and the probabilities rounded to bf16, everything else
// exact). The bound each output must meet is derived, not fitted: the float32 sums of the scores
// (Dh + 2 roundings), of l and of the weighted values (Tk + 2), and, for a probability whose
// bf16 rounding lies within the scores' error of a tie, the whole step between its two possible
// roundings. Every mask kind, tails of Tq, Tk, Dh and Dv (features zero-padded to 32), grouped
// heads, split layouts; a row's bits alone, among padded rows and under one or two threads;
// fully masked rows give 0. Controls: the reference without the rounding of the probabilities,
// or of q, k, v, breaks the bound. Each test runs on every path this machine has: the portable
// one everywhere, the AMX tiles where the CPU and OS grant them (a tiles run elsewhere is an
// error, checked). The op-level tests check that SdpaOptions::bf16_products runs this kernel on
// the tiles (their bits) where the tiles exist and the float32 flash kernel elsewhere, and never
// under a recorded gradient.
#include "kernels/attention_bf16.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attention_kernel_util.h"
#include "attn/core/dtype.h"
#include "attn/core/error.h"
#include "attn/core/tensor.h"
#include "attn/ops/ops.h"
#include "kernels/attention_flash.h"
#include "kernels/quantized_gemm.h"
#include "ops/attention_impl.h"

namespace attn::kernels {
namespace {

using test::AttnDims;

// The paths this machine runs: the portable one everywhere, the tiles where the CPU and OS have
// them. Every kernel test below runs on each.
std::vector<AttentionBf16Path> paths() {
  std::vector<AttentionBf16Path> p{AttentionBf16Path::Portable};
  if (attention_bf16_path_supported(AttentionBf16Path::Tiles)) p.push_back(AttentionBf16Path::Tiles);
  return p;
}

const char* path_name(AttentionBf16Path p) { return p == AttentionBf16Path::Tiles ? "tiles" : "portable"; }

double bf(float x) { return static_cast<double>(float_from_bf16(bf16_from_float(x))); }

struct Inputs {
  std::vector<float> q, k, v;
};

Inputs make_inputs(const AttnDims& s, uint64_t seed, float q_scale = 1.0f) {
  Inputs in{test::normals(s.B * s.H * s.Tq * s.Dh, seed), test::normals(s.B * s.Hkv * s.Tk * s.Dh, seed + 1),
            test::normals(s.B * s.Hkv * s.Tk * s.Dv, seed + 2)};
  for (float& x : in.q) x *= q_scale;
  return in;
}

std::vector<float> run(AttentionBf16Path path, const Inputs& in, const AttnDims& s, const AttentionMask<float>& m,
                       float scale, std::vector<float>* lse = nullptr) {
  std::vector<float> out(static_cast<size_t>(s.B * s.H * s.Tq * s.Dv), std::nanf(""));
  if (lse) lse->assign(static_cast<size_t>(s.B * s.H * s.Tq), std::nanf(""));
  attention_bf16_forward(out.data(), lse ? lse->data() : nullptr, in.q.data(), in.k.data(), in.v.data(), m, s, scale,
                         AttentionLayout::packed(s), path);
  return out;
}

// Which roundings the reference applies (all in the kernel's semantics; the controls drop one).
struct Rounding {
  bool qkv = true, probs = true;
};

// The float64 reference and, per output, the bound the kernel must meet (packed layouts).
struct Reference {
  std::vector<double> out, bound;
};

Reference reference(const Inputs& in, const AttnDims& s, const AttentionMask<double>& m, double scale,
                    Rounding r = {}) {
  constexpr double u = 1.0 / 16777216.0;  // 2^-24
  Reference ref;
  ref.out.assign(static_cast<size_t>(s.B * s.H * s.Tq * s.Dv), 0.0);
  ref.bound.assign(ref.out.size(), 0.0);
  const auto rd = [&](float x) { return r.qkv ? bf(x) : static_cast<double>(x); };
  std::vector<double> sc(static_cast<size_t>(s.Tk)), mag(static_cast<size_t>(s.Tk));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t hk = h / (s.H / s.Hkv);
      const float* q = in.q.data() + ((b * s.H + h) * s.Tq) * s.Dh;
      const float* k = in.k.data() + ((b * s.Hkv + hk) * s.Tk) * s.Dh;
      const float* v = in.v.data() + ((b * s.Hkv + hk) * s.Tk) * s.Dv;
      for (int64_t i = 0; i < s.Tq; ++i) {
        double err_s = 0;
        for (int64_t j = 0; j < s.Tk; ++j) {
          double dot = 0, abs = 0;
          for (int64_t c = 0; c < s.Dh; ++c) {
            dot += rd(q[i * s.Dh + c]) * rd(k[j * s.Dh + c]);
            abs += std::fabs(rd(q[i * s.Dh + c]) * rd(k[j * s.Dh + c]));
          }
          sc[static_cast<size_t>(j)] = scale * dot;
          mag[static_cast<size_t>(j)] = scale * abs;
        }
        apply_attention_mask_row(sc.data(), m, b, h, i, 0, s.Tk, s.Tq, s.Tk);
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < s.Tk; ++j) {
          mx = std::max(mx, sc[static_cast<size_t>(j)]);
          // Each score: the float32 sum (Dh terms), the scale and the mask's addition.
          if (std::isfinite(sc[static_cast<size_t>(j)]))
            err_s = std::max(err_s, (static_cast<double>(s.Dh) + 2) * u *
                                        (mag[static_cast<size_t>(j)] + std::fabs(sc[static_cast<size_t>(j)])));
        }
        double* o = ref.out.data() + ((b * s.H + h) * s.Tq + i) * s.Dv;
        double* bd = ref.bound.data() + ((b * s.H + h) * s.Tq + i) * s.Dv;
        if (mx == -std::numeric_limits<double>::infinity()) continue;  // 0, exactly
        // A probability's relative error before its rounding: its score's and the max's, exp's ulp.
        const double window = 2 * err_s + 4 * u;
        double l = 0;
        std::vector<double> p(static_cast<size_t>(s.Tk)), step(static_cast<size_t>(s.Tk), 0.0);
        for (int64_t j = 0; j < s.Tk; ++j) {
          const double e = std::exp(sc[static_cast<size_t>(j)] - mx);
          l += e;
          if (!r.probs) {
            p[static_cast<size_t>(j)] = e;
            continue;
          }
          p[static_cast<size_t>(j)] = bf(static_cast<float>(e));
          const double lo = bf(static_cast<float>(e * (1 - window))), hi = bf(static_cast<float>(e * (1 + window)));
          step[static_cast<size_t>(j)] = hi - lo;  // nonzero only near a tie of the rounding
        }
        for (int64_t c = 0; c < s.Dv; ++c) {
          double acc = 0, abs = 0, slack = 0;
          for (int64_t j = 0; j < s.Tk; ++j) {
            const double vj = rd(v[j * s.Dv + c]);
            acc += p[static_cast<size_t>(j)] * vj;
            abs += std::fabs(p[static_cast<size_t>(j)] * vj);
            slack += step[static_cast<size_t>(j)] * std::fabs(vj);
          }
          o[c] = acc / l;
          bd[c] = ((static_cast<double>(s.Tk) + 2) * u * abs + slack) / l +
                  std::fabs(o[c]) * (window + (static_cast<double>(s.Tk) + 40) * u) + 1e-30;
        }
      }
    }
  return ref;
}

// Outputs outside the bound.
int64_t outside(const std::vector<float>& got, const Reference& ref) {
  int64_t n = 0;
  for (size_t e = 0; e < got.size(); ++e)
    if (!(std::fabs(static_cast<double>(got[e]) - ref.out[e]) <= ref.bound[e])) ++n;
  return n;
}

TEST(AttentionBf16, EveryMaskKindAndTailWithinTheBoundOfTheSameRounding) {
  const AttnDims shapes[] = {
      {2, 4, 4, 37, 37, 64, 64},  // the encoder's head size, tails of the key chunks
      {2, 4, 2, 50, 21, 40, 24},  // grouped heads; Dh and Dv not multiples of 32; two query blocks with a tail
      {1, 2, 2, 16, 96, 32, 48},  // one query block of 16 rows
      {3, 2, 1, 5, 3, 8, 8},      // fewer keys and features than one chunk
  };
  for (AttentionBf16Path path : paths())
    for (const AttnDims& s : shapes)
      for (int kind = 0; kind < test::kMaskKinds; ++kind) {
        SCOPED_TRACE(std::string(path_name(path)) + ", " + test::describe(s) + ", mask " + test::mask_name(kind));
        test::Masks masks;
        test::make_masks(masks, s, kind);
        const Inputs in = make_inputs(s, 7 + static_cast<uint64_t>(kind), 2.0f);
        const float scale = 1.0f / std::sqrt(static_cast<float>(s.Dh));
        std::vector<float> lse;
        const std::vector<float> got = run(path, in, s, masks.m32, scale, &lse);
        const Reference ref = reference(in, s, masks.m64, static_cast<double>(scale));
        EXPECT_EQ(outside(got, ref), 0);
        for (size_t e = 0; e < lse.size(); ++e) EXPECT_FALSE(std::isnan(lse[e])) << e;
      }
}

TEST(AttentionBf16, ControlsWithoutTheRoundingBreakTheBound) {
  const AttnDims s{2, 4, 4, 37, 37, 64, 64};
  const Inputs in = make_inputs(s, 11, 2.0f);
  const float scale = 0.125f;
  const AttentionMask<float> m32;
  const AttentionMask<double> m64;
  for (AttentionBf16Path path : paths()) {
    SCOPED_TRACE(path_name(path));
    const std::vector<float> got = run(path, in, s, m32, scale);
    ASSERT_EQ(outside(got, reference(in, s, m64, 0.125)), 0);
    EXPECT_GT(outside(got, reference(in, s, m64, 0.125, {true, false})), 100);  // probabilities not rounded
    EXPECT_GT(outside(got, reference(in, s, m64, 0.125, {false, true})), 100);  // q, k, v not rounded
  }
}

TEST(AttentionBf16, FullyMaskedRowsGiveZerosAndMinusInfinity) {
  const AttnDims s{2, 2, 2, 20, 9, 64, 64};
  test::Masks masks;
  test::make_masks(masks, s, test::kCausal);  // Tq > Tk: the first Tq - Tk rows see no key
  const Inputs in = make_inputs(s, 3);
  for (AttentionBf16Path path : paths()) {
    SCOPED_TRACE(path_name(path));
    std::vector<float> lse;
    const std::vector<float> got = run(path, in, s, masks.m32, 0.125f, &lse);
    for (int64_t bh = 0; bh < s.B * s.H; ++bh)
      for (int64_t i = 0; i < s.Tq; ++i) {
        const bool none = i < s.Tq - s.Tk;
        EXPECT_EQ(std::isinf(lse[static_cast<size_t>(bh * s.Tq + i)]), none) << bh << " " << i;
        if (none) {
          for (int64_t c = 0; c < s.Dv; ++c) EXPECT_EQ(got[static_cast<size_t>((bh * s.Tq + i) * s.Dv + c)], 0.0f);
        }
      }
  }
}

// A source alone (B = 1, its own length) and the same source as row 1 of a batch padded to a longer
// one (key padding, other queries beside it), under one and two threads: the same bits.
TEST(AttentionBf16, ARowsBitsAloneAmongPaddedRowsAndUnderAnyThreadCount) {
  const int64_t H = 4, Dh = 64, len = 23, T = 70;
  const AttnDims alone{1, H, H, len, len, Dh, Dh}, batch{3, H, H, T, T, Dh, Dh};
  const Inputs big = make_inputs(batch, 21);
  Inputs one;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < len; ++t)
      for (int64_t c = 0; c < Dh; ++c) {
        const size_t src = static_cast<size_t>(((1 * H + h) * T + t) * Dh + c);
        one.q.push_back(big.q[src]);
        one.k.push_back(big.k[src]);
        one.v.push_back(big.v[src]);
      }
  std::vector<uint8_t> padding(static_cast<size_t>(3 * T), 0);
  for (int64_t j = len; j < T; ++j) padding[static_cast<size_t>(T + j)] = 1;
  AttentionMask<float> pad;
  pad.key_padding = padding.data();
  for (AttentionBf16Path path : paths()) {
    SCOPED_TRACE(path_name(path));
    const std::vector<float> solo = run(path, one, alone, AttentionMask<float>{}, 0.125f);
    for (int threads : {1, 2}) {
      SCOPED_TRACE(threads);
      const int before = omp_get_max_threads();
      omp_set_num_threads(threads);
      const std::vector<float> all = run(path, big, batch, pad, 0.125f);
      const std::vector<float> again = run(path, one, alone, AttentionMask<float>{}, 0.125f);
      omp_set_num_threads(before);
      EXPECT_EQ(std::memcmp(again.data(), solo.data(), solo.size() * sizeof(float)), 0);
      int64_t differing = 0;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < len; ++t)
          for (int64_t c = 0; c < Dh; ++c)
            differing += all[static_cast<size_t>(((1 * H + h) * T + t) * Dh + c)] !=
                         solo[static_cast<size_t>((h * len + t) * Dh + c)];
      EXPECT_EQ(differing, 0);
    }
  }
}

// The path given is the one that runs: where the tiles exist their bits differ from the
// portable path's (each sums in its own order; both meet the bound above), and elsewhere asking
// for them is an error rather than a fault.
TEST(AttentionBf16, ThePathAskedForIsThePathThatRuns) {
  const AttnDims s{2, 4, 4, 37, 37, 64, 64};
  const Inputs in = make_inputs(s, 13, 2.0f);
  const std::vector<float> portable = run(AttentionBf16Path::Portable, in, s, AttentionMask<float>{}, 0.125f);
  if (attention_bf16_path_supported(AttentionBf16Path::Tiles)) {
    const std::vector<float> tiles = run(AttentionBf16Path::Tiles, in, s, AttentionMask<float>{}, 0.125f);
    EXPECT_NE(std::memcmp(tiles.data(), portable.data(), tiles.size() * sizeof(float)), 0);
  } else {
    EXPECT_THROW(run(AttentionBf16Path::Tiles, in, s, AttentionMask<float>{}, 0.125f), Error);
  }
}

// ---- the op: SdpaOptions::bf16_products ----------------------------------------------------

Tensor tensor_of(const std::vector<float>& x, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::F32);
  std::memcpy(t.data<float>(), x.data(), x.size() * sizeof(float));
  return t;
}

std::vector<float> values(const Tensor& t) {
  const Tensor c = t.contiguous();
  return {c.data<float>(), c.data<float>() + c.numel()};
}

TEST(AttentionBf16Op, TheOptionRunsTheTilesWhereTheyExistAndTheFloat32KernelElsewhere) {
  const AttnDims s{2, 4, 4, 19, 19, 64, 64};
  const Inputs in = make_inputs(s, 5);
  const Tensor q = tensor_of(in.q, {s.B, s.H, s.Tq, s.Dh}), k = tensor_of(in.k, {s.B, s.H, s.Tk, s.Dh}),
               v = tensor_of(in.v, {s.B, s.H, s.Tk, s.Dv});
  SdpaOptions o;
  const std::vector<float> plain = values(scaled_dot_product_attention(q, k, v, o).out);
  o.bf16_products = true;
  const std::vector<float> got = values(scaled_dot_product_attention(q, k, v, o).out);
  // The op's choice: the tiles exactly where the bf16 products' path is the tiles.
  EXPECT_EQ(attention_bf16_available(), bf16_path() == QuantPath::Amx);
  if (attention_bf16_available()) {
    const std::vector<float> want = run(AttentionBf16Path::Tiles, in, s, AttentionMask<float>{}, 0.125f);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
    EXPECT_NE(std::memcmp(got.data(), plain.data(), plain.size() * sizeof(float)), 0);  // control: a different kernel
  } else {
    EXPECT_EQ(std::memcmp(got.data(), plain.data(), plain.size() * sizeof(float)), 0);
  }
  // With a gradient to record, the float32 pair runs (the bf16 kernel has no backward).
  Tensor qg = q.clone();
  qg.set_requires_grad(true);
  const std::vector<float> recorded = values(scaled_dot_product_attention(qg, k, v, o).out);
  EXPECT_EQ(std::memcmp(recorded.data(), plain.data(), plain.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace attn::kernels
