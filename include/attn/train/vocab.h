// attn/train/vocab.h — a token <-> id table with the four special tokens, and the two
// simple tokenizations the training tasks need: UTF-8 characters, or whitespace-separated words.
// Ids: <pad> = 0, <bos> = 1, <eos> = 2, <unk> = 3, then (only in vocabularies made for BERT's
// masked-LM objective) [MASK] = 4, then the symbols in insertion order.
// Saved as JSON so that a model folder carries its vocabulary. Not here: subword (BPE)
// tokenization, normalisation (case, Unicode forms), or frequency cut-offs.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace attn::train {

enum class Tokenization {
  Chars,       // every Unicode code point (UTF-8 sequence) is a token; spaces included
  Whitespace,  // tokens are the runs of characters between ASCII whitespace
};

// "char" and "whitespace"; parsing any other name is an error.
const char* tokenization_name(Tokenization t);
Tokenization parse_tokenization(const std::string& name);

// The code points of a UTF-8 string, one string each. Invalid UTF-8 (a stray continuation
// byte, a truncated sequence, an overlong form, a surrogate, a value past U+10FFFF) is an
// error naming the byte offset.
std::vector<std::string> utf8_chars(const std::string& text);
// Byte offset of the first invalid UTF-8 sequence, or -1 when the whole string is valid.
int64_t utf8_error_offset(const std::string& text);
// The tokens of `text` under `t` (no vocabulary involved).
std::vector<std::string> tokenize(const std::string& text, Tokenization t);

class Vocab {
 public:
  static constexpr int64_t kPad = 0;
  static constexpr int64_t kBos = 1;
  static constexpr int64_t kEos = 2;
  static constexpr int64_t kUnk = 3;
  static constexpr int64_t kNumSpecial = 4;  // <pad> <bos> <eos> <unk>, in every vocabulary
  // The masked-LM token (encoder-only models): id 4 in a vocabulary made with_mask, right after
  // the four specials, so that symbols start at 5 there. Written "[MASK]" as in BERT.
  static constexpr int64_t kMask = 4;
  static constexpr const char* kMaskToken = "[MASK]";

  // Only the special tokens (and [MASK] when with_mask).
  Vocab() : Vocab(Tokenization::Chars) {}
  explicit Vocab(Tokenization tokenization, bool with_mask = false);
  // The special tokens, then `symbols` in order (ids 4, 5, ..., or 5, 6, ... with_mask). A
  // duplicate, a special token's name, or a symbol the tokenization cannot produce (not exactly
  // one character for Chars; empty or containing whitespace for Whitespace; invalid UTF-8) is an
  // error.
  Vocab(const std::vector<std::string>& symbols, Tokenization tokenization, bool with_mask = false);

  // The id of `token`, adding it (validated as above) when it is new.
  int64_t add(const std::string& token);

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  Tokenization tokenization() const { return tokenization_; }
  // Whether [MASK] is a special token here (id kMask), and its id (-1 when not).
  bool has_mask() const { return has_mask_; }
  int64_t mask_id() const { return has_mask_ ? kMask : -1; }
  // The number of special tokens (4, or 5 with [MASK]): the first symbol's id.
  int64_t num_special() const { return has_mask_ ? kNumSpecial + 1 : kNumSpecial; }
  bool is_special(int64_t id) const { return id >= 0 && id < num_special(); }
  const std::vector<std::string>& tokens() const { return tokens_; }
  bool contains(const std::string& token) const { return ids_.count(token) != 0; }

  // The id of `token`. An unknown token is an error naming it, or <unk> when map_unknown.
  int64_t id(const std::string& token, bool map_unknown = false) const;
  // The token of `id`; an id outside [0, size()) is an error.
  const std::string& token(int64_t id) const;

  // Ids of the tokens of `text` (no <bos>/<eos> added); unknown tokens as in id().
  std::vector<int64_t> encode(const std::string& text, bool map_unknown = false) const;
  std::vector<int64_t> encode_tokens(const std::vector<std::string>& tokens,
                                     bool map_unknown = false) const;
  // Text of `ids`: <pad> and <bos> are skipped, decoding stops at the first <eos>, <unk> is
  // written "<unk>" (and [MASK] "[MASK]"); characters are concatenated, words joined by single spaces. An id out
  // of range is an error.
  std::string decode(const std::vector<int64_t>& ids) const;
  // One label per id, specials included (attention-plot axes).
  std::vector<std::string> labels(const std::vector<int64_t>& ids) const;

  // {"format": "attn-vocab", "version": 1, "tokenization": "char", "tokens": ["<pad>", ...]},
  // plus "mask": true when [MASK] is a special token (absent otherwise).
  nlohmann::json to_json() const;
  // Parses to_json() output; any other shape (missing fields, specials not at ids 0-3 (and
  // [MASK] not at 4 with "mask": true), duplicates, invalid tokens) is an error.
  static Vocab from_json(const nlohmann::json& j);
  // Writes to_json() to `path` atomically; load reads it back (errors name the path).
  void save(const std::string& path) const;
  static Vocab load(const std::string& path);

  bool operator==(const Vocab& other) const {
    return tokenization_ == other.tokenization_ && has_mask_ == other.has_mask_ && tokens_ == other.tokens_;
  }

 private:
  void check_symbol(const std::string& token) const;
  Tokenization tokenization_;
  bool has_mask_ = false;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> ids_;
};

}  // namespace attn::train
