// Plain-text corpora (train/text_data.h): lines with their numbers (CRLF, byte-order mark and
// blank lines handled), the byte-sorted vocabulary with [MASK] for encoder-only runs, the
// example layout of each single-stack arch, unknown validation tokens, and errors that name the
// file and line. Also the [MASK] special token of io::Vocab.
#include "attn/train/text_data.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "unit/models/broken_checkpoints.h"
#include "support/error_of.h"

namespace attn::train {
namespace {

using Ids = std::vector<int64_t>;
using models::Arch;
using models::test_util::TempDir;

std::string write(const TempDir& tmp, const std::string& name, const std::string& text) {
  const std::string path = tmp.file(name);
  io::write_file_atomic(path, text);
  return path;
}

using attn::test::error_of;

TEST(TextFile, ReadsNonBlankLinesWithTheirNumbers) {
  TempDir tmp("attn_text");
  const std::string path = write(tmp, "a.txt", "\xEF\xBB\xBF" "ab c\r\n\n   \nc\xC3\xA9\n");
  const TextFile f = read_text(path, io::Tokenization::Chars);
  ASSERT_EQ(f.lines.size(), 2u);
  EXPECT_EQ(f.lines[0], (std::vector<std::string>{"a", "b", " ", "c"}));  // no \r, no byte-order mark
  EXPECT_EQ(f.lines[1], (std::vector<std::string>{"c", "\xC3\xA9"}));
  EXPECT_EQ(f.line_numbers, (Ids{1, 4}));
  EXPECT_EQ(f.blank_lines, 2);
  const TextFile w = read_text(path, io::Tokenization::Whitespace);
  EXPECT_EQ(w.lines[0], (std::vector<std::string>{"ab", "c"}));
}

TEST(TextFile, InvalidUtf8IsAnErrorNamingTheLine) {
  TempDir tmp("attn_text");
  const std::string path = write(tmp, "bad.txt", "ok\nb\xFF" "d\n");
  const std::string msg = error_of([&] { read_text(path, io::Tokenization::Chars); });
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("UTF-8"), std::string::npos) << msg;
}

TEST(TextDataset, DecoderOnlyLinesAreTargetsWithoutSource) {
  TempDir tmp("attn_text");
  const std::string train = write(tmp, "train.txt", "ba\nab\n");
  const Dataset d = load_text_dataset(train, "", io::Tokenization::Chars, Arch::DecoderOnly);
  EXPECT_FALSE(d.vocab.has_mask());
  EXPECT_EQ(d.vocab.tokens(), (std::vector<std::string>{"<pad>", "<bos>", "<eos>", "<unk>", "a", "b"}));
  ASSERT_EQ(d.train.size(), 2u);
  EXPECT_TRUE(d.train[0].src.empty());
  EXPECT_EQ(d.train[0].tgt, (Ids{5, 4}));
  EXPECT_EQ(text_ids(d.train[1]), (Ids{4, 5}));
  EXPECT_TRUE(d.valid.empty());
}

TEST(TextDataset, EncoderOnlyLinesAreSourcesAndTheVocabularyHasMaskAtFour) {
  TempDir tmp("attn_text");
  const std::string train = write(tmp, "train.txt", "the cat\nthe dog\n");
  const std::string valid = write(tmp, "valid.txt", "the cow\n\n");
  const Dataset d = load_text_dataset(train, valid, io::Tokenization::Whitespace, Arch::EncoderOnly);
  EXPECT_TRUE(d.vocab.has_mask());
  EXPECT_EQ(d.vocab.mask_id(), 4);
  EXPECT_EQ(d.vocab.token(4), "[MASK]");
  EXPECT_EQ(d.vocab.num_special(), 5);
  EXPECT_EQ(d.vocab.id("cat"), 5);  // symbols after the specials, sorted: cat dog the
  EXPECT_EQ(d.train[0].src, (Ids{7, 5}));
  EXPECT_TRUE(d.train[0].tgt.empty());
  ASSERT_EQ(d.valid.size(), 1u);
  EXPECT_EQ(d.valid[0].src, (Ids{7, io::Vocab::kUnk}));  // "cow" is not in the training text
  EXPECT_EQ(d.valid_unknown_tokens, 1);
  EXPECT_EQ(d.empty_lines, 1);
}

TEST(TextDataset, EmptyFilesAndTheEncoderDecoderAreErrors) {
  TempDir tmp("attn_text");
  const std::string empty = write(tmp, "empty.txt", "");
  const std::string blank = write(tmp, "blank.txt", "\n  \n\t\n");
  const std::string good = write(tmp, "good.txt", "ab\n");
  EXPECT_NE(error_of([&] { load_text_dataset(empty, "", io::Tokenization::Chars, Arch::DecoderOnly); }).find("empty.txt"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_text_dataset(blank, "", io::Tokenization::Chars, Arch::DecoderOnly); }).find("no text"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_text_dataset(good, blank, io::Tokenization::Chars, Arch::DecoderOnly); }).find("blank.txt"),
            std::string::npos);
  EXPECT_THROW(load_text_dataset(good, "", io::Tokenization::Chars, Arch::EncoderDecoder), Error);
  EXPECT_THROW(load_text_dataset(tmp.file("missing.txt"), "", io::Tokenization::Chars, Arch::DecoderOnly), Error);
  const TextFile f = read_text(good, io::Tokenization::Chars);
  const io::Vocab v({"a"}, io::Tokenization::Chars);
  EXPECT_NE(error_of([&] { encode_text(f, v, false); }).find("unknown token 'b'"), std::string::npos);
  int64_t unknown = 0;
  EXPECT_EQ(encode_text(f, v, true, &unknown).front(), (Ids{4, io::Vocab::kUnk}));
  EXPECT_EQ(unknown, 1);
}

TEST(Vocab, MaskTokenIsSpecialAndSurvivesJson) {
  io::Vocab v({"a", "b"}, io::Tokenization::Chars, true);
  EXPECT_EQ(v.size(), 7);
  EXPECT_EQ(v.id("[MASK]"), io::Vocab::kMask);
  EXPECT_EQ(v.id("a"), 5);
  EXPECT_TRUE(v.is_special(4));
  EXPECT_FALSE(v.is_special(5));
  EXPECT_EQ(v.decode({5, 4, 6}), "a[MASK]b");
  const io::Vocab back = io::Vocab::from_json(v.to_json());
  EXPECT_TRUE(back == v);
  EXPECT_TRUE(back.has_mask());
  EXPECT_EQ(v.to_json()["mask"], true);
  // Without a mask nothing changes: no "mask" key, symbols from 4, "[MASK]" not a token.
  const io::Vocab plain({"a"}, io::Tokenization::Chars);
  EXPECT_FALSE(plain.to_json().contains("mask"));
  EXPECT_EQ(plain.mask_id(), -1);
  EXPECT_EQ(plain.num_special(), 4);
  EXPECT_FALSE(plain == io::Vocab({"a"}, io::Tokenization::Chars, true));
  // A file that claims a mask must have it at id 4.
  nlohmann::json j = plain.to_json();
  j["mask"] = true;
  EXPECT_THROW(io::Vocab::from_json(j), Error);
  j["mask"] = "yes";
  EXPECT_THROW(io::Vocab::from_json(j), Error);
}

}  // namespace
}  // namespace attn::train
