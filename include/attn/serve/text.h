// attn/serve/text.h — text on the server's side of the engine: a model folder's tokenizer as
// one interface (run::TokenCodec over vocab.json, or GPT-2's byte-level BPE), and the assembly
// of one choice's generated tokens into the text pieces a stream sends. Streamed pieces
// concatenate to exactly the non-streamed text: bytes of an incomplete UTF-8 sequence and any
// tail that could start a stop string are held back, a stop string cuts the text before it, and
// subword text is decoded from the whole generated id list each time (a new token may change
// how the previous ones read), the new suffix being what is sent.
// Not here: HTTP, JSON, the engine.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "attn/io/bpe.h"
#include "attn/run/model_folder.h"
#include "attn/run/token_codec.h"

namespace attn::serve {

// The byte offset where a trailing UTF-8 sequence that is still incomplete starts (a lead byte
// followed by fewer continuation bytes than it announces), or bytes.size() when there is none.
size_t utf8_complete_prefix(const std::string& bytes);
// Unicode code points in valid UTF-8 text (continuation bytes not counted).
int64_t utf8_length(const std::string& text);
// The length of the longest tail of `text` that is a proper prefix of one of `stops` (text that
// could still become a stop string when more is generated).
size_t stop_holdback(const std::string& text, const std::vector<std::string>& stops);

// A served model's text <-> token ids.
class TextCodec {
 public:
  // Through the folder's vocab.json (ids mode without one: text is space-separated ids), or
  // through `bpe` when set (a GPT-2 folder). `bpe` must outlive the codec.
  TextCodec(const run::ModelFolder& folder, const io::BpeTokenizer* bpe);

  // The ids of a text; an empty text, an unknown token or invalid UTF-8 is an attn::Error.
  std::vector<int64_t> encode(const std::string& text) const;
  // The text of ids as raw bytes (BPE tokens may end inside a UTF-8 character; vocabularies
  // skip <pad>/<bos> and stop at <eos> as io::Vocab::decode does).
  std::string decode_bytes(const std::vector<int64_t>& ids) const;
  // decode_bytes with invalid UTF-8 replaced by U+FFFD (always valid UTF-8).
  std::string decode(const std::vector<int64_t>& ids) const;
  // One token as the vocabulary writes it (raw bytes: a BPE piece may be part of a character).
  std::string piece(int64_t id) const;
  int64_t vocab_size() const { return vocab_size_; }
  bool byte_level() const { return bpe_ != nullptr; }
  // Whether the text of a continuation depends on the prompt before it (word and SentencePiece
  // vocabularies put a space between them), so decoder-only text decodes prompt + continuation.
  bool joins_prompt() const;
  int64_t eos() const { return eos_; }

 private:
  run::TokenCodec codec_;
  const io::BpeTokenizer* bpe_ = nullptr;
  int64_t vocab_size_ = 0;
  int64_t eos_ = -1;
};

// One choice's text as it is generated. `decode` gives the raw bytes of a list of generated ids
// (the choice's whole text so far, before stop strings); `stops` are the request's stop strings.
class ChoiceText {
 public:
  using Decoder = std::function<std::string(const std::vector<int64_t>&)>;
  ChoiceText(Decoder decode, std::vector<std::string> stops);

  // A generated token: returns the text that became safe to send (often empty). After a stop
  // string completed, tokens are ignored (the engine may still be sending some).
  std::string add(int64_t token);
  // The choice ended with `tokens` (all its generated tokens, as the engine's Finish event has
  // them): returns the rest of its text. A stop string found here still cuts the text.
  std::string finish(const std::vector<int64_t>& tokens);

  bool stopped() const { return stopped_; }      // a stop string completed
  const std::string& text() const { return sent_; }  // everything returned so far
  // The tokens the choice counts: all of them, or those up to the one that completed a stop.
  int64_t tokens_used() const { return static_cast<int64_t>(ids_.size()); }
  const std::vector<int64_t>& tokens() const { return ids_; }
  // Code point offset in the choice's full text at which token i's text starts.
  const std::vector<int64_t>& offsets() const { return offsets_; }

 private:
  std::string advance(bool final);

  Decoder decode_;
  std::vector<std::string> stops_;
  std::vector<int64_t> ids_;
  std::vector<int64_t> offsets_;
  std::string full_;  // the repaired text of ids_ (no hold-back, no stop cut)
  std::string sent_;
  bool stopped_ = false;
  bool finished_ = false;
};

}  // namespace attn::serve
