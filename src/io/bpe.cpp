// GPT-2's byte-level BPE (Radford et al. 2019, §2.2): strict UTF-8, the pre-tokenization
// pattern written out as a scanner over code-point classes (no regex engine), the
// bytes_to_unicode map, loading and validating the vocabulary and merges, and the merge loop
// of OpenAI's encoder.py (lowest rank first, every occurrence of that pair at once). No
// per-word cache: encode is const and safe to call from several threads.
#include "attn/io/bpe.h"

#include <climits>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "unicode_categories.h"

namespace attn::io {

namespace {

constexpr const char* kOp = "bpe";
using unicode::CodeClass;

// ---- UTF-8 ----------------------------------------------------------------------------------

// One step of UTF-8 decoding at s[i]: a well-formed sequence (ok, its code point and length
// 1..4), or an ill-formed one (not ok, `len` = the length of its maximal subpart, >= 1, in the
// sense of Unicode §3.9 "U+FFFD substitution of maximal subparts", which Python follows).
struct Utf8Step {
  char32_t cp = 0;
  size_t len = 1;
  bool ok = false;
};

Utf8Step utf8_step(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {b0, 1, true};
  size_t need = 0;
  char32_t cp = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the next byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong 3-byte forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates U+D800..U+DFFF
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // no overlong 4-byte forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {0, 1, false};  // a continuation byte, C0/C1 (overlong) or F5..FF
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return {0, k, false};
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < lo || b > hi) return {0, k, false};
    lo = 0x80;
    hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, need + 1, true};
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string hex_byte(unsigned char b) {
  static const char* digits = "0123456789ABCDEF";
  return std::string("0x") + digits[b >> 4] + digits[b & 15];
}

// The code points of strictly valid UTF-8 `text`, and the byte offset of each (plus the end).
void decode_strict(std::string_view text, const char* what, std::vector<char32_t>& cps,
                   std::vector<size_t>& offsets) {
  cps.clear();
  offsets.clear();
  for (size_t i = 0; i < text.size();) {
    const Utf8Step step = utf8_step(text, i);
    if (!step.ok) {
      fail(kOp, what, " is not valid UTF-8: byte ", i, " (", hex_byte(static_cast<unsigned char>(text[i])),
           ") does not start a well-formed character");
    }
    cps.push_back(step.cp);
    offsets.push_back(i);
    i += step.len;
  }
  offsets.push_back(text.size());
}

// ---- bytes_to_unicode -----------------------------------------------------------------------

const std::array<char32_t, 256>& byte_table() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 0x100;  // the non-printable bytes, in increasing order, from U+0100
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

// The inverse map: code point -> byte, or -1. Every image lies below U+0100 + 68.
constexpr char32_t kByteCodeLimit = 0x100 + 68;

const std::array<int, kByteCodeLimit>& unicode_to_byte_table() {
  static const std::array<int, kByteCodeLimit> table = [] {
    std::array<int, kByteCodeLimit> t{};
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_table()[static_cast<size_t>(b)]] = b;
    return t;
  }();
  return table;
}

// A vocabulary string -> the bytes it stands for: each code point through the inverse map;
// a string with any other code point (an added token written as plain text) stands for its
// own UTF-8.
std::string token_to_bytes(const std::string& token) {
  std::string bytes;
  for (size_t i = 0; i < token.size();) {
    const Utf8Step step = utf8_step(token, i);
    if (!step.ok || step.cp >= kByteCodeLimit || unicode_to_byte_table()[step.cp] < 0) return token;
    bytes += static_cast<char>(unicode_to_byte_table()[step.cp]);
    i += step.len;
  }
  return bytes;
}

// At most about 60 bytes of `s` for an error message, cut before a UTF-8 continuation byte.
std::string shown(std::string_view s) {
  size_t n = 60;
  if (s.size() <= n) return std::string(s);
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n)) + "...";
}

std::string file_name_or(const std::string& dir, std::initializer_list<const char*> names, const char* what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const char* name : names) {
    const fs::path p = fs::path(dir) / name;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  std::string expected;
  for (const char* name : names) expected += (expected.empty() ? "" : " or ") + std::string(name);
  fail(kOp, "'", dir, "': no ", what, " file (expected ", expected, ")");
}

}  // namespace

// ---- public helpers -------------------------------------------------------------------------

char32_t byte_to_unicode(uint8_t byte) { return byte_table()[byte]; }

std::string utf8_replace_invalid(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const Utf8Step step = utf8_step(bytes, i);
    if (step.ok) out.append(bytes.substr(i, step.len));
    else append_utf8(out, 0xFFFD);
    i += step.len;
  }
  return out;
}

std::vector<std::string> gpt2_pretokenize(std::string_view text) {
  std::vector<char32_t> cps;
  std::vector<size_t> at;  // byte offset of each code point, then the end
  decode_strict(text, "the text", cps, at);
  const size_t n = cps.size();
  std::vector<CodeClass> cls(n);
  for (size_t i = 0; i < n; ++i) cls[i] = unicode::code_class(cps[i]);
  auto run_end = [&](size_t j, CodeClass k) {  // first index >= j whose class is not k
    while (j < n && cls[j] == k) ++j;
    return j;
  };

  std::vector<std::string> pieces;
  size_t i = 0;
  while (i < n) {
    size_t end = i;
    // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive)
    if (cps[i] == U'\'' && i + 1 < n) {
      const char32_t a = cps[i + 1], b = i + 2 < n ? cps[i + 2] : 0;
      if (a == U's' || a == U't' || a == U'm' || a == U'd') end = i + 2;
      else if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) end = i + 3;
    }
    if (end == i) {
      //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+ : an optional U+0020, then a run of one class
      // (a space followed by whitespace or the end falls through to the whitespace rules).
      const size_t start = cps[i] == U' ' ? i + 1 : i;
      if (start < n && cls[start] != CodeClass::Space) end = run_end(start, cls[start]);
    }
    if (end == i) {
      // \s+(?!\S) | \s+ : a whitespace run up to the end of the text; or, when a non-space
      // follows, the run without its last character (which then leads the next piece) unless
      // that would leave it empty.
      const size_t j = run_end(i, CodeClass::Space);
      end = (j == n || j - i == 1) ? j : j - 1;
    }
    pieces.emplace_back(text.substr(at[i], at[end] - at[i]));
    i = end;
  }
  return pieces;
}

// ---- loading --------------------------------------------------------------------------------

BpeTokenizer BpeTokenizer::from_strings(const std::string& vocab_json, const std::string& merges_text,
                                        const std::string& vocab_name, const std::string& merges_name) {
  using json = nlohmann::json;
  BpeTokenizer t;
  json j;
  try {
    j = json::parse(vocab_json);
  } catch (const json::exception& e) {
    fail(kOp, "'", vocab_name, "': not valid JSON: ", e.what());
  }
  ATTN_CHECK(j.is_object(), kOp, "'", vocab_name, "': the vocabulary must be a JSON object token -> id, got ",
             j.type_name());
  const size_t n = j.size();
  ATTN_CHECK(n < static_cast<size_t>(INT32_MAX), kOp, "'", vocab_name, "': ", n, " tokens is too many");
  t.tokens_.assign(n, std::string());
  std::vector<bool> seen(n, false);
  for (const auto& [token, value] : j.items()) {
    ATTN_CHECK(value.is_number_integer(), kOp, "'", vocab_name, "': token \"", shown(token),
               "\" has a non-integer id ", shown(value.dump()));
    const int64_t id = value.get<int64_t>();
    ATTN_CHECK(id >= 0 && id < static_cast<int64_t>(n), kOp, "'", vocab_name, "': token \"", shown(token),
               "\" has id ", id, " outside [0, ", n, ") (ids must number the ", n, " tokens from 0)");
    const auto slot = static_cast<size_t>(id);
    ATTN_CHECK(!seen[slot], kOp, "'", vocab_name, "': id ", id, " is given to both \"", shown(t.tokens_[slot]),
               "\" and \"", shown(token), "\"");
    ATTN_CHECK(!token.empty(), kOp, "'", vocab_name, "': the empty string is not a token (id ", id, ")");
    seen[slot] = true;
    t.tokens_[slot] = token;
    t.ids_.emplace(token, static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(s, byte_table()[static_cast<size_t>(b)]);
    auto it = t.ids_.find(s);
    ATTN_CHECK(it != t.ids_.end(), kOp, "'", vocab_name, "': no token for byte ",
               hex_byte(static_cast<unsigned char>(b)), " (\"", s, "\"); a byte-level vocabulary holds all 256");
    t.byte_ids_[static_cast<size_t>(b)] = it->second;
  }
  t.token_bytes_.reserve(n);
  for (const std::string& token : t.tokens_) t.token_bytes_.push_back(token_to_bytes(token));
  if (auto it = t.ids_.find(kEndOfText); it != t.ids_.end()) t.eos_id_ = it->second;

  // Merges: one "left right" pair per line, in rank order.
  std::string_view rest = merges_text;
  size_t line_no = 0;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1 && line.substr(0, 8) == "#version") continue;
    const size_t sp = line.find(' ');
    ATTN_CHECK(sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() &&
                   line.find(' ', sp + 1) == std::string_view::npos,
               kOp, "'", merges_name, "' line ", line_no, ": expected two tokens separated by one space, got \"",
               shown(line), "\"");
    const std::string left(line.substr(0, sp)), right(line.substr(sp + 1)), merged = left + right;
    int32_t ids[3];
    const std::string* parts[3] = {&left, &right, &merged};
    for (int k = 0; k < 3; ++k) {
      auto it = t.ids_.find(*parts[k]);
      ATTN_CHECK(it != t.ids_.end(), kOp, "'", merges_name, "' line ", line_no, ": \"", shown(*parts[k]),
                 "\" is not in the vocabulary '", vocab_name, "'");
      ids[k] = it->second;
    }
    const uint64_t key = (static_cast<uint64_t>(ids[0]) << 32) | static_cast<uint32_t>(ids[1]);
    ATTN_CHECK(t.merges_.size() < static_cast<size_t>(INT32_MAX), kOp, "'", merges_name, "': too many merges");
    const auto rank = static_cast<int32_t>(t.merges_.size());
    const bool inserted = t.merges_.emplace(key, Merge{rank, ids[2]}).second;
    ATTN_CHECK(inserted, kOp, "'", merges_name, "' line ", line_no, ": the merge \"", shown(line),
               "\" appears twice");
  }
  return t;
}

BpeTokenizer BpeTokenizer::load(const std::string& vocab_path, const std::string& merges_path) {
  const std::string vocab = read_file(vocab_path);
  const std::string merges = read_file(merges_path);
  return from_strings(vocab, merges, vocab_path, merges_path);
}

BpeTokenizer BpeTokenizer::load_folder(const std::string& dir) {
  std::error_code ec;
  ATTN_CHECK(std::filesystem::is_directory(dir, ec), kOp, "'", dir, "': not a folder");
  const auto [vocab, merges] = folder_files(dir);
  return load(vocab, merges);
}

std::pair<std::string, std::string> BpeTokenizer::folder_files(const std::string& dir) {
  return {file_name_or(dir, {"vocab.json", kBpeEncoderFileName}, "vocabulary"),
          file_name_or(dir, {"merges.txt", kBpeMergesFileName}, "merges")};
}

// ---- encoding and decoding ------------------------------------------------------------------

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int64_t>& out) const {
  std::vector<int32_t> word(piece.size());  // symbol ids, one per byte to begin with
  for (size_t i = 0; i < piece.size(); ++i) word[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
  while (word.size() > 1) {
    // The adjacent pair of lowest rank...
    const Merge* best = nullptr;
    uint64_t best_key = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const uint64_t key = (static_cast<uint64_t>(word[i]) << 32) | static_cast<uint32_t>(word[i + 1]);
      auto it = merges_.find(key);
      if (it != merges_.end() && (!best || it->second.rank < best->rank)) {
        best = &it->second;
        best_key = key;
      }
    }
    if (!best) break;
    // ...merged at every occurrence, left to right without overlap (encoder.py's bpe()).
    const auto left = static_cast<int32_t>(best_key >> 32), right = static_cast<int32_t>(best_key & 0xFFFFFFFFu);
    size_t w = 0;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
        word[w++] = best->result;
        i += 2;
      } else {
        word[w++] = word[i++];
      }
    }
    word.resize(w);
  }
  out.insert(out.end(), word.begin(), word.end());
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<int64_t>& out) const {
  for (const std::string& piece : gpt2_pretokenize(text)) encode_piece(piece, out);
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int64_t> out;
  if (!allow_special || eos_id_ < 0) {
    encode_text(text, out);
    return out;
  }
  std::vector<char32_t> cps;
  std::vector<size_t> at;
  decode_strict(text, "the text", cps, at);  // offsets in errors refer to the whole text
  const std::string_view special = kEndOfText;
  size_t from = 0;
  for (size_t hit = text.find(special); hit != std::string_view::npos; hit = text.find(special, from)) {
    encode_text(text.substr(from, hit - from), out);
    out.push_back(eos_id_);
    from = hit + special.size();
  }
  encode_text(text.substr(from), out);
  return out;
}

void BpeTokenizer::check_id(int64_t id, size_t position) const {
  ATTN_CHECK(id >= 0 && id < vocab_size(), kOp, "token id ", id, " at position ", position,
             " is outside the vocabulary [0, ", vocab_size(), ")");
}

std::string BpeTokenizer::decode_bytes(const std::vector<int64_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    check_id(ids[i], i);
    out += token_bytes_[static_cast<size_t>(ids[i])];
  }
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  return utf8_replace_invalid(decode_bytes(ids));
}

const std::string& BpeTokenizer::token(int64_t id) const {
  ATTN_CHECK(id >= 0 && id < vocab_size(), kOp, "token id ", id, " is outside the vocabulary [0, ", vocab_size(), ")");
  return tokens_[static_cast<size_t>(id)];
}

int64_t BpeTokenizer::token_id(std::string_view token) const {
  auto it = ids_.find(std::string(token));
  return it == ids_.end() ? -1 : it->second;
}

}  // namespace attn::io
