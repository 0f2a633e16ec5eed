// io/lines.cpp — see attn/io/lines.h.
#include "attn/io/lines.h"

namespace attn::io {

std::vector<NumberedLine> split_lines(std::string_view text) {
  std::vector<NumberedLine> out;
  size_t pos = text.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;  // UTF-8 byte-order mark
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

}  // namespace attn::io
