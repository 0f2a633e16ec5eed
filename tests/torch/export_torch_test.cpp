// tools/torch_export.py end to end: a PyTorch nn.Transformer (with embeddings and an output
// layer) written as an attn checkpoint folder by the script loads through models::load_model
// (config.json + model.safetensors, strict) and gives PyTorch's eval-mode logits on a padded
// batch. Two shapes of model: post-norm/ReLU, and pre-norm/GELU with 6 heads of 4 and 1+3 layers.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "attn/models/checkpoint.h"
#include "attn/models/encoder_decoder.h"
#include "torch/fixture.h"

namespace attn::test {
namespace {

::testing::AssertionResult check_export(const std::string& name) {
  TorchCase io(name);
  auto model = std::dynamic_pointer_cast<models::EncoderDecoderModel>(
      models::load_model(TorchCase::fixture_dir() + "/" + name));
  if (!model) return ::testing::AssertionFailure() << name << ": not an encoder-decoder model";
  model->eval();
  NoGradGuard no_grad;
  Tensor logits = model->forward(io.input("src"), io.input("tgt_in"));  // [B, T, V]
  return io.output_close(logits, "logits");
}

TEST(TorchExport, PostNormReluTransformerLoadsAndMatches) {
  EXPECT_TRUE(check_export("export_post_relu_f32"));
}

TEST(TorchExport, PreNormGeluTransformerWithOddShapesLoadsAndMatches) {
  EXPECT_TRUE(check_export("export_pre_gelu_odd_f32"));
}

TEST(TorchExport, ExportedConfigRecordsTheModelsShape) {
  const models::ModelConfig c =
      models::load_model_config(TorchCase::fixture_dir() + "/export_pre_gelu_odd_f32");
  EXPECT_EQ(c.d_model, 24);
  EXPECT_EQ(c.n_heads, 6);
  EXPECT_EQ(c.n_encoder_layers, 1);
  EXPECT_EQ(c.n_decoder_layers, 3);
  EXPECT_EQ(c.d_ff, 40);
  EXPECT_TRUE(c.norm_first);
  EXPECT_EQ(c.src_vocab_size, 7);
  EXPECT_EQ(c.tgt_vocab_size, 29);
}

// The other direction: torch_export.py reads an attn checkpoint into an nn.Transformer
// (strict load_state_dict) and writes it back; the result loads in attn with every tensor
// unchanged.
TEST(TorchExport, RoundTripThroughPyTorchKeepsEveryTensor) {
  const std::string src = TorchCase::fixture_dir() + "/export_pre_gelu_odd_f32";
  const std::string dst = TorchCase::fixture_dir() + "/roundtrip_pre_gelu_odd_f32";
  std::filesystem::remove_all(dst);
  const std::string cmd = std::string("/usr/bin/python3 ") + ATTN_SOURCE_DIR +
                          "/tools/torch_export.py roundtrip " + src + " " + dst + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto a = models::load_model(src);
  auto b = models::load_model(dst);
  const auto pa = a->named_parameters();
  const auto pb = b->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    EXPECT_EQ(max_abs_diff(pa[i].second, pb[i].second), 0.0) << pa[i].first;
  }
  std::filesystem::remove_all(dst);
}

}  // namespace
}  // namespace attn::test
