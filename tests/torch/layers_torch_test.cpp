// EncoderLayer and DecoderLayer (paper §3.1-3.3) against live nn.TransformerEncoderLayer and
// nn.TransformerDecoderLayer (batch_first, dropout 0, train mode): post-norm and pre-norm,
// ReLU and GELU, float32 and float64, on padded batches. Compared: every output position
// (padded ones too: PyTorch computes them, only keys are masked), every parameter gradient, and
// the input gradients of sum(out * W). Controls swap the norm placement or drop a mask.
// Not here: dropout (random), the stacks (see transformer_torch_test.cpp).
#include <gtest/gtest.h>

#include <string>

#include "attn/nn/decoder.h"
#include "attn/nn/encoder.h"
#include "torch/fixture.h"

namespace attn::test {
namespace {

// The layer options recorded in the fixture's metadata; `flip_norm` swaps pre/post (a control).
nn::LayerOptions options_of(const TorchCase& c, bool flip_norm = false) {
  nn::LayerOptions o;
  o.d_model = c.integer("d_model");
  o.n_heads = c.integer("n_heads");
  o.d_ff = c.integer("d_ff");
  o.dropout = 0.0;
  o.attention_dropout = 0.0;
  o.activation = nn::parse_activation(c.text("activation"));
  o.norm_first = c.flag("norm_first") != flip_norm;
  o.norm = nn::NormKind::Layer;
  o.norm_eps = c.number("norm_eps");
  o.dtype = c.dtype();
  return o;
}

::testing::AssertionResult check_encoder_layer(const std::string& name, bool flip_norm = false,
                                               bool use_padding = true) {
  TorchCase c(name);
  Rng rng(3);
  nn::EncoderLayer layer(options_of(c, flip_norm), rng);
  c.load_params(layer);
  Tensor x = c.input("x", true);  // [B, T, D]
  nn::AttentionMasks masks;
  if (use_padding) masks.key_padding_mask = c.input("key_padding_mask");  // Bool [B, T]
  Tensor y = layer.forward(x, masks);
  weighted_sum(y, c.input("grad_weight")).backward();
  Checks checks;
  checks.add(c.output_close(y, "out"));
  checks.add(c.param_grads_close(layer));
  checks.add(c.input_grad_close(x, "x"));
  return checks.result();
}

::testing::AssertionResult check_decoder_layer(const std::string& name, bool flip_norm = false,
                                               bool causal = true) {
  TorchCase c(name);
  Rng rng(3);
  nn::DecoderLayer layer(options_of(c, flip_norm), rng);
  c.load_params(layer);
  Tensor tgt = c.input("tgt", true);     // [B, T, D]
  Tensor mem = c.input("memory", true);  // [B, S, D]
  nn::AttentionMasks self_masks, cross_masks;
  self_masks.causal = causal;  // PyTorch's tgt_mask = causal(T, T), not stored in the file
  self_masks.key_padding_mask = c.input("tgt_key_padding_mask");       // Bool [B, T]
  cross_masks.key_padding_mask = c.input("memory_key_padding_mask");   // Bool [B, S]
  Tensor y = layer.forward(tgt, mem, self_masks, cross_masks);
  weighted_sum(y, c.input("grad_weight")).backward();
  Checks checks;
  checks.add(c.output_close(y, "out"));
  checks.add(c.param_grads_close(layer));
  checks.add(c.input_grad_close(tgt, "tgt"));
  checks.add(c.input_grad_close(mem, "memory"));
  return checks.result();
}

class LayerTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(LayerTorch, EncoderLayerMatchesNnTransformerEncoderLayer) {
  EXPECT_TRUE(check_encoder_layer("enc_layer_" + GetParam()));
}

TEST_P(LayerTorch, DecoderLayerMatchesNnTransformerDecoderLayer) {
  EXPECT_TRUE(check_decoder_layer("dec_layer_" + GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Cases, LayerTorch,
                         ::testing::Values("post_relu_f32", "post_relu_f64", "post_gelu_f32", "post_gelu_f64",
                                           "pre_relu_f32", "pre_relu_f64", "pre_gelu_f32", "pre_gelu_f64"),
                         [](const auto& info) { return info.param; });

// Controls: the same weights wired the other way, or without a mask, must not pass.
TEST(LayerTorchControl, TheWrongNormPlacementFails) {
  EXPECT_FALSE(check_encoder_layer("enc_layer_post_relu_f64", /*flip_norm=*/true));
  EXPECT_FALSE(check_encoder_layer("enc_layer_pre_gelu_f32", /*flip_norm=*/true));
  EXPECT_FALSE(check_decoder_layer("dec_layer_post_gelu_f64", /*flip_norm=*/true));
  EXPECT_FALSE(check_decoder_layer("dec_layer_pre_relu_f32", /*flip_norm=*/true));
}

TEST(LayerTorchControl, AMissingMaskFails) {
  EXPECT_FALSE(check_encoder_layer("enc_layer_pre_relu_f64", false, /*use_padding=*/false));
  EXPECT_FALSE(check_decoder_layer("dec_layer_post_relu_f64", false, /*causal=*/false));
}

}  // namespace
}  // namespace attn::test
