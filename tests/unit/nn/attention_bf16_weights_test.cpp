// nn::MultiHeadAttention with bf16 weights: its bidirectional self-attention runs the bf16
// products (SdpaOptions::bf16_products, kernels/attention_bf16.h) between its bf16 projections,
// and causal self-attention the float32 kernels: the module's output has the bits of the ops
// called by hand with the option on, or off for causal. Control (where the CPU has the tiles,
// the only place the option changes anything): the option off gives other bits.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/nn/attention.h"
#include "attn/nn/quantize.h"
#include "attn/ops/ops.h"
#include "attn/ops/quantize.h"
#include "kernels/attention_bf16.h"

namespace attn::nn {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.contiguous().to_vector<float>(), y = b.contiguous().to_vector<float>();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

TEST(MultiHeadAttentionBf16, BidirectionalSelfAttentionTakesTheBf16ProductsAndCausalTheFloat32Ones) {
  constexpr int64_t B = 2, T = 19, D = 64, H = 4;
  Rng rng(3);
  MultiHeadAttention mha(D, H, 0.0, DType::F32, rng);
  quantize_module(mha, Quantization::BF16);
  mha.eval();
  NoGradGuard no_grad;
  const Tensor x = Tensor::randn({B, T, D}, rng);  // [B, T, D]
  std::vector<int> pad(static_cast<size_t>(B * T), 0);
  for (int64_t j = 15; j < T; ++j) pad[static_cast<size_t>(T + j)] = 1;  // row 1: 15 tokens
  const Tensor padding = Tensor::from_bools(pad, {B, T});                // [B, T]

  // The module's steps by hand: the packed projection, attention, the heads joined, W_O.
  const auto by_hand = [&](bool bf16, bool causal) {
    const Tensor qkv = quantized_linear(x, mha.in_proj_weight(), mha.in_proj_weight_scale(), mha.in_proj_bias());
    SdpaOptions o;
    if (!causal) o.key_padding_mask = padding;
    o.causal = causal;
    o.bf16_products = bf16;
    const Tensor out = scaled_dot_product_attention_packed(qkv, H, H, o).out;  // [B, H, T, Dh]
    return mha.out_proj().forward(reshape(transpose(out, 1, 2), {B, T, D}));   // [B, T, D]
  };
  AttentionMasks bidirectional;
  bidirectional.key_padding_mask = padding;
  const Tensor got = mha.forward(x, x, x, bidirectional);
  EXPECT_TRUE(same_bits(got, by_hand(true, false)));
  AttentionMasks causal;
  causal.causal = true;
  EXPECT_TRUE(same_bits(mha.forward(x, x, x, causal), by_hand(false, true)));
  if (kernels::attention_bf16_available()) {
    EXPECT_FALSE(same_bits(got, by_hand(false, false)));  // control: the float32 kernel's bits differ
    EXPECT_FALSE(same_bits(mha.forward(x, x, x, causal), by_hand(true, true)));
  }
}

}  // namespace
}  // namespace attn::nn
