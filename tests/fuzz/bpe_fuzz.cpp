// tests/fuzz/bpe_fuzz.cpp — GPT-2's tokenizer files and its byte-level BPE (io/bpe.h): a
// folder's vocab.json and merges.txt (BpeTokenizer::load_folder), then a text through
// gpt2_pretokenize, encode and decode. Input: vocab.json, NUL, merges.txt, NUL, the text.
// Bad files and invalid UTF-8 are attn::Errors. Properties on accepted input: the pre-tokens
// concatenate to the text; every id is in the vocabulary; decode_bytes(encode(text)) is the
// text (every byte has a token and every merge is a concatenation), with and without the
// special token; utf8_replace_invalid always gives valid UTF-8.
#include <filesystem>

#include "attn/io/bpe.h"
#include "attn/io/vocab.h"
#include "fuzz_util.h"

using namespace attn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = fuzz::split_parts(data, size, 3);
  const std::string& text = parts[2];
  // Independent of the files: the pre-tokenizer and the UTF-8 repair.
  ATTN_FUZZ_ASSERT(io::utf8_error_offset(io::utf8_replace_invalid(text)) < 0);
  bool valid = false;
  try {
    std::string joined;
    for (const std::string& piece : io::gpt2_pretokenize(text)) {
      ATTN_FUZZ_ASSERT(!piece.empty());
      joined += piece;
    }
    ATTN_FUZZ_ASSERT(joined == text);
    valid = true;
  } catch (const Error&) {
  }
  const std::string dir = fuzz::scratch_dir() + "/bpe";
  std::filesystem::create_directories(dir);
  fuzz::write_scratch("bpe/vocab.json", parts[0]);
  fuzz::write_scratch("bpe/merges.txt", parts[1]);
  std::optional<io::BpeTokenizer> loaded;
  try {
    loaded = io::BpeTokenizer::load_folder(dir);
  } catch (const Error&) {
    return 0;
  }
  const io::BpeTokenizer& bpe = *loaded;
  ATTN_FUZZ_ASSERT(bpe.vocab_size() >= 256);
  for (bool special : {false, true}) {
    try {
      const std::vector<int64_t> ids = bpe.encode(text, special);
      ATTN_FUZZ_ASSERT(valid);  // encode refuses exactly what the pre-tokenizer refuses
      for (int64_t id : ids) ATTN_FUZZ_ASSERT(id >= 0 && id < bpe.vocab_size());
      ATTN_FUZZ_ASSERT(bpe.decode_bytes(ids) == text);
      ATTN_FUZZ_ASSERT(bpe.decode(ids) == text);
    } catch (const Error&) {
      ATTN_FUZZ_ASSERT(!valid);
    }
  }
  // Arbitrary ids: in range they decode (to valid UTF-8), out of range they are an error.
  std::vector<int64_t> ids;
  for (unsigned char c : text) ids.push_back(static_cast<int64_t>(c) * 257 % (bpe.vocab_size() + 3));
  try {
    ATTN_FUZZ_ASSERT(io::utf8_error_offset(bpe.decode(ids)) < 0);
  } catch (const Error&) {
  }
  return 0;
}
