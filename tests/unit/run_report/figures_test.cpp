// run_report/figures: each figure of a run report from typed inputs — head means and single
// heads of captured attention, the causal mask, the PE curve dimensions, the metrics'
// conversion to curves, and the file names, sizes and captions the figures take from their
// inputs (the whole report's bytes are checked in run_report_test.cpp and tests/e2e).
#include "attn/run_report/figures.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace attn::run_report {
namespace {

// One layer's weights [1, heads, q, k] with w[h][i][j] = value(h, i, j).
run::AttentionWeights weights(run::AttentionKind kind, int64_t layer, int64_t heads, int64_t q, int64_t k) {
  run::AttentionWeights w;
  w.kind = kind;
  w.layer = layer;
  w.batch = 1;
  w.heads = heads;
  w.queries = q;
  w.keys = k;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < q; ++i)
      for (int64_t j = 0; j < k; ++j) w.values.push_back(static_cast<double>(h * 100 + i * 10 + j));
  return w;
}

std::vector<std::string> labels(int64_t n) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) out.push_back("t" + std::to_string(i));
  return out;
}

TEST(RunReportFigures, HeadMatrixIsOneHeadOrTheMeanOfHeads) {
  const run::AttentionWeights w = weights(run::AttentionKind::Cross, 0, 2, 3, 4);
  const report::Matrix h1 = head_matrix(w, 0, 1, 2, 3);  // the top-left 2 x 3 of head 1
  ASSERT_EQ(h1.rows, 2);
  ASSERT_EQ(h1.cols, 3);
  EXPECT_EQ(h1.values, (std::vector<double>{100, 101, 102, 110, 111, 112}));
  const report::Matrix mean = head_matrix(w, 0, -1, 1, 2);
  EXPECT_EQ(mean.values, (std::vector<double>{50, 51}));
}

TEST(RunReportFigures, CausalMaskIsOneAboveTheDiagonal) {
  const report::Matrix m = causal_mask(3);
  EXPECT_EQ(m.values, (std::vector<double>{0, 1, 1, 0, 0, 1, 0, 0, 0}));
}

TEST(RunReportFigures, PeDimsAreTheSeedsWhereTheyExist) {
  EXPECT_EQ(pe_dims(64), (std::vector<int64_t>{0, 4, 16, 32}));
  EXPECT_EQ(pe_dims(20), (std::vector<int64_t>{0, 4, 16}));
  EXPECT_EQ(pe_dims(8), (std::vector<int64_t>{0, 1, 4, 6}));  // too few of the seed's: a spread
  EXPECT_EQ(pe_dims(2), (std::vector<int64_t>{0, 1}));
}

TEST(RunReportFigures, RunMetricsNumberEpochsAndDropColumnsNeverMeasured) {
  io::MetricsLog log;
  log.present = true;
  log.records.push_back({{"epoch", 3}, {"loss", 2.0}, {"val_loss", nullptr}});
  log.records.push_back({{"loss", 1.0}, {"note", "x"}});
  const RunMetrics m = run_metrics(log);
  EXPECT_TRUE(m.present);
  ASSERT_EQ(m.rows.size(), 2u);
  EXPECT_EQ(m.rows[0].size(), 3u);
  EXPECT_EQ(m.history.epoch, (std::vector<double>{3, 2}));  // a record without one: its position
  EXPECT_EQ(m.history.loss, (std::vector<double>{2, 1}));
  EXPECT_TRUE(m.history.val_loss.empty());  // null or absent throughout
  EXPECT_TRUE(m.history.val_token_acc.empty());
}

TEST(RunReportFigures, TrainingCurveCaptionSaysWhatTheAccuracyMeasures) {
  io::MetricsLog log;
  log.records.push_back({{"epoch", 1}, {"loss", 2.0}});
  const RunMetrics m = run_metrics(log);
  const Figure ed = training_curve_figure(m, models::Arch::EncoderDecoder);
  EXPECT_EQ(ed.file, "01_training_curve.svg");
  EXPECT_NE(ed.caption.find("greedy decoding"), std::string::npos) << ed.caption;
  EXPECT_NE(ed.caption.find("(1 epochs)"), std::string::npos) << ed.caption;
  EXPECT_NE(training_curve_figure(m, models::Arch::DecoderOnly).caption.find("next-token"), std::string::npos);
  EXPECT_NE(training_curve_figure(m, models::Arch::EncoderOnly).caption.find("masked positions"), std::string::npos);
  EXPECT_EQ(ed.svg.rfind("<svg", 0), 0u);
}

TEST(RunReportFigures, PositionalEncodingNamesTheModelsPositionsAndShownWidth) {
  const Figure narrow = positional_encoding_figure(16, nn::PositionalKind::Rope);
  EXPECT_EQ(narrow.file, "02_positional_encoding.svg");
  EXPECT_NE(narrow.caption.find("D = 16"), std::string::npos);
  EXPECT_NE(narrow.caption.find(nn::positional_kind_name(nn::PositionalKind::Rope)), std::string::npos);
  EXPECT_EQ(narrow.caption.find("the first"), std::string::npos);
  // Control: a width over 128 shows only the first 128 dimensions, and says so.
  EXPECT_NE(positional_encoding_figure(256, nn::PositionalKind::Sinusoidal).caption.find("the first 128 dimensions"),
            std::string::npos);
}

TEST(RunReportFigures, CausalMaskFiguresCutLongInputs) {
  const run::AttentionWeights dec = weights(run::AttentionKind::DecoderSelf, 0, 2, 20, 20);
  const Figure cut = decoder_causal_mask_figure(dec, labels(20));
  EXPECT_EQ(cut.file, "03_causal_mask.svg");
  EXPECT_NE(cut.caption.find("first 16 positions"), std::string::npos);
  EXPECT_NE(cut.caption.find("over its 2 heads"), std::string::npos);
  EXPECT_EQ(decoder_causal_mask_figure(dec, labels(5)).caption.find("first 16"), std::string::npos);  // control
  const Figure lm = lm_causal_mask_figure(dec, labels(4), 30);
  EXPECT_EQ(lm.file, "02_causal_mask.svg");
  EXPECT_NE(lm.caption.find("first 24 positions"), std::string::npos);
  EXPECT_EQ(lm_causal_mask_figure(dec, labels(4), 4).caption.find("first 24"), std::string::npos);  // control
}

TEST(RunReportFigures, AttentionFiguresTakeTheirLayersFromTheTypedCapture) {
  run::CapturedAttention cap;
  for (int64_t l = 0; l < 2; ++l) cap.encoder_self.push_back(weights(run::AttentionKind::EncoderSelf, l, 2, 3, 3));
  for (int64_t l = 0; l < 3; ++l) cap.cross.push_back(weights(run::AttentionKind::Cross, l, 2, 4, 3));
  const Figure ex = attention_example_figure(cap, labels(3), labels(4), "abc", "cba");
  EXPECT_EQ(ex.file, "04_attention_example.svg");
  EXPECT_NE(ex.svg.find("Encoder self-attention, layer 2"), std::string::npos);
  EXPECT_NE(ex.svg.find("Decoder cross-attention, layer 3"), std::string::npos);
  EXPECT_NE(ex.svg.find("(mean of 2 heads)"), std::string::npos);
  const Figure cross = cross_attention_grid_figure(cap.cross, labels(3), labels(4));
  EXPECT_EQ(cross.file, "05_cross_attention_grid.svg");
  EXPECT_NE(cross.svg.find("Layer 3"), std::string::npos);
  EXPECT_EQ(cross.svg.find("Layer 4"), std::string::npos);  // control: only the layers captured
  EXPECT_NE(cross.svg.find("Head 2"), std::string::npos);
  const Figure enc = encoder_self_attention_grid_figure(cap.encoder_self, labels(3));
  EXPECT_EQ(enc.file, "06_encoder_self_attention_grid.svg");
  EXPECT_EQ(enc.svg.find("Layer 3"), std::string::npos);
  const Figure self = bidirectional_self_attention_figure(cap.encoder_self, labels(3), "a [MASK] c");
  EXPECT_EQ(self.file, "02_self_attention.svg");
  EXPECT_NE(self.caption.find("a [MASK] c"), std::string::npos);
  EXPECT_EQ(self_attention_grid_figure(cap.encoder_self, labels(3)).file, "03_self_attention_grid.svg");
}

}  // namespace
}  // namespace attn::run_report
