// tests/fuzz/sentencepiece_fuzz.cpp — the SentencePiece wrapper's loading path
// (io/sentencepiece_vocab.h): a model folder's sentencepiece.model, then vocab.json naming it
// (io/vocab.h, Vocab::load), then text through the model. Input: a text, a NUL byte, then the
// model's bytes (last, since a serialized protobuf holds NUL bytes of its own). A corrupted model or one with the wrong special tokens is
// an attn::Error; an accepted one encodes valid text to ids in range and decodes any ids.
#include <filesystem>

#include "attn/io/sentencepiece_vocab.h"
#include "attn/io/vocab.h"
#include "fuzz_util.h"

using namespace attn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = fuzz::split_parts(data, size, 2);
  const std::string& text = parts[0];
  const std::string dir = fuzz::scratch_dir() + "/sp";
  std::filesystem::create_directories(dir);
  const std::string model_path = fuzz::write_scratch("sp/sentencepiece.model", parts[1]);
  std::optional<io::SentencePieceVocab> loaded;
  try {
    loaded = io::SentencePieceVocab::load(dir);
  } catch (const Error&) {
    return 0;
  }
  const int64_t n = loaded->size();
  ATTN_FUZZ_ASSERT(n >= io::SentencePieceVocab::kNumSpecial);
  (void)loaded->has_mask();
  (void)loaded->fingerprint();
  try {
    const std::vector<int64_t> ids = loaded->encode(text);
    for (int64_t id : ids) ATTN_FUZZ_ASSERT(id >= 0 && id < n);
    (void)loaded->decode(ids);
    (void)loaded->labels(ids);
    (void)loaded->encode_pieces(text);
  } catch (const Error&) {
  }
  // Any ids in range decode (the bytes of the text as ids, folded into the vocabulary).
  std::vector<int64_t> some;
  for (unsigned char c : text) some.push_back(static_cast<int64_t>(c) % n);
  (void)loaded->decode(some);
  // The model as a vocabulary, written as a folder's vocab.json and read back through it.
  const io::Vocab vocab(std::move(*loaded));
  vocab.save(dir + "/vocab.json");
  const io::Vocab back = io::Vocab::load(dir + "/vocab.json");
  ATTN_FUZZ_ASSERT(back == vocab);
  try {
    (void)back.decode(back.encode(text));
  } catch (const Error&) {
  }
  return 0;
}
