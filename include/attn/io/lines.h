// attn/io/lines.h — the lines of a text file's contents as attn's file readers take them: a
// UTF-8 byte-order mark at the very start is dropped, "\n" ends a line and a "\r" just before
// it is dropped (Windows line endings), and a last line without "\n" still counts. Lines keep
// their 1-based numbers for error messages; split_lines cuts a file's text, LineReader reads a
// stream (stdin) line by line under the same rules. Not here: UTF-8 validation or blank-line
// policy (each reader decides).
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

namespace attn::io {

struct NumberedLine {
  int64_t number = 0;     // 1-based
  std::string_view text;  // without "\n" and "\r"; a view into the text given to split_lines
};

// The lines of `text` (an empty text has none).
std::vector<NumberedLine> split_lines(std::string_view text);

// The lines of a stream with their 1-based numbers, under split_lines' rules: a byte-order mark
// at the start of line 1 and a "\r" before "\n" are dropped.
class LineReader {
 public:
  explicit LineReader(std::istream& in) : in_(in) {}
  // The next line into `line`; false at the end of the stream.
  bool next(std::string& line);
  // The number of the line next() returned last (0 before the first).
  int64_t line_number() const { return line_; }

 private:
  std::istream& in_;
  int64_t line_ = 0;
};

}  // namespace attn::io
