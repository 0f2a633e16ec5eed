// The library example of README.md, compiled and run, so the README cannot drift from the
// API. Keep the two in sync: the body of the test is the README's code block.
#include <gtest/gtest.h>

#include <cmath>

#include "attn/attn.h"

namespace {

TEST(ReadmeExample, CompilesRunsAndLearnsOneStep) {
  using namespace attn;
  // --- README example begins ---
  // Scaled dot-product attention (Eq. 1): softmax(q k^T / sqrt(Dh)) v, causally masked.
  Rng rng(0);
  Tensor q = Tensor::randn({2, 4, 5, 16}, rng);  // [B, H, T, Dh]
  Tensor k = Tensor::randn({2, 4, 5, 16}, rng);
  Tensor v = Tensor::randn({2, 4, 5, 16}, rng);
  Tensor out = scaled_dot_product_attention(q, k, v, SdpaOptions::causal_mask()).out;

  // The paper's encoder-decoder at the seed's size (D=64, 4 heads, 2+2 layers).
  models::ModelConfig config = models::ModelConfig::seed_small();
  models::EncoderDecoderModel model(config);
  Tensor src = Tensor::from_vector<int64_t>({3, 7, 4, 9, 2}, {1, 5});     // [B, S]
  Tensor tgt_in = Tensor::from_vector<int64_t>({1, 9, 4, 7, 3}, {1, 5});  // BOS + target
  Tensor tgt_out = Tensor::from_vector<int64_t>({9, 4, 7, 3, 2}, {1, 5}); // target + EOS
  Tensor logits = model.forward(src, tgt_in);                             // [B, T, V]
  Tensor loss = cross_entropy(logits.reshape({-1, logits.size(-1)}), tgt_out.reshape({-1}),
                              /*ignore_index=*/config.pad_id, /*label_smoothing=*/0.1);
  loss.backward();  // every parameter now holds .grad()
  // --- README example ends ---
  EXPECT_EQ(out.shape(), (Shape{2, 4, 5, 16}));
  EXPECT_EQ(logits.shape(), (Shape{1, 5, config.tgt_vocab_size}));
  EXPECT_TRUE(std::isfinite(loss.item()));
  EXPECT_GT(loss.item(), 0.0);
  for (const auto& [name, p] : model.named_parameters())
    EXPECT_TRUE(p.grad().defined()) << name;
}

}  // namespace
