// Property: the key-padding mask (seed 000). Changing what sits at PAD positions changes no
// real token's output, bit for bit: encoder stack, decoder self-attention over a left-padded
// target, cross-attention over a padded source, and all three models. Layer tests put random
// values in PAD rows; model tests overwrite the PAD embedding row (ids at PAD positions are PAD
// by definition). Controls: the same change without the mask (layers) or in a pad_id = -1
// twin with the same weights (models) does change real outputs.
#include <gtest/gtest.h>

#include <memory>

#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "attn/models/encoder_only.h"
#include "attn/nn/decoder.h"
#include "attn/nn/encoder.h"
#include "property_util.h"

namespace attn {
namespace {

using props::span_diff;

constexpr int64_t kD = 16;
// A real output that moves by less than this under the control is "unchanged".
constexpr double kChanged = 1e-4;

class Padding : public ::testing::TestWithParam<DType> {};

// A padding layout: is_pad [B][T] (1 = PAD).
struct Layout {
  int64_t B, T;
  std::vector<int> is_pad;  // row-major [B, T]
  bool pad(int64_t b, int64_t t) const { return is_pad[static_cast<size_t>(b * T + t)] != 0; }
  Tensor mask() const { return props::bool_mask(is_pad, B, T); }
  std::vector<std::pair<int64_t, int64_t>> pad_positions() const {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        if (pad(b, t)) out.push_back({b, t});
    return out;
  }
};

// Right padding (the usual source batch): row 0 full, row 1 two PADs, row 2 four PADs.
const Layout kRight = {3, 6, {0, 0, 0, 0, 0, 0,  //
                              0, 0, 0, 0, 1, 1,  //
                              0, 0, 1, 1, 1, 1}};
// Left padding (a decoder-only prompt batch) and a PAD in the middle: a causal query after the
// PAD would see it without the mask, so here the key-padding mask is what protects it.
const Layout kLeft = {3, 6, {0, 0, 0, 0, 0, 0,  //
                             1, 1, 0, 0, 0, 0,  //
                             0, 1, 0, 1, 0, 0}};

// The largest change of any real (non-PAD) position's output between a and b [B, T, ...].
double real_change(const Tensor& a, const Tensor& b, const Layout& L) {
  const auto d = props::position_diffs(a, b);
  double m = 0;
  for (int64_t r = 0; r < L.B; ++r)
    for (int64_t t = 0; t < L.T; ++t)
      if (!L.pad(r, t)) m = std::max(m, d[static_cast<size_t>(r)][static_cast<size_t>(t)]);
  return m;
}

TEST_P(Padding, EncoderRealOutputsIgnoreValuesAtPadPositionsPostAndPreNorm) {
  const DType dtype = GetParam();
  for (bool norm_first : {false, true}) {
    Rng rng(21);
    nn::Encoder encoder(props::small_layer(dtype, norm_first), 2, true, rng);
    encoder.eval();
    for (const Layout* L : {&kRight, &kLeft}) {
      Tensor x = props::randn({L->B, L->T, kD}, 1, dtype);
      Tensor x2 = props::scramble_positions(x, L->pad_positions(), 2);
      nn::AttentionMasks masks;
      masks.key_padding_mask = L->mask();
      NoGradGuard no_grad;
      EXPECT_EQ(real_change(encoder.forward(x, masks), encoder.forward(x2, masks), *L), 0.0)
          << (norm_first ? "pre-norm" : "post-norm") << " encoder";
      // Control: without the mask every real position attends to the PAD rows.
      EXPECT_GT(real_change(encoder.forward(x), encoder.forward(x2), *L), kChanged) << "control: no mask";
    }
  }
}

TEST_P(Padding, DecoderSelfAttentionRealOutputsIgnoreTargetPadPositions) {
  const DType dtype = GetParam();
  for (bool norm_first : {false, true}) {
    Rng rng(22);
    nn::Decoder decoder(props::small_layer(dtype, norm_first), 2, true, rng);
    decoder.eval();
    const Layout& L = kLeft;  // right padding would be protected by the causal mask alone
    Tensor y = props::randn({L.B, L.T, kD}, 3, dtype);
    Tensor y2 = props::scramble_positions(y, L.pad_positions(), 4);
    Tensor memory = props::randn({L.B, 5, kD}, 5, dtype);
    nn::AttentionMasks self_masks;
    self_masks.causal = true;
    self_masks.key_padding_mask = L.mask();
    nn::AttentionMasks causal_only;
    causal_only.causal = true;
    NoGradGuard no_grad;
    EXPECT_EQ(real_change(decoder.forward(y, memory, self_masks), decoder.forward(y2, memory, self_masks), L), 0.0)
        << (norm_first ? "pre-norm" : "post-norm") << " decoder";
    EXPECT_GT(real_change(decoder.forward(y, memory, causal_only), decoder.forward(y2, memory, causal_only), L),
              kChanged)
        << "control: causal mask only";
  }
}

TEST_P(Padding, CrossAttentionIgnoresSourcePadPositions) {
  const DType dtype = GetParam();
  for (bool norm_first : {false, true}) {
    Rng rng(23);
    nn::Decoder decoder(props::small_layer(dtype, norm_first), 2, true, rng);
    decoder.eval();
    const Layout& S = kRight;
    Tensor memory = props::randn({S.B, S.T, kD}, 6, dtype);
    Tensor memory2 = props::scramble_positions(memory, S.pad_positions(), 7);
    Tensor y = props::randn({S.B, 4, kD}, 8, dtype);  // four real target positions per row
    nn::AttentionMasks causal;
    causal.causal = true;
    nn::AttentionMasks cross;
    cross.key_padding_mask = S.mask();
    NoGradGuard no_grad;
    Tensor a = decoder.forward(y, memory, causal, cross);
    Tensor b = decoder.forward(y, memory2, causal, cross);
    EXPECT_EQ(span_diff(a, b, 0, 0, 4), 0.0);
    EXPECT_EQ(span_diff(a, b, 1, 0, 4), 0.0);
    EXPECT_EQ(span_diff(a, b, 2, 0, 4), 0.0);
    // Control: without the source mask, rows 1 and 2 (the padded sources) change everywhere.
    Tensor c = decoder.forward(y, memory, causal);
    Tensor d = decoder.forward(y, memory2, causal);
    EXPECT_GT(props::span_min_diff(c, d, 1, 0, 4), kChanged) << "control: cross-attention without the mask";
    EXPECT_GT(props::span_min_diff(c, d, 2, 0, 4), kChanged) << "control: cross-attention without the mask";
    EXPECT_EQ(span_diff(c, d, 0, 0, 4), 0.0) << "row 0 has no PAD and nothing of it was changed";
  }
}

// Overwrites row `row` of an embedding table with fresh values (in place, not recorded).
void overwrite_row(const Tensor& table, int64_t row, uint64_t seed) {
  NoGradGuard no_grad;
  Tensor r = table.slice(0, row, row + 1);  // [1, D] view into the table
  r.copy_from(props::randn(r.shape(), seed, table.dtype()));
}

// A model of the same config with pad_id = -1 (nothing masked) and the same weights.
template <class M>
std::unique_ptr<M> unmasked_twin(M& model) {
  models::ModelConfig c = model.config();
  c.pad_id = -1;
  auto twin = std::make_unique<M>(c);
  twin->load_state_dict(model.state_dict());
  twin->eval();
  return twin;
}

TEST_P(Padding, EncoderDecoderRealLogitsIgnoreWhatIsFedAtPadPositions) {
  const DType dtype = GetParam();
  for (bool share : {true, false})
    for (bool norm_first : {false, true}) {
      models::ModelConfig c = props::small_config(models::Arch::EncoderDecoder, dtype, norm_first);
      c.share_embeddings = share;
      c.tie_output = false;  // a tied output layer would turn the PAD row into the PAD logit of every position
      models::EncoderDecoderModel model(c);
      model.eval();
      auto twin = unmasked_twin(model);
      // Source right-padded; target right-padded (teacher forcing) with its first PAD after EOS.
      const Layout& S = kRight;
      const Layout T = {3, 5, {0, 0, 0, 0, 0,  //
                               0, 0, 0, 1, 1,  //
                               0, 0, 1, 1, 1}};
      std::vector<int64_t> src = props::random_tokens(S.B * S.T, 9), tgt = props::random_tokens(T.B * T.T, 10);
      for (size_t i = 0; i < src.size(); ++i)
        if (S.is_pad[i]) src[i] = props::kPad;
      for (size_t i = 0; i < tgt.size(); ++i)
        if (T.is_pad[i]) tgt[i] = props::kPad;
      Tensor src_ids = props::ids(src, S.B, S.T), tgt_ids = props::ids(tgt, T.B, T.T);
      NoGradGuard no_grad;
      Tensor before = model.forward(src_ids, tgt_ids), twin_before = twin->forward(src_ids, tgt_ids);
      overwrite_row(model.src_embedding().weight(), props::kPad, 11);
      overwrite_row(model.tgt_embedding().weight(), props::kPad, 12);
      overwrite_row(twin->src_embedding().weight(), props::kPad, 11);
      overwrite_row(twin->tgt_embedding().weight(), props::kPad, 12);
      EXPECT_EQ(real_change(before, model.forward(src_ids, tgt_ids), T), 0.0)
          << (share ? "shared" : "separate") << " embeddings, " << (norm_first ? "pre-norm" : "post-norm");
      // Control: the unmasked twin's real logits move (through the padded sources).
      EXPECT_GT(real_change(twin_before, twin->forward(src_ids, tgt_ids), T), kChanged) << "control: no PAD mask";
    }
}

TEST_P(Padding, EncoderOnlyRealHiddenStatesIgnoreWhatIsFedAtPadPositions) {
  const DType dtype = GetParam();
  models::ModelConfig c = props::small_config(models::Arch::EncoderOnly, dtype, true);
  models::EncoderOnlyModel model(c);  // tied masked-LM head: compare hidden states
  model.eval();
  auto twin = unmasked_twin(model);
  const Layout& L = kRight;
  std::vector<int64_t> tokens = props::random_tokens(L.B * L.T, 13);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (L.is_pad[i]) tokens[i] = props::kPad;
  Tensor a = props::ids(tokens, L.B, L.T);
  NoGradGuard no_grad;
  Tensor before = model.encode(a), twin_before = twin->encode(a);
  overwrite_row(model.embedding().weight(), props::kPad, 14);
  overwrite_row(twin->embedding().weight(), props::kPad, 14);
  EXPECT_EQ(real_change(before, model.encode(a), L), 0.0);
  EXPECT_GT(real_change(twin_before, twin->encode(a), L), kChanged) << "control: no PAD mask";
}

TEST_P(Padding, DecoderOnlyLeftPaddedPromptsIgnoreWhatIsFedAtPadPositions) {
  const DType dtype = GetParam();
  models::ModelConfig c = props::small_config(models::Arch::DecoderOnly, dtype, false);
  c.tie_output = false;
  models::DecoderOnlyModel model(c);
  model.eval();
  auto twin = unmasked_twin(model);
  const Layout& L = kLeft;
  std::vector<int64_t> tokens = props::random_tokens(L.B * L.T, 15);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (L.is_pad[i]) tokens[i] = props::kPad;
  Tensor a = props::ids(tokens, L.B, L.T);
  NoGradGuard no_grad;
  Tensor before = model.forward(a), twin_before = twin->forward(a);
  overwrite_row(model.embedding().weight(), props::kPad, 16);
  overwrite_row(twin->embedding().weight(), props::kPad, 16);
  EXPECT_EQ(real_change(before, model.forward(a), L), 0.0);
  EXPECT_GT(real_change(twin_before, twin->forward(a), L), kChanged) << "control: no PAD mask";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Padding, ::testing::Values(DType::F32, DType::F64),
                         [](const ::testing::TestParamInfo<DType>& info) { return props::dtype_label(info.param); });

}  // namespace
}  // namespace attn
