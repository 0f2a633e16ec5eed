// Vocabulary, UTF-8 splitting, the character / whitespace tokenizations, and the SentencePiece
// kind, which delegates splitting and detokenizing to SentencePieceVocab (§5.1's shared
// subword vocabulary). UTF-8 validation follows RFC 3629 (no overlong forms, no surrogates,
// nothing past U+10FFFF). Not here: the subword algorithms themselves (attn/io).
#include "attn/io/vocab.h"

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"

#include <filesystem>

namespace attn::io {

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

// j[key] when j is an object holding a string there, else "".
std::string string_field(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

}  // namespace

const char* tokenization_name(Tokenization t) {
  switch (t) {
    case Tokenization::Chars: return "char";
    case Tokenization::Whitespace: return "whitespace";
    case Tokenization::SentencePiece: return "sentencepiece";
  }
  return "?";
}

Tokenization parse_tokenization(const std::string& name) {
  if (name == "char") return Tokenization::Chars;
  if (name == "whitespace") return Tokenization::Whitespace;
  if (name == "sentencepiece") return Tokenization::SentencePiece;
  fail("tokenization", "unknown tokenization '", name, "' (expected char, whitespace or sentencepiece)");
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
  if (t == Tokenization::SentencePiece) {  // the model splits it (Vocab::encode)
    for (char c : text)
      if (!is_ascii_space(static_cast<unsigned char>(c))) return {text};
    return out;
  }
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
  ATTN_CHECK(tokenization != Tokenization::SentencePiece, "vocab",
             "a SentencePiece vocabulary is made from its model (Vocab(SentencePieceVocab))");
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

Vocab::Vocab(SentencePieceVocab model)
    : tokenization_(Tokenization::SentencePiece),
      sp_(std::make_shared<const SentencePieceVocab>(std::move(model))) {
  has_mask_ = sp_->has_mask();
  tokens_.reserve(static_cast<size_t>(sp_->size()));
  for (int64_t i = 0; i < sp_->size(); ++i) {
    tokens_.push_back(sp_->token(i));
    ids_.emplace(tokens_.back(), i);
  }
}

Vocab Vocab::load_sentencepiece(const std::string& path) { return Vocab(SentencePieceVocab::load(path)); }

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
  ATTN_CHECK(sp_ == nullptr, "vocab", "cannot add '", token, "' to a SentencePiece vocabulary (its pieces are fixed)");
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
  if (sp_) return sp_->encode(text);
  return encode_tokens(tokenize(text, tokenization_), map_unknown);
}

std::string Vocab::decode(const std::vector<int64_t>& ids) const {
  if (sp_) return sp_->decode(ids);
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
  if (sp_) {
    nlohmann::json j{{"format", "attn-vocab"},
                     {"version", 1},
                     {"tokenization", tokenization_name(tokenization_)},
                     {"sentencepiece",
                      {{"file", kSentencePieceFileName}, {"fingerprint", sp_->fingerprint()}, {"pieces", size()}}}};
    if (has_mask_) j["mask"] = true;
    return j;
  }
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
  const Tokenization tokenization = parse_tokenization(j["tokenization"].get<std::string>());
  ATTN_CHECK(tokenization != Tokenization::SentencePiece, op, "a SentencePiece vocabulary needs its model file (",
             kSentencePieceFileName, " next to the JSON; Vocab::load reads both)");
  Vocab v(tokenization, with_mask);
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

Vocab Vocab::from_json(const nlohmann::json& j, SentencePieceVocab model, const std::string& json_name,
                       const std::string& model_name) {
  const char* op = "vocab";
  ATTN_CHECK(j.is_object() && string_field(j, "format") == "attn-vocab" && j.contains("version") && j["version"] == 1,
             op, json_name, " is not an attn vocabulary (\"format\": \"attn-vocab\", \"version\": 1)");
  ATTN_CHECK(string_field(j, "tokenization") == "sentencepiece", op, json_name,
             " is not a SentencePiece vocabulary (\"tokenization\" is not \"sentencepiece\")");
  ATTN_CHECK(j.contains("sentencepiece") && j["sentencepiece"].is_object(), op, json_name,
             " has no \"sentencepiece\" object (fingerprint and pieces of its model)");
  const nlohmann::json& s = j["sentencepiece"];
  ATTN_CHECK(s.contains("fingerprint") && s["fingerprint"].is_string() && s.contains("pieces") &&
                 s["pieces"].is_number_integer(),
             op, json_name, ": \"sentencepiece\" needs a string \"fingerprint\" and an integer \"pieces\"");
  const std::string want = s["fingerprint"].get<std::string>();
  const int64_t want_pieces = s["pieces"].get<int64_t>();
  ATTN_CHECK(model.fingerprint() == want && model.size() == want_pieces, op, model_name,
             " is a vocabulary file from another model: its fingerprint ", model.fingerprint(), " (", model.size(),
             " pieces) differs from the ", want, " (", want_pieces, " pieces) that ", json_name, " records");
  Vocab v(std::move(model));
  const bool want_mask = j.contains("mask") && j["mask"].is_boolean() && j["mask"].get<bool>();
  ATTN_CHECK(v.has_mask() == want_mask, op, json_name, " says \"mask\": ", want_mask ? "true" : "false", " but ",
             model_name, (v.has_mask() ? " reserves " : " does not reserve "), kMaskToken);
  return v;
}

std::vector<std::pair<std::string, std::string>> Vocab::companion_files() const {
  if (!sp_) return {};
  return {{kSentencePieceFileName, sp_->serialized()}};
}

void Vocab::save(const std::string& path) const {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  for (const auto& [name, bytes] : companion_files()) write_file_atomic((dir / name).string(), bytes);
  write_file_atomic(path, to_json().dump(1) + "\n");
}

Vocab Vocab::load(const std::string& path) {
  const std::string text = read_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("vocab", "'", path, "' is not valid JSON: ", e.what());
  }
  if (string_field(j, "tokenization") == "sentencepiece") {
    const std::string model_path =
        (std::filesystem::path(path).parent_path() / kSentencePieceFileName).string();
    std::error_code ec;
    ATTN_CHECK(std::filesystem::is_regular_file(model_path, ec), "vocab", "'", path,
               "' is a SentencePiece vocabulary but '", model_path, "' is missing");
    return from_json(j, SentencePieceVocab::load(model_path), "'" + path + "'", "'" + model_path + "'");
  }
  try {
    return from_json(j);
  } catch (const Error& e) {
    fail("vocab", "'", path, "': ", e.what());
  }
}

}  // namespace attn::io
