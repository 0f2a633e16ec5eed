// attn/io/tsv.h — the one rule for "source<TAB>target" lines, shared by every reader of a
// parallel corpus or of stdin pairs: a line must be valid UTF-8 and hold exactly one tab, and a
// bad line is an attn::Error "[op] <where> line N: ..." naming the file (or stdin) and the line.
// An empty line is no pair; whether it is skipped or refused is the caller's choice.
// Not here: tokenizing or checking the two sides (a vocabulary's job), line splitting (lines.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attn::io {

// The two sides of one "source<TAB>target" line (views into the line).
struct TsvFields {
  std::string_view source, target;
};

// Splits `line` (without its line ending) at its tab. Invalid UTF-8, no tab or more than one
// tab is an attn::Error "[op] <where> line <line_no>: ..."; `where` names the input ("'path'",
// "stdin").
TsvFields split_tsv_line(std::string_view line, int64_t line_no, const char* op, const std::string& where);

// One pair of a TSV file with its 1-based line number.
struct TsvLine {
  int64_t number = 0;
  std::string source, target;
};

// The pairs of a TSV file: lines as split_lines gives them (byte-order mark and "\r" dropped),
// empty lines skipped and counted, every other line through split_tsv_line (where = "'path'").
struct TsvLines {
  std::string path;
  std::vector<TsvLine> pairs;
  int64_t empty_lines = 0;
};
// An unreadable file is an attn::Error naming the path.
TsvLines read_tsv_lines(const std::string& path, const char* op);

}  // namespace attn::io
