// attn/io/bpe.h — GPT-2's byte-level BPE tokenizer (Radford et al. 2019, "Language Models are
// Unsupervised Multitask Learners", §2.2): text is split by GPT-2's pre-tokenization pattern,
// each piece's UTF-8 bytes become printable characters (bytes_to_unicode), and adjacent
// symbols are merged by rank until no ranked pair remains. Reads OpenAI's encoder.json +
// vocab.bpe or Hugging Face's identical vocab.json + merges.txt. Not here: tokenizer.json,
// other pre-tokenizers (cl100k, SentencePiece), normalisation, or added tokens beyond <|endoftext|>.
//
// The pattern, implemented by hand over Unicode classes (io/unicode_categories.h):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Case-sensitive ("'S" is not split off). \s is the Unicode White_Space property, as in the
// Python `regex` module of OpenAI's encoder.py; JavaScript's \s differs on U+0085 (not space
// there) and U+FEFF (space there), the only two code points where ports disagree.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace attn::io {

// OpenAI's names for the two files. One of attn's own model folders that reads text with
// GPT-2's BPE (`attn quantize` of a GPT-2 folder) keeps them under these names, since its
// vocab.json would be taken for attn's own vocabulary file (io/vocab.h).
inline constexpr const char* kBpeEncoderFileName = "encoder.json";
inline constexpr const char* kBpeMergesFileName = "vocab.bpe";

// bytes_to_unicode: the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF map to the code
// point of the same value; the other 68 bytes, in increasing order, to U+0100, U+0101, ...
// (so ' ' -> U+0120 'Ġ' and '\n' -> U+010A 'Ċ').
char32_t byte_to_unicode(uint8_t byte);

// GPT-2's pre-tokenization of UTF-8 text: the pattern's matches, in order; they concatenate
// to `text`. Invalid UTF-8 is an attn::Error naming the byte offset.
std::vector<std::string> gpt2_pretokenize(std::string_view text);

// Bytes decoded as UTF-8 the way Python's bytes.decode("utf-8", errors="replace") does: each
// maximal ill-formed subsequence becomes one U+FFFD.
std::string utf8_replace_invalid(std::string_view bytes);

class BpeTokenizer {
 public:
  // GPT-2's end-of-text token, its BOS and EOS.
  static constexpr const char* kEndOfText = "<|endoftext|>";

  // Builds the tokenizer from the two files' contents. `vocab_json` is a JSON object token ->
  // id whose ids are exactly 0 .. N-1 and which holds the 256 byte tokens; `merges_text` holds
  // one "left right" pair per line in rank order, optionally after a "#version" line; each
  // pair's parts and their concatenation must be tokens. Errors name the texts by `vocab_name`
  // and `merges_name` (the file paths when loading files).
  static BpeTokenizer from_strings(const std::string& vocab_json, const std::string& merges_text,
                                   const std::string& vocab_name = "vocabulary",
                                   const std::string& merges_name = "merges");
  // Reads the two files (encoder.json / vocab.json and vocab.bpe / merges.txt).
  static BpeTokenizer load(const std::string& vocab_path, const std::string& merges_path);
  // Reads a folder's vocab.json (or encoder.json) and merges.txt (or vocab.bpe).
  static BpeTokenizer load_folder(const std::string& dir);
  // The two paths load_folder reads: {vocabulary, merges}. A folder without one of them is an
  // attn::Error naming the names it looked for.
  static std::pair<std::string, std::string> folder_files(const std::string& dir);

  // UTF-8 text -> token ids. With allow_special, each "<|endoftext|>" in the text becomes that
  // token's id; without it (the default, as OpenAI's encoder.py) it is ordinary text.
  // Invalid UTF-8 is an attn::Error.
  std::vector<int64_t> encode(std::string_view text, bool allow_special = false) const;
  // Token ids -> text; byte sequences that are not valid UTF-8 (a character cut between
  // tokens) become U+FFFD as in Hugging Face's decode. An id outside [0, vocab_size) is an
  // attn::Error naming it and its position.
  std::string decode(const std::vector<int64_t>& ids) const;
  // Token ids -> the raw bytes they stand for (decode without the UTF-8 repair).
  std::string decode_bytes(const std::vector<int64_t>& ids) const;

  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t num_merges() const { return static_cast<int64_t>(merges_.size()); }
  // The vocabulary string of `id` (byte-encoded, e.g. "Ġworld"); throws outside the vocabulary.
  const std::string& token(int64_t id) const;
  // The id of a vocabulary string, or -1.
  int64_t token_id(std::string_view token) const;
  // The id of <|endoftext|>, or -1 when the vocabulary has none.
  int64_t eos_id() const { return eos_id_; }

 private:
  struct Merge {
    int32_t rank;    // line order in the merges file, 0 first
    int32_t result;  // the id of the merged token
  };
  BpeTokenizer() = default;
  // One pre-token's bytes -> ids appended to `out`.
  void encode_piece(std::string_view piece, std::vector<int64_t>& out) const;
  // Plain text (no special tokens) -> ids appended to `out`.
  void encode_text(std::string_view text, std::vector<int64_t>& out) const;
  void check_id(int64_t id, size_t position) const;

  std::vector<std::string> tokens_;                  // id -> vocabulary string
  std::vector<std::string> token_bytes_;             // id -> the bytes it stands for
  std::unordered_map<std::string, int32_t> ids_;     // vocabulary string -> id
  std::array<int32_t, 256> byte_ids_{};              // byte -> id of its one-byte token
  std::unordered_map<uint64_t, Merge> merges_;       // (left id << 32 | right id) -> merge
  int64_t eos_id_ = -1;
};

}  // namespace attn::io
