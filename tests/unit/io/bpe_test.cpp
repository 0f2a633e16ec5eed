// GPT-2 byte-level BPE: the byte map, the pre-tokenization pattern (expected splits checked
// against Python's `regex` module running the original pattern), strict UTF-8 and its
// replacement decoding, the merge loop against a brute-force string implementation on random
// vocabularies, special tokens, and every loading error. The comparison with an independent
// encoder on GPT-2's real vocabulary is tests/npm/.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/core/rng.h"
#include "attn/io/atomic_file.h"
#include "attn/io/bpe.h"
#include "io/unicode_categories.h"

namespace attn::io {
namespace {

namespace fs = std::filesystem;
using Pieces = std::vector<std::string>;

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// The byte-level string of raw bytes: each byte through bytes_to_unicode.
std::string byte_level(const std::string& bytes) {
  std::string s;
  for (unsigned char b : bytes) s += utf8(byte_to_unicode(b));
  return s;
}

// A vocabulary JSON: the 256 byte tokens (id = byte value), then `extra` tokens in order.
std::string vocab_json(const std::vector<std::string>& extra) {
  nlohmann::json j = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) j[byte_level(std::string(1, static_cast<char>(b)))] = b;
  for (size_t i = 0; i < extra.size(); ++i) j[extra[i]] = 256 + static_cast<int64_t>(i);
  return j.dump();
}

// A small GPT-2-like tokenizer: "hello", " world" and a few pieces, plus <|endoftext|>.
BpeTokenizer small_tokenizer() {
  const std::string merges =
      "#version: 0.2\nh e\nl l\nhe ll\nhell o\n\xC4\xA0 w\no r\n\xC4\xA0w or\nl d\n\xC4\xA0wor ld\n";
  return BpeTokenizer::from_strings(
      vocab_json(
          {"he", "ll", "hell", "hello", "\xC4\xA0w", "or", "\xC4\xA0wor", "ld", "\xC4\xA0world", "<|endoftext|>"}),
      merges);
}

// ---- bytes_to_unicode and code-point classes ---------------------------------------------------

TEST(Bpe, ByteMapKeepsPrintableBytesAndShiftsTheOthersPastU0100) {
  EXPECT_EQ(byte_to_unicode('!'), U'!');
  EXPECT_EQ(byte_to_unicode('~'), U'~');
  EXPECT_EQ(byte_to_unicode(0xA1), U'\u00A1');
  EXPECT_EQ(byte_to_unicode(0xFF), U'\u00FF');
  EXPECT_EQ(byte_to_unicode(0x00), U'\u0100');
  EXPECT_EQ(byte_to_unicode('\n'), U'\u010A');  // 'Ċ'
  EXPECT_EQ(byte_to_unicode(' '), U'\u0120');   // 'Ġ'
  EXPECT_EQ(byte_to_unicode(0x7F), U'\u0121');
  EXPECT_EQ(byte_to_unicode(0xAD), U'\u0143');  // the 68th and last shifted byte
  std::set<char32_t> images;
  for (int b = 0; b < 256; ++b) images.insert(byte_to_unicode(static_cast<uint8_t>(b)));
  EXPECT_EQ(images.size(), 256u);
}

TEST(Bpe, CodePointClassesFollowWhiteSpaceLettersAndNumbers) {
  using unicode::CodeClass;
  using unicode::code_class;
  EXPECT_EQ(code_class(U'a'), CodeClass::Letter);
  EXPECT_EQ(code_class(U'\u00E9'), CodeClass::Letter);   // é
  EXPECT_EQ(code_class(U'\u65E5'), CodeClass::Letter);   // 日
  EXPECT_EQ(code_class(U'\u01C5'), CodeClass::Letter);   // Dž (Lt)
  EXPECT_EQ(code_class(U'\u02B0'), CodeClass::Letter);   // ʰ (Lm)
  EXPECT_EQ(code_class(U'7'), CodeClass::Number);
  EXPECT_EQ(code_class(U'\u00BD'), CodeClass::Number);   // ½ (No)
  EXPECT_EQ(code_class(U'\u2167'), CodeClass::Number);   // Ⅷ (Nl)
  EXPECT_EQ(code_class(U'\u0663'), CodeClass::Number);   // ٣ (Nd)
  EXPECT_EQ(code_class(U' '), CodeClass::Space);
  EXPECT_EQ(code_class(U'\t'), CodeClass::Space);
  EXPECT_EQ(code_class(U'\u0085'), CodeClass::Space);    // NEL is White_Space
  EXPECT_EQ(code_class(U'\u3000'), CodeClass::Space);
  EXPECT_EQ(code_class(U'\uFEFF'), CodeClass::Other);    // not White_Space
  EXPECT_EQ(code_class(U'\u200B'), CodeClass::Other);
  EXPECT_EQ(code_class(U'\u0301'), CodeClass::Other);    // a combining mark (Mn)
  EXPECT_EQ(code_class(U'_'), CodeClass::Other);
  EXPECT_EQ(code_class(U'\U0001F600'), CodeClass::Other);  // 😀
  EXPECT_EQ(code_class(U'\U0010FFFF'), CodeClass::Other);
  EXPECT_EQ(code_class(0x110000), CodeClass::Other);
}

// ---- pre-tokenization ------------------------------------------------------------------------

TEST(Bpe, PretokenizeSplitsContractionsCaseSensitively) {
  EXPECT_EQ(gpt2_pretokenize("it's I'll we've they're she'd I'm don't"),
            (Pieces{"it", "'s", " I", "'ll", " we", "'ve", " they", "'re", " she", "'d", " I", "'m", " don", "'t"}));
  EXPECT_EQ(gpt2_pretokenize("IT'S"), (Pieces{"IT", "'", "S"}));
  EXPECT_EQ(gpt2_pretokenize(" 's"), (Pieces{" '", "s"}));
  EXPECT_EQ(gpt2_pretokenize("'''"), (Pieces{"'''"}));
}

TEST(Bpe, PretokenizeLeavesTheLastSpaceOfARunToTheNextWord) {
  EXPECT_EQ(gpt2_pretokenize("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(gpt2_pretokenize("a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(gpt2_pretokenize("a   \n\nb"), (Pieces{"a", "   \n", "\n", "b"}));
  EXPECT_EQ(gpt2_pretokenize("\t\tx"), (Pieces{"\t", "\t", "x"}));
  EXPECT_EQ(gpt2_pretokenize("x  "), (Pieces{"x", "  "}));
  EXPECT_EQ(gpt2_pretokenize("  "), (Pieces{"  "}));
  EXPECT_EQ(gpt2_pretokenize(" x"), (Pieces{" x"}));
  EXPECT_EQ(gpt2_pretokenize(""), (Pieces{}));
}

TEST(Bpe, PretokenizeGroupsLettersNumbersAndOtherCharacters) {
  EXPECT_EQ(gpt2_pretokenize("abc123 456"), (Pieces{"abc", "123", " 456"}));
  EXPECT_EQ(gpt2_pretokenize("3.14"), (Pieces{"3", ".", "14"}));
  EXPECT_EQ(gpt2_pretokenize("!!! ?"), (Pieces{"!!!", " ?"}));
  EXPECT_EQ(gpt2_pretokenize("na\u00EFve \u65E5\u672C\u8A9E \U0001F600!"),
            (Pieces{"na\u00EFve", " \u65E5\u672C\u8A9E", " \U0001F600!"}));
  EXPECT_EQ(gpt2_pretokenize("a\u0085b"), (Pieces{"a", "\u0085", "b"}));  // NEL is whitespace
  EXPECT_EQ(gpt2_pretokenize("a\uFEFFb"), (Pieces{"a", "\uFEFF", "b"}));  // BOM is not
}

TEST(Bpe, PretokenizePiecesConcatenateToTheText) {
  const std::vector<std::string> texts = {"  leading\tand trailing \n", "x' 's'S 'll'", "\u00A0\u00A0a\u3000 1 2",
                                          "emoji \U0001F468\u200D\U0001F469 and flags \U0001F1EB\U0001F1F7"};
  for (const std::string& t : texts) {
    std::string joined;
    for (const std::string& p : gpt2_pretokenize(t)) {
      EXPECT_FALSE(p.empty());
      joined += p;
    }
    EXPECT_EQ(joined, t);
  }
}

TEST(Bpe, InvalidUtf8IsAnError) {
  const std::vector<std::string> bad = {"\xFF", "ab\xC3", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x80",
                                        "\xE2\x82"};
  const BpeTokenizer t = small_tokenizer();
  for (const std::string& s : bad) {
    EXPECT_THROW(gpt2_pretokenize(s), Error) << s;
    EXPECT_THROW(t.encode(s), Error) << s;
    EXPECT_THROW(t.encode(s, /*allow_special=*/true), Error) << s;
  }
  try {
    t.encode("ok \xFF");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte 3 (0xFF)"), std::string::npos) << e.what();
  }
}

TEST(Bpe, ReplacementDecodingSubstitutesMaximalSubparts) {
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  EXPECT_EQ(utf8_replace_invalid("a\xE2\x82"), "a" + r);
  EXPECT_EQ(utf8_replace_invalid("\xE2\x82" "A"), r + "A");
  EXPECT_EQ(utf8_replace_invalid("\xFF\xFE"), r + r);
  EXPECT_EQ(utf8_replace_invalid("\xED\xA0\x80"), r + r + r);
  EXPECT_EQ(utf8_replace_invalid("\xF4\x90\x80\x80"), r + r + r + r);
  EXPECT_EQ(utf8_replace_invalid("\xC0\xAF"), r + r);
  EXPECT_EQ(utf8_replace_invalid("\xF0\x9F\x98"), r);
  EXPECT_EQ(utf8_replace_invalid("caf\xC3\xA9 \xF0\x9F\x98\x80"), "caf\xC3\xA9 \xF0\x9F\x98\x80");
}

// ---- encoding and decoding -------------------------------------------------------------------

TEST(Bpe, EncodeMergesByRankIntoWholeWords) {
  const BpeTokenizer t = small_tokenizer();
  EXPECT_EQ(t.vocab_size(), 266);
  EXPECT_EQ(t.num_merges(), 9);
  EXPECT_EQ(t.eos_id(), 265);
  EXPECT_EQ(t.encode("hello world"), (std::vector<int64_t>{259, 264}));
  EXPECT_EQ(t.encode("hello"), (std::vector<int64_t>{259}));
  EXPECT_EQ(t.encode("hel"), (std::vector<int64_t>{256, 'l'}));  // "he" then "l"
  EXPECT_EQ(t.token(264), "\xC4\xA0world");
  EXPECT_EQ(t.token_id("\xC4\xA0world"), 264);
  EXPECT_EQ(t.token_id("absent"), -1);
  EXPECT_EQ(t.encode(""), (std::vector<int64_t>{}));
}

TEST(Bpe, LowerRankWinsAndEveryOccurrenceOfThePairMerges) {
  // "b c" before "a b": "abc" -> a | bc; in the other order -> ab | c.
  const std::string v = vocab_json({"ab", "bc", "aa"});
  const BpeTokenizer bc_first = BpeTokenizer::from_strings(v, "b c\na b\n");
  const BpeTokenizer ab_first = BpeTokenizer::from_strings(v, "a b\nb c\n");
  EXPECT_EQ(bc_first.encode("abc"), (std::vector<int64_t>{'a', 257}));
  EXPECT_EQ(ab_first.encode("abc"), (std::vector<int64_t>{256, 'c'}));
  // "a a" merges left to right without overlap: aaa -> aa | a, aaaa -> aa | aa.
  const BpeTokenizer aa = BpeTokenizer::from_strings(v, "a a\n");
  EXPECT_EQ(aa.encode("aaa"), (std::vector<int64_t>{258, 'a'}));
  EXPECT_EQ(aa.encode("aaaa"), (std::vector<int64_t>{258, 258}));
}

// The merge loop written the slow way: symbols as strings, the merge list scanned for the
// lowest-ranked adjacent pair, then every occurrence joined left to right.
using MergeList = std::vector<std::pair<std::string, std::string>>;

std::vector<std::string> brute_force_bpe(const std::string& piece, const MergeList& merges) {
  std::vector<std::string> word;
  for (unsigned char b : piece) word.push_back(byte_level(std::string(1, static_cast<char>(b))));
  for (;;) {
    size_t best = merges.size();
    for (size_t i = 0; i + 1 < word.size(); ++i)
      for (size_t r = 0; r < best; ++r)
        if (merges[r].first == word[i] && merges[r].second == word[i + 1]) best = r;
    if (best == merges.size()) break;
    std::vector<std::string> next;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == merges[best].first && word[i + 1] == merges[best].second) {
        next.push_back(word[i] + word[i + 1]);
        i += 2;
      } else {
        next.push_back(word[i++]);
      }
    }
    word = next;
  }
  return word;
}

TEST(Bpe, EncodeMatchesABruteForceMergeLoopOnRandomVocabularies) {
  Rng rng(7);
  const std::string alphabet = "abc d";
  for (int trial = 0; trial < 20; ++trial) {
    // Random merges over growing symbols, each new token made from two existing ones.
    std::vector<std::string> symbols;
    for (char ch : alphabet) symbols.push_back(byte_level(std::string(1, ch)));
    MergeList merges;
    std::vector<std::string> extra;
    std::set<std::string> known(symbols.begin(), symbols.end());
    std::set<std::pair<std::string, std::string>> used;
    while (merges.size() < 25) {
      const std::string& l = symbols[rng.next_u64() % symbols.size()];
      const std::string& r = symbols[rng.next_u64() % symbols.size()];
      if (!used.insert({l, r}).second) continue;
      merges.emplace_back(l, r);
      if (known.insert(l + r).second) {
        extra.push_back(l + r);
        symbols.push_back(l + r);
      }
    }
    std::string merges_text;
    for (const auto& [l, r] : merges) merges_text += l + " " + r + "\n";
    const BpeTokenizer t = BpeTokenizer::from_strings(vocab_json(extra), merges_text);
    for (int s = 0; s < 20; ++s) {
      std::string text;
      const size_t n = rng.next_u64() % 16;
      for (size_t i = 0; i < n; ++i) text += alphabet[rng.next_u64() % alphabet.size()];
      std::vector<int64_t> expected;
      for (const std::string& piece : gpt2_pretokenize(text))
        for (const std::string& sym : brute_force_bpe(piece, merges)) expected.push_back(t.token_id(sym));
      EXPECT_EQ(t.encode(text), expected) << "trial " << trial << " text '" << text << "'";
      EXPECT_EQ(t.decode(t.encode(text)), text);
    }
  }
}

TEST(Bpe, DecodeRoundTripsAndReplacesCutCharacters) {
  const BpeTokenizer t = small_tokenizer();
  const std::string text = "hello world!\n\tcaf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80  42's ";
  EXPECT_EQ(t.decode(t.encode(text)), text);
  EXPECT_EQ(t.decode_bytes(t.encode(text)), text);
  // "é" is two byte tokens; the first alone is a cut character.
  const std::vector<int64_t> half = {0xC3};
  EXPECT_EQ(t.decode_bytes(half), "\xC3");
  EXPECT_EQ(t.decode(half), "\xEF\xBF\xBD");
  EXPECT_EQ(t.decode({0xC3, 0xA9}), "\xC3\xA9");
}

TEST(Bpe, DecodeRejectsIdsOutsideTheVocabulary) {
  const BpeTokenizer t = small_tokenizer();
  EXPECT_THROW(t.decode({259, 266}), Error);
  EXPECT_THROW(t.decode({-1}), Error);
  EXPECT_THROW(t.decode_bytes({1LL << 40}), Error);
  EXPECT_THROW(t.token(266), Error);
  try {
    t.decode({1, 2, 999});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 999 at position 2"), std::string::npos) << e.what();
  }
}

TEST(Bpe, EndOfTextIsSpecialOnlyWhenAllowed) {
  const BpeTokenizer t = small_tokenizer();
  const std::vector<int64_t> plain = t.encode("hello<|endoftext|>world");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 265), 0);
  EXPECT_EQ(t.decode(plain), "hello<|endoftext|>world");
  const std::vector<int64_t> special = t.encode("hello<|endoftext|> world<|endoftext|>", /*allow_special=*/true);
  EXPECT_EQ(special, (std::vector<int64_t>{259, 265, 264, 265}));
  EXPECT_EQ(t.decode(special), "hello<|endoftext|> world<|endoftext|>");
}

// ---- loading ---------------------------------------------------------------------------------

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error (expected one mentioning \"" << part << "\")";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Bpe, MalformedVocabulariesAreErrors) {
  const std::string merges = "h e\n";
  expect_error([&] { BpeTokenizer::from_strings("{", merges); }, "not valid JSON");
  expect_error([&] { BpeTokenizer::from_strings("[1, 2]", merges); }, "JSON object");
  nlohmann::json j = nlohmann::json::parse(vocab_json({"he"}));
  auto with = [&](const std::string& token, const nlohmann::json& id) {
    nlohmann::json k = j;
    k[token] = id;
    return k.dump();
  };
  expect_error([&] { BpeTokenizer::from_strings(with("he", "256"), merges); }, "non-integer id");
  expect_error([&] { BpeTokenizer::from_strings(with("he", 300), merges); }, "outside [0, 257)");
  expect_error([&] { BpeTokenizer::from_strings(with("he", -1), merges); }, "outside");
  expect_error([&] { BpeTokenizer::from_strings(with("he", 5), merges); }, "is given to both");
  nlohmann::json no_space = j;
  no_space.erase(byte_level(" "));
  no_space["he"] = 32;
  expect_error([&] { BpeTokenizer::from_strings(no_space.dump(), merges); }, "no token for byte 0x20");
  nlohmann::json empty = nlohmann::json::parse(vocab_json({"he"}));
  empty[""] = 257;
  expect_error([&] { BpeTokenizer::from_strings(empty.dump(), merges); }, "empty string");
}

TEST(Bpe, MalformedMergesAreErrorsNamingTheLine) {
  const std::string v = vocab_json({"he", "ll"});
  expect_error([&] { BpeTokenizer::from_strings(v, "h e\nl l l\n"); }, "line 2");
  expect_error([&] { BpeTokenizer::from_strings(v, "he\n"); }, "two tokens");
  expect_error([&] { BpeTokenizer::from_strings(v, "h  e\n"); }, "two tokens");
  expect_error([&] { BpeTokenizer::from_strings(v, "h e\n\nl l\n"); }, "line 2");
  expect_error([&] { BpeTokenizer::from_strings(v, "h x\n"); }, "\"hx\" is not in the vocabulary");
  expect_error([&] { BpeTokenizer::from_strings(v, "he llo\n"); }, "\"llo\" is not in the vocabulary");
  expect_error([&] { BpeTokenizer::from_strings(v, "h e\nl l\nh e\n"); }, "appears twice");
  // Accepted: a #version line, CRLF line ends, no final newline.
  EXPECT_EQ(BpeTokenizer::from_strings(v, "#version: 0.2\r\nh e\r\nl l").num_merges(), 2);
  EXPECT_EQ(BpeTokenizer::from_strings(v, "").num_merges(), 0);
}

struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/attn_bpe_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
    path = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

TEST(Bpe, LoadsEitherFileNamingFromAFolder) {
  const std::string v = vocab_json({"he"});
  {
    TempDir d;
    write_file_atomic(d.file("vocab.json"), v);
    write_file_atomic(d.file("merges.txt"), "#version: 0.2\nh e\n");
    EXPECT_EQ(BpeTokenizer::load_folder(d.path).encode("he"), (std::vector<int64_t>{256}));
  }
  {
    TempDir d;
    write_file_atomic(d.file("encoder.json"), v);
    write_file_atomic(d.file("vocab.bpe"), "#version: 0.2\nh e\n");
    EXPECT_EQ(BpeTokenizer::load_folder(d.path).encode("he"), (std::vector<int64_t>{256}));
    EXPECT_EQ(BpeTokenizer::load(d.file("encoder.json"), d.file("vocab.bpe")).num_merges(), 1);
  }
}

TEST(Bpe, MissingFilesAreErrorsNamingWhatWasExpected) {
  TempDir d;
  expect_error([&] { BpeTokenizer::load_folder(d.file("absent")); }, "not a folder");
  expect_error([&] { BpeTokenizer::load_folder(d.path); }, "expected vocab.json or encoder.json");
  write_file_atomic(d.file("vocab.json"), vocab_json({}));
  expect_error([&] { BpeTokenizer::load_folder(d.path); }, "expected merges.txt or vocab.bpe");
  EXPECT_THROW(BpeTokenizer::load(d.file("vocab.json"), d.file("nope.txt")), Error);
  write_file_atomic(d.file("merges.txt"), "a b c\n");
  expect_error([&] { BpeTokenizer::load_folder(d.path); }, "merges.txt' line 1");
}

}  // namespace
}  // namespace attn::io
