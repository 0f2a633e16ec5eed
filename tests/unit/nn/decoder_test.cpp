// DecoderLayer and Decoder (paper §3.1): nn.TransformerDecoderLayer's names, post-norm and
// pre-norm wiring against the components, float64 gradient checks for both placements (with
// causal and memory-padding masks, gradients into the memory too), the causal property, and
// the stack's names.
#include <gtest/gtest.h>

#include "attn/nn/decoder.h"
#include "attn/ops/ops.h"
#include "nn_reference.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"

namespace attn::nn {
namespace {

LayerOptions small(bool norm_first, NormKind norm = NormKind::Layer) {
  LayerOptions o;
  o.d_model = 8;
  o.n_heads = 2;
  o.d_ff = 12;
  o.dropout = 0.0;
  o.attention_dropout = 0.0;
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

void randomise_all(Module& m, uint64_t seed) {
  for (auto& p : m.parameters()) p.copy_from(test::random_tensor(p.shape(), seed++, p.dtype(), 0.5));
}

TEST(DecoderLayer, HasTransformerDecoderLayerNamesAndCount) {
  Rng rng(1);
  LayerOptions o = small(false);
  DecoderLayer layer(o, rng);
  std::vector<std::string> names;
  for (auto& [n, t] : layer.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                       "self_attn.out_proj.bias", "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias",
                       "multihead_attn.out_proj.weight", "multihead_attn.out_proj.bias", "linear1.weight",
                       "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight", "norm1.bias",
                       "norm2.weight", "norm2.bias", "norm3.weight", "norm3.bias"}));
  const int64_t D = 8, F = 12;
  EXPECT_EQ(layer.num_parameters(), 2 * (4 * D * D + 4 * D) + (2 * D * F + F + D) + 3 * 2 * D);
}

TEST(DecoderLayer, PostNormAndPreNormFollowTheirFormulas) {
  for (NormKind norm : {NormKind::Layer, NormKind::RMS}) {
    for (bool norm_first : {false, true}) {
      Rng rng(2);
      DecoderLayer layer(small(norm_first, norm), rng);
      randomise_all(layer, 3);
      Tensor x = test::random_tensor({2, 4, 8}, 4);
      Tensor mem = test::random_tensor({2, 6, 8}, 5);
      AttentionMasks self_masks, cross_masks;
      self_masks.causal = true;
      cross_masks.key_padding_mask = Tensor::from_bools({0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, {2, 6});
      auto sa = [&](const Tensor& h) { return layer.self_attn().forward(h, h, h, self_masks); };
      auto ca = [&](const Tensor& h) { return layer.multihead_attn().forward(h, mem, mem, cross_masks); };
      auto ff = [&](const Tensor& h) { return layer.feed_forward().forward(h); };
      // Norms are reached through the names the layer registered.
      auto norm_of = [&](const char* name, const Tensor& h) {
        for (auto& [n, c] : layer.children())
          if (n == name) return dynamic_cast<Norm&>(*c).forward(h);
        return Tensor();
      };
      Tensor expected;
      if (norm_first) {
        Tensor h = add(x, sa(norm_of("norm1", x)));
        h = add(h, ca(norm_of("norm2", h)));
        expected = add(h, ff(norm_of("norm3", h)));
      } else {
        Tensor h = norm_of("norm1", add(x, sa(x)));
        h = norm_of("norm2", add(h, ca(h)));
        expected = norm_of("norm3", add(h, ff(h)));
      }
      EXPECT_TRUE(test::all_close(layer.forward(x, mem, self_masks, cross_masks), expected, 1e-12))
          << "norm_first " << norm_first << " " << norm_kind_name(norm);
    }
  }
}

TEST(DecoderLayer, GradientsMatchFiniteDifferencesForBothNormPlacements) {
  for (bool norm_first : {false, true}) {
    Rng rng(6);
    DecoderLayer layer(grad_sized(norm_first), rng);
    randomise_all(layer, 7);
    Tensor x = test::random_tensor({2, 3, 4}, 8).set_requires_grad(true);
    Tensor mem = test::random_tensor({2, 4, 4}, 9).set_requires_grad(true);
    AttentionMasks self_masks, cross_masks;
    self_masks.causal = true;
    cross_masks.key_padding_mask = Tensor::from_bools({0, 0, 1, 1, 0, 0, 0, 0}, {2, 4});
    std::vector<Tensor> inputs{x, mem};
    for (auto& p : layer.parameters()) inputs.push_back(p);
    EXPECT_TRUE(test::gradcheck(
        [&](const std::vector<Tensor>& in) { return layer.forward(in[0], in[1], self_masks, cross_masks); }, inputs))
        << "norm_first " << norm_first;
  }
}

TEST(DecoderLayer, CausalSelfAttentionHidesLaterTargets) {
  Rng rng(10);
  DecoderLayer layer(small(false), rng);
  Tensor x = test::random_tensor({1, 5, 8}, 11);
  Tensor mem = test::random_tensor({1, 3, 8}, 12);
  AttentionMasks causal;
  causal.causal = true;
  Tensor base = layer.forward(x, mem, causal);
  Tensor x2 = x.clone();
  Tensor(x2.slice(1, 2, 3)).copy_from(test::random_tensor({1, 1, 8}, 13));
  Tensor moved = layer.forward(x2, mem, causal);
  EXPECT_TRUE(test::all_close(moved.slice(1, 0, 2), base.slice(1, 0, 2), 1e-12));
  EXPECT_FALSE(test::all_close(moved.slice(1, 2, 5), base.slice(1, 2, 5), 1e-6));
  // Control: without the mask position 0 moves too.
  EXPECT_FALSE(test::all_close(layer.forward(x2, mem).slice(1, 0, 1), layer.forward(x, mem).slice(1, 0, 1), 1e-6));
}

TEST(Decoder, StacksLayersAndRejectsMismatchedMemory) {
  Rng rng(14);
  Decoder dec(small(true), 2, true, rng);
  std::vector<std::string> names;
  for (auto& [n, t] : dec.named_parameters()) names.push_back(n);
  ASSERT_EQ(names.size(), 2 * 18 + 2);
  EXPECT_EQ(names[18], "layers.1.self_attn.in_proj_weight");
  EXPECT_EQ(names[4], "layers.0.multihead_attn.in_proj_weight");
  EXPECT_EQ(names.back(), "norm.bias");
  Tensor x = test::random_tensor({2, 3, 8}, 15);
  Tensor mem = test::random_tensor({2, 5, 8}, 16);
  Tensor expected = dec.norm()->forward(dec.layer(1).forward(dec.layer(0).forward(x, mem), mem));
  EXPECT_TRUE(test::all_close(dec.forward(x, mem), expected, 1e-12));
  EXPECT_THROW(dec.forward(x, test::random_tensor({1, 5, 8}, 17)), Error);
  EXPECT_THROW(dec.forward(x, test::random_tensor({2, 5, 6}, 17)), Error);
}

}  // namespace
}  // namespace attn::nn
