// attn/io/vocab.h — a token <-> id table with the four special tokens, and the tokenizations
// the trainer and the decoders share: UTF-8 characters, whitespace-separated words, or a
// SentencePiece subword model (io/sentencepiece_vocab.h; the paper's shared BPE vocabulary, §5.1).
// Ids: <pad> = 0, <bos> = 1, <eos> = 2, <unk> = 3, then (only in vocabularies made for BERT's
// masked-LM objective) [MASK] = 4, then the symbols in insertion order (SentencePiece: its ids).
// Saved as JSON (vocab.json) so that a model folder carries its vocabulary; a SentencePiece
// vocabulary keeps its model next to it (sentencepiece.model), recorded by fingerprint.
// Not here: normalisation of characters or words (case, Unicode forms), or frequency cut-offs.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn/io/run_files.h"
#include "attn/io/sentencepiece_vocab.h"

namespace attn::io {

enum class Tokenization {
  Chars,       // every Unicode code point (UTF-8 sequence) is a token; spaces included
  Whitespace,  // tokens are the runs of characters between ASCII whitespace
  SentencePiece,  // subword pieces of a SentencePiece model (the Vocab holds the model)
};

// "char", "whitespace" and "sentencepiece"; parsing any other name is an error.
const char* tokenization_name(Tokenization t);
Tokenization parse_tokenization(const std::string& name);

// The code points of a UTF-8 string, one string each. Invalid UTF-8 (a stray continuation
// byte, a truncated sequence, an overlong form, a surrogate, a value past U+10FFFF) is an
// error naming the byte offset.
std::vector<std::string> utf8_chars(const std::string& text);
// Byte offset of the first invalid UTF-8 sequence, or -1 when the whole string is valid.
int64_t utf8_error_offset(const std::string& text);
// The tokens of `text` under `t` (no vocabulary involved). SentencePiece needs its model to
// split, so here the text is one token (none when it is blank): Vocab::encode splits it.
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

  // A SentencePiece vocabulary: the model's pieces with the model's ids (its specials are
  // <pad> <bos> <eos> <unk> at 0..3; [MASK] when the model reserved it at id 4).
  explicit Vocab(SentencePieceVocab model);
  // Vocab(SentencePieceVocab::load(path)): a model file or a folder holding one.
  static Vocab load_sentencepiece(const std::string& path);

  // The id of `token`, adding it (validated as above) when it is new. A SentencePiece
  // vocabulary is fixed: adding to it is an error.
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
  // The SentencePiece model (null unless tokenization() is SentencePiece).
  const SentencePieceVocab* sentencepiece() const { return sp_.get(); }
  bool contains(const std::string& token) const { return ids_.count(token) != 0; }

  // The id of `token`. An unknown token is an error naming it, or <unk> when map_unknown.
  int64_t id(const std::string& token, bool map_unknown = false) const;
  // The token of `id`; an id outside [0, size()) is an error.
  const std::string& token(int64_t id) const;

  // Ids of the tokens of `text` (no <bos>/<eos> added); unknown tokens as in id(). A
  // SentencePiece vocabulary always maps characters it lacks to <unk> (SentencePiece's rule),
  // whatever map_unknown says; count them as the ids equal to kUnk.
  std::vector<int64_t> encode(const std::string& text, bool map_unknown = false) const;
  std::vector<int64_t> encode_tokens(const std::vector<std::string>& tokens,
                                     bool map_unknown = false) const;
  // Text of `ids`: <pad> and <bos> are skipped, decoding stops at the first <eos>, <unk> is
  // written "<unk>" (and [MASK] "[MASK]"); characters are concatenated, words joined by single spaces,
  // SentencePiece pieces detokenized ("▁" is a space). An id out of range is an error.
  std::string decode(const std::vector<int64_t>& ids) const;
  // One label per id, specials included (attention-plot axes).
  std::vector<std::string> labels(const std::vector<int64_t>& ids) const;

  // {"format": "attn-vocab", "version": 1, "tokenization": "char", "tokens": ["<pad>", ...]},
  // plus "mask": true when [MASK] is a special token (absent otherwise). SentencePiece:
  // {"format", "version", "tokenization": "sentencepiece", "sentencepiece": {"file":
  // "sentencepiece.model", "fingerprint": "<16 hex digits>", "pieces": N}} (no token list).
  nlohmann::json to_json() const;
  // Parses to_json() output; any other shape (missing fields, specials not at ids 0-3 (and
  // [MASK] not at 4 with "mask": true), duplicates, invalid tokens) is an error. A
  // SentencePiece vocabulary needs its model: without one this is an error (see load).
  static Vocab from_json(const nlohmann::json& j);
  // A SentencePiece vocabulary's JSON with its model. A model whose fingerprint or piece count
  // differs from what the JSON records is "a vocabulary file from another model", an error
  // naming `json_name` and `model_name` (the two files).
  static Vocab from_json(const nlohmann::json& j, SentencePieceVocab model,
                         const std::string& json_name = kVocabFileName,
                         const std::string& model_name = kSentencePieceFileName);
  // Writes to_json() to `path` atomically, and a SentencePiece vocabulary's model next to it
  // (sentencepiece.model in the same folder); load reads both back (errors name the paths).
  void save(const std::string& path) const;
  static Vocab load(const std::string& path);
  // The files save() writes besides `path`'s JSON, as {name, bytes} (the SentencePiece model;
  // none for the other tokenizations): what a model folder must carry next to vocab.json.
  std::vector<std::pair<std::string, std::string>> companion_files() const;

  bool operator==(const Vocab& other) const {
    return tokenization_ == other.tokenization_ && has_mask_ == other.has_mask_ && tokens_ == other.tokens_ &&
           (sp_ == nullptr) == (other.sp_ == nullptr) && (sp_ == nullptr || *sp_ == *other.sp_);
  }

 private:
  void check_symbol(const std::string& token) const;
  Tokenization tokenization_;
  bool has_mask_ = false;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> ids_;
  std::shared_ptr<const SentencePieceVocab> sp_;  // SentencePiece only (shared by copies)
};

}  // namespace attn::io
