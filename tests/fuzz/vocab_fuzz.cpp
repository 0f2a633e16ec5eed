// tests/fuzz/vocab_fuzz.cpp — a model folder's vocab.json (io/vocab.h, Vocab::load) and the
// encoding of text through it. Input: the vocab.json text, a NUL byte, then a text to encode.
// Bad files and bad text are attn::Errors; an accepted vocabulary writes back to the same
// JSON, and with a character vocabulary decode(encode(text)) is the text when every character
// is known.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "attn/io/vocab.h"
#include "fuzz_util.h"

using namespace attn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = fuzz::split_parts(data, size, 2);
  const std::string path = fuzz::write_scratch("vocab.json", parts[0]);
  std::optional<io::Vocab> loaded;
  try {
    loaded = io::Vocab::load(path);
  } catch (const Error&) {
    return 0;
  }
  const io::Vocab& vocab = *loaded;
  ATTN_FUZZ_ASSERT(io::Vocab::from_json(vocab.to_json()) == vocab);
  for (int64_t id = 0; id < vocab.size(); ++id) ATTN_FUZZ_ASSERT(vocab.id(vocab.token(id)) == id);
  const std::string& text = parts[1];
  try {
    const std::vector<int64_t> ids = vocab.encode(text, /*map_unknown=*/true);
    for (int64_t id : ids) ATTN_FUZZ_ASSERT(id >= 0 && id < vocab.size());
    const std::string back = vocab.decode(ids);
    if (vocab.tokenization() == io::Tokenization::Chars &&
        std::find(ids.begin(), ids.end(), io::Vocab::kUnk) == ids.end())
      ATTN_FUZZ_ASSERT(back == text);
    (void)vocab.labels(ids);
  } catch (const Error&) {
  }
  try {
    (void)vocab.encode(text, /*map_unknown=*/false);
  } catch (const Error&) {
  }
  return 0;
}
