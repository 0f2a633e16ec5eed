// io/tsv: the one rule for "source<TAB>target" lines — UTF-8 first, then exactly one tab — with
// messages naming the input and the line, and read_tsv_lines' handling of empty lines, CRLF and
// the byte-order mark. (train::read_tsv's tokenizing is tested in tests/unit/train/tsv_test.cpp.)
#include "attn/io/tsv.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "unit/models/broken_checkpoints.h"
#include "support/error_of.h"

namespace attn::io {
namespace {

using attn::test::error_of;

TEST(TsvLine, SplitsAtTheOnlyTab) {
  const TsvFields f = split_tsv_line("a b\tc", 3, "eval", "'x.tsv'");
  EXPECT_EQ(f.source, "a b");
  EXPECT_EQ(f.target, "c");
  // Either side may be empty here: whether that is allowed is the tokenizer's question.
  EXPECT_EQ(split_tsv_line("\t", 1, "eval", "stdin").source, "");
  EXPECT_EQ(split_tsv_line("\t", 1, "eval", "stdin").target, "");
}

TEST(TsvLine, BadLinesAreErrorsNamingTheInputAndTheLine) {
  EXPECT_EQ(error_of([] { split_tsv_line("abc", 7, "eval", "'x.tsv'"); }),
            "[eval] 'x.tsv' line 7: no tab (expected source<TAB>target)");
  EXPECT_EQ(error_of([] { split_tsv_line("a\tb\tc", 2, "score", "stdin"); }),
            "[score] stdin line 2: more than one tab (expected source<TAB>target)");
  // UTF-8 is checked before the tab, so a line with both faults reports the encoding.
  EXPECT_EQ(error_of([] { split_tsv_line("a\xC3\x28", 4, "tsv", "'y.tsv'"); }),
            "[tsv] 'y.tsv' line 4: invalid UTF-8 at byte 2 of the line");
  // Control: a good line throws nothing.
  EXPECT_EQ(error_of([] { split_tsv_line("a\tb", 1, "tsv", "'y.tsv'"); }), "(no error)");
}

TEST(TsvFile, SkipsAndCountsEmptyLinesAndKeepsLineNumbers) {
  models::test_util::TempDir tmp("attn_io_tsv");
  const std::string path = tmp.file("pairs.tsv");
  write_file_atomic(path, "\xEF\xBB\xBF" "a\tb\r\n\r\n c\td\n\n");
  const TsvLines lines = read_tsv_lines(path, "tsv");
  EXPECT_EQ(lines.path, path);
  ASSERT_EQ(lines.pairs.size(), 2u);
  EXPECT_EQ(lines.pairs[0].number, 1);
  EXPECT_EQ(lines.pairs[0].source, "a");
  EXPECT_EQ(lines.pairs[0].target, "b");
  EXPECT_EQ(lines.pairs[1].number, 3);
  EXPECT_EQ(lines.pairs[1].source, " c");  // only an empty line is skipped; spaces are content
  EXPECT_EQ(lines.empty_lines, 2);

  write_file_atomic(path, "a\tb\nno tab\n");
  EXPECT_EQ(error_of([&] { read_tsv_lines(path, "tsv"); }),
            "[tsv] '" + path + "' line 2: no tab (expected source<TAB>target)");
  EXPECT_NE(error_of([&] { read_tsv_lines(tmp.file("missing.tsv"), "tsv"); }).find(tmp.file("missing.tsv")),
            std::string::npos);
}

}  // namespace
}  // namespace attn::io
