// run/attention: the captured weights come back typed by stack and layer with their shapes,
// every row is a distribution, a masked decoder never looks ahead, and cross_attention's
// [layer][head][query][key] tables are exactly the capture's cross-attention weights.
#include "attn/run/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// The steps' chain recomputed here by brute force from the steps' own Q, K and V, and the
// softmax step compared with the weights of an independent capture of the same pass.
void expect_steps_chain(const AttentionSteps& s, const AttentionWeights& model_weights, int64_t head) {
  const int64_t T = s.queries, S = s.keys, Dh = s.head_dim;
  ASSERT_EQ(s.q.size(), static_cast<size_t>(T * Dh));
  ASSERT_EQ(s.k.size(), static_cast<size_t>(S * Dh));
  ASSERT_EQ(s.weights.size(), static_cast<size_t>(T * S));
  for (int64_t i = 0; i < T; ++i) {
    std::vector<double> e(static_cast<size_t>(S));
    double top = -1e300, sum = 0;
    for (int64_t j = 0; j < S; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < Dh; ++d) dot += s.q[static_cast<size_t>(i * Dh + d)] * s.k[static_cast<size_t>(j * Dh + d)];
      const size_t ij = static_cast<size_t>(i * S + j);
      EXPECT_NEAR(s.scores[ij], dot, 1e-12);
      EXPECT_NEAR(s.scaled[ij], dot / std::sqrt(static_cast<double>(Dh)), 1e-12);
      const bool masked = s.causal && j > i;
      EXPECT_EQ(s.mask[ij], masked ? 1.0 : 0.0);
      if (!masked) top = std::max(top, s.scaled[ij]);
    }
    for (int64_t j = 0; j < S; ++j) {
      const size_t ij = static_cast<size_t>(i * S + j);
      e[static_cast<size_t>(j)] = s.mask[ij] != 0 ? 0.0 : std::exp(s.scaled[ij] - top);
      sum += e[static_cast<size_t>(j)];
    }
    for (int64_t j = 0; j < S; ++j) {
      const size_t ij = static_cast<size_t>(i * S + j);
      EXPECT_NEAR(s.weights[ij], e[static_cast<size_t>(j)] / sum, 1e-12);
      if (s.mask[ij] != 0) {
        EXPECT_EQ(s.weights[ij], 0.0);
      }
      EXPECT_NEAR(s.weights[ij], model_weights.at(0, head, i, j), 1e-12) << "the model's weights, " << i << ", " << j;
    }
    for (int64_t d = 0; d < Dh; ++d) {
      double o = 0;
      for (int64_t j = 0; j < S; ++j)
        o += s.weights[static_cast<size_t>(i * S + j)] * s.v[static_cast<size_t>(j * Dh + d)];
      EXPECT_NEAR(s.out[static_cast<size_t>(i * Dh + d)], o, 1e-12);
    }
  }
  EXPECT_LT(s.max_weight_diff, 1e-12);
}

// The largest difference between the steps' weights and head h of the model's weights.
double max_diff(const AttentionSteps& s, const AttentionWeights& w, int64_t h) {
  double m = 0;
  for (int64_t i = 0; i < s.queries; ++i)
    for (int64_t j = 0; j < s.keys; ++j)
      m = std::max(m, std::fabs(s.weights[static_cast<size_t>(i * s.keys + j)] - w.at(0, h, i, j)));
  return m;
}

TEST(AttentionSteps, EncoderDecoderStepsAreTheEncodersFirstLayerHead) {
  TempDir tmp("attn_run_attention");
  const ModelFolder f = folder_of(tmp, models::Arch::EncoderDecoder);
  const std::vector<int64_t> src = {4, 5, 6, 7, 8, 9};
  const CapturedAttention c = capture_attention(f, pad_batch({src}, f.pad), pad_batch({{f.bos}}, f.pad));
  for (int64_t head : {0, 1}) {
    const AttentionSteps s = attention_steps(f, src, head);
    EXPECT_EQ(s.kind, AttentionKind::EncoderSelf);
    EXPECT_EQ(s.layer, 0);
    EXPECT_EQ(s.head, head);
    EXPECT_EQ(s.queries, 6);
    EXPECT_EQ(s.keys, 6);
    EXPECT_EQ(s.head_dim, 4);
    EXPECT_FALSE(s.causal);
    expect_steps_chain(s, c.encoder_self[0], head);
    // Control: the other head's weights, or the second layer's, are not these.
    EXPECT_GT(max_diff(s, c.encoder_self[0], 1 - head), 1e-3);
    EXPECT_GT(max_diff(s, c.encoder_self[1], head), 1e-3);
  }
  EXPECT_THROW(attention_steps(f, src, 2), Error);   // the model has two heads
  EXPECT_THROW(attention_steps(f, src, -1), Error);
  EXPECT_THROW(attention_steps(f, {}, 0), Error);
}

TEST(AttentionSteps, DecoderOnlyStepsAreCausalAndTakeQueriesAfterRope) {
  TempDir tmp("attn_run_attention");
  // RoPE rotates the queries and keys inside the attention: the steps must start from the
  // rotated ones to give the model's weights. Grouped-query attention: both heads read one K/V.
  models::ModelConfig c = tiny(models::Arch::DecoderOnly);
  c.positional = nn::PositionalKind::Rope;
  c.n_kv_heads = 1;
  const std::string dir = tmp.file("rope");
  models::save_model(dir, *models::make_model(c));
  const ModelFolder f = open_model_folder(dir, "test", false, models::Arch::DecoderOnly);
  const std::vector<int64_t> ids = {f.bos, 4, 5, 6, 7};
  const CapturedAttention cap = capture_self_attention(f, pad_batch({ids}, f.pad));
  for (int64_t head : {0, 1}) {
    const AttentionSteps s = attention_steps(f, ids, head);
    EXPECT_TRUE(s.causal);
    EXPECT_EQ(s.kind, AttentionKind::Self);
    expect_steps_chain(s, cap.self[0], head);
  }
  EXPECT_EQ(attention_steps(f, ids, 0).k, attention_steps(f, ids, 1).k);  // one K/V group
  EXPECT_NE(attention_steps(f, ids, 0).q, attention_steps(f, ids, 1).q);

  // An ALiBi model's scores carry a bias the steps do not show: refused.
  models::ModelConfig a = tiny(models::Arch::DecoderOnly);
  a.positional = nn::PositionalKind::Alibi;
  const std::string alibi = tmp.file("alibi");
  models::save_model(alibi, *models::make_model(a));
  EXPECT_THROW(attention_steps(open_model_folder(alibi, "test", false, models::Arch::DecoderOnly), ids, 0), Error);
}

TEST(AttentionSteps, EncoderOnlyStepsAreUnmasked) {
  TempDir tmp("attn_run_attention");
  const ModelFolder f = folder_of(tmp, models::Arch::EncoderOnly);
  const std::vector<int64_t> ids = {4, 5, 6, 7};
  const CapturedAttention cap = capture_self_attention(f, pad_batch({ids}, f.pad));
  const AttentionSteps s = attention_steps(f, ids, 1);
  EXPECT_FALSE(s.causal);
  expect_steps_chain(s, cap.self[0], 1);
  double above = 0;  // control: not causal
  for (int64_t j = 1; j < 4; ++j) above += s.weights[static_cast<size_t>(j)];
  EXPECT_GT(above, 0.0);
}

}  // namespace
}  // namespace attn::run
