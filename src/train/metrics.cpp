// Corpus BLEU (Papineni et al., 2002) and chrF (Popović, 2015) as sacreBLEU 2.x computes them.
// The 13a tokenizer's four regular expressions are applied as Python's re.sub does (one left-to-
// right pass each, matches never overlapping); they only look at ASCII, so working on UTF-8 bytes
// gives the same result as Python's code points. Character n-grams and whitespace are Unicode code
// points, as in Python strings. Not here: case folding, other tokenizers, bootstrap resampling.
#include "attn/train/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "attn/core/error.h"
#include "attn/io/vocab.h"

namespace attn::train {

namespace {

// ---- UTF-8 and Python's notion of whitespace -----------------------------------------------

// The code points for which Python's str.isspace() is true (what str.split() splits on).
bool is_unicode_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

void check_utf8(std::string_view text, const char* op) {
  const int64_t bad = io::utf8_error_offset(std::string(text));
  ATTN_CHECK(bad < 0, op, "invalid UTF-8 at byte ", bad);
}

// Code points of valid UTF-8 (checked by the caller).
std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += len;
  }
  return out;
}

// Byte length of each code point of valid UTF-8.
std::vector<size_t> utf8_lengths(std::string_view s) {
  std::vector<size_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    out.push_back(len);
    i += len;
  }
  return out;
}

// Python's str.split() on valid UTF-8.
std::vector<std::string> split_valid(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  const std::u32string cps = decode_utf8(s);
  const std::vector<size_t> lens = utf8_lengths(s);
  size_t at = 0;
  for (size_t k = 0; k < cps.size(); ++k) {
    if (is_unicode_space(cps[k])) {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.append(s.substr(at, lens[k]));
    }
    at += lens[k];
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

// Python's str.rstrip() on valid UTF-8.
std::string_view rstrip_valid(std::string_view s) {
  const std::u32string cps = decode_utf8(s);
  const std::vector<size_t> lens = utf8_lengths(s);
  size_t end = s.size();
  for (size_t k = cps.size(); k > 0 && is_unicode_space(cps[k - 1]); --k) end -= lens[k - 1];
  return s.substr(0, end);
}

std::string join(const std::vector<std::string>& words, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    if (i > begin) out += ' ';
    out += words[i];
  }
  return out;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size()) {
    out.append(s, at, hit - at);
    out.append(to);
  }
  out.append(s, at, std::string::npos);
  s = std::move(out);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The 13a class [\{-\~\[-\` -\&\(-\+\:-\@\/]: { | } ~  [ \ ] ^ _ `  space ! " # $ % &
// ( ) * +  : ; < = > ? @  and /. Not among them: ' - . , (handled by the rules after it).
bool is_13a_symbol(char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') || (c >= '(' && c <= '+') ||
         (c >= ':' && c <= '@') || c == '/';
}

// ---- n-gram counting -----------------------------------------------------------------------

using Counts = std::unordered_map<std::string, int64_t>;

// Word n-grams of orders 1..max_order, each keyed by its words joined with one space.
Counts word_ngrams(const std::vector<std::string>& words, int64_t min_order, int64_t max_order) {
  Counts c;
  for (int64_t n = min_order; n <= max_order; ++n)
    for (size_t i = 0; i + static_cast<size_t>(n) <= words.size(); ++i)
      ++c[join(words, i, i + static_cast<size_t>(n))];
  return c;
}

// Segments with their non-empty references, after checking the corpus's shape and encoding.
struct Corpus {
  std::vector<std::vector<const std::string*>> refs;  // per segment
  int64_t n_refs = 0;                                 // -1 when it varies
};

Corpus check_corpus(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs,
                    const char* op) {
  ATTN_CHECK(!hyps.empty(), op, "no hypotheses to score");
  ATTN_CHECK(!refs.empty(), op, "no references: give at least one reference stream");
  for (size_t k = 0; k < refs.size(); ++k)
    ATTN_CHECK(refs[k].size() == hyps.size(), op, "reference stream ", k + 1, " has ", refs[k].size(),
               " lines but there are ", hyps.size(), " hypotheses");
  Corpus c;
  c.refs.resize(hyps.size());
  for (size_t i = 0; i < hyps.size(); ++i) {
    const int64_t bad = io::utf8_error_offset(hyps[i]);
    ATTN_CHECK(bad < 0, op, "hypothesis line ", i + 1, ": invalid UTF-8 at byte ", bad);
    for (size_t k = 0; k < refs.size(); ++k) {
      const int64_t rbad = io::utf8_error_offset(refs[k][i]);
      ATTN_CHECK(rbad < 0, op, "reference stream ", k + 1, " line ", i + 1, ": invalid UTF-8 at byte ", rbad);
      if (!refs[k][i].empty()) c.refs[i].push_back(&refs[k][i]);
    }
    ATTN_CHECK(!c.refs[i].empty(), op, "line ", i + 1, ": the reference is empty (sacreBLEU refuses empty references)");
    const auto n = static_cast<int64_t>(c.refs[i].size());
    c.n_refs = i == 0 ? n : (c.n_refs == n ? n : -1);
  }
  return c;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string nrefs_str(int64_t n) { return n < 0 ? std::string("var") : std::to_string(n); }

// sacreBLEU's my_log: log(0) is -9999999999 rather than -inf.
double my_log(double x) { return x == 0 ? -9999999999.0 : std::log(x); }

}  // namespace

// ---- text helpers --------------------------------------------------------------------------

std::vector<std::string> split_unicode_whitespace(std::string_view text) {
  check_utf8(text, "split");
  return split_valid(text);
}

std::string tokenize_13a(std::string_view text) {
  check_utf8(text, "bleu");
  // Language-independent part of mteval-v13a, in its order.
  std::string line(text);
  replace_all(line, "<skipped>", "");
  replace_all(line, "-\n", "");
  replace_all(line, "\n", " ");
  replace_all(line, "&quot;", "\"");
  replace_all(line, "&amp;", "&");
  replace_all(line, "&lt;", "<");
  replace_all(line, "&gt;", ">");
  line = " " + line + " ";

  // 1. ([\{-\~\[-\` -\&\(-\+\:-\@\/]) -> " \1 "
  std::string a;
  for (char c : line) {
    if (is_13a_symbol(c)) {
      a += ' ';
      a += c;
      a += ' ';
    } else {
      a += c;
    }
  }
  // 2. ([^0-9])([\.,]) -> "\1 \2 ": period and comma unless preceded by a digit.
  std::string b;
  for (size_t i = 0; i < a.size();) {
    if (i + 1 < a.size() && !is_digit(a[i]) && (a[i + 1] == '.' || a[i + 1] == ',')) {
      b += a[i];
      b += ' ';
      b += a[i + 1];
      b += ' ';
      i += 2;
    } else {
      b += a[i++];
    }
  }
  // 3. ([\.,])([^0-9]) -> " \1 \2": period and comma unless followed by a digit.
  std::string c;
  for (size_t i = 0; i < b.size();) {
    if (i + 1 < b.size() && (b[i] == '.' || b[i] == ',') && !is_digit(b[i + 1])) {
      c += ' ';
      c += b[i];
      c += ' ';
      c += b[i + 1];
      i += 2;
    } else {
      c += b[i++];
    }
  }
  // 4. ([0-9])(-) -> "\1 \2 ": a dash after a digit.
  std::string d;
  for (size_t i = 0; i < c.size();) {
    if (i + 1 < c.size() && is_digit(c[i]) && c[i + 1] == '-') {
      d += c[i];
      d += " - ";
      i += 2;
    } else {
      d += c[i++];
    }
  }
  // One space between words, none around them.
  const std::vector<std::string> words = split_valid(d);
  return join(words, 0, words.size());
}

// ---- BLEU ----------------------------------------------------------------------------------

const char* bleu_tokenize_name(BleuTokenize t) { return t == BleuTokenize::Mteval13a ? "13a" : "none"; }

BleuTokenize parse_bleu_tokenize(const std::string& name) {
  if (name == "13a") return BleuTokenize::Mteval13a;
  if (name == "none") return BleuTokenize::None;
  fail("bleu", "unknown tokenizer '", name, "' (expected 13a or none)");
}

const char* bleu_smooth_name(BleuSmooth s) {
  switch (s) {
    case BleuSmooth::None: return "none";
    case BleuSmooth::Floor: return "floor";
    case BleuSmooth::AddK: return "add-k";
    case BleuSmooth::Exp: return "exp";
  }
  return "?";
}

BleuSmooth parse_bleu_smooth(const std::string& name) {
  if (name == "none") return BleuSmooth::None;
  if (name == "floor") return BleuSmooth::Floor;
  if (name == "add-k") return BleuSmooth::AddK;
  if (name == "exp") return BleuSmooth::Exp;
  fail("bleu", "unknown smoothing '", name, "' (expected exp, none, floor or add-k)");
}

BleuStats& BleuStats::operator+=(const BleuStats& o) {
  if (correct.empty()) {
    correct.assign(o.correct.size(), 0);
    total.assign(o.total.size(), 0);
  }
  ATTN_CHECK(correct.size() == o.correct.size() && total.size() == o.total.size(), "bleu",
             "cannot add statistics of ", o.correct.size(), "-grams to those of ", correct.size(), "-grams");
  hyp_len += o.hyp_len;
  ref_len += o.ref_len;
  for (size_t n = 0; n < correct.size(); ++n) {
    correct[n] += o.correct[n];
    total[n] += o.total[n];
  }
  return *this;
}

double BleuScore::ratio() const {
  return stats.ref_len > 0 ? static_cast<double>(stats.hyp_len) / static_cast<double>(stats.ref_len) : 0.0;
}

std::string BleuScore::format() const {
  std::string prec;
  for (size_t n = 0; n < precisions.size(); ++n) prec += (n ? "/" : "") + fixed(precisions[n], 1);
  return str_cat("BLEU = ", fixed(score, 2), " ", prec, " (BP = ", fixed(bp, 3), " ratio = ", fixed(ratio(), 3),
                 " hyp_len = ", stats.hyp_len, " ref_len = ", stats.ref_len, ")");
}

std::string BleuScore::signature() const {
  std::string smooth = bleu_smooth_name(options.smooth);
  if (options.smooth == BleuSmooth::Floor || options.smooth == BleuSmooth::AddK) {
    const double v = options.smooth_value >= 0 ? options.smooth_value : options.smooth == BleuSmooth::Floor ? 0.1 : 1.0;
    smooth += "[" + fixed(v, 2) + "]";
  }
  return str_cat("nrefs:", nrefs_str(n_refs), "|case:mixed|eff:", options.effective_order ? "yes" : "no",
                 "|tok:", bleu_tokenize_name(options.tokenize), "|smooth:", smooth);
}

BleuStats bleu_segment_stats(const std::vector<std::string>& hyp_words,
                             const std::vector<std::vector<std::string>>& refs_words, int64_t max_order) {
  ATTN_CHECK(max_order >= 1, "bleu", "max n-gram order must be >= 1, got ", max_order);
  ATTN_CHECK(!refs_words.empty(), "bleu", "a segment needs at least one reference");
  // The most generous reference count of each n-gram, and the reference lengths.
  Counts ref_counts;
  std::vector<int64_t> ref_lens;
  for (const auto& ref : refs_words) {
    ref_lens.push_back(static_cast<int64_t>(ref.size()));
    for (const auto& [gram, count] : word_ngrams(ref, 1, max_order)) {
      int64_t& best = ref_counts[gram];
      best = std::max(best, count);
    }
  }
  BleuStats s;
  s.hyp_len = static_cast<int64_t>(hyp_words.size());
  // Closest reference length; the shorter one on a tie.
  int64_t best_diff = -1;
  for (int64_t len : ref_lens) {
    const int64_t diff = std::abs(s.hyp_len - len);
    if (best_diff < 0 || diff < best_diff || (diff == best_diff && len < s.ref_len)) {
      best_diff = diff;
      s.ref_len = len;
    }
  }
  s.correct.assign(static_cast<size_t>(max_order), 0);
  s.total.assign(static_cast<size_t>(max_order), 0);
  for (int64_t n = 1; n <= max_order; ++n) {
    for (const auto& [gram, count] : word_ngrams(hyp_words, n, n)) {
      s.total[static_cast<size_t>(n - 1)] += count;
      auto it = ref_counts.find(gram);
      if (it != ref_counts.end()) s.correct[static_cast<size_t>(n - 1)] += std::min(count, it->second);
    }
  }
  return s;
}

BleuScore bleu_from_stats(const BleuStats& stats, const BleuOptions& options) {
  const int64_t order = options.max_order;
  ATTN_CHECK(order >= 1, "bleu", "max n-gram order must be >= 1, got ", order);
  ATTN_CHECK(static_cast<int64_t>(stats.correct.size()) == order && static_cast<int64_t>(stats.total.size()) == order,
             "bleu", "statistics hold ", stats.correct.size(), " orders but max_order is ", order);
  const double value = options.smooth_value >= 0          ? options.smooth_value
                       : options.smooth == BleuSmooth::Floor ? 0.1
                                                           : 1.0;
  BleuScore r;
  r.options = options;
  r.stats = stats;
  r.precisions.assign(static_cast<size_t>(order), 0.0);
  const auto sys_len = static_cast<double>(stats.hyp_len), ref_len = static_cast<double>(stats.ref_len);
  r.bp = stats.hyp_len < stats.ref_len ? (stats.hyp_len > 0 ? std::exp(1.0 - ref_len / sys_len) : 0.0) : 1.0;
  // No match at any order: 0 (sacreBLEU's early stop).
  if (std::all_of(stats.correct.begin(), stats.correct.end(), [](int64_t c) { return c == 0; })) return r;

  double smooth_mteval = 1.0;
  int64_t eff_order = order;
  for (int64_t n = 1; n <= order; ++n) {
    const auto k = static_cast<size_t>(n - 1);
    double correct = static_cast<double>(stats.correct[k]), total = static_cast<double>(stats.total[k]);
    if (options.smooth == BleuSmooth::AddK && n > 1) {
      correct += value;
      total += value;
    }
    if (total == 0) break;  // the hypotheses have no n-grams of this order
    if (options.effective_order) eff_order = n;
    if (correct == 0) {
      if (options.smooth == BleuSmooth::Exp) {
        smooth_mteval *= 2;
        r.precisions[k] = 100.0 / (smooth_mteval * total);
      } else if (options.smooth == BleuSmooth::Floor) {
        r.precisions[k] = 100.0 * value / total;
      }
    } else {
      r.precisions[k] = 100.0 * correct / total;
    }
  }
  double log_sum = 0;
  for (int64_t n = 0; n < eff_order; ++n) log_sum += my_log(r.precisions[static_cast<size_t>(n)]);
  r.score = r.bp * std::exp(log_sum / static_cast<double>(eff_order));
  return r;
}

BleuScore corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs,
                      const BleuOptions& options) {
  ATTN_CHECK(options.max_order >= 1, "bleu", "max n-gram order must be >= 1, got ", options.max_order);
  const Corpus corpus = check_corpus(hyps, refs, "bleu");
  // sacreBLEU's preprocessing: strip trailing whitespace, then tokenize.
  const auto words = [&](const std::string& line) {
    const std::string_view s = rstrip_valid(line);
    return split_valid(options.tokenize == BleuTokenize::Mteval13a ? tokenize_13a(s) : std::string(s));
  };
  BleuStats total;
  total.correct.assign(static_cast<size_t>(options.max_order), 0);
  total.total.assign(static_cast<size_t>(options.max_order), 0);
  for (size_t i = 0; i < hyps.size(); ++i) {
    std::vector<std::vector<std::string>> ref_words;
    for (const std::string* r : corpus.refs[i]) ref_words.push_back(words(*r));
    total += bleu_segment_stats(words(hyps[i]), ref_words, options.max_order);
  }
  BleuScore r = bleu_from_stats(total, options);
  r.n_refs = corpus.n_refs;
  return r;
}

// ---- chrF ----------------------------------------------------------------------------------

namespace {

using CharCounts = std::unordered_map<std::u32string, int64_t>;

// sacreBLEU's chrF++ word splitting: one punctuation mark is split off the end of a word, or
// else off its start ("(hi)" gives "(hi" and ")").
std::vector<std::string> chrf_words(std::string_view sent) {
  static const std::string kPuncts = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
  const auto is_punct = [&](char c) { return kPuncts.find(c) != std::string::npos; };
  std::vector<std::string> out;
  for (std::string& w : split_valid(sent)) {
    if (utf8_lengths(w).size() == 1) {
      out.push_back(std::move(w));
    } else if (is_punct(w.back())) {
      out.push_back(w.substr(0, w.size() - 1));
      out.push_back(w.substr(w.size() - 1));
    } else if (is_punct(w.front())) {
      out.push_back(w.substr(0, 1));
      out.push_back(w.substr(1));
    } else {
      out.push_back(std::move(w));
    }
  }
  return out;
}

// [hyp n-grams (0 when the reference has none of this order), ref n-grams, clipped matches].
template <class Map>
void match_stats(const Map& hyp, const Map& ref, std::vector<int64_t>& out) {
  int64_t hyp_count = 0, ref_count = 0, match = 0;
  for (const auto& [gram, count] : hyp) {
    hyp_count += count;
    auto it = ref.find(gram);
    if (it != ref.end()) match += std::min(count, it->second);
  }
  for (const auto& [gram, count] : ref) ref_count += count;
  out.push_back(ref.empty() ? 0 : hyp_count);
  out.push_back(ref_count);
  out.push_back(match);
}

// Character n-grams of orders 1..max_order of `s` (whitespace removed unless kept).
std::vector<CharCounts> char_ngrams(std::string_view s, const ChrfOptions& o) {
  std::u32string cps = decode_utf8(s);
  if (!o.whitespace) std::erase_if(cps, is_unicode_space);
  std::vector<CharCounts> out(static_cast<size_t>(o.char_order));
  for (int64_t n = 1; n <= o.char_order; ++n)
    for (size_t i = 0; i + static_cast<size_t>(n) <= cps.size(); ++i)
      ++out[static_cast<size_t>(n - 1)][cps.substr(i, static_cast<size_t>(n))];
  return out;
}

void check_chrf_options(const ChrfOptions& o) {
  ATTN_CHECK(o.char_order >= 0 && o.word_order >= 0 && o.char_order + o.word_order >= 1, "chrf",
             "n-gram orders must be >= 0 and not both 0, got char_order ", o.char_order, " and word_order ",
             o.word_order);
  ATTN_CHECK(o.beta > 0 && std::isfinite(o.beta), "chrf", "beta must be > 0, got ", o.beta);
}

}  // namespace

std::string ChrfScore::name() const {
  return str_cat("chrF", static_cast<int64_t>(options.beta), std::string(static_cast<size_t>(options.word_order), '+'));
}

std::string ChrfScore::format() const { return name() + " = " + fixed(score, 2); }

std::string ChrfScore::signature() const {
  return str_cat("nrefs:", nrefs_str(n_refs), "|case:mixed|eff:", options.eps_smoothing ? "no" : "yes",
                 "|nc:", options.char_order, "|nw:", options.word_order, "|space:", options.whitespace ? "yes" : "no");
}

std::vector<int64_t> chrf_segment_stats(std::string_view hyp, std::string_view ref, const ChrfOptions& o) {
  check_chrf_options(o);
  check_utf8(hyp, "chrf");
  check_utf8(ref, "chrf");
  std::vector<int64_t> stats;
  const std::vector<CharCounts> h = char_ngrams(hyp, o), r = char_ngrams(ref, o);
  for (size_t n = 0; n < h.size(); ++n) match_stats(h[n], r[n], stats);
  if (o.word_order > 0) {
    const std::vector<std::string> hw = chrf_words(hyp), rw = chrf_words(ref);
    for (int64_t n = 1; n <= o.word_order; ++n) match_stats(word_ngrams(hw, n, n), word_ngrams(rw, n, n), stats);
  }
  return stats;
}

double chrf_from_stats(const std::vector<int64_t>& stats, const ChrfOptions& o) {
  check_chrf_options(o);
  const int64_t order = o.char_order + o.word_order;
  ATTN_CHECK(static_cast<int64_t>(stats.size()) == 3 * order, "chrf", "expected ", 3 * order,
             " statistics (3 per order), got ", stats.size());
  const double eps = 1e-16, factor = o.beta * o.beta;
  double score = 0, avg_prec = 0, avg_rec = 0;
  int64_t effective_order = 0;
  for (int64_t i = 0; i < order; ++i) {
    const auto n_hyp = static_cast<double>(stats[static_cast<size_t>(3 * i)]);
    const auto n_ref = static_cast<double>(stats[static_cast<size_t>(3 * i + 1)]);
    const auto n_match = static_cast<double>(stats[static_cast<size_t>(3 * i + 2)]);
    const double prec = n_hyp > 0 ? n_match / n_hyp : eps;
    const double rec = n_ref > 0 ? n_match / n_ref : eps;
    const double denom = factor * prec + rec;
    score += denom > 0 ? (1 + factor) * prec * rec / denom : eps;
    if (n_hyp > 0 && n_ref > 0) {
      avg_prec += prec;
      avg_rec += rec;
      ++effective_order;
    }
  }
  if (o.eps_smoothing) return 100 * score / static_cast<double>(order);
  if (effective_order == 0) return 0.0;
  avg_prec /= static_cast<double>(effective_order);
  avg_rec /= static_cast<double>(effective_order);
  if (avg_prec + avg_rec == 0) return 0.0;
  return 100 * (1 + factor) * avg_prec * avg_rec / (factor * avg_prec + avg_rec);
}

ChrfScore corpus_chrf(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs,
                      const ChrfOptions& options) {
  check_chrf_options(options);
  const Corpus corpus = check_corpus(hyps, refs, "chrf");
  ChrfScore r;
  r.options = options;
  r.n_refs = corpus.n_refs;
  r.stats.assign(static_cast<size_t>(3 * (options.char_order + options.word_order)), 0);
  for (size_t i = 0; i < hyps.size(); ++i) {
    std::vector<int64_t> best;
    double best_f = -1;
    for (const std::string* ref : corpus.refs[i]) {
      std::vector<int64_t> s = chrf_segment_stats(hyps[i], *ref, options);
      const double f = chrf_from_stats(s, options);
      if (f > best_f) {
        best_f = f;
        best = std::move(s);
      }
    }
    for (size_t k = 0; k < best.size(); ++k) r.stats[k] += best[k];
  }
  r.score = chrf_from_stats(r.stats, options);
  return r;
}

}  // namespace attn::train
