// attn/io/lines.h — the lines of a text file's contents as attn's file readers take them: a
// UTF-8 byte-order mark at the very start is dropped, "\n" ends a line and a "\r" just before
// it is dropped (Windows line endings), and a last line without "\n" still counts. Lines keep
// their 1-based numbers for error messages. Not here: UTF-8 validation or blank-line policy
// (each reader decides), reading from a stream (cli's LineReader).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace attn::io {

struct NumberedLine {
  int64_t number = 0;     // 1-based
  std::string_view text;  // without "\n" and "\r"; a view into the text given to split_lines
};

// The lines of `text` (an empty text has none).
std::vector<NumberedLine> split_lines(std::string_view text);

}  // namespace attn::io
