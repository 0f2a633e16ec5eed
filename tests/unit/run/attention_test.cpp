// run/attention: the captured weights come back typed by stack and layer with their shapes,
// every row is a distribution, a masked decoder never looks ahead, and cross_attention's
// [layer][head][query][key] tables are exactly the capture's cross-attention weights.
#include "attn/run/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attn/io/run_files.h"
#include "attn/models/checkpoint.h"
#include "attn/models/factory.h"
#include "attn/run/token_codec.h"
#include "unit/models/broken_checkpoints.h"

namespace attn::run {
namespace {

using models::test_util::TempDir;

models::ModelConfig tiny(models::Arch arch) {
  models::ModelConfig c;
  c.arch = arch;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_encoder_layers = arch == models::Arch::DecoderOnly ? 0 : 2;
  c.n_decoder_layers = arch == models::Arch::EncoderOnly ? 0 : 3;
  c.d_ff = 16;
  c.max_len = 32;
  c.src_vocab_size = 12;
  c.tgt_vocab_size = arch == models::Arch::EncoderDecoder ? 12 : 0;
  c.dtype = DType::F64;
  c.seed = 3;
  return c;
}

ModelFolder folder_of(const TempDir& tmp, models::Arch arch) {
  const std::string dir = tmp.file(models::arch_name(arch));
  models::save_model(dir, *models::make_model(tiny(arch)));
  return open_model_folder(dir, "test", false, arch);
}

// Every row of every head sums to 1 (and, when causal, puts nothing after its own position).
void expect_rows_are_distributions(const AttentionWeights& w, bool causal) {
  for (int64_t b = 0; b < w.batch; ++b)
    for (int64_t h = 0; h < w.heads; ++h)
      for (int64_t q = 0; q < w.queries; ++q) {
        double sum = 0;
        for (int64_t k = 0; k < w.keys; ++k) {
          sum += w.at(b, h, q, k);
          if (causal && k > q) {
            EXPECT_EQ(w.at(b, h, q, k), 0.0) << "layer " << w.layer << " q " << q << " k " << k;
          }
        }
        EXPECT_NEAR(sum, 1.0, 1e-12);
      }
}

TEST(CaptureAttention, EncoderDecoderStacksAreTypedAndShaped) {
  TempDir tmp("attn_run_attention");
  const ModelFolder f = folder_of(tmp, models::Arch::EncoderDecoder);
  const CapturedAttention c =
      capture_attention(f, pad_batch({{4, 5, 6, 7, 8}}, f.pad), pad_batch({{f.bos, 9, 10}}, f.pad));
  ASSERT_EQ(c.encoder_self.size(), 2u);
  ASSERT_EQ(c.decoder_self.size(), 3u);
  ASSERT_EQ(c.cross.size(), 3u);
  EXPECT_TRUE(c.self.empty());
  for (size_t l = 0; l < 3; ++l) {
    EXPECT_EQ(c.cross[l].kind, AttentionKind::Cross);
    EXPECT_EQ(c.cross[l].layer, static_cast<int64_t>(l));
    EXPECT_EQ(c.cross[l].heads, 2);
    EXPECT_EQ(c.cross[l].queries, 3);  // BOS + two target tokens
    EXPECT_EQ(c.cross[l].keys, 5);     // the source
    EXPECT_EQ(c.decoder_self[l].kind, AttentionKind::DecoderSelf);
    expect_rows_are_distributions(c.cross[l], false);
    expect_rows_are_distributions(c.decoder_self[l], true);
  }
  EXPECT_EQ(c.encoder_self[1].kind, AttentionKind::EncoderSelf);
  EXPECT_EQ(c.encoder_self[1].queries, 5);
  expect_rows_are_distributions(c.encoder_self[0], false);
  // Control: the encoder is not causal, so some weight lies above its diagonal.
  double above = 0;
  for (int64_t k = 1; k < 5; ++k) above += c.encoder_self[0].at(0, 0, 0, k);
  EXPECT_GT(above, 0.0);
}

TEST(CrossAttention, IsTheCapturedCrossAttentionOfBosPlusTheOutput) {
  TempDir tmp("attn_run_attention");
  const ModelFolder f = folder_of(tmp, models::Arch::EncoderDecoder);
  const std::vector<int64_t> src = {4, 5, 6, 7}, out = {8, 9};
  const auto layers = cross_attention(f, src, out);
  const CapturedAttention c = capture_attention(f, pad_batch({src}, f.pad), pad_batch({{f.bos, 8, 9}}, f.pad));
  ASSERT_EQ(layers.size(), 3u);
  for (size_t l = 0; l < layers.size(); ++l) {
    ASSERT_EQ(layers[l].size(), 2u);
    for (int64_t h = 0; h < 2; ++h) {
      const HeadWeights& w = layers[l][static_cast<size_t>(h)];
      ASSERT_EQ(w.size(), 3u);  // queries: BOS, 8, 9
      for (int64_t q = 0; q < 3; ++q) {
        ASSERT_EQ(w[static_cast<size_t>(q)].size(), src.size());
        for (int64_t k = 0; k < 4; ++k)
          EXPECT_EQ(w[static_cast<size_t>(q)][static_cast<size_t>(k)], c.cross[l].at(0, h, q, k));
      }
    }
  }
}

TEST(CaptureSelfAttention, SingleStackModelsFillTheSelfStack) {
  TempDir tmp("attn_run_attention");
  const ModelFolder lm = folder_of(tmp, models::Arch::DecoderOnly);
  const CapturedAttention c = capture_self_attention(lm, pad_batch({{lm.bos, 4, 5, 6}}, lm.pad));
  ASSERT_EQ(c.self.size(), 3u);
  EXPECT_TRUE(c.cross.empty() && c.encoder_self.empty() && c.decoder_self.empty());
  for (const AttentionWeights& w : c.self) {
    EXPECT_EQ(w.kind, AttentionKind::Self);
    EXPECT_EQ(w.queries, 4);
    expect_rows_are_distributions(w, true);
  }
  const ModelFolder mlm = folder_of(tmp, models::Arch::EncoderOnly);
  const CapturedAttention e = capture_self_attention(mlm, pad_batch({{4, 5, 6}}, mlm.pad));
  ASSERT_EQ(e.self.size(), 2u);
  expect_rows_are_distributions(e.self[1], false);
  // An encoder-decoder folder has no single stack to capture.
  const ModelFolder ed = folder_of(tmp, models::Arch::EncoderDecoder);
  EXPECT_THROW(capture_self_attention(ed, pad_batch({{4, 5}}, ed.pad)), Error);
}

}  // namespace
}  // namespace attn::run
