// io/metrics_log.cpp — see attn/io/metrics_log.h. Lines are split by io::LineReader, so line
// numbers and line endings follow the other line readers.
#include "attn/io/metrics_log.h"

#include <filesystem>
#include <fstream>

#include "attn/core/error.h"
#include "attn/io/lines.h"

namespace attn::io {

MetricsLog read_metrics_log(const std::string& path, const char* op) {
  MetricsLog log;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return log;
  log.present = true;
  std::ifstream in(path);
  ATTN_CHECK(in, op, "cannot read '", path, "'");
  LineReader reader(in);
  std::string line;
  while (reader.next(line)) {
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    nlohmann::ordered_json record;
    try {
      record = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail(op, "'", path, "' line ", reader.line_number(), ": not valid JSON (", e.what(), ")");
    }
    ATTN_CHECK(record.is_object(), op, "'", path, "' line ", reader.line_number(), ": expected a JSON object");
    log.records.push_back(std::move(record));
  }
  return log;
}

}  // namespace attn::io
