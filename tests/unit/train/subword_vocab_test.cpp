// io::Vocab of the SentencePiece kind: ids and pieces equal the model's, encode/decode round
// trips, vocab.json with the model's fingerprint next to sentencepiece.model, a model file from
// another vocabulary refused naming both files, characters the model lacks read as <unk>, [MASK]
// reserved at id 4 by `mask_symbol`, and the TSV / text loaders and TrainConfig using it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/io/sentencepiece_vocab.h"
#include "attn/train/tasks.h"
#include "attn/train/text_data.h"
#include "attn/train/train_config.h"
#include "attn/io/vocab.h"

namespace attn::train {
namespace {

namespace fs = std::filesystem;

class SubwordVocabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("attn_subword_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    io::write_file_atomic(file(name), text);
    return file(name);
  }
  // A small unigram model trained on 200 deterministic lines of a few lowercase words.
  io::SentencePieceVocab model(int64_t size = 30, bool mask = false) const {
    const char* words[] = {"the", "cat", "sat", "on", "mat", "dog", "ran", "far", "away", "from", "house", "big"};
    std::string text;
    uint32_t s = 11;
    for (int line = 0; line < 200; ++line) {
      for (int k = 0; k < 3 + line % 5; ++k) {
        s = s * 1103515245u + 12345u;
        text += (k ? " " : "") + std::string(words[(s >> 16) % 12]);
      }
      text += "\n";
    }
    io::SentencePieceTrainOptions o;
    o.inputs = {write("corpus.txt", text)};
    o.vocab_size = size;
    o.mask_symbol = mask;
    return io::SentencePieceVocab::train(o);
  }

  fs::path dir_;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SubwordTokenization, HasItsNameAndLeavesTheSplitToTheModel) {
  EXPECT_EQ(io::parse_tokenization("sentencepiece"), io::Tokenization::SentencePiece);
  EXPECT_STREQ(io::tokenization_name(io::Tokenization::SentencePiece), "sentencepiece");
  EXPECT_EQ(io::tokenize("the cat", io::Tokenization::SentencePiece), std::vector<std::string>{"the cat"});
  EXPECT_TRUE(io::tokenize(" \t ", io::Tokenization::SentencePiece).empty());
  EXPECT_THROW(io::tokenize("a\xFF", io::Tokenization::SentencePiece), Error);
  EXPECT_THROW(static_cast<void>(io::Vocab(io::Tokenization::SentencePiece)), Error);  // needs its model
}

TEST_F(SubwordVocabTest, IdsAndPiecesAreTheModelsAndTextRoundTrips) {
  io::SentencePieceVocab sp = model();
  const std::string text = "the dog ran away from the big house";
  const std::vector<int64_t> want = sp.encode(text);
  const int64_t size = sp.size();
  const std::string piece5 = sp.token(5);
  const io::Vocab v(std::move(sp));
  EXPECT_EQ(v.tokenization(), io::Tokenization::SentencePiece);
  ASSERT_NE(v.sentencepiece(), nullptr);
  EXPECT_EQ(v.size(), size);
  EXPECT_EQ(v.token(5), piece5);
  EXPECT_EQ(v.id(piece5), 5);
  EXPECT_EQ(v.token(io::Vocab::kEos), "<eos>");
  EXPECT_FALSE(v.has_mask());
  EXPECT_EQ(v.num_special(), io::Vocab::kNumSpecial);
  const std::vector<int64_t> ids = v.encode(text);
  EXPECT_EQ(ids, want);
  EXPECT_LT(ids.size(), text.size());  // subwords, not characters
  EXPECT_EQ(v.decode(ids), text);
  std::vector<int64_t> framed = {io::Vocab::kBos};
  framed.insert(framed.end(), ids.begin(), ids.end());
  framed.push_back(io::Vocab::kEos);
  framed.push_back(ids.front());
  EXPECT_EQ(v.decode(framed), text);  // <bos> skipped, stops at <eos>
  EXPECT_THROW(v.decode({v.size()}), Error);
  const io::Vocab copy = v;  // copies share the model
  EXPECT_EQ(copy, v);
  EXPECT_EQ(copy.encode(text), ids);
}

TEST_F(SubwordVocabTest, CharactersTheModelLacksReadAsUnkAndThePiecesAreFixed) {
  const io::Vocab v(model());
  const std::vector<int64_t> ids = v.encode("the Zebra");  // no capital letters in the corpus
  EXPECT_NE(std::find(ids.begin(), ids.end(), io::Vocab::kUnk), ids.end());
  EXPECT_NE(v.decode(ids).find("<unk>"), std::string::npos);
  EXPECT_EQ(v.id("no such piece", true), io::Vocab::kUnk);
  EXPECT_NE(error_of([&] { v.id("no such piece"); }).find("unknown token"), std::string::npos);
  io::Vocab w = v;
  EXPECT_NE(error_of([&] { w.add("zzz"); }).find("SentencePiece"), std::string::npos);
  EXPECT_THROW(v.encode("bad \xC0\xAF utf-8"), Error);
}

TEST_F(SubwordVocabTest, SavesJsonWithTheFingerprintNextToTheModelAndLoadsBoth) {
  const io::Vocab v(model());
  const nlohmann::json j = v.to_json();
  EXPECT_EQ(j["tokenization"], "sentencepiece");
  EXPECT_EQ(j["sentencepiece"]["file"], "sentencepiece.model");
  EXPECT_EQ(j["sentencepiece"]["fingerprint"], v.sentencepiece()->fingerprint());
  EXPECT_EQ(j["sentencepiece"]["pieces"], v.size());
  EXPECT_FALSE(j.contains("tokens"));
  v.save(file("vocab.json"));
  EXPECT_TRUE(fs::is_regular_file(file("sentencepiece.model")));
  const io::Vocab back = io::Vocab::load(file("vocab.json"));
  EXPECT_EQ(back, v);
  EXPECT_EQ(back.encode("the cat sat"), v.encode("the cat sat"));
  ASSERT_EQ(v.companion_files().size(), 1u);
  EXPECT_EQ(v.companion_files()[0].first, "sentencepiece.model");
  EXPECT_TRUE(io::Vocab(io::Tokenization::Chars).companion_files().empty());
  // The JSON alone cannot make the vocabulary; malformed JSON with a model is an error too.
  EXPECT_NE(error_of([&] { io::Vocab::from_json(j); }).find("model file"), std::string::npos);
  for (const char* broken : {R"({"format": "attn-vocab", "version": 1, "tokenization": "sentencepiece"})",
                             R"({"format": 7, "version": "1", "tokenization": "sentencepiece"})",
                             R"({"format": "attn-vocab", "version": 1, "tokenization": "sentencepiece",
                                 "sentencepiece": {"fingerprint": 12, "pieces": "30"}})",
                             R"([1, 2])"})
    EXPECT_THROW(io::Vocab::from_json(nlohmann::json::parse(broken), model()), Error) << broken;
  io::write_file_atomic(file("vocab.json"), R"({"format": "attn-vocab", "tokenization": 3})");
  EXPECT_THROW(io::Vocab::load(file("vocab.json")), Error);
}

TEST_F(SubwordVocabTest, AModelFileFromAnotherVocabularyIsAnErrorNamingBothFiles) {
  io::Vocab(model(30)).save(file("vocab.json"));
  model(26).save(file("sentencepiece.model"));  // another vocabulary's model in its place
  const std::string msg = error_of([&] { io::Vocab::load(file("vocab.json")); });
  EXPECT_NE(msg.find("a vocabulary file from another model"), std::string::npos) << msg;
  EXPECT_NE(msg.find(file("vocab.json")), std::string::npos) << msg;
  EXPECT_NE(msg.find(file("sentencepiece.model")), std::string::npos) << msg;
  fs::remove(file("sentencepiece.model"));
  EXPECT_NE(error_of([&] { io::Vocab::load(file("vocab.json")); }).find("missing"), std::string::npos);
}

TEST_F(SubwordVocabTest, AMaskReservedByTheModelIsId4AndEncodesFromText) {
  const io::Vocab v(model(30, true));
  EXPECT_TRUE(v.has_mask());
  EXPECT_EQ(v.mask_id(), io::Vocab::kMask);
  EXPECT_EQ(v.num_special(), io::Vocab::kMask + 1);
  EXPECT_EQ(v.token(io::Vocab::kMask), io::Vocab::kMaskToken);
  const std::vector<int64_t> ids = v.encode("the [MASK] sat");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), io::Vocab::kMask), 1);
  v.save(file("vocab.json"));
  EXPECT_EQ(v.to_json()["mask"], true);
  EXPECT_TRUE(io::Vocab::load(file("vocab.json")).has_mask());
}

TEST_F(SubwordVocabTest, TsvAndTextLoadersEncodeWithTheGivenModelAndCountUnknowns) {
  model().save(file("sp.model"));
  const std::string train = write("train.tsv", "the cat\tthe dog\nbig house\taway far\n");
  const std::string valid = write("valid.tsv", "the Cat\tthe dog\n");
  const Dataset d = load_tsv_dataset(train, valid, io::Tokenization::SentencePiece, file("sp.model"));
  ASSERT_EQ(d.train.size(), 2u);
  EXPECT_EQ(d.train[0].src, d.vocab.encode("the cat"));
  EXPECT_EQ(d.train[1].tgt, d.vocab.encode("away far"));
  EXPECT_EQ(d.train_unknown_tokens, 0);
  EXPECT_EQ(d.valid_unknown_tokens, 1);  // "C"
  EXPECT_EQ(d.vocab.size(), 30);

  const std::string text = write("train.txt", "the cat sat\n\nthe dog ran\n");
  const Dataset t = load_text_dataset(text, "", io::Tokenization::SentencePiece, models::Arch::DecoderOnly, file("sp.model"));
  ASSERT_EQ(t.train.size(), 2u);
  EXPECT_EQ(t.train[1].tgt, t.vocab.encode("the dog ran"));
  EXPECT_EQ(t.empty_lines, 1);
  // Encoder-only needs [MASK] in the model; a model path needs the sentencepiece tokenization.
  EXPECT_NE(error_of([&] {
              load_text_dataset(text, "", io::Tokenization::SentencePiece, models::Arch::EncoderOnly, file("sp.model"));
            }).find("--mask"),
            std::string::npos);
  EXPECT_THROW(load_tsv_dataset(train, "", io::Tokenization::Chars, file("sp.model")), Error);
  EXPECT_THROW(load_tsv_dataset(train, "", io::Tokenization::SentencePiece), Error);
  EXPECT_THROW(load_tsv_dataset(train, "", io::Tokenization::SentencePiece, file("missing.model")), Error);
}

TEST(SubwordTrainConfig, TheTokenizationAndTheModelPathGoTogether) {
  TrainConfig c;
  c.task = "";
  c.train_path = "train.tsv";
  c.tokens = io::Tokenization::SentencePiece;
  EXPECT_NE(error_of([&] { c.validate(); }).find("needs a SentencePiece model"), std::string::npos);
  c.vocab = "sp.model";
  EXPECT_NO_THROW(c.validate());
  c.tokens = io::Tokenization::Chars;
  EXPECT_THROW(c.validate(), Error);
  TrainConfig back;
  c.tokens = io::Tokenization::SentencePiece;
  back.update_from_json(c.to_json());
  EXPECT_EQ(back.vocab, "sp.model");
  EXPECT_EQ(back.tokens, io::Tokenization::SentencePiece);
}

}  // namespace
}  // namespace attn::train
