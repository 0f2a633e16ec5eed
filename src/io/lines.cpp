// io/lines.cpp — see attn/io/lines.h.
#include "attn/io/lines.h"

namespace attn::io {

namespace {
constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";  // UTF-8's, dropped at the start
}  // namespace

std::vector<NumberedLine> split_lines(std::string_view text) {
  std::vector<NumberedLine> out;
  size_t pos = text.substr(0, 3) == kByteOrderMark ? 3 : 0;
  int64_t number = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out.push_back({++number, line});
    pos = end + 1;
  }
  return out;
}

bool LineReader::next(std::string& line) {
  if (!std::getline(in_, line)) return false;
  if (line_ == 0 && line.rfind(kByteOrderMark, 0) == 0) {
    line.erase(0, 3);
    // A stream of nothing but the mark holds no line, as split_lines says of such a text (found
    // by tests/fuzz/tsv_fuzz.cpp: it read one empty line here).
    if (line.empty() && in_.eof()) return false;
  }
  ++line_;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return true;
}

}  // namespace attn::io
