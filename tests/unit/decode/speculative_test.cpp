// Speculative decoding (decode/speculative.h) and the pieces it stands on:
//   - step_many of both decoders returns, bit for bit in the batch-invariant mode, what step()
//     returns token by token, and rollback() makes the decoder forget the rejected tokens
//     (KVCache::truncate);
//   - greedy speculative decoding equals greedy_search token for token and log-probability for
//     log-probability, over random prompts and sources, both families, K = 1..8, batch 1 and 8,
//     with a draft that is the target itself (acceptance exactly 1), a noisy copy of it and an
//     unrelated smaller model, and with prompt lookup. Control: an acceptance rule off by one
//     (the test hook) is caught;
//   - speculative sampling: a chi-square test over 10^5 draws of the first tokens against the
//     target's exact distribution (brute force over all short sequences) passes, while sampling
//     from the draft alone fails it (control), as does a residual drawn from p instead of
//     norm(max(0, p - q)) (control, a test hook), and plain sample() passes (the test's own check);
//     prompt lookup's sampling passes too (2 * 10^4 draws; the checks and controls 10^4 or 2 * 10^4);
//   - prompt lookup's proposals; bad input (another vocabulary, K < 1, no step_many).
#include "attn/decode/speculative.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "attn/core/autograd.h"
#include "attn/decode/greedy.h"
#include "attn/decode/lm_decoder.h"
#include "attn/decode/sampler.h"
#include "attn/decode/transformer_decoder.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "attn/ops/batch_invariant.h"
#include "attn/ops/ops.h"
#include "unit/decode/mock_decoder.h"

namespace attn::decode {
namespace {

constexpr int64_t kPad = 0, kBos = 1, kEos = 2;

models::ModelConfig lm_config(int64_t vocab, int64_t d, int64_t layers, DType dtype, uint64_t seed) {
  models::ModelConfig c;
  c.arch = models::Arch::DecoderOnly;
  c.d_model = d;
  c.n_heads = 2;
  c.n_decoder_layers = layers;
  c.d_ff = 2 * d;
  c.dropout = 0.0;
  c.attention_dropout = 0.0;
  c.max_len = 64;
  c.src_vocab_size = vocab;
  c.tgt_vocab_size = 0;
  c.pad_id = kPad;
  c.bos_id = kBos;
  c.eos_id = kEos;
  c.dtype = dtype;
  c.norm_first = true;
  c.positional = nn::PositionalKind::Learned;
  c.tie_output = false;  // a random tied head mostly repeats the last token: too easy a draft
  c.seed = seed;
  return c;
}

models::ModelConfig ed_config(int64_t vocab, int64_t d, int64_t layers, DType dtype, uint64_t seed) {
  models::ModelConfig c;
  c.d_model = d;
  c.n_heads = 2;
  c.n_encoder_layers = layers;
  c.n_decoder_layers = layers;
  c.d_ff = 2 * d;
  c.dropout = 0.0;
  c.attention_dropout = 0.0;
  c.max_len = 64;
  c.src_vocab_size = c.tgt_vocab_size = vocab;
  c.pad_id = kPad;
  c.bos_id = kBos;
  c.eos_id = kEos;
  c.dtype = dtype;
  c.seed = seed;
  return c;
}

// Matrices N(0, 1/fan_in), embeddings N(0, 0.5^2) (norms untouched): outputs then depend on
// the input. With `base` given, base's values plus N(0, noise^2) instead (a draft that mostly
// agrees with its target).
void randomize(models::Model& model, uint64_t seed, models::Model* base = nullptr, double noise = 0) {
  Rng rng(seed);
  std::map<std::string, Tensor> from;
  if (base != nullptr)
    for (auto& [name, p] : base->named_parameters()) from[name] = p;
  for (auto& [name, p] : model.named_parameters()) {
    if (base != nullptr) {
      p.copy_from(add(from.at(name), Tensor::randn(p.shape(), rng, p.dtype(), 0.0, noise)));
      continue;
    }
    if (name.find("norm") != std::string::npos) continue;
    const double sd =
        name.find("embedding") != std::string::npos ? 0.5 : 1.0 / std::sqrt(static_cast<double>(p.size(-1)));
    p.copy_from(Tensor::randn(p.shape(), rng, p.dtype(), 0.0, sd));
  }
  model.eval();
}

// B random rows of lengths in [1, max_len] over ids [3, vocab), right-padded with PAD; LM rows
// start with BOS.
Tensor random_batch(Rng& rng, int64_t b, int64_t max_len, int64_t vocab, bool bos) {
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(b));
  int64_t width = 0;
  for (auto& r : rows) {
    if (bos) r.push_back(kBos);
    const int64_t len = 1 + static_cast<int64_t>(rng.below(static_cast<uint64_t>(max_len)));
    for (int64_t j = 0; j < len; ++j) r.push_back(3 + static_cast<int64_t>(rng.below(static_cast<uint64_t>(vocab - 3))));
    width = std::max<int64_t>(width, static_cast<int64_t>(r.size()));
  }
  std::vector<int64_t> ids;
  for (auto& r : rows) {
    r.resize(static_cast<size_t>(width), kPad);
    ids.insert(ids.end(), r.begin(), r.end());
  }
  return Tensor::from_vector<int64_t>(ids, {b, width});
}

// The decoder of a model of either family.
std::unique_ptr<IncrementalDecoder> decoder_of(models::Model& m) {
  if (auto* lm = dynamic_cast<models::DecoderOnlyModel*>(&m)) return std::make_unique<LmDecoder>(*lm);
  return std::make_unique<TransformerDecoder>(dynamic_cast<models::EncoderDecoderModel&>(m));
}

GreedyOptions greedy_options(int64_t max_len) {
  GreedyOptions o;
  o.bos = kBos;
  o.eos = kEos;
  o.pad = kPad;
  o.max_len = max_len;
  return o;
}

// ---- step_many and rollback ----

// Feeds the same tokens by step() and by step_many(), with a rollback in between, and compares
// the log-probabilities bit for bit (batch-invariant mode).
void check_step_many(models::Model& model, const Tensor& src) {
  BatchInvariantGuard invariant;
  const int64_t b = src.size(0);
  const std::vector<int64_t> toks = {5, 7, 3, 9, 4};  // [T = 5], the same for every row
  auto one = decoder_of(model);
  auto many = decoder_of(model);
  one->start(src);
  many->start(src);
  const Tensor bos = Tensor::from_vector<int64_t>(std::vector<int64_t>(static_cast<size_t>(b), kBos), {b});
  one->step(bos);
  many->step(bos);
  std::vector<std::vector<double>> stepwise;
  for (int64_t t : toks)
    stepwise.push_back(one->step(Tensor::from_vector<int64_t>(std::vector<int64_t>(static_cast<size_t>(b), t), {b}))
                           .to_vector<double>());
  // A wrong draft first (3 tokens), taken back, then the real tokens in one call.
  std::vector<int64_t> wrong(static_cast<size_t>(b * 3), 6);
  many->step_many(Tensor::from_vector<int64_t>(wrong, {b, 3}));
  many->rollback(3);
  std::vector<int64_t> all;
  for (int64_t r = 0; r < b; ++r) all.insert(all.end(), toks.begin(), toks.end());
  const Tensor out = many->step_many(Tensor::from_vector<int64_t>(all, {b, 5}));  // [B, 5, V]
  const int64_t v = out.size(2);
  const auto got = out.contiguous().to_vector<double>();
  for (int64_t r = 0; r < b; ++r)
    for (int64_t t = 0; t < 5; ++t)
      for (int64_t j = 0; j < v; ++j)
        ASSERT_EQ(got[static_cast<size_t>((r * 5 + t) * v + j)], stepwise[t][static_cast<size_t>(r * v + j)])
            << "row " << r << " position " << t << " token " << j;
  // After a rollback of 2 the next step continues from the third token.
  many->rollback(2);
  const std::vector<int64_t> next(static_cast<size_t>(b), toks[3]);
  const auto again = many->step(Tensor::from_vector<int64_t>(next, {b})).to_vector<double>();
  EXPECT_EQ(again, stepwise[3]);
}

TEST(StepMany, DecoderOnlyEqualsStepByStepAfterRollback) {
  models::DecoderOnlyModel model(lm_config(13, 16, 2, DType::F32, 3));
  randomize(model, 11);
  Rng rng(5);
  check_step_many(model, random_batch(rng, 3, 6, 13, true));
}

TEST(StepMany, EncoderDecoderEqualsStepByStepAfterRollback) {
  models::EncoderDecoderModel model(ed_config(13, 16, 2, DType::F32, 3));
  randomize(model, 12);
  Rng rng(6);
  check_step_many(model, random_batch(rng, 3, 6, 13, false));
  // Rows of one source, as beam search leaves them (row_sources), attend over memory the same.
  TransformerDecoder dec(model);
  BatchInvariantGuard invariant;
  dec.start(random_batch(rng, 2, 5, 13, false));
  dec.step(Tensor::from_vector<int64_t>({kBos, kBos}, {2}));
  dec.reorder({1, 1, 0});
  const Tensor many = dec.step_many(Tensor::from_vector<int64_t>({4, 5, 4, 5, 6, 7}, {3, 2}));  // [3, 2, V]
  dec.rollback(2);
  const auto a = dec.step(Tensor::from_vector<int64_t>({4, 4, 6}, {3})).to_vector<double>();
  const auto b = dec.step(Tensor::from_vector<int64_t>({5, 5, 7}, {3})).to_vector<double>();
  const auto m = many.contiguous().to_vector<double>();
  const int64_t v = many.size(2);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t j = 0; j < v; ++j) {
      EXPECT_EQ(m[static_cast<size_t>((r * 2) * v + j)], a[static_cast<size_t>(r * v + j)]);
      EXPECT_EQ(m[static_cast<size_t>((r * 2 + 1) * v + j)], b[static_cast<size_t>(r * v + j)]);
    }
}

TEST(StepMany, BadUse) {
  models::DecoderOnlyModel model(lm_config(13, 16, 1, DType::F32, 3));
  randomize(model, 1);
  LmDecoder dec(model);
  dec.start(Tensor::from_vector<int64_t>({kBos, 4}, {1, 2}));
  // The first step after start() hands back the prompt's distribution: step() first.
  EXPECT_THROW(dec.step_many(Tensor::from_vector<int64_t>({4}, {1, 1})), Error);
  dec.step(Tensor::from_vector<int64_t>({kBos}, {1}));
  EXPECT_THROW(dec.step_many(Tensor::from_vector<int64_t>({4, 5}, {2, 1})), Error);  // 2 rows of 1
  EXPECT_THROW(dec.rollback(3), Error);  // the cache holds 2 positions
  // A decoder without step_many (the mock) refuses speculative decoding.
  test::MockDecoder mock(13, test::hash_logits(13, 1), kPad);
  models::DecoderOnlyModel m2(lm_config(13, 16, 1, DType::F32, 3));
  randomize(m2, 2);
  LmDecoder d2(m2);
  EXPECT_THROW(speculative_greedy(mock, d2, Tensor::from_vector<int64_t>({3}, {1, 1}), greedy_options(4), {}), Error);
}

// ---- greedy: identical to greedy_search ----

struct Pair {
  std::unique_ptr<models::Model> target, same, noisy, small;
  bool lm = true;
};

Pair make_pair(bool lm, int64_t vocab) {
  Pair p;
  p.lm = lm;
  auto make = [&](int64_t d, int64_t layers, uint64_t seed) -> std::unique_ptr<models::Model> {
    if (lm) return std::make_unique<models::DecoderOnlyModel>(lm_config(vocab, d, layers, DType::F32, seed));
    return std::make_unique<models::EncoderDecoderModel>(ed_config(vocab, d, layers, DType::F32, seed));
  };
  p.target = make(32, 2, 1);
  randomize(*p.target, 21);
  p.noisy = make(32, 2, 1);
  randomize(*p.noisy, 22, p.target.get(), lm ? 0.05 : 0.03);
  p.small = make(8, 1, 2);
  randomize(*p.small, 23);
  return p;
}

// Greedy speculative decoding of `src` with every draft and K = 1..8 against greedy_search;
// returns the number of rows that differ (0 when correct) and checks self-draft acceptance.
int64_t greedy_mismatches(Pair& p, const Tensor& src, int64_t max_len, int64_t accept_offset, double* noisy_acc) {
  GreedyOptions o = greedy_options(max_len);
  std::vector<Hypothesis> want;
  {
    BatchInvariantGuard invariant;
    auto dec = decoder_of(*p.target);
    want = greedy_search(*dec, src, o);
  }
  int64_t mismatches = 0;
  SpeculativeStats noisy_stats;
  for (int64_t k = 1; k <= 8; ++k) {
    for (models::Model* draft : {p.target.get(), p.noisy.get(), p.small.get()}) {
      auto t = decoder_of(*p.target);
      auto d = decoder_of(*draft);
      SpeculativeOptions so;
      so.draft_tokens = k;
      so.test_accept_offset = accept_offset;
      SpeculativeStats stats;
      const auto got = speculative_greedy(*t, *d, src, o, so, &stats);
      for (size_t r = 0; r < want.size(); ++r) {
        const bool same = got[r].tokens == want[r].tokens && got[r].finished == want[r].finished &&
                          got[r].logprob == want[r].logprob && got[r].score == want[r].score;
        if (!same) ++mismatches;
      }
      if (accept_offset == 0 && draft == p.target.get() && stats.drafted > 0) {
        EXPECT_EQ(stats.accepted, stats.drafted) << "self-draft must accept every draft token (K = " << k << ")";
      }
      if (draft == p.noisy.get()) {
        noisy_stats.drafted += stats.drafted;
        noisy_stats.accepted += stats.accepted;
      }
    }
    // Prompt lookup.
    auto t = decoder_of(*p.target);
    SpeculativeOptions so;
    so.draft_tokens = k;
    so.test_accept_offset = accept_offset;
    const auto got = lookup_greedy(*t, src, o, so);
    for (size_t r = 0; r < want.size(); ++r)
      if (got[r].tokens != want[r].tokens || got[r].logprob != want[r].logprob) ++mismatches;
  }
  if (noisy_acc != nullptr) *noisy_acc = noisy_stats.acceptance();
  return mismatches;
}

void check_greedy_family(bool lm) {
  constexpr int64_t kVocab = 16;
  Pair p = make_pair(lm, kVocab);
  Rng rng(lm ? 41 : 42);
  double acc = 0;
  for (int64_t b : {1, 8})
    for (int round = 0; round < 2; ++round) {
      const Tensor src = random_batch(rng, b, 7, kVocab, lm);
      EXPECT_EQ(greedy_mismatches(p, src, 20, 0, &acc), 0) << "batch " << b << " round " << round;
    }
  // The noisy copy accepts much but not all: the accept and the reject paths both ran.
  std::cout << (lm ? "decoder-only" : "encoder-decoder") << ": the noisy draft's acceptance " << acc << "\n";
  EXPECT_GT(acc, 0.3);
  EXPECT_LT(acc, 1.0);
  // Control: an acceptance rule that keeps one draft token too many is caught.
  int64_t caught = 0;
  caught += greedy_mismatches(p, random_batch(rng, 8, 7, kVocab, lm), 20, 1, nullptr);
  EXPECT_GT(caught, 0);
}

TEST(SpeculativeGreedy, DecoderOnlyEqualsGreedySearch) { check_greedy_family(true); }
TEST(SpeculativeGreedy, EncoderDecoderEqualsGreedySearch) { check_greedy_family(false); }

TEST(SpeculativeGreedy, DraftOfAnotherVocabularyIsAnError) {
  models::DecoderOnlyModel target(lm_config(16, 16, 1, DType::F32, 1)), draft(lm_config(17, 16, 1, DType::F32, 2));
  randomize(target, 1);
  randomize(draft, 2);
  LmDecoder t(target), d(draft);
  try {
    speculative_greedy(t, d, Tensor::from_vector<int64_t>({kBos, 4}, {1, 2}), greedy_options(4), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("17"), std::string::npos) << msg;
    EXPECT_NE(msg.find("16"), std::string::npos) << msg;
  }
  SpeculativeOptions bad;
  bad.draft_tokens = 0;
  EXPECT_THROW(speculative_greedy(t, t, Tensor::from_vector<int64_t>({kBos, 4}, {1, 2}), greedy_options(4), bad),
               Error);
}

// ---- prompt lookup ----

TEST(PromptLookup, ProposesTheContinuationOfTheMostRecentMatch) {
  // The last 3-gram (1 2 3) occurs at 0 and at 5: the most recent is at 5, followed by 9 4.
  EXPECT_EQ(lookup_draft({1, 2, 3, 7, 8, 1, 2, 3, 9, 4, 1, 2, 3}, 4, 3, 1), (std::vector<int64_t>{9, 4, 1, 2}));
  EXPECT_EQ(lookup_draft({1, 2, 3, 7, 8, 1, 2, 3, 9, 4, 1, 2, 3}, 1, 3, 1), (std::vector<int64_t>{9}));
  // No 3-gram or 2-gram recurs; the 1-gram 5 does.
  EXPECT_EQ(lookup_draft({5, 6, 7, 8, 5}, 3, 3, 1), (std::vector<int64_t>{6, 7, 8}));
  EXPECT_EQ(lookup_draft({5, 6, 7, 8, 5}, 3, 3, 2), std::vector<int64_t>{});  // ngram_min 2
  EXPECT_EQ(lookup_draft({4}, 3, 3, 1), std::vector<int64_t>{});
  EXPECT_EQ(lookup_draft({}, 3, 3, 1), std::vector<int64_t>{});
  // The continuation may run into the final n-gram itself (a repeating pattern).
  EXPECT_EQ(lookup_draft({7, 7, 7}, 5, 2, 1), (std::vector<int64_t>{7}));
}

// ---- sampling: the output distribution is the target's ----

// The exact probability of every output of at most `len` tokens under sampling with `o` from
// `model` for one prompt: brute force over all prefixes (each distribution from a fresh
// decoder fed the prefix), filtered with temperature and top-k as written here, independently.
void exact_distribution(models::Model& model, const Tensor& src, const SamplingOptions& o, int64_t len,
                        std::vector<int64_t> prefix, double prob, std::map<std::vector<int64_t>, double>& out) {
  auto dec = decoder_of(model);
  dec->start(src);
  Tensor lp = dec->step(Tensor::from_vector<int64_t>({kBos}, {1}));
  for (int64_t t : prefix) lp = dec->step(Tensor::from_vector<int64_t>({t}, {1}));
  const auto row = lp.to_vector<double>();
  const int64_t v = static_cast<int64_t>(row.size());
  std::vector<double> w(static_cast<size_t>(v));
  for (int64_t t = 0; t < v; ++t) w[t] = std::exp(row[t] / o.temperature);
  std::vector<double> sorted = w;
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  const double cut = sorted[static_cast<size_t>(o.top_k - 1)];  // keep the top_k largest (no ties here)
  double total = 0;
  for (double& x : w) total += (x = x >= cut ? x : 0.0);
  for (int64_t t = 0; t < v; ++t) {
    if (w[t] == 0) continue;
    const double pt = prob * w[t] / total;
    std::vector<int64_t> seq = prefix;
    seq.push_back(t);
    if (t == kEos || static_cast<int64_t>(seq.size()) == len)
      out[seq] += pt;
    else
      exact_distribution(model, src, o, len, seq, pt, out);
  }
}

// Pearson's chi-square of the observed outputs against `expected` (cells expected below 5
// pooled into one); returns chi2 and sets df. An output outside expected's support: infinity.
double chi_square(const std::map<std::vector<int64_t>, double>& expected, const std::map<std::vector<int64_t>, int64_t>& seen,
                  int64_t draws, int64_t& df) {
  double chi2 = 0, pooled_e = 0;
  int64_t pooled_o = 0, cells = 0, matched = 0;
  for (const auto& [seq, p] : expected) {
    const double e = p * static_cast<double>(draws);
    const auto it = seen.find(seq);
    const int64_t o = it == seen.end() ? 0 : it->second;
    matched += o;
    if (e < 5) {
      pooled_e += e;
      pooled_o += o;
      continue;
    }
    chi2 += (o - e) * (o - e) / e;
    ++cells;
  }
  if (pooled_e > 0) {
    chi2 += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    ++cells;
  }
  df = cells - 1;
  return matched == draws ? chi2 : INFINITY;
}

TEST(SpeculativeSample, DistributionEqualsTheTargetsChiSquare) {
  constexpr int64_t kVocab = 6, kLen = 4, kRows = 1000, kCalls = 100;  // 10^5 draws
  models::DecoderOnlyModel target(lm_config(kVocab, 16, 2, DType::F32, 1)), draft(lm_config(kVocab, 8, 1, DType::F32, 2));
  randomize(target, 31);
  randomize(draft, 32);
  const std::vector<int64_t> prompt = {kBos, 4, 3, 5};
  SamplingOptions o;
  o.bos = kBos;
  o.eos = kEos;
  o.pad = kPad;
  o.max_len = kLen;
  o.temperature = 1.5;  // flatter than the model: more outputs with enough mass to test
  o.top_k = 5;  // one token of six filtered out, on p and q alike
  std::map<std::vector<int64_t>, double> expected;
  {
    NoGradGuard no_grad;
    exact_distribution(target, Tensor::from_vector<int64_t>(prompt, {1, 4}), o, kLen, {}, 1.0, expected);
  }
  std::vector<int64_t> batch;
  for (int64_t r = 0; r < kRows; ++r) batch.insert(batch.end(), prompt.begin(), prompt.end());
  const Tensor src = Tensor::from_vector<int64_t>(batch, {kRows, 4});
  // One output's key: its tokens, then EOS when it ended with one.
  auto key = [](const Hypothesis& h) {
    std::vector<int64_t> s = h.tokens;
    if (h.finished) s.push_back(kEos);
    return s;
  };
  auto run_test = [&](const char* what, int64_t calls, auto&& sample_batch) {
    std::map<std::vector<int64_t>, int64_t> seen;
    for (int64_t call = 0; call < calls; ++call) {
      o.seed = 1000 + static_cast<uint64_t>(call);
      for (const Hypothesis& h : sample_batch()) ++seen[key(h)];
    }
    int64_t df = 0;
    const double chi2 = chi_square(expected, seen, kRows * calls, df);
    // Far in the tail: for df ~ 100 this bound's p-value is about 1e-9.
    const double bound = static_cast<double>(df) + 6.0 * std::sqrt(2.0 * static_cast<double>(df));
    std::cout << what << ": chi2 " << chi2 << " df " << df << " bound " << bound << "\n";
    return chi2 < bound;
  };
  SpeculativeOptions so;
  so.draft_tokens = 2;
  SpeculativeStats stats;
  EXPECT_TRUE(run_test("speculative", kCalls, [&] {
    LmDecoder t(target), d(draft);
    return speculative_sample(t, d, src, o, so, &stats);
  }));
  EXPECT_GT(stats.accepted, 0);
  EXPECT_LT(stats.accepted, stats.drafted);
  EXPECT_TRUE(run_test("prompt lookup", kCalls / 5, [&] {
    LmDecoder t(target);
    return lookup_sample(t, src, o, so);
  }));
  // Control: a residual drawn from p instead of norm(max(0, p - q)) is caught.
  SpeculativeOptions wrong = so;
  wrong.test_residual_from_p = true;
  EXPECT_FALSE(run_test("speculative, residual from p", kCalls / 10, [&] {
    LmDecoder t(target), d(draft);
    return speculative_sample(t, d, src, o, wrong);
  }));
  // The test's own check: plain sampling from the target passes.
  EXPECT_TRUE(run_test("sample(target)", kCalls / 5, [&] {
    LmDecoder t(target);
    return sample(t, src, o);
  }));
  // Control: sampling from the draft alone (q) fails.
  EXPECT_FALSE(run_test("sample(draft)", kCalls / 10, [&] {
    LmDecoder d(draft);
    return sample(d, src, o);
  }));
}

}  // namespace
}  // namespace attn::decode
