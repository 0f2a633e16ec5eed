// tests/fuzz/tsv_fuzz.cpp — the line and TSV rules every parallel-corpus reader shares
// (io/lines.h, io/tsv.h): a file's bytes through read_tsv_lines, split_lines and LineReader.
// Properties: split_lines and LineReader (the stdin reader) give the same numbered lines;
// read_tsv_lines accepts a file exactly when every non-empty line passes split_tsv_line, and
// then gives those lines' two sides, rejoined by their tab, as the lines.
#include <sstream>

#include "attn/io/lines.h"
#include "attn/io/tsv.h"
#include "fuzz_util.h"

using namespace attn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<io::NumberedLine> lines = io::split_lines(text);
  std::istringstream in(text);
  io::LineReader reader(in);
  std::string line;
  size_t k = 0;
  while (reader.next(line)) {
    ATTN_FUZZ_ASSERT(k < lines.size());
    ATTN_FUZZ_ASSERT(lines[k].text == line);
    ATTN_FUZZ_ASSERT(lines[k].number == reader.line_number());
    ++k;
  }
  ATTN_FUZZ_ASSERT(k == lines.size());

  bool all_good = true;
  std::vector<io::TsvLine> expected;
  int64_t empty = 0;
  for (const io::NumberedLine& l : lines) {
    if (l.text.empty()) {
      ++empty;
      continue;
    }
    try {
      const io::TsvFields f = io::split_tsv_line(l.text, l.number, "fuzz", "input");
      ATTN_FUZZ_ASSERT(std::string(f.source) + "\t" + std::string(f.target) == l.text);
      expected.push_back({l.number, std::string(f.source), std::string(f.target)});
    } catch (const Error&) {
      all_good = false;
    }
  }
  const std::string path = fuzz::write_scratch("pairs.tsv", text);
  try {
    const io::TsvLines got = io::read_tsv_lines(path, "fuzz");
    ATTN_FUZZ_ASSERT(all_good);
    ATTN_FUZZ_ASSERT(got.empty_lines == empty);
    ATTN_FUZZ_ASSERT(got.pairs.size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      ATTN_FUZZ_ASSERT(got.pairs[i].number == expected[i].number);
      ATTN_FUZZ_ASSERT(got.pairs[i].source == expected[i].source && got.pairs[i].target == expected[i].target);
    }
  } catch (const Error&) {
    ATTN_FUZZ_ASSERT(!all_good);
  }
  return 0;
}
