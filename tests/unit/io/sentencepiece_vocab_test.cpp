// SentencePieceVocab: BPE and unigram training on a small generated corpus, attn's special ids,
// encode/decode round trips, <unk>, <eos> and <pad> handling, save/load (file and folder),
// fingerprints, and the input problems of the issue: Windows line endings, empty lines, byte-order
// marks, invalid UTF-8, missing files, an impossible vocabulary size, corrupted model files.
#include "attn/io/sentencepiece_vocab.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/io/vocab.h"

namespace attn::io {
namespace {

namespace fs = std::filesystem;

static_assert(SentencePieceVocab::kPad == io::Vocab::kPad && SentencePieceVocab::kBos == io::Vocab::kBos &&
              SentencePieceVocab::kEos == io::Vocab::kEos && SentencePieceVocab::kUnk == io::Vocab::kUnk);

// A per-test folder under the temporary directory, removed afterwards.
class SentencePieceVocabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("attn_spm_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    write_file_atomic(file(name), text);
    return file(name);
  }

  fs::path dir_;
};

// 300 lines of a small English-like language, deterministic; `eol` ends every line.
std::string corpus(const std::string& eol = "\n") {
  const char* words[] = {"the",   "cat",    "sat",     "on",      "mat",    "dog",   "ran",    "far",
                         "away",  "from",   "house",   "quickly", "slowly", "and",   "then",   "garden",
                         "running", "walked", "big",  "small",   "yellow", "bird",  "flew",   "over",
                         "jumped", "fox",   "brown",   "lazy",    "river",  "was",   "with",   "night"};
  std::string out;
  uint32_t s = 7;
  for (int line = 0; line < 300; ++line) {
    const int n = 3 + line % 7;
    for (int k = 0; k < n; ++k) {
      s = s * 1103515245u + 12345u;
      if (k) out += ' ';
      out += words[(s >> 16) % 32];
    }
    out += eol;
  }
  return out;
}

SentencePieceTrainOptions options(const std::string& input, SubwordModel model, int64_t size) {
  SentencePieceTrainOptions o;
  o.inputs = {input};
  o.model = model;
  o.vocab_size = size;
  return o;
}

TEST_F(SentencePieceVocabTest, BpeAndUnigramKeepAttnSpecialIdsAndRoundTripText) {
  const std::string input = write("corpus.txt", corpus());
  for (SubwordModel model : {SubwordModel::Bpe, SubwordModel::Unigram}) {
    SentencePieceTrainReport report;
    const SentencePieceVocab v = SentencePieceVocab::train(options(input, model, 60), &report);
    SCOPED_TRACE(subword_model_name(model));
    EXPECT_EQ(v.size(), 60);
    EXPECT_EQ(v.token(0), "<pad>");
    EXPECT_EQ(v.token(1), "<bos>");
    EXPECT_EQ(v.token(2), "<eos>");
    EXPECT_EQ(v.token(3), "<unk>");
    EXPECT_EQ(v.id("<eos>"), SentencePieceVocab::kEos);
    EXPECT_EQ(report.lines, 300);
    EXPECT_EQ(report.sentences, 300);
    const std::string text = "the dog walked slowly from the garden";
    const std::vector<int64_t> ids = v.encode(text);
    ASSERT_FALSE(ids.empty());
    for (int64_t i : ids) EXPECT_GE(i, SentencePieceVocab::kNumSpecial);
    EXPECT_EQ(v.decode(ids), text);
    EXPECT_EQ(v.encode_pieces(text).size(), ids.size());
    EXPECT_EQ(v.encode_pieces("the").front().rfind("\xE2\x96\x81", 0), 0u);  // "▁" marks a word start
    EXPECT_LT(ids.size(), text.size());  // subwords, not characters
  }
}

TEST_F(SentencePieceVocabTest, DecodeSkipsPadAndBosStopsAtEosAndWritesUnk) {
  const SentencePieceVocab v = SentencePieceVocab::train(options(write("c.txt", corpus()), SubwordModel::Unigram, 50));
  std::vector<int64_t> ids = v.encode("the cat");
  std::vector<int64_t> framed = {SentencePieceVocab::kBos};
  framed.insert(framed.end(), ids.begin(), ids.end());
  framed.push_back(SentencePieceVocab::kEos);
  framed.insert(framed.end(), ids.begin(), ids.end());  // after <eos>: ignored
  framed.push_back(SentencePieceVocab::kPad);
  EXPECT_EQ(v.decode(framed), "the cat");
  // Characters the corpus never had become <unk>, written "<unk>".
  const std::vector<int64_t> unk = v.encode("the café");
  EXPECT_NE(std::find(unk.begin(), unk.end(), SentencePieceVocab::kUnk), unk.end());
  EXPECT_NE(v.decode(unk).find("<unk>"), std::string::npos) << v.decode(unk);
  EXPECT_EQ(v.decode({}), "");
  EXPECT_EQ(v.encode(""), std::vector<int64_t>{});
  EXPECT_THROW(v.decode({v.size()}), Error);
  EXPECT_THROW(v.decode({-1}), Error);
  EXPECT_THROW(v.token(v.size()), Error);
  EXPECT_THROW(v.encode("the \xFF cat"), Error);
  EXPECT_EQ(v.labels({0, 2}), (std::vector<std::string>{"<pad>", "<eos>"}));
}

TEST_F(SentencePieceVocabTest, ByteFallbackSpellsUnknownCharactersInBytes) {
  SentencePieceTrainOptions o = options(write("c.txt", corpus()), SubwordModel::Bpe, 4 + 256 + 40);
  o.byte_fallback = true;
  const SentencePieceVocab v = SentencePieceVocab::train(o);
  const std::vector<int64_t> ids = v.encode("the café");
  EXPECT_EQ(std::find(ids.begin(), ids.end(), SentencePieceVocab::kUnk), ids.end());
  EXPECT_EQ(v.decode(ids), "the café");
}

TEST_F(SentencePieceVocabTest, SavesAndLoadsAsFileAndInAFolder) {
  const SentencePieceVocab v = SentencePieceVocab::train(options(write("c.txt", corpus()), SubwordModel::Bpe, 50));
  v.save(file("v.model"));
  const SentencePieceVocab a = SentencePieceVocab::load(file("v.model"));
  EXPECT_TRUE(a == v);
  EXPECT_EQ(a.fingerprint(), v.fingerprint());
  EXPECT_EQ(a.encode("the garden"), v.encode("the garden"));
  const std::string saved = v.save_to_folder(file("model_dir"));
  EXPECT_EQ(saved, file("model_dir") + "/" + io::kSentencePieceFileName);
  EXPECT_TRUE(SentencePieceVocab::load(file("model_dir")) == v);
  EXPECT_EQ(v.fingerprint().size(), 16u);
}

TEST_F(SentencePieceVocabTest, TrainingIsDeterministicAndTheSizeAndTypeMatter) {
  const std::string input = write("c.txt", corpus());
  const SentencePieceVocab a = SentencePieceVocab::train(options(input, SubwordModel::Unigram, 50));
  const SentencePieceVocab b = SentencePieceVocab::train(options(input, SubwordModel::Unigram, 50));
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_NE(a.fingerprint(), SentencePieceVocab::train(options(input, SubwordModel::Unigram, 55)).fingerprint());
  EXPECT_NE(a.fingerprint(), SentencePieceVocab::train(options(input, SubwordModel::Bpe, 50)).fingerprint());
}

// Windows line endings and a byte-order mark are dropped, empty lines skipped: the same model as
// from the clean file, with the lines counted.
TEST_F(SentencePieceVocabTest, CrlfEmptyLinesAndByteOrderMarkGiveTheSameModel) {
  const std::string clean = write("clean.txt", corpus());
  std::string messy = "\xEF\xBB\xBF" + corpus("\r\n");
  messy.insert(messy.find("\r\n") + 2, "\r\n   \n\n");  // blank lines after line 1
  const std::string dirty = write("dirty.txt", messy);
  SentencePieceTrainReport report;
  const SentencePieceVocab a = SentencePieceVocab::train(options(clean, SubwordModel::Bpe, 50));
  const SentencePieceVocab b = SentencePieceVocab::train(options(dirty, SubwordModel::Bpe, 50), &report);
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_EQ(report.lines, 303);
  EXPECT_EQ(report.sentences, 300);
  EXPECT_EQ(report.empty_lines, 3);
  EXPECT_EQ(report.crlf_lines, 301);
}

TEST_F(SentencePieceVocabTest, SeveralInputsAndLongLinesAreCounted) {
  const std::string a = write("a.txt", corpus());
  const std::string b = write("b.txt", std::string(100, 'x') + "\nthe cat\n");
  SentencePieceTrainOptions o = options(a, SubwordModel::Unigram, 50);
  o.inputs.push_back(b);
  o.max_sentence_bytes = 80;
  SentencePieceTrainReport report;
  SentencePieceVocab::train(o, &report);
  EXPECT_EQ(report.lines, 302);
  EXPECT_EQ(report.long_lines, 1);
  EXPECT_EQ(report.sentences, 301);
}

TEST_F(SentencePieceVocabTest, BadInputIsAnErrorNamingTheProblem) {
  const std::string good = write("c.txt", corpus());
  const auto message = [](const SentencePieceTrainOptions& o) {
    try {
      SentencePieceVocab::train(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Invalid UTF-8 names the file and line.
  const std::string bad = write("bad.txt", "the cat\nthe \xC3\x28 dog\n");
  EXPECT_NE(message(options(bad, SubwordModel::Bpe, 20)).find("bad.txt' line 2: invalid UTF-8"), std::string::npos)
      << message(options(bad, SubwordModel::Bpe, 20));
  // ... also when it comes late, after SentencePiece started reading.
  const std::string late = write("late.txt", corpus() + "\xFF\n");
  EXPECT_NE(message(options(late, SubwordModel::Bpe, 40)).find("line 301"), std::string::npos);
  EXPECT_NE(message(options(file("missing.txt"), SubwordModel::Bpe, 20)).find("missing.txt"), std::string::npos);
  EXPECT_NE(message(options(write("blank.txt", "\n  \r\n"), SubwordModel::Bpe, 20)).find("no usable line"),
            std::string::npos);
  // More pieces than the text allows: SentencePiece's limit, without its source location.
  const std::string big = message(options(good, SubwordModel::Unigram, 5000));
  EXPECT_NE(big.find("Vocabulary size too high"), std::string::npos) << big;
  EXPECT_EQ(big.find("./src/"), std::string::npos) << big;
  EXPECT_THROW(SentencePieceVocab::train(options(good, SubwordModel::Bpe, 4)), Error);
  SentencePieceTrainOptions o = options(good, SubwordModel::Bpe, 50);
  o.inputs.clear();
  EXPECT_THROW(SentencePieceVocab::train(o), Error);
  o = options(good, SubwordModel::Bpe, 50);
  o.character_coverage = 0;
  EXPECT_THROW(SentencePieceVocab::train(o), Error);
  o = options(good, SubwordModel::Bpe, 50);
  o.normalization = "no_such_rule";
  EXPECT_THROW(SentencePieceVocab::train(o), Error);
  EXPECT_THROW(parse_subword_model("wordpiece"), Error);
}

TEST_F(SentencePieceVocabTest, CorruptedOrForeignModelFilesAreRefused) {
  const SentencePieceVocab v = SentencePieceVocab::train(options(write("c.txt", corpus()), SubwordModel::Bpe, 50));
  EXPECT_THROW(SentencePieceVocab::load(file("nothing.model")), Error);
  EXPECT_THROW(SentencePieceVocab::load(dir_.string()), Error);  // a folder without the model
  EXPECT_THROW(SentencePieceVocab::from_serialized("not a model"), Error);
  EXPECT_THROW(SentencePieceVocab::from_serialized(""), Error);
  // A truncated file.
  write("cut.model", v.serialized().substr(0, v.serialized().size() / 2));
  EXPECT_THROW(SentencePieceVocab::load(file("cut.model")), Error);
  // A JSON vocabulary where a SentencePiece model is expected.
  write("vocab.json", io::Vocab({"a", "b"}, io::Tokenization::Chars).to_json().dump());
  try {
    SentencePieceVocab::load(file("vocab.json"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a SentencePiece model"), std::string::npos) << e.what();
  }
}

// A model whose piece became empty makes the SentencePiece library throw its own exception while
// loading; it must reach the caller as attn::Error like any corrupted model (the fuzz target's
// regression input: a text, a NUL byte, the model). Control: the seed it was mutated from loads.
TEST_F(SentencePieceVocabTest, AModelThatMakesTheLibraryThrowIsRefusedAsAnError) {
  const auto model_of = [](const std::string& name) {
    const std::string input = io::read_file(std::string(ATTN_SOURCE_DIR) + "/tests/fuzz/corpus/sentencepiece/" + name);
    return input.substr(input.find('\0') + 1);
  };
  EXPECT_NO_THROW(SentencePieceVocab::from_serialized(model_of("ok_unigram_mask_bytes")));
  try {
    SentencePieceVocab::from_serialized(model_of("regress_empty_piece_darts_exception"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a SentencePiece model"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attn::io
