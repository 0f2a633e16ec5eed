// attn/run/token_codec.h — how input text becomes token ids and ids become output text for a
// model folder: through its vocabulary (characters, words or SentencePiece pieces) or as
// space-separated decimal ids, with errors that name the input line; and padded batches of ids.
// Not here: reading lines (io/lines.h) or the TSV rule (io/tsv.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/core/tensor.h"
#include "attn/io/vocab.h"

namespace attn::run {

// How one side of an input line becomes token ids, and ids become output text.
// Text mode (vocab set): tokens as vocab.json's tokenization says (characters or whitespace-
// separated words, or SentencePiece pieces, whose output is detokenized text); for a character
// vocabulary without a space token, ASCII whitespace only separates characters, so "3 7 1" and
// "371" read the same. Ids mode: space-separated decimal
// ids in [0, vocab_size). PAD is never accepted in input (it would be silently masked).
struct TokenCodec {
  const io::Vocab* vocab = nullptr;  // null: ids mode
  int64_t vocab_size = 0;            // ids mode: the model's (source) vocabulary size
  int64_t pad = -1;
  std::string command;           // "translate", ...: the message prefix
  std::string source = "stdin";  // where lines come from, for messages
  // Text mode: when set, a token the vocabulary lacks reads as <unk> and is counted here
  // (as training's validation does) instead of being an error. A SentencePiece vocabulary always
  // reads characters it lacks as <unk>; they are counted here too.
  int64_t* unknown = nullptr;

  // The ids of `field`, the `what` side ("source", "target") of line `line_no`. An empty field,
  // an unknown token (unless `unknown` is set), a malformed or out-of-range id, or invalid UTF-8 is an attn::Error
  // "[command] stdin line N: ...".
  std::vector<int64_t> read(const std::string& field, int64_t line_no, const char* what) const;
  // Output text of generated ids: decoded through the vocabulary, or space-separated ids.
  std::string write(const std::vector<int64_t>& ids) const;
  // One label per id for figure axes (ids as numbers in ids mode).
  std::vector<std::string> labels(const std::vector<int64_t>& ids) const;
};

// Tokens of `text` under a vocabulary's tokenization, whitespace dropped for a character
// vocabulary that has no space token (see TokenCodec).
std::vector<std::string> split_tokens(const std::string& text, const io::Vocab& vocab);

// Space-separated integers of `text` (tokens of ASCII whitespace); a token that is not a
// non-negative decimal integer is an attn::Error naming it.
std::vector<int64_t> parse_ids(const std::string& text);

// Sequences padded with `pad` into I64 [B, max length]; every sequence must be non-empty.
Tensor pad_batch(const std::vector<std::vector<int64_t>>& seqs, int64_t pad);

}  // namespace attn::run
