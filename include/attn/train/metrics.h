// attn/train/metrics.h — corpus BLEU and chrF computed as sacreBLEU 2.x computes them by default,
// the metrics the paper's Table 2 (BLEU, §6.1) and later MT work report on detokenized output.
// BLEU: mteval-v13a tokenization, n-grams up to 4, clipped counts against the most generous
// reference, brevity penalty from the closest reference length, "exp" (NIST) smoothing.
// chrF: character 6-grams without whitespace, beta 2, effective-order averaging.
// Not here: lowercasing, the intl/zh/ja tokenizers, TER, significance tests or bootstrap.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attn::train {

// ---- text helpers --------------------------------------------------------------------------

// The words of `text` as Python's str.split() gives them: runs of characters between Unicode
// whitespace (the 29 code points for which str.isspace() is true). Invalid UTF-8 is an error.
std::vector<std::string> split_unicode_whitespace(std::string_view text);

// sacreBLEU's "13a" tokenizer (mteval-v13a.pl): drops "<skipped>", joins "-\n" hyphenations,
// unescapes &quot; &amp; &lt; &gt;, puts spaces around ASCII punctuation and symbols (periods
// and commas only next to a non-digit, dashes only after a digit) and collapses whitespace.
// Returns the tokens joined by single spaces. Invalid UTF-8 is an error.
std::string tokenize_13a(std::string_view line);

// ---- BLEU ----------------------------------------------------------------------------------

enum class BleuTokenize {
  Mteval13a,  // "13a", sacreBLEU's default
  None,        // "none": split on whitespace only (for text that is already tokenized)
};
enum class BleuSmooth {
  None,   // "none": a zero n-gram precision makes the score 0
  Floor,  // "floor": zero counts become smooth_value (default 0.1)
  AddK,   // "add-k": k (default 1) added to matches and totals of orders >= 2
  Exp,    // "exp": the k-th zero precision becomes 1 / (2^k * total) (sacreBLEU's default)
};
const char* bleu_tokenize_name(BleuTokenize t);
BleuTokenize parse_bleu_tokenize(const std::string& name);
const char* bleu_smooth_name(BleuSmooth s);
BleuSmooth parse_bleu_smooth(const std::string& name);

struct BleuOptions {
  BleuTokenize tokenize = BleuTokenize::Mteval13a;
  BleuSmooth smooth = BleuSmooth::Exp;
  double smooth_value = -1;    // < 0: the method's default (floor 0.1, add-k 1)
  int64_t max_order = 4;       // n-grams of 1..max_order words
  bool effective_order = false;  // average only over orders the hypotheses have (sentence BLEU)
};

// Sufficient statistics: summed over segments, they give the corpus score.
struct BleuStats {
  int64_t hyp_len = 0, ref_len = 0;  // words; ref_len sums each segment's closest reference
  std::vector<int64_t> correct;      // clipped n-gram matches, one per order
  std::vector<int64_t> total;        // hypothesis n-grams, one per order
  BleuStats& operator+=(const BleuStats& other);
};

struct BleuScore {
  double score = 0;                 // 0..100
  std::vector<double> precisions;   // per order, 0..100, after smoothing
  double bp = 0;                    // brevity penalty
  BleuStats stats;
  int64_t n_refs = 1;               // references per segment (-1 when it varies)
  BleuOptions options;
  double ratio() const;             // hyp_len / ref_len (0 when ref_len is 0)
  // "BLEU = 34.21 66.7/40.0/25.0/14.3 (BP = 1.000 ratio = 1.000 hyp_len = 9 ref_len = 9)"
  std::string format() const;
  // sacreBLEU's reproducibility signature without its version: "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp".
  std::string signature() const;
};

// Statistics of one segment from its (already tokenized) words: the hypothesis n-grams are
// clipped by the largest count of each n-gram in any one reference, and ref_len is the
// reference length closest to the hypothesis length (the shorter one on a tie).
BleuStats bleu_segment_stats(const std::vector<std::string>& hyp_words,
                             const std::vector<std::vector<std::string>>& refs_words, int64_t max_order);
// The score of summed statistics (sacreBLEU's compute_bleu, including its log(0) = -9999999999).
BleuScore bleu_from_stats(const BleuStats& stats, const BleuOptions& options = {});

// Corpus BLEU of hypotheses against reference streams: refs[k][i] is the k-th reference of
// segment i (sacreBLEU's layout); every stream has as many lines as `hyps`. A segment whose
// references are all "" is an error (as in sacreBLEU), a "" among others is ignored; an empty
// hypothesis is allowed (it adds no n-grams). Errors name the stream and 1-based line.
BleuScore corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs,
                      const BleuOptions& options = {});

// ---- chrF ----------------------------------------------------------------------------------

struct ChrfOptions {
  int64_t char_order = 6;     // character n-grams of 1..char_order code points
  int64_t word_order = 0;     // word n-grams of 1..word_order (2: chrF++)
  double beta = 2;            // recall weighs beta times as much as precision
  bool whitespace = false;    // keep whitespace in character n-grams
  bool eps_smoothing = false; // average per-order F-scores (chrF++.py, NLTK) instead
};

struct ChrfScore {
  double score = 0;               // 0..100
  std::vector<int64_t> stats;     // [hyp n-grams, ref n-grams, matches] per order, chars first
  int64_t n_refs = 1;
  ChrfOptions options;
  std::string name() const;       // "chrF2", "chrF2++"
  std::string format() const;     // "chrF2 = 58.34"
  std::string signature() const;  // "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no"
};

// The chrF statistics of one segment against one reference.
std::vector<int64_t> chrf_segment_stats(std::string_view hyp, std::string_view ref, const ChrfOptions& options);
// The F-score of (summed) statistics, 0..100.
double chrf_from_stats(const std::vector<int64_t>& stats, const ChrfOptions& options);
// Corpus chrF: per segment the reference with the best sentence-level F-score is kept (the
// first on a tie), and the statistics are summed before the F-score. Inputs as corpus_bleu.
ChrfScore corpus_chrf(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs,
                      const ChrfOptions& options = {});

}  // namespace attn::train
