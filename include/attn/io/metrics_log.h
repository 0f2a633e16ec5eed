// attn/io/metrics_log.h — the one reader of a run's metrics.jsonl (io/run_files.h): one JSON
// object per line, in file order. The rule for lines: a blank line (spaces and tabs only) is
// skipped, anything else must be a JSON object, or it is an attn::Error naming the file and line.
// Not here: what the keys mean (train/trainer.h's EpochMetrics writes them) or figures of them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace attn::io {

// A metrics file as read: whether it exists, and its records in file order (keys in file order).
struct MetricsLog {
  bool present = false;
  std::vector<nlohmann::ordered_json> records;
};

// Reads `path` under the rule above; a missing file is `present == false` with no records. An
// unreadable file or a bad line is an attn::Error "[op] 'path' line N: ...".
MetricsLog read_metrics_log(const std::string& path, const char* op);

}  // namespace attn::io
