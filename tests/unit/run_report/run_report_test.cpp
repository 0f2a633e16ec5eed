// run_report/run_report: the files write_run_report writes (figures, report.html), byte-identical on a
// second run, the optional training curve, the anti-diagonal scores, and its errors (no
// example to show, a malformed metrics.jsonl line). The end-to-end run on a trained model is
// in tests/e2e/infer_cli_test.cpp. The implementation comes from the attn_run_report library.
#include "attn/run_report/run_report.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "attn/models/checkpoint.h"
#include "attn/models/factory.h"
#include "attn/train/tasks.h"
#include "attn/train/train_config.h"
#include "unit/models/broken_checkpoints.h"
#include "support/error_of.h"

namespace attn::run_report {
namespace {

using models::test_util::TempDir;

// An untrained reverse-task model (6 symbols) with vocab.json and train_config.json.
std::string make_folder(const TempDir& tmp, bool with_task = true) {
  train::TrainConfig c;
  c.length = 4;
  c.symbols = 6;
  c.valid_size = 10;
  c.model.d_model = 8;
  c.model.n_heads = 2;
  c.model.n_encoder_layers = 2;
  c.model.n_decoder_layers = 3;
  c.model.d_ff = 16;
  c.model.src_vocab_size = c.model.tgt_vocab_size = 10;
  c.model.seed = 3;
  train::TaskConfig t;
  t.n_symbols = 6;
  models::ExtraFiles extra = {{"vocab.json", train::task_vocab(t).to_json().dump()}};
  if (with_task) extra.emplace_back("train_config.json", c.to_json().dump());
  const std::string dir = tmp.file(with_task ? "run" : "model");
  models::save_model(dir, *models::make_model(c.model), extra);
  return dir;
}

using attn::test::error_of;

TEST(RunReport, WritesEveryFigureAndTheReportWithTheSameBytesTwice) {
  TempDir tmp("attn_run_report");
  const std::string dir = make_folder(tmp);
  RunReportOptions o;
  o.src = "3 1 4 0";
  o.max_len = 6;
  o.out_dir = tmp.file("a");
  const RunReportResult a = write_run_report(dir, o);
  o.out_dir = tmp.file("b");
  const RunReportResult b = write_run_report(dir, o);
  ASSERT_EQ(a.figure_paths.size(), 8u);  // no metrics.jsonl: no training curve
  // Seed 001's figures 1, 4 and 3, last: this model's architecture, multi-head flow and the
  // scaled dot-product steps on its own Q, K, V.
  EXPECT_EQ(a.figure_paths[5], tmp.file("a") + "/figures/architecture.svg");
  EXPECT_EQ(a.figure_paths[6], tmp.file("a") + "/figures/multi_head.svg");
  EXPECT_NE(io::read_file(a.figure_paths[6]).find("T = 4, D = "), std::string::npos);  // the 4 source tokens
  EXPECT_EQ(a.figure_paths[7], tmp.file("a") + "/figures/attention_steps.svg");
  const std::string steps = io::read_file(a.figure_paths[7]);
  EXPECT_NE(steps.find("Encoder self-attention, layer 1, head 1"), std::string::npos);
  EXPECT_NE(steps.find("4. softmax"), std::string::npos);
  EXPECT_EQ(a.report_path, tmp.file("a") + "/report.html");
  for (size_t i = 0; i < a.figure_paths.size(); ++i)
    EXPECT_EQ(io::read_file(a.figure_paths[i]), io::read_file(b.figure_paths[i])) << a.figure_paths[i];
  const std::string html = io::read_file(a.report_path);
  EXPECT_EQ(html, io::read_file(b.report_path));
  EXPECT_NE(html.find("No metrics.jsonl"), std::string::npos);
  EXPECT_NE(html.find("Anti-diagonal score"), std::string::npos);
  EXPECT_EQ(a.example_source, "3140");
  EXPECT_TRUE(a.reversal_task);
  EXPECT_FALSE(std::filesystem::exists(dir + "/report.html"));  // out_dir was given
}

TEST(RunReport, AntiDiagonalScoresArePerDecoderLayerShares) {
  TempDir tmp("attn_run_report");
  const std::string dir = make_folder(tmp);
  RunReportOptions o;
  o.max_len = 4;
  o.out_dir = tmp.file("out");
  // The untrained model ends some outputs at once; the first source with an output is scored.
  RunReportResult r;
  for (const char* src : {"0 1 2 3", "5 4 3 2", "1 1 5 5", "2 0 4 1", "3 3 3 3", "4 2 0 5"}) {
    o.src = src;
    r = write_run_report(dir, o);
    if (!r.anti_diagonal_per_layer.empty()) break;
    EXPECT_TRUE(r.example_output.empty());  // no output tokens: nothing to score
  }
  ASSERT_FALSE(r.anti_diagonal_per_layer.empty()) << "no source gave a non-empty output";
  ASSERT_EQ(r.anti_diagonal_per_layer.size(), 3u);
  for (double s : r.anti_diagonal_per_layer) {
    EXPECT_GE(s, 0.0);
    EXPECT_LE(s, 1.0);
  }
}

TEST(RunReport, DrawsTheTrainingCurveFromMetricsJsonl) {
  TempDir tmp("attn_run_report");
  const std::string dir = make_folder(tmp);
  io::write_file_atomic(dir + "/metrics.jsonl",
                        "{\"epoch\": 1, \"loss\": 2.0, \"val_token_acc\": 0.5}\n\n{\"epoch\": 2, \"loss\": 1.0, "
                        "\"val_token_acc\": null}\n");
  RunReportOptions o;
  o.max_len = 4;
  const RunReportResult r = write_run_report(dir, o);  // example: the run's first validation example
  ASSERT_EQ(r.figure_paths.size(), 9u);
  EXPECT_EQ(r.figure_paths[0], dir + "/figures/01_training_curve.svg");
  const std::string html = io::read_file(dir + "/report.html");
  EXPECT_NE(html.find("val_token_acc"), std::string::npos);
  EXPECT_NE(html.find("Sample translations"), std::string::npos);

  io::write_file_atomic(dir + "/metrics.jsonl", "{\"epoch\": 1}\n{\"epoch\": 2,\n");
  const std::string e = error_of([&] { write_run_report(dir, o); });
  EXPECT_NE(e.find("metrics.jsonl' line 2"), std::string::npos) << e;
}

TEST(RunReport, NeedsAnExampleWhenTheFolderRecordsNoTask) {
  TempDir tmp("attn_run_report");
  const std::string dir = make_folder(tmp, false);
  const std::string e = error_of([&] { write_run_report(dir, {}); });
  EXPECT_NE(e.find("--src"), std::string::npos) << e;
  RunReportOptions o;
  o.src = "12";
  o.max_len = 3;
  const RunReportResult r = write_run_report(dir, o);
  EXPECT_FALSE(r.reversal_task);
  EXPECT_FALSE(r.anti_diagonal_mean.has_value());
  // Bad --src: a token outside the vocabulary, or nothing.
  o.src = "1 9";
  EXPECT_NE(error_of([&] { write_run_report(dir, o); }).find("'9'"), std::string::npos);
  o.src = "";
  EXPECT_NE(error_of([&] { write_run_report(dir, o); }).find("empty"), std::string::npos);
}

}  // namespace
}  // namespace attn::run_report
