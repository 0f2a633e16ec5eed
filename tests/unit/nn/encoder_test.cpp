// EncoderLayer and Encoder (paper §3.1): nn.TransformerEncoderLayer's names and parameter
// count (8544 for the seed's pre-norm D=32 block), post-norm and pre-norm wiring against the
// components, LayerNorm and RMSNorm, float64 gradient checks for both placements, the causal
// property of a GPT block, train/eval dropout, the stack's "layers.N." / "norm." names, and
// the cached causal path (forward_cached: a prompt, then steps) against the full causal forward.
#include <gtest/gtest.h>

#include "attn/core/autograd.h"
#include "attn/nn/encoder.h"
#include "attn/ops/ops.h"
#include "nn_reference.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"

namespace attn::nn {
namespace {

LayerOptions small(bool norm_first, NormKind norm = NormKind::Layer, double dropout = 0.0) {
  LayerOptions o;
  o.d_model = 8;
  o.n_heads = 2;
  o.d_ff = 12;
  o.dropout = dropout;
  o.attention_dropout = dropout;
  o.norm_first = norm_first;
  o.norm = norm;
  o.dtype = DType::F64;
  return o;
}

// Smaller for float64 gradient checks, which perturb every parameter element twice.
LayerOptions grad_sized(bool norm_first) {
  LayerOptions o = small(norm_first);
  o.d_model = 4;
  o.d_ff = 6;
  return o;
}

std::vector<std::string> names_of(const Module& m) {
  std::vector<std::string> out;
  for (auto& [n, t] : m.named_parameters()) out.push_back(n);
  return out;
}

// Gives norm parameters random values so that the gradient check sees them act.
void randomise_all(Module& m, uint64_t seed) {
  for (auto& p : m.parameters()) p.copy_from(test::random_tensor(p.shape(), seed++, p.dtype(), 0.5));
}

TEST(EncoderLayer, HasTransformerEncoderLayerNamesAndTheSeedParameterCount) {
  LayerOptions o;
  o.d_model = 32;
  o.n_heads = 4;
  o.d_ff = 64;
  o.norm_first = true;
  Rng rng(1);
  EncoderLayer layer(o, rng);
  EXPECT_EQ(layer.num_parameters(), 8544);
  EXPECT_EQ(names_of(layer),
            (std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                                      "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                                      "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"}));
  o.norm = NormKind::RMS;
  EncoderLayer rms(o, rng);
  EXPECT_EQ(rms.num_parameters(), 8544 - 64);  // RMSNorm has no bias
}

TEST(EncoderLayer, PostNormAndPreNormFollowTheirFormulas) {
  for (NormKind norm : {NormKind::Layer, NormKind::RMS}) {
    for (bool norm_first : {false, true}) {
      Rng rng(2);
      EncoderLayer layer(small(norm_first, norm), rng);
      randomise_all(layer, 3);
      Tensor x = test::random_tensor({2, 5, 8}, 4);
      AttentionMasks masks;
      masks.key_padding_mask = Tensor::from_bools({0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, {2, 5});
      auto sa = [&](const Tensor& h) { return layer.self_attn().forward(h, h, h, masks); };
      auto ff = [&](const Tensor& h) { return layer.feed_forward().forward(h); };
      Tensor expected;
      if (norm_first) {
        Tensor h = add(x, sa(layer.norm1().forward(x)));
        expected = add(h, ff(layer.norm2().forward(h)));
      } else {
        Tensor h = layer.norm1().forward(add(x, sa(x)));
        expected = layer.norm2().forward(add(h, ff(h)));
      }
      EXPECT_TRUE(test::all_close(layer.forward(x, masks), expected, 1e-12))
          << "norm_first " << norm_first << " " << norm_kind_name(norm);
    }
  }
}

TEST(EncoderLayer, GradientsMatchFiniteDifferencesForBothNormPlacements) {
  for (bool norm_first : {false, true}) {
    Rng rng(5);
    EncoderLayer layer(grad_sized(norm_first), rng);
    randomise_all(layer, 6);
    Tensor x = test::random_tensor({2, 3, 4}, 7).set_requires_grad(true);
    AttentionMasks masks;
    masks.key_padding_mask = Tensor::from_bools({0, 0, 1, 0, 0, 0}, {2, 3});
    std::vector<Tensor> inputs{x};
    for (auto& p : layer.parameters()) inputs.push_back(p);
    EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>& in) { return layer.forward(in[0], masks); }, inputs))
        << "norm_first " << norm_first;
  }
}

TEST(EncoderLayer, WithACausalMaskAChangeAtPositionTOnlyMovesOutputsFromT) {
  Rng rng(8);
  EncoderLayer layer(small(true), rng);
  AttentionMasks causal;
  causal.causal = true;
  Tensor x = test::random_tensor({1, 6, 8}, 9);
  Tensor base = layer.forward(x, causal);
  Tensor x2 = x.clone();
  Tensor(x2.slice(1, 3, 4)).copy_from(test::random_tensor({1, 1, 8}, 10));
  Tensor moved = layer.forward(x2, causal);
  EXPECT_TRUE(test::all_close(moved.slice(1, 0, 3), base.slice(1, 0, 3), 1e-12));
  EXPECT_FALSE(test::all_close(moved.slice(1, 3, 6), base.slice(1, 3, 6), 1e-6));
  // Control: without the mask the earlier positions move too.
  EXPECT_FALSE(test::all_close(layer.forward(x2).slice(1, 0, 3), layer.forward(x).slice(1, 0, 3), 1e-6));
}

TEST(EncoderLayer, TrainModeDropsOutAndEvalModeIsDeterministic) {
  Rng rng(11), rng0(11);
  EncoderLayer layer(small(false, NormKind::Layer, 0.3), rng);
  EncoderLayer no_dropout(small(false, NormKind::Layer, 0.0), rng0);
  Tensor x = test::random_tensor({2, 4, 8}, 12);
  Tensor train_out = layer.forward(x);
  EXPECT_FALSE(test::all_close(layer.forward(x), train_out, 1e-6));
  layer.eval();
  EXPECT_TRUE(test::all_close(layer.forward(x), no_dropout.forward(x), 1e-12));
}

TEST(Encoder, StacksLayersUnderLayersNWithAnOptionalFinalNorm) {
  Rng rng(13);
  Encoder enc(small(true), 2, true, rng);
  const auto names = names_of(enc);
  ASSERT_EQ(names.size(), 2 * 12 + 2);
  EXPECT_EQ(names[0], "layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(names[12], "layers.1.self_attn.in_proj_weight");
  EXPECT_EQ(names[24], "norm.weight");
  EXPECT_EQ(names[25], "norm.bias");
  Tensor x = test::random_tensor({1, 3, 8}, 14);
  Tensor expected = enc.norm()->forward(enc.layer(1).forward(enc.layer(0).forward(x)));
  EXPECT_TRUE(test::all_close(enc.forward(x), expected, 1e-12));
  Encoder bare(small(false), 1, false, rng);
  EXPECT_EQ(bare.norm(), nullptr);
  EXPECT_EQ(names_of(bare).back(), "layers.0.norm2.bias");
  EXPECT_THROW(enc.layer(0).forward(Tensor::zeros({2, 3, 7}, DType::F64)), Error);
}

TEST(EncoderLayer, PrefillAndStepsEqualTheFullCausalForwardWithPadding) {
  for (bool norm_first : {false, true}) {
    Rng rng(15);
    EncoderLayer layer(small(norm_first, NormKind::RMS), rng);
    randomise_all(layer, 16);
    layer.eval();
    NoGradGuard no_grad;
    Tensor x = test::random_tensor({2, 6, 8}, 17);  // [2, 6, D]
    // Row 1's position 1 is PAD: masked as a key in both paths.
    Tensor padding = Tensor::from_bools({0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}, {2, 6});
    AttentionMasks full_masks;
    full_masks.causal = true;
    full_masks.key_padding_mask = padding;
    Tensor full = layer.forward(x, full_masks);  // [2, 6, D]
    LayerKV kv;
    AttentionMasks first;
    first.key_padding_mask = padding.slice(1, 0, 4).contiguous();
    Tensor head = layer.forward_cached(x.slice(1, 0, 4).contiguous(), kv, first);  // [2, 4, D]
    EXPECT_TRUE(test::all_close(head, full.slice(1, 0, 4), 1e-12, 0, "prompt"));
    EXPECT_EQ(kv.self.k.shape(), (Shape{2, 2, 4, 4}));
    for (int64_t t = 4; t < 6; ++t) {
      AttentionMasks step_masks;
      step_masks.key_padding_mask = padding.slice(1, 0, t + 1).contiguous();
      Tensor step = layer.forward_cached(x.slice(1, t, t + 1).contiguous(), kv, step_masks);
      EXPECT_TRUE(test::all_close(step, full.slice(1, t, t + 1), 1e-12, 0, "step " + std::to_string(t)));
    }
    EXPECT_EQ(kv.self.v.shape(), (Shape{2, 2, 6, 4}));
    // Control: a cache missing the first position gives different outputs.
    LayerKV short_kv;
    AttentionMasks no_pad;
    layer.forward_cached(x.slice(1, 1, 5).contiguous(), short_kv, no_pad);
    EXPECT_FALSE(test::all_close(layer.forward_cached(x.slice(1, 5, 6).contiguous(), short_kv, no_pad),
                                 full.slice(1, 5, 6), 1e-6));
    EXPECT_THROW(layer.forward_cached(x.slice(2, 0, 4).contiguous(), kv, no_pad), Error);  // width 4, not D
    AttentionMasks six;
    six.key_padding_mask = padding;
    EXPECT_THROW(layer.forward_cached(x.slice(1, 0, 1).contiguous(), kv, six), Error);  // mask of 6, not 7
  }
}

}  // namespace
}  // namespace attn::nn
