// io::split_lines against hand-written expectations: byte-order mark, CRLF, a last line
// without "\n", empty lines, and a "\r" that is not at a line's end (kept); io::LineReader, the
// same rules over a stream.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "attn/io/lines.h"

namespace attn::io {
namespace {

std::vector<std::pair<int64_t, std::string>> lines_of(const std::string& text) {
  std::vector<std::pair<int64_t, std::string>> out;
  for (const NumberedLine& l : split_lines(text)) out.emplace_back(l.number, std::string(l.text));
  return out;
}

using Lines = std::vector<std::pair<int64_t, std::string>>;

TEST(SplitLines, NumbersLinesAndDropsTheByteOrderMarkAndCarriageReturns) {
  EXPECT_EQ(lines_of("\xEF\xBB\xBF" "a\tb\r\nc\n"), (Lines{{1, "a\tb"}, {2, "c"}}));
  EXPECT_EQ(lines_of("x\ny"), (Lines{{1, "x"}, {2, "y"}}));  // no final newline
  EXPECT_EQ(lines_of("\n\n"), (Lines{{1, ""}, {2, ""}}));
  EXPECT_EQ(lines_of("a\rb\r\n"), (Lines{{1, "a\rb"}}));  // only the "\r" before "\n" goes
  EXPECT_TRUE(lines_of("").empty());
  EXPECT_TRUE(lines_of("\xEF\xBB\xBF").empty());
  // A byte-order mark later in the text is content, not a marker.
  EXPECT_EQ(lines_of("a\n\xEF\xBB\xBF" "b"), (Lines{{1, "a"}, {2, "\xEF\xBB\xBF" "b"}}));
}

TEST(LineReader, NumbersLinesAndDropsCarriageReturnsAndTheByteOrderMark) {
  std::istringstream in(
      "\xEF\xBB\xBF"
      "a\r\n\nb");
  LineReader r(in);
  std::string line;
  ASSERT_TRUE(r.next(line));
  EXPECT_EQ(line, "a");
  EXPECT_EQ(r.line_number(), 1);
  ASSERT_TRUE(r.next(line));
  EXPECT_EQ(line, "");
  ASSERT_TRUE(r.next(line));
  EXPECT_EQ(line, "b");
  EXPECT_EQ(r.line_number(), 3);
  EXPECT_FALSE(r.next(line));
}

// A stream holding only the byte-order mark has no line, as split_lines says of that text; with
// a "\n" after the mark it has one empty line (the control: the mark alone is what differs).
TEST(LineReader, AByteOrderMarkAloneIsNoLine) {
  for (const std::string text : {"\xEF\xBB\xBF", "\xEF\xBB\xBF\n", "", "\n"}) {
    std::istringstream in(text);
    LineReader r(in);
    std::string line;
    std::vector<std::string> got;
    while (r.next(line)) got.push_back(line);
    std::vector<std::string> want;
    for (const NumberedLine& l : split_lines(text)) want.emplace_back(l.text);
    EXPECT_EQ(got, want) << testing::PrintToString(text);
    EXPECT_EQ(got.size(), text.find('\n') == std::string::npos ? 0u : 1u) << testing::PrintToString(text);
  }
}

}  // namespace
}  // namespace attn::io
