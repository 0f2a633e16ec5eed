// serve/text.cpp — see attn/serve/text.h.
#include "attn/serve/text.h"

#include <algorithm>

#include "attn/core/error.h"

namespace attn::serve {

namespace {

constexpr const char* kCmd = "serve";

bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// Bytes a UTF-8 sequence with this lead byte has (0: not a lead byte of a valid sequence).
size_t sequence_length(unsigned char b) {
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

}  // namespace

size_t utf8_complete_prefix(const std::string& bytes) {
  // The last lead byte within the final 3 bytes, followed only by continuation bytes, and
  // announcing more bytes than there are: a character that the next token may complete. A
  // lead byte ends any ill-formed sequence before it, so the text before it decodes the same
  // whatever follows.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const unsigned char b = static_cast<unsigned char>(bytes[n - back]);
    if (is_continuation(b)) continue;
    const size_t need = sequence_length(b);
    return need > back ? n - back : n;
  }
  return n;
}

int64_t utf8_length(const std::string& text) {
  int64_t n = 0;
  for (unsigned char b : text)
    if (!is_continuation(b)) ++n;
  return n;
}

size_t stop_holdback(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& stop : stops) {
    // Tails of length k < |stop| that equal the stop's first k bytes; the longest counts.
    for (size_t k = std::min(stop.size() - (stop.empty() ? 0 : 1), text.size()); k > hold; --k)
      if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
  }
  return hold;
}

TextCodec::TextCodec(const run::ModelFolder& folder, const io::BpeTokenizer* bpe) : bpe_(bpe) {
  codec_.vocab = bpe || !folder.vocab ? nullptr : &*folder.vocab;
  codec_.vocab_size = std::max(folder.src_vocab_size, folder.tgt_vocab_size);
  codec_.pad = folder.pad;
  codec_.command = kCmd;
  codec_.source = "the prompt";
  vocab_size_ = bpe ? std::min(bpe->vocab_size(), folder.tgt_vocab_size) : codec_.vocab_size;
  eos_ = folder.eos;
}

std::vector<int64_t> TextCodec::encode(const std::string& text) const {
  if (!bpe_) return codec_.read(text, 0, "prompt");
  std::vector<int64_t> ids = bpe_->encode(text);
  ATTN_CHECK(!ids.empty(), kCmd, "the prompt is empty");
  return ids;
}

std::string TextCodec::decode_bytes(const std::vector<int64_t>& ids) const {
  if (!bpe_) return codec_.write(ids);
  // GPT-2's <|endoftext|> ends a text as <eos> does for our vocabularies.
  std::vector<int64_t> kept;
  for (int64_t id : ids) {
    if (id == eos_) break;
    kept.push_back(id);
  }
  return bpe_->decode_bytes(kept);
}

std::string TextCodec::decode(const std::vector<int64_t>& ids) const {
  return io::utf8_replace_invalid(decode_bytes(ids));
}

std::string TextCodec::piece(int64_t id) const {
  if (bpe_) return bpe_->decode_bytes({id});
  if (!codec_.vocab) return std::to_string(id);
  return codec_.vocab->token(id);
}

bool TextCodec::joins_prompt() const {
  if (bpe_) return false;  // byte-level: the continuation's bytes follow the prompt's as they are
  if (!codec_.vocab) return true;  // ids mode: space-separated ids
  return codec_.vocab->tokenization() != io::Tokenization::Chars;
}

ChoiceText::ChoiceText(Decoder decode, std::vector<std::string> stops)
    : decode_(std::move(decode)), stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

std::string ChoiceText::add(int64_t token) {
  if (stopped_ || finished_) return {};
  offsets_.push_back(utf8_length(full_));
  ids_.push_back(token);
  return advance(false);
}

std::string ChoiceText::finish(const std::vector<int64_t>& tokens) {
  if (stopped_ || finished_) return {};
  finished_ = true;
  if (tokens != ids_) {
    // Beam search sends no tokens before its result; a stream that missed tokens is replaced.
    ids_.clear();
    offsets_.clear();
    full_.clear();
    for (int64_t t : tokens) {
      offsets_.push_back(utf8_length(full_));
      ids_.push_back(t);
      full_ = io::utf8_replace_invalid(decode_(ids_));
    }
  }
  return advance(true);
}

std::string ChoiceText::advance(bool final) {
  const std::string bytes = decode_(ids_);
  full_ = io::utf8_replace_invalid(bytes);
  // What the text is now: without a character the next token may still complete.
  std::string text = final ? full_ : io::utf8_replace_invalid(bytes.substr(0, utf8_complete_prefix(bytes)));
  size_t cut = std::string::npos;
  for (const std::string& stop : stops_) cut = std::min(cut, text.find(stop));
  if (cut != std::string::npos) {
    stopped_ = true;
    text.resize(cut);
  } else if (!final) {
    text.resize(text.size() - stop_holdback(text, stops_));
  }
  // A decoding that no longer extends what was sent (it cannot be taken back) sends nothing.
  if (text.size() < sent_.size() || text.compare(0, sent_.size(), sent_) != 0) return {};
  std::string delta = text.substr(sent_.size());
  sent_ = std::move(text);
  return delta;
}

}  // namespace attn::serve
