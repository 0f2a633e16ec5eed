// The descendants (issue 5) against live PyTorch references written from their papers:
// rotary_embedding for both pairings (Meta's complex-number form and Hugging Face's
// rotate_half), ALiBi slopes from the ALiBi paper's own get_slopes, attention with ALiBi,
// grouped K/V heads (repeat_interleave), bottom-right causal masks, padding and a sliding
// window, outputs and gradients; and whole causal blocks (EncoderLayer) with RoPE/ALiBi,
// GQA/MQA, windows, SwiGLU, RMSNorm, pre- and post-norm, every parameter gradient included.
// Controls: the wrong pairing and a missing window are caught.
#include <gtest/gtest.h>

#include <string>

#include "attn/nn/encoder.h"
#include "attn/ops/ops.h"
#include "torch/fixture.h"

namespace attn::test {
namespace {

::testing::AssertionResult check_rope(const std::string& name, bool flip_pairing = false) {
  TorchCase c(name);
  RopeOptions o;
  o.theta = c.number("theta");
  o.pairing = parse_rope_pairing(c.text("pairing"));
  if (flip_pairing) o.pairing = o.pairing == RopePairing::Half ? RopePairing::Interleaved : RopePairing::Half;
  Tensor x = c.input("x", true);
  Tensor y = rotary_embedding(x, c.input("positions"), o);
  weighted_sum(y, c.input("grad_weight")).backward();
  Checks checks;
  checks.add(c.output_close(y, "out"));
  checks.add(c.input_grad_close(x, "x"));
  return checks.result();
}

TEST(VariantsTorch, RotaryEmbeddingMatchesBothPairingConventions) {
  for (const char* pairing : {"interleaved", "half"})
    for (const char* dtype : {"f32", "f64"}) EXPECT_TRUE(check_rope(str_cat("rope_", pairing, "_", dtype)));
  EXPECT_FALSE(check_rope("rope_half_f64", /*flip_pairing=*/true));
}

TEST(VariantsTorch, AlibiSlopesMatchThePapersGetSlopes) {
  for (int n : {1, 3, 5, 8, 12, 20}) {
    TorchCase c(str_cat("alibi_slopes_", n, "_f64"));
    const Tensor mine = Tensor::from_vector<double>(alibi_slopes(n), {n});
    EXPECT_TRUE(all_close(mine, c.get("out.slopes"), 1e-15, 0, str_cat(n, " heads")));
  }
}

::testing::AssertionResult check_alibi_gqa(const std::string& name, bool drop_window = false) {
  TorchCase c(name);
  const int64_t H = c.integer("n_heads");
  Tensor q = c.input("q", true), k = c.input("k", true), v = c.input("v", true);
  SdpaOptions o;
  o.causal = true;
  o.window = drop_window ? 0 : c.integer("window");
  o.key_padding_mask = c.input("key_padding_mask");
  o.alibi_slopes = Tensor::from_vector<double>(alibi_slopes(H), {H}).to(c.dtype());
  Tensor y = scaled_dot_product_attention(q, k, v, o).out;
  weighted_sum(y, c.input("grad_weight")).backward();
  Checks checks;
  checks.add(c.output_close(y, "out"));
  checks.add(c.input_grad_close(q, "q"));
  checks.add(c.input_grad_close(k, "k"));
  checks.add(c.input_grad_close(v, "v"));
  return checks.result();
}

TEST(VariantsTorch, AttentionWithAlibiGroupedHeadsAndWindowsMatches) {
  for (const char* w : {"0", "3"})
    for (const char* dtype : {"f32", "f64"}) EXPECT_TRUE(check_alibi_gqa(str_cat("alibi_gqa_w", w, "_", dtype)));
  EXPECT_FALSE(check_alibi_gqa("alibi_gqa_w3_f64", /*drop_window=*/true));
}

::testing::AssertionResult check_block(const std::string& name) {
  TorchCase c(name);
  nn::LayerOptions o;
  o.d_model = c.integer("d_model");
  o.n_heads = c.integer("n_heads");
  o.d_ff = c.integer("d_ff");
  o.dropout = 0.0;
  o.attention_dropout = 0.0;
  o.activation = nn::parse_activation(c.text("act"));
  o.norm = nn::parse_norm_kind(c.text("norm"));
  o.norm_first = c.flag("norm_first");
  o.norm_eps = c.number("norm_eps");
  o.dtype = c.dtype();
  o.attention.n_kv_heads = c.integer("Hkv");
  o.attention.rope = c.text("positional") == "rope";
  o.attention.alibi = c.text("positional") == "alibi";
  o.attention.rope_options.theta = c.number("theta");
  o.attention.rope_options.pairing = parse_rope_pairing(c.text("pairing"));
  o.attention.window = c.integer("window");
  Rng rng(3);
  nn::EncoderLayer layer(o, rng);
  c.load_params(layer);
  Tensor x = c.input("x", true);
  nn::AttentionMasks masks;
  masks.causal = true;
  masks.key_padding_mask = c.input("key_padding_mask");
  Tensor y = layer.forward(x, masks);
  weighted_sum(y, c.input("grad_weight")).backward();
  Checks checks;
  checks.add(c.output_close(y, "out"));
  checks.add(c.param_grads_close(layer));
  checks.add(c.input_grad_close(x, "x"));
  return checks.result();
}

TEST(VariantsTorch, CausalBlocksWithEachVariantMatchOutputsAndEveryGradient) {
  for (const char* v : {"llama", "rope_interleaved", "alibi_mqa_window", "gqa_swiglu_window"})
    for (const char* dtype : {"f32", "f64"}) EXPECT_TRUE(check_block(str_cat("variant_block_", v, "_", dtype)));
}

}  // namespace
}  // namespace attn::test
