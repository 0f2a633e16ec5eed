// Corpus BLEU and chrF against independently computed values: tests/torch/nltk_metrics.py runs
// Debian's python3-nltk (corpus_bleu with NIST smoothing and without, sentence_chrf at beta 2) on
// generated corpora and writes them with the tokens it used; the 13a tokenizer is checked against
// the same rules applied by Python's re. The script runs once per process, into a temporary file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attn/io/atomic_file.h"
#include "attn/train/metrics.h"

namespace attn::train {
namespace {

using Words = std::vector<std::string>;

// The script's output, generated on first use.
const nlohmann::json& nltk() {
  static const nlohmann::json j = [] {
    const std::string out =
        (std::filesystem::temp_directory_path() / ("attn_nltk_" + std::to_string(::getpid()) + ".json")).string();
    const char* py = std::getenv("ATTN_PYTHON");
    const std::string cmd = std::string("'") + (py && *py ? py : "/usr/bin/python3") + "' '" + ATTN_SOURCE_DIR +
                            "/tests/torch/nltk_metrics.py' '" + out + "'";
    const int status = std::system(cmd.c_str());
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ADD_FAILURE() << "nltk_metrics.py failed (is python3-nltk installed? make deps): " << cmd;
      return nlohmann::json::object();
    }
    nlohmann::json parsed = nlohmann::json::parse(io::read_file(out));
    std::filesystem::remove(out);
    return parsed;
  }();
  return j;
}

// |a - b| within 1e-9 of the larger magnitude (both sides only round differently).
::testing::AssertionResult close(double a, double b) {
  if (std::abs(a - b) <= 1e-9 * std::max({1.0, std::abs(a), std::abs(b)})) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << a << " vs NLTK " << b << " (diff " << a - b << ")";
}

TEST(BleuAgainstNltk, CorpusBleuOnTheSameTokensWithAndWithoutSmoothing) {
  const nlohmann::json& j = nltk();
  ASSERT_TRUE(j.contains("bleu"));
  ASSERT_GE(j["bleu"].size(), 7u);
  for (const auto& c : j["bleu"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    BleuStats stats;
    for (size_t i = 0; i < c["hyps"].size(); ++i)
      stats += bleu_segment_stats(c["hyps"][i].get<Words>(), c["refs"][i].get<std::vector<Words>>(), 4);
    EXPECT_TRUE(close(bleu_from_stats(stats).score, c["exp"].get<double>()));
    BleuOptions none;
    none.smooth = BleuSmooth::None;
    if (!c["none"].is_null()) {
      EXPECT_TRUE(close(bleu_from_stats(stats, none).score, c["none"].get<double>()));
    } else {
      // NLTK floors a zero precision to 1e-308 (a score near 1e-75); sacreBLEU gives exactly 0.
      EXPECT_EQ(bleu_from_stats(stats, none).score, 0.0);
    }
  }
}

TEST(BleuAgainstNltk, RawTextThroughThirteenAMatchesNltkOnPythonTokens) {
  const nlohmann::json& j = nltk();
  int cases = 0;
  for (const auto& c : j.value("bleu", nlohmann::json::array())) {
    if (!c.contains("raw_hyps")) continue;
    ++cases;
    const auto hyps = c["raw_hyps"].get<std::vector<std::string>>();
    const auto per_segment = c["raw_refs"].get<std::vector<std::vector<std::string>>>();
    std::vector<std::vector<std::string>> streams(1);
    for (const auto& refs : per_segment) streams[0].push_back(refs.at(0));
    EXPECT_TRUE(close(corpus_bleu(hyps, streams).score, c["exp"].get<double>()));
  }
  EXPECT_GE(cases, 1);
}

TEST(Tokenize13aAgainstPythonRe, EveryStringTokenizesAlike) {
  const nlohmann::json& j = nltk();
  ASSERT_TRUE(j.contains("tok13a"));
  for (const auto& t : j["tok13a"]) {
    const std::string in = t["in"].get<std::string>();
    EXPECT_EQ(tokenize_13a(in), t["out"].get<std::string>()) << "input: '" << in << "'";
  }
}

TEST(ChrfAgainstNltk, SentenceChrfEqualsEpsSmoothedChrf) {
  const nlohmann::json& j = nltk();
  ASSERT_TRUE(j.contains("chrf"));
  ChrfOptions eps;
  eps.eps_smoothing = true;
  for (const auto& c : j["chrf"]) {
    const std::string hyp = c["hyp"].get<std::string>(), ref = c["ref"].get<std::string>();
    const double want = c["eps_chrf"].get<double>();
    const double got = corpus_chrf({hyp}, {{ref}}, eps).score;
    EXPECT_NEAR(got, want, 1e-9) << "'" << hyp << "' vs '" << ref << "'";
  }
}

}  // namespace
}  // namespace attn::train
