// Property: the causal mask (paper §3.2.3; seeds 000, 001). Changing the input at position t
// changes outputs only at positions >= t (earlier ones bit-for-bit equal, every later one
// changed), for several t, f32 and f64: causal self-attention, a causal block stack, the
// decoder-only model, the decoder stack and the encoder-decoder logits. Controls: the same
// change without the causal mask (for the GPT, its weights run bidirectionally) does change
// outputs before t. Not here: the KV cache (decode/) and step-by-step decoding (prefix_decoding).
#include <gtest/gtest.h>

#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "attn/models/encoder_only.h"
#include "attn/nn/attention.h"
#include "attn/nn/decoder.h"
#include "attn/nn/encoder.h"
#include "property_util.h"
#include "support/expect_close.h"

namespace attn {
namespace {

using props::span_diff;
using props::span_min_diff;

constexpr int64_t kB = 2, kT = 7, kD = 16;
const std::vector<int64_t> kPositions = {0, 1, 3, 6};  // the changed position t
// A change at t moves later outputs by O(0.1-1); anything below this counts as "not changed".
constexpr double kChanged = 1e-4;

class Causal : public ::testing::TestWithParam<DType> {};

// x [B, T, D] with position t replaced by fresh values in every batch row.
Tensor change_position(const Tensor& x, int64_t t, uint64_t seed) {
  std::vector<std::pair<int64_t, int64_t>> where;
  for (int64_t b = 0; b < x.size(0); ++b) where.push_back({b, t});
  return props::scramble_positions(x, where, seed);
}

// The causal property for one pair of outputs: rows before t exactly equal, rows from t changed.
void expect_only_from_t(const Tensor& before, const Tensor& after, int64_t t, const std::string& what) {
  for (int64_t b = 0; b < before.size(0); ++b) {
    EXPECT_EQ(span_diff(after, before, b, 0, t), 0.0) << what << ": output before t=" << t << " changed (batch " << b << ")";
    EXPECT_GT(span_min_diff(after, before, b, t, before.size(1)), kChanged)
        << what << ": some output at or after t=" << t << " did not change (batch " << b << ")";
  }
}

TEST_P(Causal, SelfAttentionLayerOutputsChangeOnlyFromTheChangedPosition) {
  const DType dtype = GetParam();
  Rng rng(11);
  nn::MultiHeadAttention mha(kD, 4, 0.0, dtype, rng);
  Tensor x = props::randn({kB, kT, kD}, 1, dtype);
  nn::AttentionMasks causal;
  causal.causal = true;
  NoGradGuard no_grad;
  for (int64_t t : kPositions) {
    Tensor x2 = change_position(x, t, 100 + static_cast<uint64_t>(t));
    expect_only_from_t(mha.forward(x, x, x, causal), mha.forward(x2, x2, x2, causal), t, "causal self-attention");
    // Control: without the mask, outputs before t see position t and change.
    if (t > 0) {
      for (int64_t b = 0; b < kB; ++b)
        EXPECT_GT(span_min_diff(mha.forward(x2, x2, x2), mha.forward(x, x, x), b, 0, t), kChanged)
            << "control: unmasked self-attention before t=" << t << " did not change";
    }
  }
}

TEST_P(Causal, BlockStackOutputsChangeOnlyFromTheChangedPositionPostAndPreNorm) {
  const DType dtype = GetParam();
  for (bool norm_first : {false, true}) {
    Rng rng(12);
    nn::Encoder stack(props::small_layer(dtype, norm_first), 2, norm_first, rng);
    stack.eval();
    Tensor x = props::randn({kB, kT, kD}, 2, dtype);
    nn::AttentionMasks causal;
    causal.causal = true;
    NoGradGuard no_grad;
    const std::string what = norm_first ? "pre-norm causal stack" : "post-norm causal stack";
    for (int64_t t : kPositions) {
      Tensor x2 = change_position(x, t, 200 + static_cast<uint64_t>(t));
      expect_only_from_t(stack.forward(x, causal), stack.forward(x2, causal), t, what);
      if (t > 0) {
        for (int64_t b = 0; b < kB; ++b)
          EXPECT_GT(span_min_diff(stack.forward(x2), stack.forward(x), b, 0, t), kChanged)
              << "control: " << what << " without the mask, before t=" << t;
      }
    }
  }
}

TEST_P(Causal, DecoderOnlyLogitsChangeOnlyFromTheChangedToken) {
  const DType dtype = GetParam();
  for (bool norm_first : {false, true}) {
    models::ModelConfig c = props::small_config(models::Arch::DecoderOnly, dtype, norm_first);
    models::DecoderOnlyModel gpt(c);
    gpt.eval();
    // Control twin: the same embedding and blocks, run bidirectionally (EncoderOnlyModel has no
    // causal mask); its masked-LM head is not used, so it is left out of the copy.
    models::ModelConfig bc = c;
    bc.arch = models::Arch::EncoderOnly;
    bc.n_encoder_layers = c.n_decoder_layers;
    models::EncoderOnlyModel bidirectional(bc);
    bidirectional.load_state_dict(gpt.state_dict(), /*strict=*/false);
    bidirectional.eval();

    std::vector<int64_t> tokens = props::random_tokens(kB * kT, 3);
    Tensor a = props::ids(tokens, kB, kT);
    NoGradGuard no_grad;
    // The twin is faithful: it holds the same embedding and block weights, and on a single
    // token (where causal and bidirectional attention coincide) it computes the same states.
    for (const auto& [name, p] : gpt.named_parameters()) {
      if (name.rfind("lm_head", 0) != 0) {
        EXPECT_EQ(test::max_abs_diff(bidirectional.parameter(name), p), 0.0) << name;
      }
    }
    Tensor one = props::ids({5, 8}, kB, 1);
    EXPECT_LE(test::max_abs_diff(gpt.hidden(one), bidirectional.encode(one)), props::reshape_tolerance(dtype));
    for (int64_t t : kPositions) {
      std::vector<int64_t> changed = tokens;
      for (int64_t b = 0; b < kB; ++b) {
        int64_t& v = changed[static_cast<size_t>(b * kT + t)];
        v = 3 + (v - 3 + 4) % (props::kVocab - 3);  // another ordinary token
      }
      Tensor a2 = props::ids(changed, kB, kT);
      expect_only_from_t(gpt.forward(a), gpt.forward(a2), t, norm_first ? "pre-norm GPT logits" : "post-norm GPT logits");
      if (t > 0) {
        for (int64_t b = 0; b < kB; ++b)
          EXPECT_GT(span_min_diff(bidirectional.encode(a2), bidirectional.encode(a), b, 0, t), kChanged)
              << "control: the same weights without the causal mask, before t=" << t;
      }
    }
  }
}

TEST_P(Causal, EncoderDecoderLogitsChangeOnlyFromTheChangedTargetToken) {
  const DType dtype = GetParam();
  for (bool norm_first : {false, true}) {
    models::EncoderDecoderModel model(props::small_config(models::Arch::EncoderDecoder, dtype, norm_first));
    model.eval();
    Tensor src = props::ids(props::random_tokens(kB * 5, 4), kB, 5);
    std::vector<int64_t> tgt = props::random_tokens(kB * kT, 5);
    for (int64_t b = 0; b < kB; ++b) tgt[static_cast<size_t>(b * kT)] = props::kBos;
    NoGradGuard no_grad;
    Tensor logits = model.forward(src, props::ids(tgt, kB, kT));  // [B, T, V]
    for (int64_t t : kPositions) {
      std::vector<int64_t> changed = tgt;
      for (int64_t b = 0; b < kB; ++b) {
        int64_t& v = changed[static_cast<size_t>(b * kT + t)];
        v = v == props::kBos ? 3 : 3 + (v - 3 + 5) % (props::kVocab - 3);
      }
      expect_only_from_t(logits, model.forward(src, props::ids(changed, kB, kT)), t,
                         norm_first ? "pre-norm encoder-decoder logits" : "post-norm encoder-decoder logits");
    }
  }
}

TEST_P(Causal, DecoderStackWithoutTheCausalMaskLetsTheFutureIn) {
  // The decoder layer class itself: causal self-attention protects the past even with
  // attention over a memory; the same stack with an unmasked self-attention does not.
  const DType dtype = GetParam();
  Rng rng(13);
  nn::Decoder decoder(props::small_layer(dtype), 2, true, rng);
  decoder.eval();
  Tensor y = props::randn({kB, kT, kD}, 6, dtype);
  Tensor memory = props::randn({kB, 5, kD}, 7, dtype);
  nn::AttentionMasks causal;
  causal.causal = true;
  NoGradGuard no_grad;
  for (int64_t t : kPositions) {
    Tensor y2 = change_position(y, t, 300 + static_cast<uint64_t>(t));
    expect_only_from_t(decoder.forward(y, memory, causal), decoder.forward(y2, memory, causal), t, "decoder stack");
    if (t > 0) {
      for (int64_t b = 0; b < kB; ++b)
        EXPECT_GT(span_min_diff(decoder.forward(y2, memory), decoder.forward(y, memory), b, 0, t), kChanged)
            << "control: decoder stack without the causal mask, before t=" << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Causal, ::testing::Values(DType::F32, DType::F64),
                         [](const ::testing::TestParamInfo<DType>& info) { return props::dtype_label(info.param); });

}  // namespace
}  // namespace attn
