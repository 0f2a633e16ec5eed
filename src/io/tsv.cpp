// io/tsv.cpp — see attn/io/tsv.h. The checks run in one order (UTF-8, then the tab), so a
// line with two faults reports the same one wherever it is read.
#include "attn/io/tsv.h"

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/io/lines.h"
#include "attn/io/vocab.h"

namespace attn::io {

TsvFields split_tsv_line(std::string_view line, int64_t line_no, const char* op, const std::string& where) {
  const int64_t bad = utf8_error_offset(std::string(line));
  ATTN_CHECK(bad < 0, op, where, " line ", line_no, ": invalid UTF-8 at byte ", bad + 1, " of the line");
  const size_t tab = line.find('\t');
  ATTN_CHECK(tab != std::string_view::npos, op, where, " line ", line_no, ": no tab (expected source<TAB>target)");
  ATTN_CHECK(line.find('\t', tab + 1) == std::string_view::npos, op, where, " line ", line_no,
             ": more than one tab (expected source<TAB>target)");
  return {line.substr(0, tab), line.substr(tab + 1)};
}

TsvLines read_tsv_lines(const std::string& path, const char* op) {
  const std::string text = read_file(path);
  const std::string where = "'" + path + "'";
  TsvLines out;
  out.path = path;
  for (const NumberedLine& line : split_lines(text)) {
    if (line.text.empty()) {
      ++out.empty_lines;
      continue;
    }
    const TsvFields f = split_tsv_line(line.text, line.number, op, where);
    out.pairs.push_back({line.number, std::string(f.source), std::string(f.target)});
  }
  return out;
}

}  // namespace attn::io
