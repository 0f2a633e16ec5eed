// examples/attention — the README's "A short example": causal scaled dot-product attention,
// then the paper's encoder-decoder at the seed's size, one forward pass, the loss and its
// backward pass. Prints what it computed; it trains nothing and reads no files.
#include <cmath>
#include <cstdio>

#include "attn/attn.h"

int main() {
  using namespace attn;
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

  // The first query sees only the first key, so its output is the first value row.
  double row0 = 0;
  for (int64_t d = 0; d < 16; ++d) row0 = std::fmax(row0, std::fabs(out.at({1, 3, 0, d}) - v.at({1, 3, 0, d})));
  size_t params = 0, with_grad = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    ++params;
    if (p.grad().defined()) ++with_grad;
  }
  std::printf("attention out %s, causal first row equals v: %s\n", out.str().c_str(),
              row0 < 1e-6 ? "yes" : "no");
  std::printf("logits %s, loss %.4f\n", logits.str().c_str(), loss.item());
  std::printf("parameters with a gradient: %zu of %zu\n", with_grad, params);
  return std::isfinite(loss.item()) && with_grad == params && row0 < 1e-6 ? 0 : 1;
}
