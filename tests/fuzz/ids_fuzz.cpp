// tests/fuzz/ids_fuzz.cpp — `--ids` input lines and the line reading of the run commands
// (run/token_codec.h: parse_ids and TokenCodec::read, in ids mode and through character and
// word vocabularies). Input: the text of stdin, read line by line as the commands do.
// Properties: parse_ids accepts exactly lines of non-negative decimal integers, and its ids
// written back with single spaces parse to the same ids; TokenCodec::read gives ids in
// [0, vocabulary size) without <pad>, or an attn::Error naming the line.
#include <string>

#include "attn/io/lines.h"
#include "attn/io/vocab.h"
#include "attn/run/token_codec.h"
#include "fuzz_util.h"

using namespace attn;

namespace {

void check_read(const run::TokenCodec& codec, const std::string& line, int64_t line_no, int64_t size) {
  try {
    const std::vector<int64_t> ids = codec.read(line, line_no, "source");
    ATTN_FUZZ_ASSERT(!ids.empty());
    for (int64_t id : ids) ATTN_FUZZ_ASSERT(id >= 0 && id < size && id != codec.pad);
    (void)codec.write(ids);
    (void)codec.labels(ids);
  } catch (const Error& e) {
    ATTN_FUZZ_ASSERT(std::string(e.what()).find(" line " + std::to_string(line_no)) != std::string::npos);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const io::Vocab chars({"a", "b", " ", "\xC3\xA9", "7"}, io::Tokenization::Chars);
  static const io::Vocab words({"the", "cat", "<3"}, io::Tokenization::Whitespace, /*with_mask=*/true);
  const std::string text(reinterpret_cast<const char*>(data), size);
  run::TokenCodec ids_mode;
  ids_mode.vocab_size = 1000;
  ids_mode.pad = 0;
  ids_mode.command = "fuzz";
  run::TokenCodec char_mode = ids_mode;
  char_mode.vocab = &chars;
  char_mode.vocab_size = chars.size();
  run::TokenCodec word_mode = ids_mode;
  word_mode.vocab = &words;
  word_mode.vocab_size = words.size();
  int64_t unknown = 0;
  run::TokenCodec lenient = word_mode;
  lenient.unknown = &unknown;
  for (const io::NumberedLine& l : io::split_lines(text)) {
    const std::string line(l.text);
    try {
      const std::vector<int64_t> ids = run::parse_ids(line);
      std::string joined;
      for (int64_t id : ids) joined += (joined.empty() ? "" : " ") + std::to_string(id);
      ATTN_FUZZ_ASSERT(run::parse_ids(joined) == ids);
    } catch (const Error&) {
    }
    check_read(ids_mode, line, l.number, ids_mode.vocab_size);
    check_read(char_mode, line, l.number, chars.size());
    check_read(word_mode, line, l.number, words.size());
    check_read(lenient, line, l.number, words.size());
  }
  return 0;
}
