// Vocabulary, UTF-8 splitting and the character / whitespace tokenizations.
// UTF-8 validation follows RFC 3629 (no overlong forms, no surrogates, nothing past
// U+10FFFF). Not here: subword tokenizers, which would live in attn/io (bpe.h).
#include "attn/train/vocab.h"

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"

namespace attn::train {

namespace {

constexpr const char* kSpecialTokens[Vocab::kNumSpecial] = {"<pad>", "<bos>", "<eos>", "<unk>"};

bool is_ascii_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is invalid.
size_t utf8_sequence_length(const std::string& s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;  // a continuation byte or 0xF8..0xFF where a sequence should start
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len]) return 0;                   // overlong
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;     // UTF-16 surrogate
  if (cp > 0x10FFFF) return 0;
  return len;
}

}  // namespace

const char* tokenization_name(Tokenization t) {
  return t == Tokenization::Chars ? "char" : "whitespace";
}

Tokenization parse_tokenization(const std::string& name) {
  if (name == "char") return Tokenization::Chars;
  if (name == "whitespace") return Tokenization::Whitespace;
  fail("tokenization", "unknown tokenization '", name, "' (expected char or whitespace)");
}

int64_t utf8_error_offset(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const size_t len = utf8_sequence_length(text, i);
    if (len == 0) return static_cast<int64_t>(i);
    i += len;
  }
  return -1;
}

std::vector<std::string> utf8_chars(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    const size_t len = utf8_sequence_length(text, i);
    ATTN_CHECK(len != 0, "utf8", "invalid UTF-8 at byte ", i, " (byte value ",
               static_cast<int>(static_cast<unsigned char>(text[i])), ")");
    out.push_back(text.substr(i, len));
    i += len;
  }
  return out;
}

std::vector<std::string> tokenize(const std::string& text, Tokenization t) {
  if (t == Tokenization::Chars) return utf8_chars(text);
  const int64_t bad = utf8_error_offset(text);
  ATTN_CHECK(bad < 0, "utf8", "invalid UTF-8 at byte ", bad);
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_ascii_space(static_cast<unsigned char>(text[i]))) ++i;
    const size_t start = i;
    while (i < text.size() && !is_ascii_space(static_cast<unsigned char>(text[i]))) ++i;
    if (i > start) out.push_back(text.substr(start, i - start));
  }
  return out;
}

Vocab::Vocab(Tokenization tokenization, bool with_mask) : tokenization_(tokenization), has_mask_(with_mask) {
  for (int64_t i = 0; i < kNumSpecial; ++i) {
    tokens_.emplace_back(kSpecialTokens[i]);
    ids_.emplace(kSpecialTokens[i], i);
  }
  if (with_mask) {
    tokens_.emplace_back(kMaskToken);
    ids_.emplace(kMaskToken, kMask);
  }
}

Vocab::Vocab(const std::vector<std::string>& symbols, Tokenization tokenization, bool with_mask)
    : Vocab(tokenization, with_mask) {
  for (const std::string& s : symbols) {
    ATTN_CHECK(!contains(s), "vocab", "symbol '", s, "' is listed twice or is a special token");
    add(s);
  }
}

void Vocab::check_symbol(const std::string& token) const {
  ATTN_CHECK(utf8_error_offset(token) < 0, "vocab", "token is not valid UTF-8 (invalid byte at ",
             utf8_error_offset(token), ")");
  if (tokenization_ == Tokenization::Chars) {
    ATTN_CHECK(utf8_chars(token).size() == 1, "vocab", "token '", token,
               "' is not a single character (the vocabulary tokenizes by characters)");
  } else {
    ATTN_CHECK(!token.empty(), "vocab", "empty token");
    for (char c : token)
      ATTN_CHECK(!is_ascii_space(static_cast<unsigned char>(c)), "vocab", "token '", token,
                 "' contains whitespace (the vocabulary tokenizes by whitespace)");
  }
}

int64_t Vocab::add(const std::string& token) {
  auto it = ids_.find(token);
  if (it != ids_.end()) return it->second;
  check_symbol(token);
  const int64_t id = size();
  tokens_.push_back(token);
  ids_.emplace(token, id);
  return id;
}

int64_t Vocab::id(const std::string& token, bool map_unknown) const {
  auto it = ids_.find(token);
  if (it != ids_.end()) return it->second;
  ATTN_CHECK(map_unknown, "vocab", "unknown token '", token, "' (not among the ", size(),
             " tokens; map_unknown would map it to <unk>)");
  return kUnk;
}

const std::string& Vocab::token(int64_t id) const {
  ATTN_CHECK(id >= 0 && id < size(), "vocab", "id ", id, " out of range [0, ", size(), ")");
  return tokens_[static_cast<size_t>(id)];
}

std::vector<int64_t> Vocab::encode_tokens(const std::vector<std::string>& tokens, bool map_unknown) const {
  std::vector<int64_t> out;
  out.reserve(tokens.size());
  for (const std::string& t : tokens) out.push_back(id(t, map_unknown));
  return out;
}

std::vector<int64_t> Vocab::encode(const std::string& text, bool map_unknown) const {
  return encode_tokens(tokenize(text, tokenization_), map_unknown);
}

std::string Vocab::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  bool first = true;
  for (int64_t i : ids) {
    const std::string& t = token(i);
    if (i == kPad || i == kBos) continue;
    if (i == kEos) break;
    if (tokenization_ == Tokenization::Whitespace && !first) out += ' ';
    out += t;
    first = false;
  }
  return out;
}

std::vector<std::string> Vocab::labels(const std::vector<int64_t>& ids) const {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (int64_t i : ids) out.push_back(token(i));
  return out;
}

nlohmann::json Vocab::to_json() const {
  nlohmann::json j{{"format", "attn-vocab"},
                   {"version", 1},
                   {"tokenization", tokenization_name(tokenization_)},
                   {"tokens", tokens_}};
  if (has_mask_) j["mask"] = true;
  return j;
}

Vocab Vocab::from_json(const nlohmann::json& j) {
  const char* op = "vocab";
  ATTN_CHECK(j.is_object(), op, "vocabulary JSON must be an object");
  ATTN_CHECK(j.contains("format") && j["format"] == "attn-vocab", op,
             "missing or wrong \"format\" (expected \"attn-vocab\")");
  ATTN_CHECK(j.contains("version") && j["version"] == 1, op, "unsupported \"version\" (expected 1)");
  ATTN_CHECK(j.contains("tokenization") && j["tokenization"].is_string(), op,
             "missing \"tokenization\"");
  bool with_mask = false;
  if (j.contains("mask")) {
    ATTN_CHECK(j["mask"].is_boolean(), op, "\"mask\" must be true or false");
    with_mask = j["mask"].get<bool>();
  }
  Vocab v(parse_tokenization(j["tokenization"].get<std::string>()), with_mask);
  ATTN_CHECK(j.contains("tokens") && j["tokens"].is_array(), op, "missing \"tokens\" array");
  const auto& tokens = j["tokens"];
  ATTN_CHECK(static_cast<int64_t>(tokens.size()) >= v.num_special(), op, "\"tokens\" has ", tokens.size(),
             " entries, fewer than the ", v.num_special(), " special tokens");
  for (size_t i = 0; i < tokens.size(); ++i) {
    ATTN_CHECK(tokens[i].is_string(), op, "token ", i, " is not a string");
    const std::string t = tokens[i].get<std::string>();
    if (static_cast<int64_t>(i) < v.num_special()) {
      const char* want = static_cast<int64_t>(i) < kNumSpecial ? kSpecialTokens[i] : kMaskToken;
      ATTN_CHECK(t == want, op, "token ", i, " is '", t, "', expected '", want, "'");
      continue;
    }
    ATTN_CHECK(!v.contains(t), op, "token ", i, " ('", t, "') appears twice");
    v.add(t);
  }
  return v;
}

void Vocab::save(const std::string& path) const { io::write_file_atomic(path, to_json().dump(1) + "\n"); }

Vocab Vocab::load(const std::string& path) {
  const std::string text = io::read_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("vocab", "'", path, "' is not valid JSON: ", e.what());
  }
  try {
    return from_json(j);
  } catch (const Error& e) {
    fail("vocab", "'", path, "': ", e.what());
  }
}

}  // namespace attn::train
