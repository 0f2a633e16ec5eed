// Corpus BLEU and chrF: worked examples by hand (every n-gram count written out), the edge cases
// (empty hypothesis, no overlap, hypotheses shorter than 4 words, a single sentence, several
// references), the 13a tokenizer's rules, sacreBLEU's output format and signature, and bad input.
// NLTK's corpus_bleu and sentence_chrf on the same tokens: tests/torch/metrics_nltk_test.cpp.
#include "attn/train/metrics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "attn/core/error.h"

namespace attn::train {
namespace {

using Lines = std::vector<std::string>;

double bleu(const Lines& hyps, const std::vector<Lines>& refs, BleuOptions o = {}) {
  return corpus_bleu(hyps, refs, o).score;
}
double chrf(const Lines& hyps, const std::vector<Lines>& refs, ChrfOptions o = {}) {
  return corpus_chrf(hyps, refs, o).score;
}

TEST(Bleu, IdenticalSentencesScore100) {
  const BleuScore s = corpus_bleu({"the cat sat on the mat ."}, {{"the cat sat on the mat ."}});
  EXPECT_DOUBLE_EQ(s.score, 100.0);
  EXPECT_DOUBLE_EQ(s.bp, 1.0);
  EXPECT_EQ(s.stats.hyp_len, 7);
  EXPECT_EQ(s.stats.ref_len, 7);
}

// hyp "the cat is on the mat" against "the cat sat on the mat":
//   1-grams: the x2, cat, on, mat match        5/6
//   2-grams: "the cat", "on the", "the mat"     3/5
//   3-grams: "on the mat"                       1/4
//   4-grams: none                               0/3 -> exp smoothing: 1 / (2 * 3)
// BLEU = (5/6 * 3/5 * 1/4 * 1/6)^(1/4) = (1/48)^(1/4) = 37.9918...
TEST(Bleu, WorkedExampleWithExpSmoothing) {
  const BleuScore s = corpus_bleu({"the cat is on the mat"}, {{"the cat sat on the mat"}});
  EXPECT_EQ(s.stats.correct, (std::vector<int64_t>{5, 3, 1, 0}));
  EXPECT_EQ(s.stats.total, (std::vector<int64_t>{6, 5, 4, 3}));
  EXPECT_NEAR(s.precisions[0], 500.0 / 6, 1e-12);
  EXPECT_NEAR(s.precisions[1], 60.0, 1e-12);
  EXPECT_NEAR(s.precisions[2], 25.0, 1e-12);
  EXPECT_NEAR(s.precisions[3], 100.0 / 6, 1e-12);
  EXPECT_NEAR(s.score, 100 * std::pow(1.0 / 48, 0.25), 1e-10);
  EXPECT_EQ(s.format(), "BLEU = 37.99 83.3/60.0/25.0/16.7 (BP = 1.000 ratio = 1.000 hyp_len = 6 ref_len = 6)");
  EXPECT_EQ(s.signature(), "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp");
}

TEST(Bleu, ZeroFourGramMatchesScoreZeroWithoutSmoothingAndFloorUsesItsValue) {
  BleuOptions none;
  none.smooth = BleuSmooth::None;
  EXPECT_EQ(bleu({"the cat is on the mat"}, {{"the cat sat on the mat"}}, none), 0.0);
  BleuOptions floor;
  floor.smooth = BleuSmooth::Floor;  // 0.1 / 3 for the 4-grams
  EXPECT_NEAR(bleu({"the cat is on the mat"}, {{"the cat sat on the mat"}}, floor),
              100 * std::pow(5.0 / 6 * 3.0 / 5 * 1.0 / 4 * 0.1 / 3, 0.25), 1e-10);
  EXPECT_EQ(corpus_bleu({"a"}, {{"a"}}, floor).signature(), "nrefs:1|case:mixed|eff:no|tok:13a|smooth:floor[0.10]");
}

// add-k adds 1 to the matches and totals of orders 2..4: 5/6, 4/6, 2/5, 1/4.
TEST(Bleu, AddKSmoothingAddsOneFromBigramsOn) {
  BleuOptions o;
  o.smooth = BleuSmooth::AddK;
  EXPECT_NEAR(bleu({"the cat is on the mat"}, {{"the cat sat on the mat"}}, o),
              100 * std::pow(5.0 / 6 * 4.0 / 6 * 2.0 / 5 * 1.0 / 4, 0.25), 1e-10);
}

// "the cat" against a 6-word reference: BP = exp(1 - 6/2); no 3-grams in the hypothesis, so
// the precision stays 0 and the score is 0 (sacreBLEU), unless only the orders the hypothesis
// has are averaged (effective order): then 100 * BP.
TEST(Bleu, ShortHypothesisScoresZeroUnlessEffectiveOrder) {
  const BleuScore s = corpus_bleu({"the cat"}, {{"the cat sat on the mat"}});
  EXPECT_EQ(s.score, 0.0);
  EXPECT_NEAR(s.bp, std::exp(-2.0), 1e-15);
  BleuOptions eff;
  eff.effective_order = true;
  EXPECT_NEAR(bleu({"the cat"}, {{"the cat sat on the mat"}}, eff), 100 * std::exp(-2.0), 1e-10);
}

TEST(Bleu, EmptyHypothesisScoresZeroWithZeroBrevityPenalty) {
  const BleuScore s = corpus_bleu({""}, {{"a b c d"}});
  EXPECT_EQ(s.score, 0.0);
  EXPECT_EQ(s.bp, 0.0);
  EXPECT_EQ(s.stats.hyp_len, 0);
  EXPECT_EQ(s.stats.ref_len, 4);
  // In a corpus it only lengthens the reference: BP = exp(1 - 8/4) on an otherwise exact match.
  EXPECT_NEAR(bleu({"a b c d", ""}, {{"a b c d", "e f g h"}}), 100 * std::exp(-1.0), 1e-10);
}

TEST(Bleu, NoOverlapScoresZero) {
  const BleuScore s = corpus_bleu({"w x y z"}, {{"a b c d"}});
  EXPECT_EQ(s.score, 0.0);
  EXPECT_EQ(s.stats.correct, (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(s.format(), "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 1.000 ratio = 1.000 hyp_len = 4 ref_len = 4)");
}

// Corpus BLEU sums the counts before dividing (not the mean of sentence scores): segment 1 is
// exact, segment 2 shares nothing, so every order matches half of its n-grams: BLEU 50.
TEST(Bleu, CorpusSumsCountsBeforeDividing) {
  const BleuScore s = corpus_bleu({"a b c d", "w x y z"}, {{"a b c d", "e f g h"}});
  EXPECT_EQ(s.stats.correct, (std::vector<int64_t>{4, 3, 2, 1}));
  EXPECT_EQ(s.stats.total, (std::vector<int64_t>{8, 6, 4, 2}));
  EXPECT_NEAR(s.score, 50.0, 1e-10);  // every precision is 1/2
}

// Clipping takes the largest count of an n-gram in any one reference; the brevity penalty the
// reference length closest to the hypothesis (the shorter on a tie).
//   hyp  "the cat is on the mat" (6)
//   ref1 "the cat sat on the mat" (6), ref2 "there is a cat on the mat" (7)
//   1-grams: the x2, cat, is, on, mat           6/6
//   2-grams: "the cat", "on the", "the mat"      3/5
//   3-grams: "on the mat"                        1/4
//   4-grams: none                                0/3 -> 1/6
TEST(Bleu, SeveralReferencesClipByTheMostGenerousOne) {
  const BleuScore s =
      corpus_bleu({"the cat is on the mat"}, {{"the cat sat on the mat"}, {"there is a cat on the mat"}});
  EXPECT_EQ(s.stats.correct, (std::vector<int64_t>{6, 3, 1, 0}));
  EXPECT_EQ(s.stats.ref_len, 6);
  EXPECT_EQ(s.n_refs, 2);
  EXPECT_NEAR(s.score, 100 * std::pow(3.0 / 5 * 1.0 / 4 * 1.0 / 6, 0.25), 1e-10);
  EXPECT_EQ(s.signature(), "nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp");
  // Tie between lengths 3 and 5 for a 4-word hypothesis: the shorter one counts.
  EXPECT_EQ(corpus_bleu({"a b c d"}, {{"a b c d e"}, {"a b c"}}).stats.ref_len, 3);
  // An empty reference among others is ignored (variable references: nrefs "var").
  EXPECT_EQ(corpus_bleu({"a b", "c d"}, {{"a b", "c d"}, {"", "x"}}).signature(),
            "nrefs:var|case:mixed|eff:no|tok:13a|smooth:exp");
}

TEST(Bleu, TokenizesPunctuationAsThirteenA) {
  // Without tokenization "mat." would not match "mat ."; with 13a both give the same words.
  EXPECT_DOUBLE_EQ(bleu({"The cat sat on the mat."}, {{"The cat sat on the mat ."}}), 100.0);
  BleuOptions none;
  none.tokenize = BleuTokenize::None;
  EXPECT_LT(bleu({"The cat sat on the mat."}, {{"The cat sat on the mat ."}}, none), 100.0);
  // Case matters (sacreBLEU's default is case-sensitive).
  EXPECT_LT(bleu({"the cat sat on the mat"}, {{"The cat sat on the mat"}}), 100.0);
}

TEST(Tokenize13a, FollowsTheMtevalRules) {
  EXPECT_EQ(tokenize_13a("Hello, world!"), "Hello , world !");
  EXPECT_EQ(tokenize_13a("It costs $3.50."), "It costs $ 3.50 .");
  EXPECT_EQ(tokenize_13a("1,000 people"), "1,000 people");
  EXPECT_EQ(tokenize_13a("well-known 1990-2000"), "well-known 1990 - 2000");
  EXPECT_EQ(tokenize_13a("don't (really)"), "don't ( really )");
  EXPECT_EQ(tokenize_13a("e.g. this"), "e . g . this");
  EXPECT_EQ(tokenize_13a("a&amp;b &lt;tag&gt; &quot;q&quot;"), "a & b < tag > \" q \"");
  EXPECT_EQ(tokenize_13a("x<skipped>y"), "xy");
  EXPECT_EQ(tokenize_13a("hyphen-\nated line\nbreak"), "hyphenated line break");
  EXPECT_EQ(tokenize_13a("  many   spaces\there  "), "many spaces here");
  EXPECT_EQ(tokenize_13a("Straße, café."), "Straße , café .");
  EXPECT_EQ(tokenize_13a("a\xC2\xA0" "b"), "a b");  // U+00A0 is whitespace to Python's split()
  EXPECT_EQ(tokenize_13a(""), "");
  EXPECT_EQ(split_unicode_whitespace("a\xE3\x80\x80" "b\x1C" "c"), (std::vector<std::string>{"a", "b", "c"}));
}

// chrF of "ab" against "abc" (whitespace removed, orders 1..6):
//   1-grams: hyp a b (2), ref a b c (3), match 2   P 1, R 2/3
//   2-grams: hyp ab (1), ref ab bc (2), match 1    P 1, R 1/2
//   3-grams: hyp none -> not counted; 4..6: none on either side
//   P = 1, R = (2/3 + 1/2) / 2 = 7/12;  F2 = 5PR / (4P + R) = 35/55 = 63.6363...
TEST(Chrf, WorkedExampleAveragesOverTheOrdersBothSidesHave) {
  const ChrfScore s = corpus_chrf({"ab"}, {{"abc"}});
  EXPECT_EQ(s.stats, (std::vector<int64_t>{2, 3, 2, 1, 2, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_NEAR(s.score, 100.0 * 7 / 11, 1e-10);
  EXPECT_EQ(s.format(), "chrF2 = 63.64");
  EXPECT_EQ(s.signature(), "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no");
}

// "cat" against "hat": P = R = (2/3 + 1/2 + 0) / 3 = 7/18 at orders 1..3, so F = 7/18.
TEST(Chrf, WorkedExampleWithPartialOverlap) {
  EXPECT_NEAR(chrf({"cat"}, {{"hat"}}), 100.0 * 7 / 18, 1e-10);
  // eps smoothing averages the F-scores of all six orders instead: (2/3 + 1/2 + 0 + 3 eps) / 6.
  ChrfOptions eps;
  eps.eps_smoothing = true;
  EXPECT_NEAR(chrf({"cat"}, {{"hat"}}, eps), 100.0 * (2.0 / 3 + 0.5) / 6, 1e-10);
}

TEST(Chrf, IgnoresWhitespaceAndCountsCodePoints) {
  EXPECT_DOUBLE_EQ(chrf({"a b  c"}, {{"abc"}}), 100.0);
  ChrfOptions ws;
  ws.whitespace = true;
  EXPECT_LT(chrf({"a b  c"}, {{"abc"}}, ws), 100.0);
  // "é" is one character: "café" vs "cafe" shares 3 of 4 unigrams.
  const ChrfScore s = corpus_chrf({"café"}, {{"cafe"}});
  EXPECT_EQ(s.stats[0], 4);
  EXPECT_EQ(s.stats[2], 3);
}

TEST(Chrf, EdgeCasesScoreZero) {
  EXPECT_EQ(chrf({""}, {{"abc"}}), 0.0);
  EXPECT_EQ(chrf({"xyz"}, {{"abc"}}), 0.0);
  EXPECT_DOUBLE_EQ(chrf({"abc"}, {{"abc"}}), 100.0);
}

TEST(Chrf, CorpusSumsStatisticsAndPicksTheBestReference) {
  // Summed statistics: the corpus score is not the mean of the two sentence scores.
  const double a = chrf({"cat"}, {{"hat"}}), b = chrf({"dogs"}, {{"dogs"}});
  const double both = chrf({"cat", "dogs"}, {{"hat", "dogs"}});
  EXPECT_GT(both, std::min(a, b));
  EXPECT_LT(both, std::max(a, b));
  EXPECT_NE(both, (a + b) / 2);
  // With two references, the one with the better sentence F-score is used.
  EXPECT_DOUBLE_EQ(chrf({"dogs"}, {{"cats"}, {"dogs"}}), 100.0);
  EXPECT_DOUBLE_EQ(chrf({"dogs"}, {{"dogs"}, {"cats"}}), 100.0);
}

// chrF++ adds word 1- and 2-grams, splitting one punctuation mark off a word's end.
TEST(Chrf, WordOrderTwoIsChrfPlusPlus) {
  ChrfOptions pp;
  pp.word_order = 2;
  const ChrfScore s = corpus_chrf({"the cat."}, {{"the cat ."}}, pp);
  EXPECT_EQ(s.name(), "chrF2++");
  EXPECT_DOUBLE_EQ(s.score, 100.0);
  EXPECT_EQ(s.stats.size(), 3u * 8);
  EXPECT_EQ(s.stats[3 * 6], 3);  // word unigrams: the, cat, .
  // "the dog" vs "the cat": P = R at every order. Characters (thedog/thecat): 3/6, 2/5, 1/4, 0,
  // 0, 0; words: 1/2 ("the"), 0/1. chrF = 1.15 / 6, chrF++ = 1.65 / 8.
  EXPECT_NEAR(chrf({"the dog"}, {{"the cat"}}), 100 * 1.15 / 6, 1e-10);
  EXPECT_NEAR(corpus_chrf({"the dog"}, {{"the cat"}}, pp).score, 100 * 1.65 / 8, 1e-10);
}

TEST(Metrics, BadInputIsAnError) {
  EXPECT_THROW(corpus_bleu({}, {{}}), Error);                         // nothing to score
  EXPECT_THROW(corpus_bleu({"a"}, {}), Error);                        // no reference stream
  EXPECT_THROW(corpus_bleu({"a", "b"}, {{"a"}}), Error);              // line counts differ
  EXPECT_THROW(corpus_bleu({"a"}, {{""}}), Error);                    // empty reference
  EXPECT_THROW(corpus_chrf({"a"}, {{""}}), Error);
  EXPECT_THROW(corpus_bleu({"a\xFF"}, {{"a"}}), Error);               // invalid UTF-8
  EXPECT_THROW(corpus_chrf({"a"}, {{"\xC3"}}), Error);
  EXPECT_THROW(tokenize_13a("\xED\xA0\x80"), Error);                  // a surrogate
  BleuOptions zero;
  zero.max_order = 0;
  EXPECT_THROW(corpus_bleu({"a"}, {{"a"}}, zero), Error);
  ChrfOptions no_order;
  no_order.char_order = 0;
  EXPECT_THROW(corpus_chrf({"a"}, {{"a"}}, no_order), Error);
  ChrfOptions bad_beta;
  bad_beta.beta = 0;
  EXPECT_THROW(corpus_chrf({"a"}, {{"a"}}, bad_beta), Error);
  EXPECT_THROW(parse_bleu_smooth("laplace"), Error);
  EXPECT_THROW(parse_bleu_tokenize("intl"), Error);
  EXPECT_THROW(bleu_from_stats(BleuStats{}, BleuOptions{}), Error);  // no per-order counts
  try {
    corpus_bleu({"a", "b\xFF"}, {{"a", "b"}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hypothesis line 2"), std::string::npos) << e.what();
  }
}

TEST(Metrics, ParseNamesRoundTrip) {
  for (BleuSmooth s : {BleuSmooth::None, BleuSmooth::Floor, BleuSmooth::AddK, BleuSmooth::Exp})
    EXPECT_EQ(parse_bleu_smooth(bleu_smooth_name(s)), s);
  for (BleuTokenize t : {BleuTokenize::Mteval13a, BleuTokenize::None})
    EXPECT_EQ(parse_bleu_tokenize(bleu_tokenize_name(t)), t);
}

}  // namespace
}  // namespace attn::train
