// EncoderDecoderModel (the paper's Transformer, §3 and Figure 1) against a live nn.Transformer
// subclass (tools/torch_export.py Seq2Seq: embeddings x sqrt(D), sinusoidal positions, a final
// norm on each stack, an output Linear) on padded source and target batches. The strict load
// proves the state_dict names match; then logits, the label-smoothed cross-entropy (§5.4,
// ignore_index = PAD) and every parameter gradient are compared, in float32 and float64.
// Controls: a perturbed parameter or the wrong norm placement must make the comparison fail.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "attn/models/encoder_decoder.h"
#include "torch/fixture.h"

namespace attn::test {
namespace {

// The model the fixture describes: no sharing or tying, dropout 0, pad_id from the metadata.
models::ModelConfig config_of(const TorchCase& c, bool flip_norm = false) {
  models::ModelConfig cfg;
  cfg.arch = models::Arch::EncoderDecoder;
  cfg.d_model = c.integer("d_model");
  cfg.n_heads = c.integer("n_heads");
  cfg.n_encoder_layers = c.integer("n_encoder_layers");
  cfg.n_decoder_layers = c.integer("n_decoder_layers");
  cfg.d_ff = c.integer("d_ff");
  cfg.dropout = 0.0;
  cfg.attention_dropout = 0.0;
  cfg.activation = nn::parse_activation(c.text("activation"));
  cfg.norm_first = c.flag("norm_first") != flip_norm;
  cfg.norm = nn::NormKind::Layer;
  cfg.norm_eps = 1e-5;  // nn.Transformer's default layer_norm_eps
  cfg.final_norm = true;
  cfg.positional = nn::PositionalKind::Sinusoidal;
  cfg.src_vocab_size = c.integer("src_vocab_size");
  cfg.tgt_vocab_size = c.integer("tgt_vocab_size");
  cfg.share_embeddings = false;
  cfg.tie_output = false;
  cfg.scale_embeddings = true;
  cfg.pad_id = c.integer("pad_id");
  cfg.dtype = c.dtype();
  return cfg;
}

struct Knobs {
  bool flip_norm = false;      // build the other norm placement
  bool perturb = false;        // nudge one weight after loading
};

::testing::AssertionResult check_transformer(const std::string& name, Knobs knobs = {}) {
  TorchCase c(name);
  models::EncoderDecoderModel model(config_of(c, knobs.flip_norm));
  c.load_params(model);  // strict: every nn.Transformer name exists here with its shape
  if (knobs.perturb) {
    NoGradGuard no_grad;
    Tensor w = model.parameter("decoder.layers.1.linear1.weight");  // [F, D]
    w.copy_from(add(w, Tensor::full(w.shape(), c.dtype() == DType::F64 ? 1e-7 : 1e-3, c.dtype())));
  }
  Tensor src = c.input("src");          // I64 [B, S]
  Tensor tgt_in = c.input("tgt_in");    // I64 [B, T]
  Tensor tgt_out = c.input("tgt_out");  // I64 [B, T]
  Tensor logits = model.forward(src, tgt_in);  // [B, T, V]
  const int64_t V = logits.size(2);
  Tensor loss = cross_entropy(reshape(logits, {-1, V}), reshape(tgt_out, {-1}), c.integer("pad_id"),
                              c.number("label_smoothing"));
  loss.backward();

  Checks checks;
  checks.add(c.output_close(logits, "logits"));
  checks.add(c.output_close(loss, "loss"));
  checks.add(c.param_grads_close(model));
  return checks.result();
}

class TransformerTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(TransformerTorch, LogitsLossAndEveryGradientMatchNnTransformer) {
  EXPECT_TRUE(check_transformer("transformer_" + GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Cases, TransformerTorch,
                         ::testing::Values("post_relu_f32", "post_relu_f64", "pre_relu_f32", "pre_relu_f64",
                                           "pre_gelu_f32", "pre_gelu_f64"),
                         [](const auto& info) { return info.param; });

TEST(TransformerTorch, ParameterNamesAndShapesAreNnTransformers) {
  // Both directions of the strict load, spelled out: the same name set, the same shapes.
  TorchCase c("transformer_post_relu_f32");
  models::EncoderDecoderModel model(config_of(c));
  const nn::NamedTensors ours = model.named_parameters();
  const nn::NamedTensors theirs = c.params();
  ASSERT_EQ(ours.size(), theirs.size());
  for (const auto& [n, t] : theirs) EXPECT_EQ(model.parameter(n).shape(), t.shape()) << n;
}

// Controls: the comparison notices a one-weight change and a wrong norm placement.
TEST(TransformerTorchControl, APerturbedWeightFails) {
  EXPECT_FALSE(check_transformer("transformer_pre_relu_f64", {.perturb = true}));
  EXPECT_FALSE(check_transformer("transformer_post_relu_f32", {.perturb = true}));
}

TEST(TransformerTorchControl, TheWrongNormPlacementFails) {
  EXPECT_FALSE(check_transformer("transformer_post_relu_f64", {.flip_norm = true}));
  EXPECT_FALSE(check_transformer("transformer_pre_gelu_f32", {.flip_norm = true}));
}

}  // namespace
}  // namespace attn::test
