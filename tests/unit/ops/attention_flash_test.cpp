// attention_flash: the tiled online-softmax kernel pair against its naive twin, outputs and
// gradients, in f32 (within float32 rounding) and f64, for every mask kind (none, causal
// square / bottom-right / more queries than keys, key padding, causal + padding, Bool and
// float attn_mask of broadcast shapes, sliding window, fully masked rows), T not a multiple
// of the tile, Dh 8 and 64; small tiles at the kernel level; float64 gradchecks on the flash
// path; which kernel the op picks; and a peak-memory check that no T x T buffer is made.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "attn/ops/ops.h"
#include "kernels/attention_flash.h"
#include "kernels/attention_naive.h"
#include "kernels/attention_short.h"
#include "ops/attention_impl.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"

namespace attn {
namespace {

using detail::SdpaImpl;
using test::all_close;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Flash vs naive: |diff| <= tol * max(1, max |naive|), i.e. relative to the output's scale.
double rel_tol(DType d) { return d == DType::F32 ? 1e-5 : 1e-12; }

Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::F64) {
  Rng rng(seed);
  return Tensor::randn(shape, rng, dtype);
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.to_vector<double>()) m = std::max(m, std::fabs(x));
  return m;
}

bool has_nan(const Tensor& t) {
  for (double x : t.to_vector<double>())
    if (std::isnan(x)) return true;
  return false;
}

::testing::AssertionResult close_scaled(const Tensor& got, const Tensor& want, DType dt,
                                        const std::string& label) {
  return all_close(got, want, rel_tol(dt) * std::max(1.0, max_abs(want)), 0, label);
}

// A Bool key-padding mask [B, Tk] where batch b pads its last `pads[b]` keys.
Tensor padding_mask(int64_t Tk, const std::vector<int64_t>& pads) {
  std::vector<int> bits;
  for (int64_t p : pads)
    for (int64_t j = 0; j < Tk; ++j) bits.push_back(j >= Tk - p ? 1 : 0);
  return Tensor::from_bools(bits, {static_cast<int64_t>(pads.size()), Tk});
}

Tensor random_bool_mask(const Shape& shape, uint64_t seed, double p = 0.35) {
  Rng rng(seed);
  std::vector<int> bits(static_cast<size_t>(shape_numel(shape)));
  for (int& b : bits) b = rng.uniform() < p ? 1 : 0;
  return Tensor::from_bools(bits, shape);
}

// A float additive mask: N(0, 1) entries with about a fifth set to -inf.
Tensor random_float_mask(const Shape& shape, uint64_t seed, DType dt) {
  std::vector<double> vals = randn(shape, seed).to_vector<double>();
  Rng rng(seed + 100);
  for (double& x : vals)
    if (rng.uniform() < 0.2) x = -kInf;
  return Tensor::from_vector<double>(vals, shape).to(dt);
}

struct Dims {
  int64_t B = 2, H = 2, Tq = 7, Tk = 7, Dh = 8, Dv = 8;
};

std::string dims_str(const Dims& d) {
  std::ostringstream os;
  os << "B" << d.B << " H" << d.H << " Tq" << d.Tq << " Tk" << d.Tk << " Dh" << d.Dh << " Dv" << d.Dv;
  return os.str();
}

// The kernels' dimensions of d (multi-head: Hkv = H) and its packed layout.
kernels::AttentionDims kernel_dims(const Dims& d) { return {d.B, d.H, d.H, d.Tq, d.Tk, d.Dh, d.Dv}; }
kernels::AttentionLayout packed_layout(const Dims& d) { return kernels::AttentionLayout::packed(kernel_dims(d)); }

// The masks of one comparison, built for given sizes and dtype.
enum class MaskKind {
  None, Causal, CausalFewerQueries, CausalMoreQueries, Padding, CausalPadding, BoolFull,
  BoolBroadcastHeads, BoolBroadcastBatch, BoolColumn, FloatBias, FloatBiasCausal, Window,
  WindowPadding, FullyMaskedRows,
};

const char* kind_name(MaskKind k) {
  switch (k) {
    case MaskKind::None: return "None";
    case MaskKind::Causal: return "Causal";
    case MaskKind::CausalFewerQueries: return "CausalFewerQueries";
    case MaskKind::CausalMoreQueries: return "CausalMoreQueries";
    case MaskKind::Padding: return "Padding";
    case MaskKind::CausalPadding: return "CausalPadding";
    case MaskKind::BoolFull: return "BoolFull";
    case MaskKind::BoolBroadcastHeads: return "BoolBroadcastHeads";
    case MaskKind::BoolBroadcastBatch: return "BoolBroadcastBatch";
    case MaskKind::BoolColumn: return "BoolColumn";
    case MaskKind::FloatBias: return "FloatBias";
    case MaskKind::FloatBiasCausal: return "FloatBiasCausal";
    case MaskKind::Window: return "Window";
    case MaskKind::WindowPadding: return "WindowPadding";
    case MaskKind::FullyMaskedRows: return "FullyMaskedRows";
  }
  return "?";
}

// Sizes adjusted to the kind (Tq vs Tk), and the options. T is the base length.
void make_case(MaskKind kind, int64_t T, Dims& d, SdpaOptions& o, DType dt) {
  d.Tq = d.Tk = T;
  o = SdpaOptions{};
  const int64_t pad = std::max<int64_t>(1, T / 3);
  switch (kind) {
    case MaskKind::None: d.Tq = std::max<int64_t>(1, T - T / 4); break;  // Tq != Tk too
    case MaskKind::Causal: o.causal = true; break;
    case MaskKind::CausalFewerQueries: d.Tq = std::max<int64_t>(1, T / 2); o.causal = true; break;
    case MaskKind::CausalMoreQueries: d.Tk = std::max<int64_t>(1, T / 2); o.causal = true; break;
    case MaskKind::Padding: o.key_padding_mask = padding_mask(T, {0, std::min(T, pad)}); break;
    case MaskKind::CausalPadding:
      o.key_padding_mask = padding_mask(T, {std::min(T, pad), 0});
      o.causal = true;
      break;
    case MaskKind::BoolFull: o.attn_mask = random_bool_mask({d.B, d.H, T, T}, 11); break;
    case MaskKind::BoolBroadcastHeads: o.attn_mask = random_bool_mask({d.B, 1, T, T}, 12); break;
    case MaskKind::BoolBroadcastBatch: o.attn_mask = random_bool_mask({T, T}, 13); break;
    case MaskKind::BoolColumn: o.attn_mask = random_bool_mask({1, d.H, 1, T}, 14); break;
    case MaskKind::FloatBias: o.attn_mask = random_float_mask({d.B, 1, T, T}, 15, dt); break;
    case MaskKind::FloatBiasCausal:
      d.Tq = std::max<int64_t>(1, T - 2);
      o.attn_mask = random_float_mask({d.Tq, T}, 16, dt);
      o.causal = true;
      break;
    case MaskKind::Window: o = SdpaOptions::sliding_window(std::max<int64_t>(1, T / 4)); break;
    case MaskKind::WindowPadding:
      d.Tq = std::max<int64_t>(1, T - 3);
      o = SdpaOptions::sliding_window(5);
      o.key_padding_mask = padding_mask(T, {std::min(T, pad), 1});
      break;
    case MaskKind::FullyMaskedRows: {
      // Batch 1 is all padding; in batch 0 rows 0 and T-1 of the Bool mask hide every key.
      o.key_padding_mask = padding_mask(T, {0, T});
      std::vector<int> bits(static_cast<size_t>(T * T), 0);
      for (int64_t j = 0; j < T; ++j) {
        bits[static_cast<size_t>(j)] = 1;
        bits[static_cast<size_t>((T - 1) * T + j)] = 1;
      }
      o.attn_mask = Tensor::from_bools(bits, {T, T});
      break;
    }
  }
}

struct Grads {
  Tensor out, dq, dk, dv;
};

// Runs the op with the kernel forced and back-propagates L = sum(out * w).
Grads run_op(const Dims& d, const SdpaOptions& o, DType dt, SdpaImpl impl, uint64_t seed = 1) {
  Tensor q = randn({d.B, d.H, d.Tq, d.Dh}, seed, dt).set_requires_grad(true);
  Tensor k = randn({d.B, d.H, d.Tk, d.Dh}, seed + 1, dt).set_requires_grad(true);
  Tensor v = randn({d.B, d.H, d.Tk, d.Dv}, seed + 2, dt).set_requires_grad(true);
  const Tensor w = randn({d.B, d.H, d.Tq, d.Dv}, seed + 3, dt);
  const Tensor out = detail::scaled_dot_product_attention_impl(q, k, v, o, impl).out;
  sum(mul(out, w)).backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

::testing::AssertionResult flash_matches_naive(const Dims& d, const SdpaOptions& o, DType dt) {
  const Grads n = run_op(d, o, dt, SdpaImpl::Naive);
  const Grads f = run_op(d, o, dt, SdpaImpl::Flash);
  for (auto [got, want, label] : {std::tuple{&f.out, &n.out, "out"}, std::tuple{&f.dq, &n.dq, "dq"},
                                  std::tuple{&f.dk, &n.dk, "dk"}, std::tuple{&f.dv, &n.dv, "dv"}}) {
    if (has_nan(*got)) return ::testing::AssertionFailure() << label << " has NaN";
    auto r = close_scaled(*got, *want, dt, label);
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

// ---- flash vs naive through the op, every mask kind x lengths x head sizes ---------------

class FlashVsNaive : public ::testing::TestWithParam<std::tuple<DType, MaskKind>> {};

TEST_P(FlashVsNaive, OutputsAndGradientsAgreeForOddLengthsAndBothHeadSizes) {
  const auto [dt, kind] = GetParam();
  for (int64_t T : {1, 7, 63, 65, 130})
    for (int64_t Dh : {8, 64}) {
      Dims d;
      d.Dh = d.Dv = Dh;
      SdpaOptions o;
      make_case(kind, T, d, o, dt);
      EXPECT_TRUE(flash_matches_naive(d, o, dt)) << kind_name(kind) << " " << dims_str(d);
    }
}

INSTANTIATE_TEST_SUITE_P(
    AttentionFlash, FlashVsNaive,
    ::testing::Combine(
        ::testing::Values(DType::F32, DType::F64),
        ::testing::Values(MaskKind::None, MaskKind::Causal, MaskKind::CausalFewerQueries,
                          MaskKind::CausalMoreQueries, MaskKind::Padding, MaskKind::CausalPadding,
                          MaskKind::BoolFull, MaskKind::BoolBroadcastHeads,
                          MaskKind::BoolBroadcastBatch, MaskKind::BoolColumn, MaskKind::FloatBias,
                          MaskKind::FloatBiasCausal, MaskKind::Window, MaskKind::WindowPadding,
                          MaskKind::FullyMaskedRows)),
    [](const auto& info) {
      return std::string(dtype_name(std::get<0>(info.param))) + "_" + kind_name(std::get<1>(info.param));
    });

TEST(AttentionFlash, DifferentValueWidthAndCustomScaleAgreeWithNaive) {
  Dims d{2, 3, 65, 130, 8, 24};
  SdpaOptions o = SdpaOptions::padding(padding_mask(130, {3, 70}));
  o.scale = 0.3;
  EXPECT_TRUE(flash_matches_naive(d, o, DType::F32));
  EXPECT_TRUE(flash_matches_naive(d, o, DType::F64));
}

// The control: the comparison above can fail. A different scale on one side is caught.
TEST(AttentionFlash, ComparisonDetectsADifferentResult) {
  Dims d{1, 2, 65, 65, 8, 8};
  SdpaOptions a = SdpaOptions::causal_mask(), b = a;
  b.scale = 1.01 / std::sqrt(8.0);
  const Grads n = run_op(d, a, DType::F32, SdpaImpl::Naive);
  const Grads f = run_op(d, b, DType::F32, SdpaImpl::Flash);
  EXPECT_FALSE(close_scaled(f.out, n.out, DType::F32, "out"));
}

// ---- the kernels directly, with small tiles that cross many tile edges -------------------

// Resolved masks for the kernels: a float bias [Bm, Hm, Tq, Tk] with -inf entries, padding.
template <class T>
struct KernelMask {
  std::vector<T> bias;
  std::vector<uint8_t> padding;
  kernels::AttentionMask<T> view;
};

template <class T>
KernelMask<T> kernel_mask(const Dims& d, bool bias, bool broadcast_bias, bool padding, bool causal,
                          int64_t window, uint64_t seed) {
  KernelMask<T> m;
  Rng rng(seed);
  if (bias) {
    const int64_t Bm = broadcast_bias ? 1 : d.B, Hm = broadcast_bias ? 1 : d.H;
    m.bias.resize(static_cast<size_t>(Bm * Hm * d.Tq * d.Tk));
    for (T& x : m.bias) x = rng.uniform() < 0.15 ? -std::numeric_limits<T>::infinity()
                                                 : static_cast<T>(rng.uniform() * 2 - 1);
    m.view.bias = m.bias.data();
    m.view.bias_stride_b = Bm == 1 ? 0 : Hm * d.Tq * d.Tk;
    m.view.bias_stride_h = Hm == 1 ? 0 : d.Tq * d.Tk;
  }
  if (padding) {
    m.padding.assign(static_cast<size_t>(d.B * d.Tk), 0);
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t j = 0; j < d.Tk; ++j)
        m.padding[static_cast<size_t>(b * d.Tk + j)] = (j % 5 == 3 || (b == 1 && j >= d.Tk - 4)) ? 1 : 0;
    m.view.key_padding = m.padding.data();
  }
  m.view.causal = causal;
  m.view.window = window;
  return m;
}

template <class T>
std::vector<T> random_vec(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<T> x(static_cast<size_t>(n));
  for (T& e : x) e = static_cast<T>(rng.normal());
  return x;
}

template <class T>
double max_abs_vec(const std::vector<T>& v) {
  double m = 0;
  for (T x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

template <class T>
::testing::AssertionResult vec_close(const std::vector<T>& got, const std::vector<T>& want, double tol,
                                     const char* label) {
  const double bound = tol * std::max(1.0, max_abs_vec(want));
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    if (!(diff <= bound))
      return ::testing::AssertionFailure() << label << "[" << i << "]: " << got[i] << " vs " << want[i]
                                           << " (bound " << bound << ")";
  }
  return ::testing::AssertionSuccess();
}

// Both kernel pairs on the same inputs; outputs and gradients must agree.
template <class T>
::testing::AssertionResult kernels_agree(const Dims& d, const kernels::AttentionMask<T>& mask,
                                         kernels::FlashTiles tiles, double tol) {
  const int64_t nq = d.B * d.H * d.Tq, nk = d.B * d.H * d.Tk;
  const auto q = random_vec<T>(nq * d.Dh, 1), k = random_vec<T>(nk * d.Dh, 2);
  const auto v = random_vec<T>(nk * d.Dv, 3), dout = random_vec<T>(nq * d.Dv, 4);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d.Dh)));
  std::vector<T> out_n(static_cast<size_t>(nq * d.Dv)), probs(static_cast<size_t>(nq * d.Tk));
  std::vector<T> work(probs.size());
  std::vector<T> dq_n(q.size(), T(0)), dk_n(k.size(), T(0)), dv_n(v.size(), T(0));
  kernels::attention_naive_forward<T>(out_n.data(), probs.data(), nullptr, q.data(), k.data(), v.data(),
                                      mask, nullptr, kernel_dims(d), scale, packed_layout(d));
  kernels::attention_naive_backward<T>(dq_n.data(), dk_n.data(), dv_n.data(), work.data(), dout.data(),
                                       probs.data(), nullptr, q.data(), k.data(), v.data(), kernel_dims(d),
                                       scale, packed_layout(d), packed_layout(d));
  std::vector<T> out_f(out_n.size(), T(7)), lse(static_cast<size_t>(nq), T(7));
  std::vector<T> dq_f(q.size(), T(0)), dk_f(k.size(), T(0)), dv_f(v.size(), T(0));
  kernels::attention_flash_forward<T>(out_f.data(), lse.data(), q.data(), k.data(), v.data(), mask,
                                      kernel_dims(d), scale, tiles, packed_layout(d));
  kernels::attention_flash_backward<T>(dq_f.data(), dk_f.data(), dv_f.data(), dout.data(), out_f.data(),
                                       lse.data(), q.data(), k.data(), v.data(), mask, kernel_dims(d), scale,
                                       tiles, packed_layout(d), packed_layout(d));
  for (auto [got, want, label] : {std::tuple{&out_f, &out_n, "out"}, std::tuple{&dq_f, &dq_n, "dq"},
                                  std::tuple{&dk_f, &dk_n, "dk"}, std::tuple{&dv_f, &dv_n, "dv"}}) {
    auto r = vec_close(*got, *want, tol, label);
    if (!r) return r << " (" << dims_str(d) << ", tiles " << tiles.q << "x" << tiles.k << ")";
  }
  return ::testing::AssertionSuccess();
}

template <class T>
void check_small_tiles(double tol) {
  const std::vector<kernels::FlashTiles> tile_sets = {{1, 1}, {4, 8}, {7, 3}, {16, 16}, {64, 64}};
  const std::vector<std::pair<int64_t, int64_t>> lengths = {{37, 37}, {13, 37}, {37, 13}, {1, 9}};
  int cases = 0;
  for (auto [Tq, Tk] : lengths)
    for (int combo = 0; combo < 8; ++combo) {
      Dims d{2, 2, Tq, Tk, 8, 5};
      const bool causal = combo & 1, padding = combo & 2, bias = combo & 4;
      for (int64_t window : {int64_t{0}, int64_t{6}}) {
        const KernelMask<T> m = kernel_mask<T>(d, bias, combo == 4, padding, causal || window > 0,
                                               window, 20 + static_cast<uint64_t>(combo));
        for (const auto& tiles : tile_sets) {
          EXPECT_TRUE(kernels_agree<T>(d, m.view, tiles, tol))
              << "causal " << causal << " padding " << padding << " bias " << bias << " window " << window;
          ++cases;
        }
      }
    }
  EXPECT_EQ(cases, 4 * 8 * 2 * 5);
}

TEST(AttentionFlashKernel, SmallTilesAgreeWithNaiveForEveryMaskMixF32) { check_small_tiles<float>(1e-5); }
TEST(AttentionFlashKernel, SmallTilesAgreeWithNaiveForEveryMaskMixF64) { check_small_tiles<double>(1e-12); }

TEST(AttentionFlashKernel, LogSumExpIsTheMaskedRowLogSumExpAndMinusInfinityForEmptyRows) {
  Dims d{1, 1, 6, 10, 4, 3};
  d.Tq = 6;
  KernelMask<double> m = kernel_mask<double>(d, false, false, true, true, 0, 3);  // causal + padding
  const auto q = random_vec<double>(d.Tq * d.Dh, 1), k = random_vec<double>(d.Tk * d.Dh, 2);
  const auto v = random_vec<double>(d.Tk * d.Dv, 3);
  // Pad keys 0..4 as well: query 0 sees keys j <= 4 only, so it sees none.
  for (int64_t j = 0; j <= 4; ++j) m.padding[static_cast<size_t>(j)] = 1;
  std::vector<double> out(static_cast<size_t>(d.Tq * d.Dv)), lse(static_cast<size_t>(d.Tq));
  kernels::attention_flash_forward<double>(out.data(), lse.data(), q.data(), k.data(), v.data(), m.view,
                                           kernel_dims(d), 0.5, {2, 3}, packed_layout(d));
  int finite_rows = 0;
  for (int64_t i = 0; i < d.Tq; ++i) {
    double z = 0;
    bool any = false;
    for (int64_t j = 0; j < d.Tk; ++j) {
      if (m.padding[static_cast<size_t>(j)] || j > i + 4) continue;
      double s = 0;
      for (int64_t c = 0; c < d.Dh; ++c) s += q[static_cast<size_t>(i * d.Dh + c)] * k[static_cast<size_t>(j * d.Dh + c)];
      z += std::exp(0.5 * s);
      any = true;
    }
    if (any) {
      EXPECT_NEAR(lse[static_cast<size_t>(i)], std::log(z), 1e-12) << "row " << i;
      ++finite_rows;
    } else {
      EXPECT_EQ(lse[static_cast<size_t>(i)], -kInf) << "row " << i;
      for (int64_t c = 0; c < d.Dv; ++c) EXPECT_EQ(out[static_cast<size_t>(i * d.Dv + c)], 0.0);
    }
  }
  EXPECT_EQ(finite_rows, d.Tq - 1);
}

// A key tile that the causal mask hides from a whole query tile is never read: NaN values
// planted there stay out of that query tile, while the rows that do read it (0 * NaN) show
// them. The naive kernel, which multiplies every P_ij by v_j, would poison every row.
TEST(AttentionFlashKernel, CausalSkipsKeyTilesAboveTheDiagonal) {
  const int64_t T = 128, Dh = 4;
  auto q = random_vec<float>(T * Dh, 1), k = random_vec<float>(T * Dh, 2), v = random_vec<float>(T * Dh, 3);
  for (int64_t j = 64; j < T; ++j) v[static_cast<size_t>(j * Dh)] = std::nanf("");
  kernels::AttentionMask<float> mask;
  mask.causal = true;
  std::vector<float> out(static_cast<size_t>(T * Dh)), lse(static_cast<size_t>(T));
  kernels::attention_flash_forward<float>(out.data(), lse.data(), q.data(), k.data(), v.data(), mask,
                                          kernel_dims({1, 1, T, T, Dh, Dh}), 0.5f, {64, 64},
                                          packed_layout({1, 1, T, T, Dh, Dh}));
  for (int64_t i = 0; i < 64; ++i) EXPECT_FALSE(std::isnan(out[static_cast<size_t>(i * Dh)])) << i;
  for (int64_t i = 64; i < T; ++i) EXPECT_TRUE(std::isnan(out[static_cast<size_t>(i * Dh)])) << i;
}

TEST(AttentionFlashKernel, SlidingWindowSkipsKeyTilesLeftOfTheWindow) {
  const int64_t T = 128, Dh = 4;
  auto q = random_vec<float>(T * Dh, 1), k = random_vec<float>(T * Dh, 2), v = random_vec<float>(T * Dh, 3);
  for (int64_t j = 0; j < 32; ++j) v[static_cast<size_t>(j * Dh)] = std::nanf("");
  kernels::AttentionMask<float> mask;
  mask.causal = true;
  mask.window = 16;  // query i sees keys i-15..i: rows >= 64 never reach keys < 32
  std::vector<float> out(static_cast<size_t>(T * Dh)), lse(static_cast<size_t>(T));
  kernels::attention_flash_forward<float>(out.data(), lse.data(), q.data(), k.data(), v.data(), mask,
                                          kernel_dims({1, 1, T, T, Dh, Dh}), 0.5f, {32, 32},
                                          packed_layout({1, 1, T, T, Dh, Dh}));
  for (int64_t i = 0; i < 64; ++i) EXPECT_TRUE(std::isnan(out[static_cast<size_t>(i * Dh)])) << i;
  for (int64_t i = 64; i < T; ++i) EXPECT_FALSE(std::isnan(out[static_cast<size_t>(i * Dh)])) << i;
}

// With one slice and several threads the backward splits key tiles across threads, each
// with a private dQ; the result must match the naive kernel all the same.
TEST(AttentionFlashKernel, BackwardSplitAcrossThreadsAgreesWithNaive) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(3);
  Dims d{1, 1, 200, 200, 16, 16};
  const KernelMask<double> causal = kernel_mask<double>(d, false, false, true, true, 0, 1);
  EXPECT_TRUE(kernels_agree<double>(d, causal.view, {32, 32}, 1e-12));
  const KernelMask<float> plain = kernel_mask<float>(d, true, false, false, false, 0, 2);
  EXPECT_TRUE(kernels_agree<float>(d, plain.view, {64, 32}, 1e-5));
  omp_set_num_threads(before);
}

// ---- fully masked rows through the op -----------------------------------------------------

TEST(AttentionFlash, FullyMaskedRowsGiveExactZerosAndZeroGradientWithoutNaN) {
  for (DType dt : {DType::F32, DType::F64}) {
    Dims d{2, 2, 70, 70, 8, 8};
    SdpaOptions o;
    make_case(MaskKind::FullyMaskedRows, 70, d, o, dt);
    const Grads f = run_op(d, o, dt, SdpaImpl::Flash);
    EXPECT_FALSE(has_nan(f.out) || has_nan(f.dq) || has_nan(f.dk) || has_nan(f.dv));
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t c = 0; c < d.Dh; ++c) {
        EXPECT_EQ(f.out.at({0, h, 0, c}), 0.0);
        EXPECT_EQ(f.out.at({0, h, 69, c}), 0.0);
        EXPECT_EQ(f.dq.at({0, h, 0, c}), 0.0);
        EXPECT_EQ(f.dq.at({0, h, 69, c}), 0.0);
      }
    EXPECT_EQ(max_abs(slice(f.out, 0, 1, 2)), 0.0);
    EXPECT_EQ(max_abs(slice(f.dk, 0, 1, 2)), 0.0);
    EXPECT_EQ(max_abs(slice(f.dv, 0, 1, 2)), 0.0);
    EXPECT_GT(max_abs(slice(f.dq, 0, 0, 1)), 0.0);  // the visible rows do get a gradient
  }
}

// ---- sliding window semantics ---------------------------------------------------------------

TEST(AttentionFlash, SlidingWindowMatchesBruteForceOnBothPaths) {
  const int64_t W = 3;
  const Tensor q = randn({1, 2, 5, 3}, 1), k = randn({1, 2, 9, 3}, 2), v = randn({1, 2, 9, 2}, 3);
  std::vector<double> want(static_cast<size_t>(2 * 5 * 2), 0.0);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 5; ++i) {
      const int64_t ip = i + (9 - 5);  // bottom-right aligned position
      std::vector<double> w;
      double z = 0;
      for (int64_t j = ip - W + 1; j <= ip; ++j) {
        double s = 0;
        for (int64_t c = 0; c < 3; ++c) s += q.at({0, h, i, c}) * k.at({0, h, j, c});
        w.push_back(std::exp(s / std::sqrt(3.0)));
        z += w.back();
      }
      for (int64_t t = 0; t < W; ++t)
        for (int64_t c = 0; c < 2; ++c)
          want[static_cast<size_t>((h * 5 + i) * 2 + c)] += w[static_cast<size_t>(t)] / z * v.at({0, h, ip - W + 1 + t, c});
    }
  const Tensor ref = Tensor::from_vector<double>(want, {1, 2, 5, 2});
  const SdpaOptions o = SdpaOptions::sliding_window(W);
  EXPECT_TRUE(all_close(detail::scaled_dot_product_attention_impl(q, k, v, o, SdpaImpl::Flash).out, ref,
                        1e-12, 0, "flash"));
  EXPECT_TRUE(all_close(detail::scaled_dot_product_attention_impl(q, k, v, o, SdpaImpl::Naive).out, ref,
                        1e-12, 0, "naive"));
  // need_weights (naive) shows exactly W nonzero weights per row, at the right places.
  SdpaOptions ow = o;
  ow.need_weights = true;
  const Tensor w = scaled_dot_product_attention(q, k, v, ow).weights;
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 9; ++j)
      EXPECT_EQ(w.at({0, 1, i, j}) > 0, j > i + 4 - W && j <= i + 4) << i << "," << j;
}

TEST(AttentionFlash, WindowOfOneCopiesTheValueAtTheSamePosition) {
  const Tensor q = randn({2, 2, 70, 8}, 1), k = randn({2, 2, 70, 8}, 2), v = randn({2, 2, 70, 8}, 3);
  const Tensor out = scaled_dot_product_attention(q, k, v, SdpaOptions::sliding_window(1)).out;
  EXPECT_TRUE(all_close(out, v, 1e-15, 0, "out"));
}

TEST(AttentionFlash, WindowAsLongAsTheKeysIsPlainCausal) {
  const Tensor q = randn({1, 2, 65, 8}, 1), k = randn({1, 2, 65, 8}, 2), v = randn({1, 2, 65, 8}, 3);
  const Tensor a = scaled_dot_product_attention(q, k, v, SdpaOptions::sliding_window(65)).out;
  const Tensor b = scaled_dot_product_attention(q, k, v, SdpaOptions::causal_mask()).out;
  EXPECT_TRUE(all_close(a, b, 1e-14, 0, "out"));
  const Tensor c = scaled_dot_product_attention(q, k, v, SdpaOptions::sliding_window(64)).out;
  EXPECT_GT(test::max_abs_diff(c, b), 1e-6);  // one key fewer for the last row: differs
}

TEST(AttentionFlash, RejectsANegativeWindow) {
  const Tensor q = Tensor::zeros({1, 1, 2, 3});
  SdpaOptions o;
  o.window = -1;
  EXPECT_THROW(scaled_dot_product_attention(q, q, q, o), Error);
}

// ---- float64 gradient checks on the flash path -------------------------------------------

::testing::AssertionResult gradcheck_flash(const Dims& d, const SdpaOptions& o) {
  Tensor q = randn({d.B, d.H, d.Tq, d.Dh}, 1).set_requires_grad(true);
  Tensor k = randn({d.B, d.H, d.Tk, d.Dh}, 2).set_requires_grad(true);
  Tensor v = randn({d.B, d.H, d.Tk, d.Dv}, 3).set_requires_grad(true);
  return test::gradcheck(
      [&](const std::vector<Tensor>& x) {
        return detail::scaled_dot_product_attention_impl(x[0], x[1], x[2], o, SdpaImpl::Flash).out;
      },
      {q, k, v});
}

TEST(AttentionFlash, GradcheckAcrossTileEdgesWithoutMaskAndCausal) {
  EXPECT_TRUE(gradcheck_flash(Dims{1, 1, 66, 70, 2, 2}, {}));
  EXPECT_TRUE(gradcheck_flash(Dims{1, 1, 66, 70, 2, 2}, SdpaOptions::causal_mask()));
  EXPECT_TRUE(gradcheck_flash(Dims{1, 2, 5, 3, 3, 2}, SdpaOptions::causal_mask()));  // rows with no key
}

TEST(AttentionFlash, GradcheckPaddingBiasAndWindow) {
  SdpaOptions o = SdpaOptions::padding(padding_mask(67, {3, 67}));
  o.causal = true;
  EXPECT_TRUE(gradcheck_flash(Dims{2, 1, 67, 67, 2, 2}, o));
  SdpaOptions f;
  f.attn_mask = random_float_mask({1, 2, 4, 66}, 7, DType::F64);
  EXPECT_TRUE(gradcheck_flash(Dims{1, 2, 4, 66, 2, 3}, f));
  EXPECT_TRUE(gradcheck_flash(Dims{1, 1, 66, 70, 2, 2}, SdpaOptions::sliding_window(9)));
}

// ---- which kernel runs --------------------------------------------------------------------

TEST(AttentionFlash, TheOpUsesFlashUnlessWeightsOrDropoutAreAsked) {
  const int64_t kLong = kernels::kShortAttentionMaxT + 1;
  auto choose = [=](const SdpaOptions& o, int64_t Tq = -1, int64_t Tk = -1, DType dt = DType::F32) {
    return detail::choose_sdpa_impl(o, dt, Tq < 0 ? kLong : Tq, Tk < 0 ? kLong : Tk);
  };
  SdpaOptions o;
  EXPECT_EQ(choose(o), SdpaImpl::Flash);
  EXPECT_EQ(choose(o, 3, 3), SdpaImpl::Flash);
  o.causal = true;
  o.key_padding_mask = padding_mask(3, {1});
  EXPECT_EQ(choose(o), SdpaImpl::Flash);
  o.need_weights = true;
  EXPECT_EQ(choose(o), SdpaImpl::Rows);
  EXPECT_EQ(choose(o, -1, -1, DType::F64), SdpaImpl::Naive);
  o.need_weights = false;
  o.dropout_p = 0.1;
  EXPECT_EQ(choose(o), SdpaImpl::Rows);
  // Short float32 sequences take the vector-kernel twin of the naive pair, longer ones the naive
  // pair's products with its rows on the vector kernels; float64 always the naive pair itself.
  EXPECT_EQ(choose(o, kLong - 1, kLong - 1), SdpaImpl::Short);
  EXPECT_EQ(choose(o, kLong - 1, kLong), SdpaImpl::Rows);
  EXPECT_EQ(choose(o, kLong, kLong - 1), SdpaImpl::Rows);
  EXPECT_EQ(choose(o, 9, 9, DType::F64), SdpaImpl::Naive);
  EXPECT_EQ(choose(o, kLong, kLong, DType::F64), SdpaImpl::Naive);

  const Tensor q = randn({1, 1, 3, 2}, 1).set_requires_grad(true);
  EXPECT_STREQ(scaled_dot_product_attention(q, q, q).out.grad_fn()->name(), "FlashSdpaBackward");
  SdpaOptions w;
  w.need_weights = true;
  EXPECT_STREQ(scaled_dot_product_attention(q, q, q, w).out.grad_fn()->name(), "SdpaBackward");
}

TEST(AttentionFlash, ForcingFlashWithWeightsOrDropoutIsAnError) {
  const Tensor q = Tensor::zeros({1, 1, 2, 3});
  SdpaOptions o;
  o.need_weights = true;
  EXPECT_THROW(detail::scaled_dot_product_attention_impl(q, q, q, o, SdpaImpl::Flash), Error);
  Rng rng;
  SdpaOptions p;
  p.dropout_p = 0.2;
  p.rng = &rng;
  EXPECT_THROW(detail::scaled_dot_product_attention_impl(q, q, q, p, SdpaImpl::Flash), Error);
  EXPECT_NO_THROW(detail::scaled_dot_product_attention_impl(q, q, q, p, SdpaImpl::Naive));
  EXPECT_NO_THROW(detail::scaled_dot_product_attention_impl(q, q, q, p, SdpaImpl::Short));
  const Tensor q64 = Tensor::zeros({1, 1, 2, 3}, DType::F64);
  EXPECT_THROW(detail::scaled_dot_product_attention_impl(q64, q64, q64, p, SdpaImpl::Short), Error);
  EXPECT_NO_THROW(detail::scaled_dot_product_attention_impl(q, q, q, p, SdpaImpl::Rows));
  EXPECT_THROW(detail::scaled_dot_product_attention_impl(q64, q64, q64, p, SdpaImpl::Rows), Error);
}

// ---- memory -------------------------------------------------------------------------------

// Resets the peak resident memory (VmHWM) to the current RSS (Linux >= 4.0).
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// VmHWM in bytes; -1 when /proc/self/status has none.
int64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

int64_t current_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

// Peak RSS growth of one forward + backward at length T with the kernel forced.
int64_t peak_growth(int64_t T, SdpaImpl impl) {
  Rng rng(1);
  Tensor q = Tensor::randn({1, 1, T, 32}, rng).set_requires_grad(true);  // f32
  Tensor k = Tensor::randn({1, 1, T, 32}, rng).set_requires_grad(true);
  Tensor v = Tensor::randn({1, 1, T, 32}, rng).set_requires_grad(true);
  release_cached_memory();  // blocks cached by earlier tests are resident already
  reset_peak_rss();
  const int64_t base = current_rss_bytes();
  {
    const Tensor out = detail::scaled_dot_product_attention_impl(q, k, v, SdpaOptions::causal_mask(), impl).out;
    sum(out).backward();
  }
  EXPECT_TRUE(q.grad().defined());
  return peak_rss_bytes() - base;
}

TEST(AttentionFlash, LongSequenceForwardAndBackwardNeverAllocateTxT) {
  reset_peak_rss();
  if (peak_rss_bytes() < 0 || peak_rss_bytes() > current_rss_bytes() + (4 << 20))
    GTEST_SKIP() << "this system cannot reset VmHWM through /proc/self/clear_refs";
  // The control: the naive kernel at T = 4096 keeps P (64 MiB in f32) and a work buffer.
  const int64_t naive = peak_growth(4096, SdpaImpl::Naive);
  EXPECT_GT(naive, int64_t{60} << 20) << "the measurement would not see a T x T buffer";
  // T = 8192: a T x T f32 buffer is 256 MiB. The flash path needs q, k, v, out, dq, dk, dv
  // ([T, 32] each, 1 MiB), lse and per-thread tiles: a few MiB.
  const int64_t flash = peak_growth(8192, SdpaImpl::Flash);
  EXPECT_LT(flash, int64_t{32} << 20) << "peak RSS grew by " << (flash >> 20) << " MiB";
}

}  // namespace
}  // namespace attn
