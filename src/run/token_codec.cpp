// run/token_codec.cpp — see attn/run/token_codec.h. Errors from the tokenizer or the id
// parser gain the input line they come from; a message never shows raw control characters.
#include "attn/run/token_codec.h"

#include <algorithm>
#include <charconv>

#include "attn/core/error.h"
#include "attn/io/run_files.h"

namespace attn::run {

namespace {

bool is_ascii_space(const std::string& s) {
  return s.size() == 1 && (s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r' || s[0] == '\v' || s[0] == '\f');
}

// A token as a message shows it: quoted, with control characters escaped.
std::string quoted(const std::string& token) {
  std::string out = "'";
  for (unsigned char ch : token) {
    if (ch < 0x20 || ch == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[ch >> 4];
      out += hex[ch & 15];
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "'";
}

}  // namespace

std::vector<std::string> split_tokens(const std::string& text, const io::Vocab& vocab) {
  std::vector<std::string> tokens = io::tokenize(text, vocab.tokenization());
  if (vocab.tokenization() == io::Tokenization::Chars && !vocab.contains(" ")) {
    std::erase_if(tokens, [](const std::string& t) { return is_ascii_space(t); });
  }
  return tokens;
}

std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  size_t i = 0;
  const auto space = [](char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
  };
  while (i < text.size()) {
    if (space(text[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && !space(text[j])) ++j;
    const std::string tok = text.substr(i, j - i);
    int64_t v = -1;
    const auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (ec != std::errc() || end != tok.data() + tok.size() || v < 0 || tok[0] == '+' || tok[0] == '-')
      fail("ids", quoted(tok), " is not a token id (a non-negative decimal integer)");
    ids.push_back(v);
    i = j;
  }
  return ids;
}

std::vector<int64_t> TokenCodec::read(const std::string& field, int64_t line_no, const char* what) const {
  const std::string where = line_no > 0 ? str_cat(source, " line ", line_no, ": ") : source + ": ";
  std::vector<int64_t> ids;
  try {
    if (vocab && vocab->sentencepiece()) {
      ids = vocab->encode(field);  // characters the model lacks read as <unk> (SentencePiece's rule)
      if (unknown) *unknown += std::count(ids.begin(), ids.end(), io::Vocab::kUnk);
    } else if (vocab) {
      const std::vector<std::string> tokens = split_tokens(field, *vocab);
      ids.reserve(tokens.size());
      for (const std::string& t : tokens) {
        if (!vocab->contains(t) && unknown) {
          ++*unknown;
          ids.push_back(io::Vocab::kUnk);
          continue;
        }
        if (!vocab->contains(t))
          fail(command.c_str(), where, "token ", quoted(t), " of the ", what, " is not in the model's vocabulary (",
               vocab->size(), " tokens in ", io::kVocabFileName, ")");
        ids.push_back(vocab->id(t));
      }
    } else {
      ids = parse_ids(field);
      for (int64_t id : ids)
        if (id >= vocab_size)
          fail(command.c_str(), where, "token id ", id, " of the ", what,
               " is out of range: the model's vocabulary has ", vocab_size, " ids (0..", vocab_size - 1, ")");
    }
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.find(where) != std::string::npos) throw;
    fail(command.c_str(), where, msg);  // tokenizer / id-parser errors gain the line
  }
  if (ids.empty()) fail(command.c_str(), where, "the ", what, " is empty (every line needs at least one token)");
  for (int64_t id : ids)
    if (id == pad)
      fail(command.c_str(), where, "the ", what, " holds the padding token (id ", pad, "), which the model ignores");
  return ids;
}

std::string TokenCodec::write(const std::vector<int64_t>& ids) const {
  if (vocab) return vocab->decode(ids);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  return out;
}

std::vector<std::string> TokenCodec::labels(const std::vector<int64_t>& ids) const {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (int64_t id : ids) {
    if (vocab && id >= 0 && id < vocab->size())
      out.push_back(vocab->token(id));
    else
      out.push_back(std::to_string(id));
  }
  return out;
}

Tensor pad_batch(const std::vector<std::vector<int64_t>>& seqs, int64_t pad) {
  ATTN_CHECK(!seqs.empty(), "pad_batch", "no sequences");
  size_t len = 0;
  for (const auto& s : seqs) {
    ATTN_CHECK(!s.empty(), "pad_batch", "an empty sequence");
    len = std::max(len, s.size());
  }
  std::vector<int64_t> values(seqs.size() * len, pad < 0 ? 0 : pad);
  for (size_t b = 0; b < seqs.size(); ++b) std::copy(seqs[b].begin(), seqs[b].end(), values.begin() + b * len);
  return Tensor::from_vector<int64_t>(values, {static_cast<int64_t>(seqs.size()), static_cast<int64_t>(len)});
}

}  // namespace attn::run
