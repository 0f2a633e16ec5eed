// serve/text.h: a choice's streamed pieces concatenate to its non-streamed text. Tokens that
// stand for raw bytes (as GPT-2's BPE does) split UTF-8 characters and stop strings; the pieces
// never hold half a character or the start of a stop string that later completes, and a stop
// string cuts the text before it, as the whole text cut at its first stop would be. Controls:
// without the hold-backs the same streams go wrong.
#include "attn/serve/text.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "attn/io/bpe.h"

namespace attn::serve {
namespace {

// Token t stands for the bytes kPieces[t].
const std::vector<std::string> kPieces = {
    "a", "b", " ", "\xE2", "\x82", "\xAC",          // "€" in three tokens
    "\xF0\x9F", "\x98\x80",                          // "😀" in two
    "ST", "OP", "\xC3", "\xA9", "\x82", "xy", "\n",  // "é" in two; a stray continuation byte
};

std::string bytes_of(const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) out += kPieces[static_cast<size_t>(id)];
  return out;
}

// The non-streamed text: the whole text (invalid bytes as U+FFFD) cut at its first stop string.
std::string whole(const std::vector<int64_t>& ids, const std::vector<std::string>& stops, bool* stopped) {
  std::string text = io::utf8_replace_invalid(bytes_of(ids));
  size_t cut = std::string::npos;
  for (const std::string& s : stops) cut = std::min(cut, text.find(s));
  *stopped = cut != std::string::npos;
  if (*stopped) text.resize(cut);
  return text;
}

struct Streamed {
  std::string text;
  std::vector<std::string> pieces;
  bool stopped = false;
  int64_t used = 0;
};

Streamed stream(const std::vector<int64_t>& ids, const std::vector<std::string>& stops) {
  ChoiceText c(bytes_of, stops);
  Streamed s;
  for (int64_t id : ids) {
    std::string piece = c.add(id);
    s.pieces.push_back(piece);
    s.text += piece;
  }
  std::string last = c.finish(ids);
  s.pieces.push_back(last);
  s.text += last;
  s.stopped = c.stopped();
  s.used = c.tokens_used();
  EXPECT_EQ(s.text, c.text());
  return s;
}

TEST(ServeText, Utf8CompletePrefixHoldsBackOnlyAnUnfinishedCharacter) {
  EXPECT_EQ(utf8_complete_prefix("ab"), 2u);
  EXPECT_EQ(utf8_complete_prefix("a\xE2"), 1u);
  EXPECT_EQ(utf8_complete_prefix("a\xE2\x82"), 1u);
  EXPECT_EQ(utf8_complete_prefix("a\xE2\x82\xAC"), 4u);
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98"), 0u);
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98\x80"), 4u);
  EXPECT_EQ(utf8_complete_prefix("a\x82"), 2u);  // a stray continuation byte is not waited for
  EXPECT_EQ(utf8_complete_prefix(""), 0u);
  EXPECT_EQ(utf8_length("a\xE2\x82\xAC\xF0\x9F\x98\x80"), 3);
}

TEST(ServeText, StopHoldbackIsTheLongestTailThatStartsAStop) {
  EXPECT_EQ(stop_holdback("xyS", {"STOP"}), 1u);
  EXPECT_EQ(stop_holdback("xySTO", {"STOP"}), 3u);
  EXPECT_EQ(stop_holdback("xySTOP", {"STOP"}), 0u);  // complete: the cut's business, not a hold-back
  EXPECT_EQ(stop_holdback("aab", {"ab", "bx"}), 1u);
  EXPECT_EQ(stop_holdback("aa", {"aab"}), 2u);
  EXPECT_EQ(stop_holdback("abc", {}), 0u);
}

TEST(ServeText, StreamedPiecesEqualTheWholeTextForRandomTokenStreams) {
  std::mt19937 rng(7);
  const std::vector<std::vector<std::string>> stop_sets = {{}, {"STOP"}, {"\xE2\x82\xAC"}, {"b a", "OPx"}, {"\n"}};
  int stopped = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<int64_t> ids(rng() % 12);
    for (int64_t& id : ids) id = static_cast<int64_t>(rng() % kPieces.size());
    const std::vector<std::string>& stops = stop_sets[static_cast<size_t>(trial) % stop_sets.size()];
    bool want_stop = false;
    const std::string want = whole(ids, stops, &want_stop);
    const Streamed got = stream(ids, stops);
    ASSERT_EQ(got.text, want) << "trial " << trial;
    ASSERT_EQ(got.stopped, want_stop) << "trial " << trial;
    for (const std::string& p : got.pieces) ASSERT_LT(io::utf8_error_offset(p), 0) << "a piece is not valid UTF-8";
    stopped += got.stopped;
  }
  EXPECT_GT(stopped, 100);  // the stops were exercised
}

TEST(ServeText, AStopStringCountsTheTokensUpToItAndIgnoresTheRest) {
  // "ab" "ST" "OP" "a": the stop completes with token 3 of 5.
  const Streamed s = stream({0, 1, 8, 9, 0}, {"STOP"});
  EXPECT_EQ(s.text, "ab");
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.used, 4);
  // "S" is held back while it could start the stop; "ST" then "OP" complete it.
  const Streamed split = stream({0, 8, 0}, {"STa"});
  EXPECT_EQ(split.pieces[0], "a");
  EXPECT_EQ(split.pieces[1], "");
  EXPECT_TRUE(split.stopped);
}

TEST(ServeText, ACharacterSplitOverTokensIsSentWhole) {
  const Streamed s = stream({0, 3, 4, 5, 1}, {});
  EXPECT_EQ(s.pieces, (std::vector<std::string>{"a", "", "", "\xE2\x82\xAC", "b", ""}));
  // Ending inside a character: the finish sends U+FFFD, as the whole text decodes.
  const Streamed cut = stream({0, 6}, {});
  EXPECT_EQ(cut.text, "a\xEF\xBF\xBD");
}

// Control: a stream that sends each token's bytes as they come (no hold-backs) breaks
// characters and leaks stop strings, which the tests above would catch.
TEST(ServeText, ControlWithoutHoldBacksTheStreamDiffers) {
  const std::vector<int64_t> ids = {0, 3, 4, 5, 8, 9};
  std::string naive;
  bool invalid_piece = false;
  for (int64_t id : ids) {
    const std::string piece = kPieces[static_cast<size_t>(id)];
    invalid_piece = invalid_piece || io::utf8_error_offset(piece) >= 0;
    naive += io::utf8_replace_invalid(piece);
  }
  bool stopped = false;
  EXPECT_TRUE(invalid_piece);
  EXPECT_NE(naive, whole(ids, {"STOP"}, &stopped));
  EXPECT_EQ(stream(ids, {"STOP"}).text, whole(ids, {"STOP"}, &stopped));
}

}  // namespace
}  // namespace attn::serve
