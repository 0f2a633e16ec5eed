// scaled_dot_product_attention: values and weights against a brute-force double loop in f32
// and f64 for every mask kind (none, causal square and bottom-right, key padding, Bool
// [Tq, Tk] / [B, H, Tq, Tk] / broadcast, float additive), cross-attention, a custom scale,
// fully masked rows (exact zeros, no NaN), dropout (seeded, identity at p = 0), float64
// gradient checks for every mask kind, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>

#include "attn/ops/ops.h"
#include "support/dropout_reference.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"
#include "support/tolerances.h"

namespace attn {
namespace {

using test::all_close;
using test::gradcheck;

constexpr double kInf = std::numeric_limits<double>::infinity();

double tol(DType d) { return d == DType::F32 ? test::kAbsF32 : test::kAbsF64; }

Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::F64) {
  Rng rng(seed);
  return Tensor::randn(shape, rng, dtype);
}

Tensor leaf(const Shape& shape, uint64_t seed) { return randn(shape, seed).set_requires_grad(true); }

// Reads a mask broadcast to [B, H, Tq, Tk] at (b, h, i, j): trailing dimensions line up and
// dimensions of size 1 are pinned to 0.
double mask_at(const Tensor& m, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t full[4] = {b, h, i, j};
  std::vector<int64_t> idx;
  for (int64_t d = 4 - m.dim(); d < 4; ++d)
    idx.push_back(m.size(d - (4 - m.dim())) == 1 ? 0 : full[d]);
  return m.at(idx);
}

struct Reference {
  Tensor out;      // f64 [B, H, Tq, Dv]
  Tensor weights;  // f64 [B, H, Tq, Tk]
};

// The definition, entry by entry in double: masked keys are left out of the softmax, a row
// with no visible key gives weights 0 and output 0. `keep` (optional) is the dropout scale
// [B, H, Tq, Tk] applied to the weights before they multiply v.
Reference reference(const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& o,
                    const std::vector<double>* keep = nullptr) {
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), Dh = q.size(3);
  const int64_t Tk = k.size(2), Dv = v.size(3);
  const double scale = o.scale != 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(Dh));
  std::vector<double> out(static_cast<size_t>(B * H * Tq * Dv), 0.0);
  std::vector<double> w(static_cast<size_t>(B * H * Tq * Tk), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        std::vector<double> s(static_cast<size_t>(Tk));
        std::vector<bool> masked(static_cast<size_t>(Tk), false);
        for (int64_t j = 0; j < Tk; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < Dh; ++c) dot += q.at({b, h, i, c}) * k.at({b, h, j, c});
          double sj = dot * scale;
          bool mj = false;
          if (o.attn_mask.defined()) {
            const double mv = mask_at(o.attn_mask, b, h, i, j);
            if (o.attn_mask.dtype() == DType::Bool) mj = mv != 0;
            else if (mv == -kInf) mj = true;
            else sj += mv;
          }
          if (o.key_padding_mask.defined() && o.key_padding_mask.at({b, j}) != 0) mj = true;
          if (o.causal && j > i + (Tk - Tq)) mj = true;
          s[static_cast<size_t>(j)] = sj;
          masked[static_cast<size_t>(j)] = mj;
        }
        double m = -kInf;
        for (int64_t j = 0; j < Tk; ++j)
          if (!masked[static_cast<size_t>(j)]) m = std::max(m, s[static_cast<size_t>(j)]);
        if (m == -kInf) continue;  // fully masked: zeros
        double z = 0;
        for (int64_t j = 0; j < Tk; ++j)
          if (!masked[static_cast<size_t>(j)]) z += std::exp(s[static_cast<size_t>(j)] - m);
        for (int64_t j = 0; j < Tk; ++j) {
          const size_t wi = static_cast<size_t>(((b * H + h) * Tq + i) * Tk + j);
          const double p = masked[static_cast<size_t>(j)] ? 0.0 : std::exp(s[static_cast<size_t>(j)] - m) / z;
          w[wi] = p;
          const double pd = keep ? p * (*keep)[wi] : p;
          for (int64_t c = 0; c < Dv; ++c)
            out[static_cast<size_t>(((b * H + h) * Tq + i) * Dv + c)] += pd * v.at({b, h, j, c});
        }
      }
  return {Tensor::from_vector<double>(out, {B, H, Tq, Dv}),
          Tensor::from_vector<double>(w, {B, H, Tq, Tk})};
}

// The dropout scale the op must draw, written from the dropout op's convention
// (docs/conventions.md) rather than with its kernel: row-major over [B, H, Tq, Tk], eight lanes
// Rng(rng.next_u64()) seeded in lane order, four entries per 64-bit draw, group g of four from
// lane g % 8's (g / 8)-th draw, entry 4g + f dropped when bits 16f..16f+15 of that draw are below
// round(p * 65536); kept ones scaled by 1 / (1 - p).
std::vector<double> expected_keep(uint64_t seed, int64_t n, double p) {
  Rng rng(seed);
  const auto t = static_cast<uint32_t>(std::llround(p * 65536));
  const std::vector<uint8_t> kept = test::reference_keep(n, t, rng);  // support/dropout_reference.h
  std::vector<double> keep(static_cast<size_t>(n));
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = kept[i] ? 1.0 / (1.0 - p) : 0.0;
  return keep;
}

bool has_nan(const Tensor& t) {
  for (double x : t.to_vector<double>())
    if (std::isnan(x)) return true;
  return false;
}

// Sizes of one case: q [B, H, Tq, Dh], k [B, H, Tk, Dh], v [B, H, Tk, Dv].
struct Dims {
  int64_t B = 2, H = 3, Tq = 4, Tk = 4, Dh = 5, Dv = 5;
};

struct Inputs {
  Tensor q, k, v;
};

Inputs make_inputs(const Dims& d, DType dtype, uint64_t seed = 1) {
  return {randn({d.B, d.H, d.Tq, d.Dh}, seed, dtype), randn({d.B, d.H, d.Tk, d.Dh}, seed + 1, dtype),
          randn({d.B, d.H, d.Tk, d.Dv}, seed + 2, dtype)};
}

// A Bool key-padding mask [B, Tk] where batch b pads its last `pads[b]` keys.
Tensor padding_mask(int64_t Tk, const std::vector<int64_t>& pads) {
  std::vector<int> bits;
  for (int64_t p : pads)
    for (int64_t j = 0; j < Tk; ++j) bits.push_back(j >= Tk - p ? 1 : 0);
  return Tensor::from_bools(bits, {static_cast<int64_t>(pads.size()), Tk});
}

// A Bool mask of the given shape with a fixed pseudo-random pattern (about a third masked).
Tensor random_bool_mask(const Shape& shape, uint64_t seed) {
  Rng rng(seed);
  std::vector<int> bits(static_cast<size_t>(shape_numel(shape)));
  for (int& b : bits) b = rng.uniform() < 0.35 ? 1 : 0;
  return Tensor::from_bools(bits, shape);
}

::testing::AssertionResult matches_reference(const Inputs& in, SdpaOptions o, DType dtype) {
  o.need_weights = true;
  const SdpaResult r = scaled_dot_product_attention(in.q, in.k, in.v, o);
  const Reference ref = reference(in.q, in.k, in.v, o);
  auto res = all_close(r.out, ref.out, tol(dtype), 0, "out");
  if (!res) return res;
  return all_close(r.weights, ref.weights, tol(dtype), 0, "weights");
}

class SdpaByDtype : public ::testing::TestWithParam<DType> {};

TEST_P(SdpaByDtype, NoMaskMatchesBruteForce) {
  const Dims d;
  EXPECT_TRUE(matches_reference(make_inputs(d, GetParam()), {}, GetParam()));
}

TEST_P(SdpaByDtype, CausalSquareMatchesBruteForce) {
  const Dims d;
  EXPECT_TRUE(matches_reference(make_inputs(d, GetParam()), SdpaOptions::causal_mask(), GetParam()));
}

TEST_P(SdpaByDtype, CausalWithFewerQueriesIsAlignedBottomRight) {
  Dims d;
  d.Tq = 2;
  d.Tk = 5;
  const Inputs in = make_inputs(d, GetParam());
  SdpaOptions o = SdpaOptions::causal_mask();
  EXPECT_TRUE(matches_reference(in, o, GetParam()));
  // Query 0 sees keys 0..3 (= 0 + Tk - Tq), query 1 sees all five: the last query row is the
  // last key row, as a KV cache needs. Top-left alignment would let query 0 see key 0 only.
  o.need_weights = true;
  const Tensor w = scaled_dot_product_attention(in.q, in.k, in.v, o).weights;
  for (int64_t j = 0; j < 5; ++j) {
    EXPECT_EQ(w.at({1, 2, 0, j}) > 0, j <= 3) << "query 0, key " << j;
    EXPECT_GT(w.at({1, 2, 1, j}), 0) << "query 1, key " << j;
  }
}

TEST_P(SdpaByDtype, CausalWithMoreQueriesThanKeysZeroesTheRowsThatSeeNothing) {
  Dims d;
  d.Tq = 5;
  d.Tk = 3;
  const Inputs in = make_inputs(d, GetParam());
  SdpaOptions o = SdpaOptions::causal_mask();
  EXPECT_TRUE(matches_reference(in, o, GetParam()));
  const Tensor out = scaled_dot_product_attention(in.q, in.k, in.v, o).out;
  // Queries 0 and 1 would see keys j <= i - 2: none.
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t c = 0; c < d.Dv; ++c) EXPECT_EQ(out.at({0, 0, i, c}), 0.0);
}

TEST_P(SdpaByDtype, KeyPaddingMatchesBruteForce) {
  Dims d;
  d.Tk = 6;
  EXPECT_TRUE(matches_reference(make_inputs(d, GetParam()), SdpaOptions::padding(padding_mask(6, {0, 2})),
                                GetParam()));
}

TEST_P(SdpaByDtype, CausalAndKeyPaddingTogetherMatchBruteForce) {
  Dims d;
  d.Tq = 3;
  d.Tk = 6;
  SdpaOptions o = SdpaOptions::padding(padding_mask(6, {1, 3}));
  o.causal = true;
  EXPECT_TRUE(matches_reference(make_inputs(d, GetParam()), o, GetParam()));
}

TEST_P(SdpaByDtype, BoolMaskOfEveryBroadcastShapeMatchesBruteForce) {
  Dims d;
  d.Tq = 3;
  d.Tk = 5;
  const Inputs in = make_inputs(d, GetParam());
  const std::vector<Shape> shapes = {{3, 5}, {2, 3, 3, 5}, {1, 3, 3, 5}, {2, 1, 3, 5},
                                     {3, 3, 5}, {2, 3, 1, 5}, {3, 1}};
  for (size_t s = 0; s < shapes.size(); ++s) {
    SdpaOptions o;
    o.attn_mask = random_bool_mask(shapes[s], 10 + s);
    EXPECT_TRUE(matches_reference(in, o, GetParam())) << "mask " << shape_str(shapes[s]);
  }
}

TEST_P(SdpaByDtype, BoolMaskTrueMeansMaskedOut) {
  Dims d;
  d.B = 1;
  d.H = 1;
  d.Tq = 1;
  d.Tk = 3;
  const Inputs in = make_inputs(d, GetParam());
  SdpaOptions o;
  o.attn_mask = Tensor::from_bools({0, 1, 0}, {1, 3});
  o.need_weights = true;
  const Tensor w = scaled_dot_product_attention(in.q, in.k, in.v, o).weights;
  EXPECT_GT(w.at({0, 0, 0, 0}), 0);
  EXPECT_EQ(w.at({0, 0, 0, 1}), 0);
  EXPECT_GT(w.at({0, 0, 0, 2}), 0);
}

TEST_P(SdpaByDtype, FloatAdditiveMaskMatchesBruteForce) {
  Dims d;
  d.Tq = 3;
  d.Tk = 5;
  const Inputs in = make_inputs(d, GetParam());
  SdpaOptions o;
  // [1, H, Tq, Tk]: a finite bias per head with a few -inf entries.
  std::vector<double> bias = randn({1, 3, 3, 5}, 77).to_vector<double>();
  bias[2] = -kInf;
  bias[17] = -kInf;
  bias[40] = -kInf;
  o.attn_mask = Tensor::from_vector<double>(bias, {1, 3, 3, 5}).to(GetParam());
  EXPECT_TRUE(matches_reference(in, o, GetParam()));
  // A float [Tq, Tk] mask with -inf strictly above the diagonal is the causal mask.
  std::vector<double> tri(16, 0.0);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = i + 1; j < 4; ++j) tri[static_cast<size_t>(i * 4 + j)] = -kInf;
  const Inputs sq = make_inputs(Dims{}, GetParam());
  SdpaOptions fo;
  fo.attn_mask = Tensor::from_vector<double>(tri, {4, 4}).to(GetParam());
  const Tensor a = scaled_dot_product_attention(sq.q, sq.k, sq.v, fo).out;
  const Tensor b = scaled_dot_product_attention(sq.q, sq.k, sq.v, SdpaOptions::causal_mask()).out;
  EXPECT_TRUE(all_close(a, b, tol(GetParam()), 0, "float causal vs causal flag"));
}

TEST_P(SdpaByDtype, CrossAttentionWithDifferentLengthsAndValueDimMatchesBruteForce) {
  Dims d;
  d.Tq = 3;
  d.Tk = 7;
  d.Dh = 4;
  d.Dv = 6;
  const Inputs in = make_inputs(d, GetParam());
  EXPECT_TRUE(matches_reference(in, {}, GetParam()));
  EXPECT_TRUE(matches_reference(in, SdpaOptions::padding(padding_mask(7, {2, 5})), GetParam()));
  EXPECT_EQ(scaled_dot_product_attention(in.q, in.k, in.v).out.shape(), (Shape{2, 3, 3, 6}));
}

TEST_P(SdpaByDtype, CustomScaleMatchesBruteForceAndDiffersFromTheDefault) {
  const Inputs in = make_inputs(Dims{}, GetParam());
  SdpaOptions o;
  o.scale = 0.9;
  EXPECT_TRUE(matches_reference(in, o, GetParam()));
  const Tensor a = scaled_dot_product_attention(in.q, in.k, in.v, o).out;
  const Tensor b = scaled_dot_product_attention(in.q, in.k, in.v).out;
  EXPECT_GT(test::max_abs_diff(a, b), 1e-3);
}

TEST_P(SdpaByDtype, StridedInputsAreReadCorrectly) {
  // q, k, v as [B, T, H, D] permuted to [B, H, T, D], as multi-head attention produces them.
  const DType dt = GetParam();
  const Tensor q = randn({2, 4, 3, 5}, 1, dt).permute({0, 2, 1, 3});
  const Tensor k = randn({2, 6, 3, 5}, 2, dt).permute({0, 2, 1, 3});
  const Tensor v = randn({2, 6, 3, 2}, 3, dt).permute({0, 2, 1, 3});
  ASSERT_FALSE(q.is_contiguous());
  SdpaOptions o = SdpaOptions::padding(padding_mask(6, {1, 0}));
  EXPECT_TRUE(matches_reference({q, k, v}, o, dt));
}

INSTANTIATE_TEST_SUITE_P(Sdpa, SdpaByDtype, ::testing::Values(DType::F32, DType::F64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---- fully masked rows and weights ------------------------------------------------------

// The layout of a KV cache with spare room (nn/kv_cache.h): k and v are the first Tk
// positions of longer buffers [B, Hkv, C, Dh]. Without a tape the flash kernel reads them in
// place; the result must be the same bits as with packed copies, with and without a tape.
TEST(Sdpa, KeysAndValuesThatArePrefixesOfLongerBuffersGiveTheSameBitsAsPackedCopies) {
  const int64_t B = 2, H = 4, Hkv = 2, Tq = 1, Tk = 5, C = 9, Dh = 8;
  const Tensor q = randn({B, H, Tq, Dh}, 31, DType::F32);
  const Tensor k = randn({B, Hkv, C, Dh}, 32, DType::F32).slice(2, 0, Tk);  // [B, Hkv, Tk, Dh] of C
  const Tensor v = randn({B, Hkv, C, Dh}, 33, DType::F32).slice(2, 2, 2 + Tk);
  ASSERT_FALSE(k.is_contiguous());
  SdpaOptions o;
  Tensor mask = Tensor::from_bools({0, 0, 1, 0, 0, 0, 0, 0, 0, 1}, {B, Tk});  // [B, Tk]
  o.key_padding_mask = mask;
  const std::vector<float> packed = scaled_dot_product_attention(q, k.clone(), v.clone(), o).out.to_vector<float>();
  {
    NoGradGuard no_grad;
    EXPECT_EQ(scaled_dot_product_attention(q, k, v, o).out.to_vector<float>(), packed);
  }
  Tensor kg = k.detach().set_requires_grad(true);
  Tensor kg_packed = k.clone().set_requires_grad(true);
  Tensor out = scaled_dot_product_attention(q, kg, v, o).out;
  EXPECT_EQ(out.to_vector<float>(), packed);
  sum(out).backward();
  Tensor out_packed = scaled_dot_product_attention(q, kg_packed, v.clone(), o).out;
  sum(out_packed).backward();
  EXPECT_EQ(kg.grad().to_vector<float>(), kg_packed.grad().to_vector<float>());
}

TEST(Sdpa, FullyMaskedRowsGiveExactZerosAndFiniteGradients) {
  const Dims d{2, 2, 3, 4, 3, 2};
  Tensor q = leaf({2, 2, 3, 3}, 1), k = leaf({2, 2, 4, 3}, 2), v = leaf({2, 2, 4, 2}, 3);
  // Batch 1 pads every key; in batch 0 the Bool mask hides all keys from query 1.
  std::vector<int> bits(12, 0);
  for (int j = 0; j < 4; ++j) bits[static_cast<size_t>(4 + j)] = 1;
  SdpaOptions o = SdpaOptions::padding(padding_mask(4, {0, 4}));
  o.attn_mask = Tensor::from_bools(bits, {3, 4});
  o.need_weights = true;
  const SdpaResult r = scaled_dot_product_attention(q, k, v, o);
  for (int64_t h = 0; h < d.H; ++h) {
    for (int64_t c = 0; c < d.Dv; ++c) EXPECT_EQ(r.out.at({0, h, 1, c}), 0.0);
    for (int64_t j = 0; j < d.Tk; ++j) EXPECT_EQ(r.weights.at({0, h, 1, j}), 0.0);
    for (int64_t i = 0; i < d.Tq; ++i)
      for (int64_t c = 0; c < d.Dv; ++c) EXPECT_EQ(r.out.at({1, h, i, c}), 0.0);
  }
  EXPECT_FALSE(has_nan(r.out));
  EXPECT_FALSE(has_nan(r.weights));
  sum(r.out).backward();
  for (const Tensor* t : {&q, &k, &v}) EXPECT_FALSE(has_nan(t->grad()));
  // Nothing reaches a query row that sees no key, nor any input of the all-padded batch.
  for (int64_t h = 0; h < d.H; ++h)
    for (int64_t c = 0; c < d.Dh; ++c) EXPECT_EQ(q.grad().at({0, h, 1, c}), 0.0);
  for (double g : slice(k.grad(), 0, 1, 2).to_vector<double>()) EXPECT_EQ(g, 0.0);
  for (double g : slice(v.grad(), 0, 1, 2).to_vector<double>()) EXPECT_EQ(g, 0.0);
  // ... while the rows that do see keys get a gradient (the check above could fail).
  EXPECT_NE(q.grad().at({0, 0, 0, 0}), 0.0);
}

TEST(Sdpa, FloatMaskRowOfMinusInfinityGivesZerosNotNaN) {
  Tensor q = leaf({1, 1, 2, 3}, 4), k = leaf({1, 1, 3, 3}, 5), v = leaf({1, 1, 3, 2}, 6);
  SdpaOptions o;
  o.attn_mask = Tensor::from_vector<double>({-kInf, -kInf, -kInf, 0.5, 0, -1}, {2, 3});
  const Tensor out = scaled_dot_product_attention(q, k, v, o).out;
  EXPECT_EQ(out.at({0, 0, 0, 0}), 0.0);
  EXPECT_EQ(out.at({0, 0, 0, 1}), 0.0);
  EXPECT_NE(out.at({0, 0, 1, 0}), 0.0);
  sum(out).backward();
  EXPECT_FALSE(has_nan(q.grad()) || has_nan(k.grad()) || has_nan(v.grad()));
}

TEST(Sdpa, WeightsSumToOneOverUnmaskedKeysAndAreExactlyZeroOnMaskedOnes) {
  const Inputs in = make_inputs(Dims{2, 2, 4, 6, 3, 3}, DType::F32);
  SdpaOptions o = SdpaOptions::padding(padding_mask(6, {2, 0}));
  o.causal = true;
  o.attn_mask = random_bool_mask({4, 6}, 3);
  o.need_weights = true;
  const Tensor w = scaled_dot_product_attention(in.q, in.k, in.v, o).weights;
  ASSERT_EQ(w.shape(), (Shape{2, 2, 4, 6}));
  int rows_checked = 0;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 4; ++i) {
        double s = 0;
        int visible = 0;
        for (int64_t j = 0; j < 6; ++j) {
          const bool masked = o.attn_mask.at({i, j}) != 0 || o.key_padding_mask.at({b, j}) != 0 ||
                              j > i + 2;
          if (masked) EXPECT_EQ(w.at({b, h, i, j}), 0.0) << b << h << i << j;
          else EXPECT_GT(w.at({b, h, i, j}), 0.0);
          visible += masked ? 0 : 1;
          s += w.at({b, h, i, j});
        }
        if (visible > 0) {
          EXPECT_NEAR(s, 1.0, 1e-6);
          ++rows_checked;
        } else {
          EXPECT_EQ(s, 0.0);
        }
      }
  EXPECT_GT(rows_checked, 8);
}

TEST(Sdpa, WeightsAreReturnedOnlyWhenAskedAndCarryNoGradient) {
  Tensor q = leaf({1, 2, 3, 4}, 1), k = leaf({1, 2, 3, 4}, 2), v = leaf({1, 2, 3, 4}, 3);
  EXPECT_FALSE(scaled_dot_product_attention(q, k, v).weights.defined());
  SdpaOptions o;
  o.need_weights = true;
  SdpaResult r = scaled_dot_product_attention(q, k, v, o);
  ASSERT_TRUE(r.weights.defined());
  EXPECT_FALSE(r.weights.requires_grad());
  EXPECT_TRUE(r.out.requires_grad());
  // Overwriting the returned weights must not disturb the saved state of the backward.
  Tensor ref_q = q.detach().clone().set_requires_grad(true);
  sum(scaled_dot_product_attention(ref_q, k, v).out).backward();
  r.weights.fill(0.0);
  sum(r.out).backward();
  EXPECT_TRUE(all_close(q.grad(), ref_q.grad(), 1e-14, 0, "dq"));
}

TEST(Sdpa, RecordsNothingUnderNoGradGuard) {
  Tensor q = leaf({1, 1, 2, 2}, 1), k = leaf({1, 1, 2, 2}, 2), v = leaf({1, 1, 2, 2}, 3);
  NoGradGuard guard;
  EXPECT_FALSE(scaled_dot_product_attention(q, k, v).out.requires_grad());
}

// ---- gradients --------------------------------------------------------------------------

// Float64 central differences on q, k and v for one set of options.
::testing::AssertionResult gradcheck_sdpa(const Dims& d, const SdpaOptions& o, uint64_t seed = 1) {
  std::vector<Tensor> in = {leaf({d.B, d.H, d.Tq, d.Dh}, seed), leaf({d.B, d.H, d.Tk, d.Dh}, seed + 1),
                            leaf({d.B, d.H, d.Tk, d.Dv}, seed + 2)};
  return gradcheck(
      [&](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], o).out; },
      in);
}

TEST(Sdpa, GradcheckWithoutMask) { EXPECT_TRUE(gradcheck_sdpa(Dims{2, 2, 3, 3, 4, 4}, {})); }

TEST(Sdpa, GradcheckCausalSquareAndBottomRight) {
  EXPECT_TRUE(gradcheck_sdpa(Dims{1, 2, 4, 4, 3, 3}, SdpaOptions::causal_mask()));
  EXPECT_TRUE(gradcheck_sdpa(Dims{1, 2, 2, 5, 3, 2}, SdpaOptions::causal_mask()));
  EXPECT_TRUE(gradcheck_sdpa(Dims{1, 2, 5, 3, 3, 2}, SdpaOptions::causal_mask()));  // rows with no key
}

TEST(Sdpa, GradcheckKeyPaddingAndCausalWithPadding) {
  EXPECT_TRUE(gradcheck_sdpa(Dims{2, 2, 3, 5, 3, 3}, SdpaOptions::padding(padding_mask(5, {2, 5}))));
  SdpaOptions o = SdpaOptions::padding(padding_mask(4, {1, 0}));
  o.causal = true;
  EXPECT_TRUE(gradcheck_sdpa(Dims{2, 1, 4, 4, 3, 3}, o));
}

TEST(Sdpa, GradcheckBoolMasks) {
  SdpaOptions o;
  o.attn_mask = random_bool_mask({3, 4}, 5);
  EXPECT_TRUE(gradcheck_sdpa(Dims{2, 2, 3, 4, 3, 2}, o));
  o.attn_mask = random_bool_mask({2, 2, 3, 4}, 6);
  EXPECT_TRUE(gradcheck_sdpa(Dims{2, 2, 3, 4, 3, 2}, o));
}

TEST(Sdpa, GradcheckFloatMask) {
  SdpaOptions o;
  std::vector<double> bias = randn({2, 1, 3, 4}, 9).to_vector<double>();
  bias[1] = -kInf;
  bias[14] = -kInf;
  o.attn_mask = Tensor::from_vector<double>(bias, {2, 1, 3, 4});
  EXPECT_TRUE(gradcheck_sdpa(Dims{2, 2, 3, 4, 3, 3}, o));
}

TEST(Sdpa, GradcheckCrossAttentionWithCustomScale) {
  SdpaOptions o;
  o.scale = 0.7;
  EXPECT_TRUE(gradcheck_sdpa(Dims{1, 2, 2, 5, 3, 4}, o));
}

TEST(Sdpa, GradientReachesOnlyTheInputsThatRequireIt) {
  Tensor q = leaf({1, 2, 3, 4}, 1);
  const Tensor k = randn({1, 2, 3, 4}, 2), v = randn({1, 2, 3, 4}, 3);
  sum(scaled_dot_product_attention(q, k, v).out).backward();
  ASSERT_TRUE(q.grad().defined());
  EXPECT_EQ(q.grad().shape(), q.shape());
  EXPECT_FALSE(k.grad().defined());
  EXPECT_FALSE(v.grad().defined());
}

// ---- dropout ------------------------------------------------------------------------------

TEST(Sdpa, DropoutMatchesTheMaskDrawnInRowMajorOrder) {
  const Inputs in = make_inputs(Dims{2, 2, 3, 4, 3, 3}, DType::F64);
  Rng rng(42);
  SdpaOptions o = SdpaOptions::causal_mask();
  o.dropout_p = 0.3;
  o.rng = &rng;
  o.need_weights = true;
  const SdpaResult r = scaled_dot_product_attention(in.q, in.k, in.v, o);
  const std::vector<double> keep = expected_keep(42, 2 * 2 * 3 * 4, 0.3);
  const Reference ref = reference(in.q, in.k, in.v, o, &keep);
  EXPECT_TRUE(all_close(r.out, ref.out, test::kAbsF64, 0, "out"));
  // need_weights returns the weights before dropout.
  EXPECT_TRUE(all_close(r.weights, reference(in.q, in.k, in.v, SdpaOptions::causal_mask()).weights,
                        test::kAbsF64, 0, "weights"));
  // The control: without dropout the output differs.
  EXPECT_GT(test::max_abs_diff(r.out, scaled_dot_product_attention(in.q, in.k, in.v,
                                                                   SdpaOptions::causal_mask()).out),
            1e-3);
}

TEST(Sdpa, DropoutIsReproducibleWithASeed) {
  const Inputs in = make_inputs(Dims{2, 2, 4, 4, 3, 3}, DType::F32);
  auto run = [&](uint64_t seed) {
    Rng rng(seed);
    SdpaOptions o;
    o.dropout_p = 0.5;
    o.rng = &rng;
    return scaled_dot_product_attention(in.q, in.k, in.v, o).out;
  };
  EXPECT_EQ(run(7).to_vector<float>(), run(7).to_vector<float>());
  EXPECT_NE(run(7).to_vector<float>(), run(8).to_vector<float>());
}

TEST(Sdpa, DropoutZeroIsTheIdentityAndNeedsNoRng) {
  const Inputs in = make_inputs(Dims{}, DType::F32);
  Rng rng(3);
  const Rng::State before = rng.state();
  SdpaOptions o;
  o.dropout_p = 0.0;
  o.rng = &rng;
  EXPECT_EQ(scaled_dot_product_attention(in.q, in.k, in.v, o).out.to_vector<float>(),
            scaled_dot_product_attention(in.q, in.k, in.v).out.to_vector<float>());
  EXPECT_EQ(rng.state().s[0], before.s[0]);  // no draw at p = 0
  o.rng = nullptr;
  EXPECT_NO_THROW(scaled_dot_product_attention(in.q, in.k, in.v, o));
}

TEST(Sdpa, DropoutOfOneGivesZeros) {
  const Inputs in = make_inputs(Dims{}, DType::F64);
  Rng rng(1);
  SdpaOptions o;
  o.dropout_p = 1.0;
  o.rng = &rng;
  for (double x : scaled_dot_product_attention(in.q, in.k, in.v, o).out.to_vector<double>())
    EXPECT_EQ(x, 0.0);
}

TEST(Sdpa, GradcheckWithDropoutAndAFixedSeed) {
  Rng rng;
  std::vector<Tensor> in = {leaf({2, 2, 3, 3}, 1), leaf({2, 2, 4, 3}, 2), leaf({2, 2, 4, 3}, 3)};
  auto f = [&](const std::vector<Tensor>& x) {
    rng.seed_with(11);  // every evaluation draws the same mask
    SdpaOptions o = SdpaOptions::padding(padding_mask(4, {1, 0}));
    o.dropout_p = 0.4;
    o.rng = &rng;
    return scaled_dot_product_attention(x[0], x[1], x[2], o).out;
  };
  EXPECT_TRUE(gradcheck(f, in));
}

// ---- bad input ----------------------------------------------------------------------------

TEST(Sdpa, RejectsWrongRanksAndMismatchedDimensions) {
  const Tensor q = Tensor::zeros({2, 3, 4, 5}), k = Tensor::zeros({2, 3, 6, 5}),
               v = Tensor::zeros({2, 3, 6, 7});
  EXPECT_NO_THROW(scaled_dot_product_attention(q, k, v));
  EXPECT_THROW(scaled_dot_product_attention(Tensor::zeros({3, 4, 5}), k, v), Error);
  EXPECT_THROW(scaled_dot_product_attention(q, Tensor::zeros({2, 3, 6, 5, 1}), v), Error);
  EXPECT_THROW(scaled_dot_product_attention(q, Tensor::zeros({2, 2, 6, 5}), v), Error);  // heads
  EXPECT_THROW(scaled_dot_product_attention(q, k, Tensor::zeros({2, 4, 6, 7})), Error);  // heads
  EXPECT_THROW(scaled_dot_product_attention(q, Tensor::zeros({1, 3, 6, 5}), v), Error);  // batch
  EXPECT_THROW(scaled_dot_product_attention(q, Tensor::zeros({2, 3, 6, 4}), v), Error);  // Dh
  EXPECT_THROW(scaled_dot_product_attention(q, k, Tensor::zeros({2, 3, 5, 7})), Error);  // Tk
  try {
    (void)scaled_dot_product_attention(q, Tensor::zeros({2, 2, 6, 5}), v);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[scaled_dot_product_attention]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[2, 2, 6, 5]"), std::string::npos) << msg;
  }
}

TEST(Sdpa, RejectsWrongDtypes) {
  const Tensor q = Tensor::zeros({1, 1, 2, 3}), k = Tensor::zeros({1, 1, 2, 3}),
               v = Tensor::zeros({1, 1, 2, 3});
  EXPECT_THROW(scaled_dot_product_attention(q, k.to(DType::F64), v), Error);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v.to(DType::F64)), Error);
  EXPECT_THROW(scaled_dot_product_attention(q.to(DType::I64), k.to(DType::I64), v.to(DType::I64)),
               Error);
}

TEST(Sdpa, RejectsMasksOfTheWrongShapeOrDtype) {
  const Tensor q = Tensor::zeros({2, 3, 4, 5}), k = Tensor::zeros({2, 3, 6, 5}),
               v = Tensor::zeros({2, 3, 6, 5});
  auto with_mask = [&](Tensor m) {
    SdpaOptions o;
    o.attn_mask = std::move(m);
    return scaled_dot_product_attention(q, k, v, o);
  };
  EXPECT_NO_THROW(with_mask(Tensor::zeros({4, 6})));
  EXPECT_NO_THROW(with_mask(Tensor::zeros({4, 6}, DType::Bool)));
  EXPECT_THROW(with_mask(Tensor::zeros({6, 4}, DType::Bool)), Error);
  EXPECT_THROW(with_mask(Tensor::zeros({4, 5}, DType::Bool)), Error);
  EXPECT_THROW(with_mask(Tensor::zeros({3, 3, 4, 6}, DType::Bool)), Error);  // B
  EXPECT_THROW(with_mask(Tensor::zeros({1, 2, 3, 4, 6}, DType::Bool)), Error);  // rank 5
  EXPECT_THROW(with_mask(Tensor::zeros({6}, DType::Bool)), Error);  // rank 1
  EXPECT_THROW(with_mask(Tensor::zeros({4, 6}, DType::F64)), Error);  // float of another dtype
  EXPECT_THROW(with_mask(Tensor::zeros({4, 6}, DType::I64)), Error);
  EXPECT_THROW(with_mask(Tensor::full({4, 6}, std::nan(""))), Error);
  EXPECT_THROW(with_mask(Tensor::full({4, 6}, kInf)), Error);
  auto with_padding = [&](Tensor m) {
    return scaled_dot_product_attention(q, k, v, SdpaOptions::padding(std::move(m)));
  };
  EXPECT_NO_THROW(with_padding(Tensor::zeros({2, 6}, DType::Bool)));
  EXPECT_THROW(with_padding(Tensor::zeros({2, 4}, DType::Bool)), Error);
  EXPECT_THROW(with_padding(Tensor::zeros({1, 6}, DType::Bool)), Error);
  EXPECT_THROW(with_padding(Tensor::zeros({2, 1, 6}, DType::Bool)), Error);
  EXPECT_THROW(with_padding(Tensor::zeros({2, 6})), Error);  // float
}

TEST(Sdpa, RejectsDropoutWithoutRngOrOutOfRange) {
  const Tensor q = Tensor::zeros({1, 1, 2, 3});
  SdpaOptions o;
  o.dropout_p = 0.1;
  EXPECT_THROW(scaled_dot_product_attention(q, q, q, o), Error);
  Rng rng;
  o.rng = &rng;
  EXPECT_NO_THROW(scaled_dot_product_attention(q, q, q, o));
  o.dropout_p = -0.1;
  EXPECT_THROW(scaled_dot_product_attention(q, q, q, o), Error);
  o.dropout_p = 1.5;
  EXPECT_THROW(scaled_dot_product_attention(q, q, q, o), Error);
}

}  // namespace
}  // namespace attn
