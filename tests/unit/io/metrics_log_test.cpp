// io/metrics_log: the one reader of metrics.jsonl — records in file order with their keys in
// file order, blank lines skipped, a missing file absent rather than an error, and a bad line
// an error naming the file and the line.
#include "attn/io/metrics_log.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "unit/models/broken_checkpoints.h"
#include "support/error_of.h"

namespace attn::io {
namespace {

using models::test_util::TempDir;

using attn::test::error_of;

TEST(MetricsLog, ReadsOneObjectPerLineAndSkipsBlankLines) {
  TempDir tmp("attn_metrics_log");
  const std::string path = tmp.file("metrics.jsonl");
  write_file_atomic(path, "{\"epoch\": 1, \"loss\": 2.5}\n \t\n\r\n{\"loss\": 1.0, \"epoch\": 2}\n");
  const MetricsLog log = read_metrics_log(path, "report");
  EXPECT_TRUE(log.present);
  ASSERT_EQ(log.records.size(), 2u);
  EXPECT_EQ(log.records[0]["epoch"], 1);
  EXPECT_EQ(log.records[1]["loss"], 1.0);
  EXPECT_EQ(log.records[1].begin().key(), "loss");  // keys keep the file's order
}

TEST(MetricsLog, AMissingFileIsAbsentNotAnError) {
  TempDir tmp("attn_metrics_log");
  const MetricsLog log = read_metrics_log(tmp.file("none.jsonl"), "report");
  EXPECT_FALSE(log.present);
  EXPECT_TRUE(log.records.empty());
  // Control: an empty file is present, with no records.
  write_file_atomic(tmp.file("empty.jsonl"), "");
  EXPECT_TRUE(read_metrics_log(tmp.file("empty.jsonl"), "report").present);
}

TEST(MetricsLog, BadLinesAreErrorsNamingTheFileAndTheLine) {
  TempDir tmp("attn_metrics_log");
  const std::string path = tmp.file("metrics.jsonl");
  write_file_atomic(path, "{\"epoch\": 1}\n\n[1, 2]\n");
  EXPECT_EQ(error_of([&] { read_metrics_log(path, "report"); }),
            "[report] '" + path + "' line 3: expected a JSON object");
  write_file_atomic(path, "{\"epoch\": 1}\n{\"epoch\": 2,\n");
  const std::string e = error_of([&] { read_metrics_log(path, "eval"); });
  EXPECT_EQ(e.rfind("[eval] '" + path + "' line 2: not valid JSON (", 0), 0u) << e;
}

}  // namespace
}  // namespace attn::io
