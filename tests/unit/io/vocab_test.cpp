// Vocab: special ids, character and whitespace encoding, JSON round trip, and errors;
// UTF-8 splitting and validation.
#include "attn/io/vocab.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "attn/core/error.h"

namespace attn::io {
namespace {

using Ids = std::vector<int64_t>;

// A per-process file name, so that concurrent test runs do not collide.
std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("attn_" + std::to_string(::getpid()) + "_" + name);
}

TEST(Vocab, SpecialTokensComeFirst) {
  Vocab v({"a", "b"}, Tokenization::Chars);
  EXPECT_EQ(v.size(), 6);
  EXPECT_EQ(v.id("<pad>"), 0);
  EXPECT_EQ(v.id("<bos>"), 1);
  EXPECT_EQ(v.id("<eos>"), 2);
  EXPECT_EQ(v.id("<unk>"), 3);
  EXPECT_EQ(v.id("a"), 4);
  EXPECT_EQ(v.token(5), "b");
  EXPECT_EQ(Vocab::kPad, 0);
  EXPECT_EQ(Vocab::kUnk, 3);
}

TEST(Vocab, CharacterEncodingRoundTripsMultiByteText) {
  Vocab v(Tokenization::Chars);
  for (const std::string& c : utf8_chars("한국어 ok")) v.add(c);
  EXPECT_EQ(v.size(), 4 + 6);  // 한 국 어 ' ' o k
  const Ids ids = v.encode("ok 한국");
  EXPECT_EQ(ids.size(), 5u);
  EXPECT_EQ(v.decode(ids), "ok 한국");
  EXPECT_EQ(v.add("o"), v.id("o"));  // adding an existing token returns its id
}

TEST(Vocab, WhitespaceEncodingSplitsOnRunsOfSpaces) {
  Vocab v({"the", "cat", "sat"}, Tokenization::Whitespace);
  EXPECT_EQ(v.encode("  the\tcat   sat\n"), (Ids{4, 5, 6}));
  EXPECT_EQ(v.decode({1, 4, 5, 6, 2, 0, 0}), "the cat sat");
}

TEST(Vocab, DecodeSkipsPadAndBosAndStopsAtEos) {
  Vocab v({"x", "y"}, Tokenization::Chars);
  EXPECT_EQ(v.decode({1, 4, 0, 5, 2, 4, 4}), "xy");
  EXPECT_EQ(v.decode({4, 3, 5}), "x<unk>y");
  EXPECT_EQ(v.labels({1, 4, 2}), (std::vector<std::string>{"<bos>", "x", "<eos>"}));
  EXPECT_THROW(v.decode({4, 6}), Error);
  EXPECT_THROW(v.token(-1), Error);
}

TEST(Vocab, UnknownTokensAreErrorsUnlessMappedToUnk) {
  Vocab v({"a"}, Tokenization::Chars);
  try {
    v.encode("ab");
    FAIL() << "unknown token should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown token 'b'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(v.encode("ab", true), (Ids{4, 3}));
  EXPECT_EQ(v.id("zzz", true), Vocab::kUnk);
}

TEST(Vocab, RejectsSymbolsItsTokenizationCannotProduce) {
  EXPECT_THROW(Vocab({"ab"}, Tokenization::Chars), Error);
  EXPECT_THROW(Vocab({""}, Tokenization::Chars), Error);
  EXPECT_THROW(Vocab({"a b"}, Tokenization::Whitespace), Error);
  EXPECT_THROW(Vocab({""}, Tokenization::Whitespace), Error);
  EXPECT_THROW(Vocab({"a", "a"}, Tokenization::Chars), Error);
  EXPECT_THROW(Vocab({"<eos>"}, Tokenization::Whitespace), Error);
  EXPECT_THROW(Vocab({"\xff"}, Tokenization::Chars), Error);
  EXPECT_NO_THROW(Vocab({"é", " "}, Tokenization::Chars));
}

TEST(Vocab, JsonRoundTripKeepsTokensAndTokenization) {
  Vocab v({"hello", "wörld"}, Tokenization::Whitespace);
  const nlohmann::json j = v.to_json();
  EXPECT_EQ(j["format"], "attn-vocab");
  EXPECT_EQ(j["tokenization"], "whitespace");
  EXPECT_EQ(j["tokens"][4], "hello");
  const Vocab back = Vocab::from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(back, v);
  EXPECT_EQ(back.encode("wörld hello"), (Ids{5, 4}));

  const auto path = temp_path("vocab.json");
  v.save(path.string());
  EXPECT_EQ(Vocab::load(path.string()), v);
  std::filesystem::remove(path);
  EXPECT_THROW(Vocab::load(path.string()), Error);  // gone
}

TEST(Vocab, FromJsonRejectsMalformedInput) {
  const nlohmann::json good = Vocab({"a"}, Tokenization::Chars).to_json();
  EXPECT_NO_THROW(Vocab::from_json(good));
  auto broken = [&](auto edit) {
    nlohmann::json j = good;
    edit(j);
    return j;
  };
  EXPECT_THROW(Vocab::from_json(nlohmann::json::array()), Error);
  EXPECT_THROW(Vocab::from_json(broken([](auto& j) { j["format"] = "other"; })), Error);
  EXPECT_THROW(Vocab::from_json(broken([](auto& j) { j["version"] = 2; })), Error);
  EXPECT_THROW(Vocab::from_json(broken([](auto& j) { j["tokenization"] = "bpe"; })), Error);
  EXPECT_THROW(Vocab::from_json(broken([](auto& j) { j.erase("tokens"); })), Error);
  EXPECT_THROW(Vocab::from_json(broken([](auto& j) { j["tokens"][0] = "<bos>"; })), Error);
  EXPECT_THROW(Vocab::from_json(broken([](auto& j) { j["tokens"].push_back("a"); })), Error);
  EXPECT_THROW(Vocab::from_json(broken([](auto& j) { j["tokens"].push_back(5); })), Error);
  EXPECT_THROW(Vocab::from_json(broken([](auto& j) { j["tokens"].push_back("bc"); })), Error);
  EXPECT_THROW(Vocab::from_json(broken([](auto& j) { j["tokens"].erase(3); })), Error);

  const auto path = temp_path("vocab_bad.json");
  std::ofstream(path) << "{not json";
  try {
    Vocab::load(path.string());
    FAIL() << "bad JSON should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(Utf8, SplitsCodePointsAndRejectsInvalidSequences) {
  EXPECT_EQ(utf8_chars("aé€😀"), (std::vector<std::string>{"a", "é", "€", "😀"}));
  EXPECT_EQ(utf8_error_offset("abc"), -1);
  EXPECT_EQ(utf8_error_offset("ab\x80"), 2);          // stray continuation byte
  EXPECT_EQ(utf8_error_offset("a\xC3"), 1);           // truncated
  EXPECT_EQ(utf8_error_offset("\xC0\x80"), 0);        // overlong NUL
  EXPECT_EQ(utf8_error_offset("\xE0\x80\x80"), 0);    // overlong 3-byte
  EXPECT_EQ(utf8_error_offset("x\xED\xA0\x80"), 1);   // surrogate U+D800
  EXPECT_EQ(utf8_error_offset("\xF4\x90\x80\x80"), 0);  // past U+10FFFF
  EXPECT_EQ(utf8_error_offset("\xFF"), 0);
  EXPECT_THROW(utf8_chars("ok\xC3("), Error);
  EXPECT_THROW(tokenize("a \xff", Tokenization::Whitespace), Error);
  EXPECT_EQ(parse_tokenization("char"), Tokenization::Chars);
  EXPECT_THROW(parse_tokenization("bytes"), Error);
}

}  // namespace
}  // namespace attn::io
