// MultiHeadAttention's descendants (AttentionOptions): grouped-query and multi-query attention
// (the packed in_proj layout, equality with multi-head attention whose K/V projections are
// repeated, gradients included); RoPE (positions shifted together change nothing, per-row
// positions); ALiBi (equal to the same bias as a float mask); sliding window (equal to full
// attention under a band mask, and an error without a causal mask); float64 gradient checks of
// each; the cached path (a prompt, then steps) equal to the full causal forward for each variant,
// with the window's cache holding only W positions; the cached cross-attention step over K/V
// shared by the rows of one source, bit for bit as over per-row copies; and bad configurations.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "attn/core/autograd.h"
#include "attn/nn/attention.h"
#include "attn/nn/encoder.h"
#include "attn/ops/ops.h"
#include "nn_reference.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"

namespace attn::nn {
namespace {

AttentionOptions gqa(int64_t kv) {
  AttentionOptions o;
  o.n_kv_heads = kv;
  return o;
}
AttentionOptions rope(RopePairing pairing) {
  AttentionOptions o;
  o.rope = true;
  o.rope_options.pairing = pairing;
  return o;
}
AttentionOptions alibi() {
  AttentionOptions o;
  o.alibi = true;
  return o;
}
AttentionOptions window(int64_t w) {
  AttentionOptions o;
  o.window = w;
  return o;
}

// Non-zero biases so that comparisons see them.
void randomise_biases(MultiHeadAttention& mha, uint64_t seed) {
  Tensor(mha.in_proj_bias()).copy_from(test::random_tensor(mha.in_proj_bias().shape(), seed, mha.in_proj_bias().dtype()));
  Tensor(mha.out_proj().bias()).copy_from(test::random_tensor({mha.d_model()}, seed + 1, mha.in_proj_bias().dtype()));
}

TEST(GroupedQueryAttention, PacksQueryThenFewerKeyAndValueRowsIntoInProj) {
  Rng rng(1);
  MultiHeadAttention mha(8, 4, 0.0, DType::F32, rng, gqa(2));  // Dh = 2
  EXPECT_EQ(mha.n_kv_heads(), 2);
  EXPECT_EQ(mha.in_proj_weight().shape(), (Shape{8 + 2 * 2 * 2, 8}));
  EXPECT_EQ(mha.in_proj_bias().shape(), (Shape{16}));
  EXPECT_EQ(mha.num_parameters(), 16 * 8 + 16 + 8 * 8 + 8);
  Rng rng2(1);
  MultiHeadAttention mqa(8, 4, 0.0, DType::F32, rng2, gqa(1));
  EXPECT_EQ(mqa.in_proj_weight().shape(), (Shape{12, 8}));
  Rng rng3(1);
  MultiHeadAttention same(8, 4, 0.0, DType::F32, rng3, gqa(4));  // n_kv_heads == n_heads: PyTorch's [3D, D]
  EXPECT_EQ(same.in_proj_weight().shape(), (Shape{24, 8}));
}

// A multi-head attention whose key/value projection rows repeat the grouped one's per head.
void load_repeated(MultiHeadAttention& full, MultiHeadAttention& grouped) {
  const int64_t D = grouped.d_model(), H = grouped.n_heads(), Hkv = grouped.n_kv_heads(), Dh = grouped.head_dim();
  std::vector<Tensor> w = {grouped.in_proj_weight().slice(0, 0, D)}, b = {grouped.in_proj_bias().slice(0, 0, D)};
  for (int64_t part = 0; part < 2; ++part)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = D + part * Hkv * Dh + (h / (H / Hkv)) * Dh;
      w.push_back(grouped.in_proj_weight().slice(0, row, row + Dh));
      b.push_back(grouped.in_proj_bias().slice(0, row, row + Dh));
    }
  NoGradGuard no_grad;
  Tensor(full.in_proj_weight()).copy_from(concat(w, 0));
  Tensor(full.in_proj_bias()).copy_from(concat(b, 0));
  Tensor(full.out_proj().weight()).copy_from(grouped.out_proj().weight());
  Tensor(full.out_proj().bias()).copy_from(grouped.out_proj().bias());
}

TEST(GroupedQueryAttention, EqualsMultiHeadAttentionWithRepeatedKeyValueHeadsGradientsIncluded) {
  for (int64_t kv : {2, 1}) {
    Rng rng(2), rng_full(3);
    MultiHeadAttention grouped(8, 4, 0.0, DType::F64, rng, gqa(kv));
    randomise_biases(grouped, 4);
    MultiHeadAttention full(8, 4, 0.0, DType::F64, rng_full);
    load_repeated(full, grouped);
    Tensor x = test::random_tensor({2, 5, 8}, 5).set_requires_grad(true);
    Tensor x2 = x.clone().set_requires_grad(true);
    AttentionMasks masks;
    masks.causal = true;
    masks.key_padding_mask = Tensor::from_bools({0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, {2, 5});
    const Tensor a = grouped.forward(x, x, x, masks), b = full.forward(x2, x2, x2, masks);
    EXPECT_TRUE(test::all_close(a, b, 1e-12, 0, "Hkv " + std::to_string(kv)));
    sum(a).backward();
    sum(b).backward();
    EXPECT_TRUE(test::all_close(x.grad(), x2.grad(), 1e-12, 0, "input gradient"));
    // Cross-attention over a memory of another length, and the cached cross-attention step.
    const Tensor mem = test::random_tensor({2, 7, 8}, 6);
    EXPECT_TRUE(test::all_close(grouped.forward(x, mem, mem), full.forward(x2, mem, mem), 1e-12, 0, "cross"));
    NoGradGuard no_grad;
    const CrossKV cross = grouped.project_memory_kv(mem);
    EXPECT_EQ(cross.k.shape(), (Shape{2, kv, 7, 2}));
    const Tensor q = x.slice(1, 4, 5).contiguous();
    EXPECT_TRUE(test::all_close(grouped.forward_cached(q, cross, Tensor()), full.forward(q, mem, mem), 1e-12, 0,
                                "cached cross step"));
  }
}

TEST(RotaryAttention, ShiftingEveryPositionTogetherChangesNothingButPerRowOffsetsDo) {
  for (RopePairing pairing : {RopePairing::Interleaved, RopePairing::Half}) {
    Rng rng(7);
    MultiHeadAttention mha(8, 2, 0.0, DType::F64, rng, rope(pairing));
    randomise_biases(mha, 8);
    const Tensor x = test::random_tensor({2, 4, 8}, 9);
    AttentionMasks at0, at7;
    at0.causal = at7.causal = true;
    at7.positions = Tensor::from_vector<int64_t>({7, 8, 9, 10}, {4});
    const Tensor base = mha.forward(x, x, x, at0);
    EXPECT_TRUE(test::all_close(mha.forward(x, x, x, at7), base, 1e-12, 0, rope_pairing_name(pairing)));
    // Per-row positions: row 1 shifted alone is still the same (relative), row 0 with a gap is not.
    AttentionMasks gap;
    gap.causal = true;
    gap.positions = Tensor::from_vector<int64_t>({0, 1, 5, 6, 3, 4, 5, 6}, {2, 4});
    const Tensor g = mha.forward(x, x, x, gap);
    EXPECT_TRUE(test::all_close(g.slice(0, 1, 2), base.slice(0, 1, 2), 1e-12));
    EXPECT_FALSE(test::all_close(g.slice(0, 0, 1).slice(1, 2, 4), base.slice(0, 0, 1).slice(1, 2, 4), 1e-6));
    // Control: with RoPE off the output differs (positions are seen at all).
    Rng rng0(7);
    MultiHeadAttention plain(8, 2, 0.0, DType::F64, rng0);
    randomise_biases(plain, 8);
    EXPECT_FALSE(test::all_close(plain.forward(x, x, x, at0), base, 1e-6));
    // The pipeline: project, rotate q and k, attend, join.
    EXPECT_THROW(mha.forward(x, test::random_tensor({2, 6, 8}, 10), test::random_tensor({2, 6, 8}, 10)), Error);
  }
}

TEST(AlibiAttention, EqualsTheSameBiasGivenAsAFloatMask) {
  Rng rng(11), rng2(11);
  MultiHeadAttention with(12, 3, 0.0, DType::F64, rng, alibi());
  MultiHeadAttention without(12, 3, 0.0, DType::F64, rng2);
  randomise_biases(with, 12);
  randomise_biases(without, 12);
  const Tensor x = test::random_tensor({2, 5, 12}, 13);
  const auto m = alibi_slopes(3);
  std::vector<double> bias;
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 5; ++j) bias.push_back(-m[static_cast<size_t>(h)] * std::fabs(static_cast<double>(i - j)));
  for (bool causal : {false, true}) {
    AttentionMasks plain, biased;
    plain.causal = biased.causal = causal;
    biased.attn_mask = Tensor::from_vector<double>(bias, {1, 3, 5, 5});
    EXPECT_TRUE(test::all_close(with.forward(x, x, x, plain), without.forward(x, x, x, biased), 1e-12, 0,
                                causal ? "causal" : "bidirectional"));
    EXPECT_FALSE(test::all_close(with.forward(x, x, x, plain), without.forward(x, x, x, plain), 1e-6));
  }
}

TEST(SlidingWindowAttention, EqualsFullAttentionUnderABandMaskAndNeedsACausalMask) {
  Rng rng(14), rng2(14);
  MultiHeadAttention windowed(8, 2, 0.0, DType::F64, rng, window(3));
  MultiHeadAttention full(8, 2, 0.0, DType::F64, rng2);
  const Tensor x = test::random_tensor({2, 7, 8}, 15);
  std::vector<int> band;  // true = masked: j > i or j <= i - 3
  for (int64_t i = 0; i < 7; ++i)
    for (int64_t j = 0; j < 7; ++j) band.push_back(j > i || j <= i - 3 ? 1 : 0);
  AttentionMasks causal, banded;
  causal.causal = true;
  banded.attn_mask = Tensor::from_bools(band, {7, 7});
  EXPECT_TRUE(test::all_close(windowed.forward(x, x, x, causal), full.forward(x, x, x, banded), 1e-12));
  EXPECT_FALSE(test::all_close(windowed.forward(x, x, x, causal), full.forward(x, x, x, causal), 1e-6));
  EXPECT_THROW(windowed.forward(x, x, x), Error);  // a window needs the causal mask
}

TEST(AttentionVariants, GradientsMatchFiniteDifferencesForEachVariant) {
  const std::vector<std::pair<std::string, AttentionOptions>> variants = {
      {"gqa", gqa(2)}, {"mqa", gqa(1)}, {"rope interleaved", rope(RopePairing::Interleaved)},
      {"rope half", rope(RopePairing::Half)}, {"alibi", alibi()}, {"window", window(2)}};
  for (const auto& [name, options] : variants) {
    Rng rng(16);
    MultiHeadAttention mha(8, 4, 0.0, DType::F64, rng, options);
    randomise_biases(mha, 17);
    Tensor x = test::random_tensor({2, 4, 8}, 18).set_requires_grad(true);
    AttentionMasks masks;
    masks.causal = true;
    masks.key_padding_mask = Tensor::from_bools({0, 0, 0, 0, 0, 0, 0, 1}, {2, 4});
    std::vector<Tensor> inputs = {x};
    for (auto& p : mha.parameters()) inputs.push_back(p);
    EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], in[0], masks); },
                                inputs))
        << name;
  }
}

LayerOptions layer_with(const AttentionOptions& attention, bool norm_first) {
  LayerOptions o;
  o.d_model = 8;
  o.n_heads = 4;
  o.d_ff = 12;
  o.dropout = 0.0;
  o.attention_dropout = 0.0;
  o.norm_first = norm_first;
  o.dtype = DType::F64;
  o.attention = attention;
  return o;
}

TEST(AttentionVariants, PrefillAndStepsEqualTheFullCausalForwardForEachVariant) {
  AttentionOptions mix = rope(RopePairing::Half);
  mix.n_kv_heads = 2;
  mix.window = 4;
  const std::vector<std::pair<std::string, AttentionOptions>> variants = {
      {"gqa", gqa(2)}, {"mqa", gqa(1)}, {"rope interleaved", rope(RopePairing::Interleaved)},
      {"rope half", rope(RopePairing::Half)}, {"alibi", alibi()}, {"window 3", window(3)}, {"rope+gqa+window", mix}};
  for (const auto& [name, options] : variants)
    for (bool norm_first : {false, true}) {
      Rng rng(19);
      EncoderLayer layer(layer_with(options, norm_first), rng);
      for (auto& p : layer.parameters()) p.copy_from(test::random_tensor(p.shape(), 20, p.dtype(), 0.5));
      layer.eval();
      NoGradGuard no_grad;
      const Tensor x = test::random_tensor({2, 8, 8}, 21);
      const Tensor padding = Tensor::from_bools({0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, {2, 8});
      AttentionMasks full_masks;
      full_masks.causal = true;
      full_masks.key_padding_mask = padding;
      const Tensor full = layer.forward(x, full_masks);  // [2, 8, D]
      LayerKV kv;
      AttentionMasks first;
      first.key_padding_mask = padding.slice(1, 0, 5).contiguous();
      const Tensor head = layer.forward_cached(x.slice(1, 0, 5).contiguous(), kv, first);
      EXPECT_TRUE(test::all_close(head, full.slice(1, 0, 5), 1e-12, 0, name + " prompt"));
      for (int64_t t = 5; t < 8; ++t) {
        const int64_t held = kv.self.k.size(2);
        const Tensor pad = padding.slice(1, t + 1 - (held + 1), t + 1).contiguous();  // the held positions and t
        AttentionMasks step_masks;
        step_masks.key_padding_mask = pad;
        step_masks.positions = Tensor::from_vector<int64_t>({t, t}, {2, 1});
        const Tensor step = layer.forward_cached(x.slice(1, t, t + 1).contiguous(), kv, step_masks);
        EXPECT_TRUE(test::all_close(step, full.slice(1, t, t + 1), 1e-12, 0, name + " step " + std::to_string(t)));
      }
      const int64_t kv_heads = options.n_kv_heads > 0 ? options.n_kv_heads : 4;
      const int64_t kept = options.window > 0 ? options.window : 8;
      EXPECT_EQ(kv.self.k.shape(), (Shape{2, kv_heads, kept, 2})) << name;
    }
}

TEST(AttentionVariants, RejectsBadConfigurations) {
  Rng rng(22);
  EXPECT_THROW(MultiHeadAttention(8, 4, 0.0, DType::F32, rng, gqa(3)), Error);   // 3 does not divide 4
  EXPECT_THROW(MultiHeadAttention(8, 4, 0.0, DType::F32, rng, gqa(8)), Error);   // more K/V than query heads
  EXPECT_THROW(MultiHeadAttention(8, 4, 0.0, DType::F32, rng, gqa(-1)), Error);
  EXPECT_THROW(MultiHeadAttention(6, 2, 0.0, DType::F32, rng, rope(RopePairing::Half)), Error);  // Dh = 3 is odd
  AttentionOptions both = rope(RopePairing::Interleaved);
  both.alibi = true;
  EXPECT_THROW(MultiHeadAttention(8, 2, 0.0, DType::F32, rng, both), Error);
  AttentionOptions bad_theta = rope(RopePairing::Interleaved);
  bad_theta.rope_options.theta = -1;
  EXPECT_THROW(MultiHeadAttention(8, 2, 0.0, DType::F32, rng, bad_theta), Error);
  EXPECT_THROW(MultiHeadAttention(8, 2, 0.0, DType::F32, rng, window(-2)), Error);
  // A cache of the wrong head count is an error, not a silent broadcast.
  MultiHeadAttention grouped(8, 4, 0.0, DType::F64, rng, gqa(2));
  grouped.eval();
  NoGradGuard no_grad;
  SelfKV wrong_heads{test::random_tensor({1, 4, 3, 2}, 1), test::random_tensor({1, 4, 3, 2}, 2)};
  EXPECT_THROW(grouped.forward_cached(test::random_tensor({1, 1, 8}, 3), wrong_heads, AttentionMasks{}), Error);
  MultiHeadAttention with_rope(8, 2, 0.0, DType::F64, rng, rope(RopePairing::Interleaved));
  const CrossKV memory_kv{test::random_tensor({1, 2, 3, 4}, 4), test::random_tensor({1, 2, 3, 4}, 5)};
  EXPECT_THROW(with_rope.forward_cached(test::random_tensor({1, 1, 8}, 6), memory_kv, Tensor()), Error);
}

// Rows x[rows[i]] of x [N, ...] stacked: [rows.size(), ...].
Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& rows) {
  std::vector<Tensor> parts;
  for (int64_t r : rows) parts.push_back(x.slice(0, r, r + 1));
  return concat(parts, 0).contiguous();
}

// Beam search's rows read their source's cross-attention K/V (nn/kv_cache.h): the step over
// shared K/V and a row-to-source map equals, bit for bit, the step over K/V copied per row, for
// multi-head and grouped-query heads, uneven and unsorted rows, a source no row reads, and
// padded keys. Control: a different map gives a different result.
TEST(CachedCrossAttention, RowsSharingTheirSourcesKeysAndValuesEqualPerRowCopiesBitForBit) {
  for (DType dtype : {DType::F32, DType::F64})
    for (int64_t kv : {4, 2}) {
      Rng rng(11);
      MultiHeadAttention mha(16, 4, 0.0, dtype, rng, gqa(kv));
      mha.eval();
      NoGradGuard no_grad;
      const Tensor mem = test::random_tensor({3, 6, 16}, 7, dtype);  // 3 sources of 6 positions
      const std::vector<int> pad_flags = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1};
      const Tensor pad = Tensor::from_bools(pad_flags, {3, 6});
      const CrossKV cross = mha.project_memory_kv(mem);  // k, v [3, Hkv, 6, 4]
      const std::vector<int64_t> sources = {2, 0, 2, 2, 0};  // source 1 unread, source 2 three rows
      std::vector<int> row_pad;
      for (int64_t s : sources) row_pad.insert(row_pad.end(), pad_flags.begin() + s * 6, pad_flags.begin() + s * 6 + 6);
      const Tensor q = test::random_tensor({5, 1, 16}, 8, dtype);
      const auto shared = mha.forward_cached(q, cross, pad, sources).to_vector<double>();  // [5, 1, 16]
      const CrossKV per_row{gather_rows(cross.k, sources), gather_rows(cross.v, sources)};
      const auto copied = mha.forward_cached(q, per_row, Tensor::from_bools(row_pad, {5, 6})).to_vector<double>();
      EXPECT_EQ(shared, copied) << dtype_name(dtype) << " Hkv " << kv;
      const auto other = mha.forward_cached(q, cross, pad, {2, 0, 2, 0, 0}).to_vector<double>();
      EXPECT_NE(other, copied) << dtype_name(dtype) << " Hkv " << kv;
      EXPECT_THROW(mha.forward_cached(q, cross, pad, {2, 0, 3, 2, 0}), Error);  // no source 3
      EXPECT_THROW(mha.forward_cached(q, cross, pad, {2, 0}), Error);           // one per row
    }
}

}  // namespace
}  // namespace attn::nn
