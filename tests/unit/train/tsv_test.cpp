// The tab-separated parallel-corpus loader: tokens, the shared vocabulary, CRLF and empty
// lines, unknown validation tokens, and errors that name the file and the line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "attn/core/error.h"
#include "attn/train/tasks.h"

namespace attn::train {
namespace {

using Ids = std::vector<int64_t>;

// A file in the temp directory, removed when the test ends.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& contents)
      : path_(std::filesystem::temp_directory_path() /
              ("attn_" + std::to_string(::getpid()) + "_" + name)) {
    std::ofstream(path_, std::ios::binary) << contents;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// The message of the attn::Error that f throws (fails the test when none is thrown).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no attn::Error thrown";
  return "";
}

TEST(TsvLoader, ReadsCharacterPairsWithCrlfAndEmptyLines) {
  TempFile f("chars.tsv", "\xEF\xBB\xBF" "abc\tcba\r\n\r\nba\tab\r\n\n\nc\tc");
  const TsvFile t = read_tsv(f.path(), io::Tokenization::Chars);
  ASSERT_EQ(t.src.size(), 3u);
  EXPECT_EQ(t.src[0], (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(t.tgt[1], (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(t.line_numbers, (Ids{1, 3, 6}));
  EXPECT_EQ(t.empty_lines, 3);
}

TEST(TsvLoader, BuildsOneSharedSortedVocabulary) {
  TempFile train("train.tsv", "the cat\tle chat\nthe dog\tle chien\n");
  TempFile valid("valid.tsv", "the bird\tl' oiseau\n\n");
  const Dataset d = load_tsv_dataset(train.path(), valid.path(), io::Tokenization::Whitespace);
  EXPECT_EQ(d.vocab.tokens(), (std::vector<std::string>{"<pad>", "<bos>", "<eos>", "<unk>", "cat", "chat",
                                                        "chien", "dog", "le", "the"}));
  ASSERT_EQ(d.train.size(), 2u);
  EXPECT_EQ(d.train[0].src, (Ids{9, 4}));
  EXPECT_EQ(d.train[1].tgt, (Ids{8, 6}));
  ASSERT_EQ(d.valid.size(), 1u);
  EXPECT_EQ(d.valid[0].src, (Ids{9, io::Vocab::kUnk}));
  EXPECT_EQ(d.valid[0].tgt, (Ids{io::Vocab::kUnk, io::Vocab::kUnk}));
  EXPECT_EQ(d.valid_unknown_tokens, 3);
  EXPECT_EQ(d.empty_lines, 1);
  EXPECT_EQ(d.vocab.tokenization(), io::Tokenization::Whitespace);
  // Without a validation file there is no validation set.
  EXPECT_TRUE(load_tsv_dataset(train.path(), "", io::Tokenization::Whitespace).valid.empty());
}

TEST(TsvLoader, UnknownTokensAreErrorsUnlessMapped) {
  TempFile f("unk.tsv", "ab\tba\nxy\tyx\n");
  const TsvFile t = read_tsv(f.path(), io::Tokenization::Chars);
  const io::Vocab v({"a", "b"}, io::Tokenization::Chars);
  const std::string msg = error_of([&] { encode_tsv(t, v, false); });
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  int64_t unknown = 0;
  const auto ex = encode_tsv(t, v, true, &unknown);
  EXPECT_EQ(unknown, 4);
  EXPECT_EQ(ex[1].src, (Ids{3, 3}));
}

TEST(TsvLoader, ErrorsNameTheFileAndTheLine) {
  TempFile no_tab("no_tab.tsv", "a\tb\n\nabc\n");
  std::string msg = error_of([&] { read_tsv(no_tab.path(), io::Tokenization::Chars); });
  EXPECT_NE(msg.find(no_tab.path()), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no tab"), std::string::npos) << msg;

  TempFile empty_src("empty_src.tsv", "a\tb\n\tb\n");
  msg = error_of([&] { read_tsv(empty_src.path(), io::Tokenization::Chars); });
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("empty source"), std::string::npos) << msg;

  TempFile empty_tgt("empty_tgt.tsv", "a b\t   \r\n");
  msg = error_of([&] { read_tsv(empty_tgt.path(), io::Tokenization::Whitespace); });
  EXPECT_NE(msg.find("line 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("empty target"), std::string::npos) << msg;

  TempFile bad_utf8("bad_utf8.tsv", "a\tb\nc\td\ne\t\xC3\x28\n");
  msg = error_of([&] { read_tsv(bad_utf8.path(), io::Tokenization::Chars); });
  EXPECT_NE(msg.find("line 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("UTF-8"), std::string::npos) << msg;

  TempFile two_tabs("two_tabs.tsv", "a\tb\tc\n");
  msg = error_of([&] { read_tsv(two_tabs.path(), io::Tokenization::Chars); });
  EXPECT_NE(msg.find("more than one tab"), std::string::npos) << msg;

  msg = error_of([&] { read_tsv("/nonexistent/attn/corpus.tsv", io::Tokenization::Chars); });
  EXPECT_NE(msg.find("/nonexistent/attn/corpus.tsv"), std::string::npos) << msg;

  TempFile only_empty("only_empty.tsv", "\n\r\n");
  msg = error_of([&] { load_tsv_dataset(only_empty.path(), "", io::Tokenization::Chars); });
  EXPECT_NE(msg.find("no source<TAB>target pair"), std::string::npos) << msg;
}

}  // namespace
}  // namespace attn::train
