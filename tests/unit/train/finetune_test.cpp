// Fine-tuning (train/finetune.h, the sft and dpo objectives, the trainer's --init and --ref):
// pairs files and their errors naming the line, the template, the SFT rows whose prompt
// positions get no loss and no gradient (with the control that an unmasked row is caught),
// per-sequence log-probabilities and the DPO loss against their formulas and float64 central
// differences (with the control that swapped chosen/rejected is caught), the KL to the
// reference against a brute-force sum over the vocabulary (with controls: the reversed KL and a
// reference compared with itself differ from it), packed SFT rows (a pair's logits in a packed
// row equal its logits alone; control: a plain causal mask over the row differs), and tiny runs: SFT
// from scratch, DPO from its folder (step 1's loss is log 2: policy = reference), a reference
// of another vocabulary refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/models/checkpoint.h"
#include "attn/models/factory.h"
#include "attn/ops/ops.h"
#include "attn/train/finetune.h"
#include "attn/train/objective.h"
#include "attn/train/trainer.h"
#include "support/error_of.h"
#include "support/gradcheck.h"
#include "unit/models/broken_checkpoints.h"

namespace attn::train {
namespace {

using models::test_util::TempDir;
using test::error_of;
using Ids = std::vector<int64_t>;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- pairs files -------------------------------------------------------------------------------

TEST(Pairs, ReadsTsvAndJsonlForSftAndDpo) {
  TempDir tmp("attn_pairs");
  io::write_file_atomic(tmp.file("sft.tsv"), "\xEF\xBB\xBFrev ab\tba\r\n\nup a\tA\n");
  const PairsFile sft = read_pairs(tmp.file("sft.tsv"), ObjectiveKind::Sft);
  ASSERT_EQ(sft.records.size(), 2u);
  EXPECT_EQ(sft.records[0].prompt, "rev ab");
  EXPECT_EQ(sft.records[0].response, "ba");
  EXPECT_EQ(sft.records[1].line, 3);
  io::write_file_atomic(tmp.file("dpo.jsonl"),
                        "{\"prompt\": \"q\\n\", \"chosen\": \"yes\", \"rejected\": \"no\", \"extra\": 1}\n");
  const PairsFile dpo = read_pairs(tmp.file("dpo.jsonl"), ObjectiveKind::Dpo);
  ASSERT_EQ(dpo.records.size(), 1u);
  EXPECT_EQ(dpo.records[0].prompt, "q\n");
  EXPECT_EQ(dpo.records[0].response, "yes");
  EXPECT_EQ(dpo.records[0].rejected, "no");
}

TEST(Pairs, BadLinesAreErrorsNamingFileAndLine) {
  TempDir tmp("attn_pairs");
  const auto err = [&](const std::string& name, const std::string& text, ObjectiveKind kind) {
    io::write_file_atomic(tmp.file(name), text);
    return error_of([&] { read_pairs(tmp.file(name), kind); });
  };
  std::string e = err("a.jsonl", "{\"prompt\": \"p\", \"chosen\": \"c\", \"rejected\": \"r\"}\n{\"prompt\": \"p\", "
                                 "\"chosen\": \"c\"}\n", ObjectiveKind::Dpo);
  EXPECT_TRUE(contains(e, "a.jsonl' line 2") && contains(e, "missing field \"rejected\"")) << e;
  e = err("b.tsv", "p\tr\np only\n", ObjectiveKind::Sft);
  EXPECT_TRUE(contains(e, "b.tsv' line 2") && contains(e, "expected 2 tab-separated fields")) << e;
  e = err("c.tsv", "p\tr\nq\t\n", ObjectiveKind::Sft);
  EXPECT_TRUE(contains(e, "c.tsv' line 2") && contains(e, "the response is empty")) << e;
  e = err("d.tsv", "p\tc\t\n", ObjectiveKind::Dpo);
  EXPECT_TRUE(contains(e, "d.tsv' line 1") && contains(e, "the rejected is empty")) << e;
  e = err("e.jsonl", "{\"prompt\": 3, \"response\": \"r\"}\n", ObjectiveKind::Sft);
  EXPECT_TRUE(contains(e, "line 1") && contains(e, "must be a string")) << e;
  e = err("f.jsonl", "not json\n", ObjectiveKind::Sft);
  EXPECT_TRUE(contains(e, "f.jsonl' line 1") && contains(e, "not valid JSON")) << e;
  e = err("g.tsv", "\n\n", ObjectiveKind::Sft);
  EXPECT_TRUE(contains(e, "holds no prompt/response pairs")) << e;
}

TEST(Pairs, TemplateAndItsEscapes) {
  EXPECT_EQ(apply_template(kDefaultTemplate, "hi"), "hi\n");
  EXPECT_EQ(apply_template("Q: {prompt} A:", "x"), "Q: x A:");
  EXPECT_TRUE(contains(error_of([] { validate_template("no slot"); }), "has no {prompt}"));
  EXPECT_TRUE(contains(error_of([] { validate_template("{prompt}{prompt}"); }), "more than once"));
  EXPECT_EQ(unescape_template("{prompt}\\n\\t\\\\"), "{prompt}\n\t\\");
  EXPECT_TRUE(contains(error_of([] { unescape_template("{prompt}\\x"); }), "unknown escape"));
}

// ---- SFT rows and the prompt mask ----------------------------------------------------------------

TEST(SftBatch, PromptPositionsAreIgnoredResponseAndEosCount) {
  const std::vector<io::Example> data = {{{10, 11, 12}, {20, 21}}, {{13}, {22, 23, 24}}};
  const SpecialIds ids{0, 1, 2};
  const Batch b = make_sft_batch(data, {0, 1}, ids);
  const int64_t I = kIgnoreTarget;
  // Row 0: <bos> 10 11 12 20 21 -> targets - - - 20 21 <eos>; row 1 padded.
  EXPECT_EQ(b.tgt_in.to_vector<int64_t>(), (Ids{1, 10, 11, 12, 20, 21, 1, 13, 22, 23, 24, 0}));
  EXPECT_EQ(b.tgt_out.to_vector<int64_t>(), (Ids{I, I, I, 20, 21, 2, I, 22, 23, 24, 2, I}));
  EXPECT_EQ(b.n_tgt_tokens, 3 + 4);
  // Without <bos> (GPT-2) and without <pad> (padding with <eos>): one shorter.
  const Batch g = make_sft_batch(data, {0, 1}, SpecialIds{-1, -1, 7});
  EXPECT_EQ(g.tgt_in.to_vector<int64_t>(), (Ids{10, 11, 12, 20, 21, 13, 22, 23, 24, 7}));
  EXPECT_EQ(g.tgt_out.to_vector<int64_t>(), (Ids{I, I, 20, 21, 7, 22, 23, 24, 7, I}));
  // Rejected responses replace tgt when given.
  const std::vector<Ids> rejected = {{30}, {31, 32}};
  const Batch r = make_sft_batch(data, {1}, ids, &rejected);
  EXPECT_EQ(r.tgt_out.to_vector<int64_t>(), (Ids{I, 31, 32, 2}));
  EXPECT_TRUE(contains(error_of([&] { make_sft_batch({{{}, {5}}}, {0}, SpecialIds{-1, -1, 7}); }), "empty prompt"));
}

// The largest |d loss / d logits| over the rows of prompt positions (those predicting a prompt
// token: the first |prompt| positions of each row, <bos> included).
double prompt_grad(const Batch& b, const std::vector<io::Example>& data, const Tensor& targets) {
  Rng rng(5);
  const int64_t B = b.tgt_in.size(0), T = b.tgt_in.size(1), V = 40;
  Tensor logits = Tensor::randn({B * T, V}, rng, DType::F64);
  logits.set_requires_grad(true);
  cross_entropy(logits, targets.reshape({B * T}), kIgnoreTarget, 0.1).backward();
  const std::vector<double> g = logits.grad().to_vector<double>();
  double worst = 0;
  for (int64_t r = 0; r < B; ++r)
    for (int64_t i = 0; i < static_cast<int64_t>(data[static_cast<size_t>(r)].src.size()); ++i)
      for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(g[static_cast<size_t>((r * T + i) * V + v)]));
  return worst;
}

TEST(SftBatch, PromptPositionsGetNoGradientAndAnUnmaskedRowIsCaught) {
  const std::vector<io::Example> data = {{{10, 11, 12}, {20, 21}}, {{13, 14}, {22, 23, 24}}};
  const Batch b = make_sft_batch(data, {0, 1}, SpecialIds{0, 1, 2});
  EXPECT_EQ(prompt_grad(b, data, b.tgt_out), 0.0);
  // Control: the same rows with the prompt targets left in (plain next-token targets) give the
  // prompt positions a gradient, so the check above would catch a missing mask.
  std::vector<int64_t> unmasked = b.tgt_out.to_vector<int64_t>();
  const std::vector<int64_t> in = b.tgt_in.to_vector<int64_t>();
  const int64_t T = b.tgt_in.size(1);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t i = 0; i < static_cast<int64_t>(data[static_cast<size_t>(r)].src.size()); ++i)
      unmasked[static_cast<size_t>(r * T + i)] = in[static_cast<size_t>(r * T + i + 1)];
  EXPECT_GT(prompt_grad(b, data, Tensor::from_vector<int64_t>(unmasked, b.tgt_out.shape())), 1e-3);
}

// ---- sequence log-probabilities and the DPO loss --------------------------------------------------

TEST(SequenceLogprobs, SumsLogSoftmaxOverCountedPositions) {
  Rng rng(11);
  const int64_t B = 2, T = 3, V = 5;
  const Tensor logits = Tensor::randn({B, T, V}, rng, DType::F64);
  const Tensor targets = Tensor::from_vector<int64_t>({1, kIgnoreTarget, 4, kIgnoreTarget, kIgnoreTarget, 0}, {B, T});
  const std::vector<double> got = sequence_logprobs(logits, targets, kIgnoreTarget).to_vector<double>();
  const std::vector<double> lp = log_softmax(logits).to_vector<double>();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NEAR(got[0], lp[0 * V + 1] + lp[2 * V + 4], 1e-12);
  EXPECT_NEAR(got[1], lp[(1 * T + 2) * V + 0], 1e-12);
  const Tensor none = Tensor::full({1, T}, static_cast<double>(kIgnoreTarget), DType::I64);
  EXPECT_EQ(sequence_logprobs(slice(logits, 0, 0, 1), none, kIgnoreTarget).item(), 0.0);
}

TEST(SequenceLogprobs, Float64GradientsMatchCentralDifferences) {
  Rng rng(12);
  Tensor logits = Tensor::randn({2, 4, 6}, rng, DType::F64);
  logits.set_requires_grad(true);
  const Tensor targets = Tensor::from_vector<int64_t>({kIgnoreTarget, 2, 3, 5, kIgnoreTarget, kIgnoreTarget, 0, 1}, {2, 4});
  EXPECT_TRUE(test::gradcheck([&](const std::vector<Tensor>& x) { return sequence_logprobs(x[0], targets, kIgnoreTarget); },
                              {logits}));
}

// -log sigmoid(beta z), z = (pc - rc) - (pr - rr), averaged: the formula in plain doubles.
double dpo_formula(const std::vector<double>& pc, const std::vector<double>& pr, const std::vector<double>& rc,
                   const std::vector<double>& rr, double beta) {
  double s = 0;
  for (size_t k = 0; k < pc.size(); ++k) {
    const double z = (pc[k] - rc[k]) - (pr[k] - rr[k]);
    s += -std::log(1.0 / (1.0 + std::exp(-beta * z)));
  }
  return s / static_cast<double>(pc.size());
}

TEST(DpoLoss, MatchesTheFormulaAndSwappedPairsAreCaught) {
  const std::vector<double> pc = {-3.0, -7.5, -1.25}, pr = {-4.0, -2.0, -9.0}, rc = {-3.5, -6.0, -2.0},
                            rr = {-3.0, -3.0, -8.0};
  const auto t = [](const std::vector<double>& v) { return Tensor::from_vector<double>(v, {3}); };
  for (double beta : {0.1, 0.5, 2.0}) {
    const double expected = dpo_formula(pc, pr, rc, rr, beta);
    EXPECT_NEAR(dpo_loss(t(pc), t(pr), t(rc), t(rr), beta).item(), expected, 1e-12) << beta;
    // Control: chosen and rejected swapped (a sign error in z) gives another value.
    EXPECT_GT(std::fabs(dpo_loss(t(pr), t(pc), t(rr), t(rc), beta).item() - expected), 1e-3) << beta;
    EXPECT_NEAR(preference_stats(pc, pr, rc, rr, beta).loss, expected, 1e-12);
  }
  // Large margins do not overflow either way.
  EXPECT_NEAR(dpo_loss(t({1000, 0, 0}), t({0, 0, 0}), t({0, 0, 0}), t({0, 0, 0}), 1.0).item(), 2 * std::log(2.0) / 3,
              1e-12);
  EXPECT_NEAR(dpo_loss(t({-1000, 0, 0}), t({0, 0, 0}), t({0, 0, 0}), t({0, 0, 0}), 1.0).item(),
              (1000 + 2 * std::log(2.0)) / 3, 1e-9);
}

TEST(DpoLoss, Float64GradientsMatchCentralDifferencesAndTheReferenceGetsNone) {
  Rng rng(13);
  Tensor pc = Tensor::randn({4}, rng, DType::F64), pr = Tensor::randn({4}, rng, DType::F64);
  Tensor rc = Tensor::randn({4}, rng, DType::F64), rr = Tensor::randn({4}, rng, DType::F64);
  pc.set_requires_grad(true);
  pr.set_requires_grad(true);
  EXPECT_TRUE(test::gradcheck(
      [&](const std::vector<Tensor>& x) { return dpo_loss(x[0], x[1], rc, rr, 0.7).reshape({1}); }, {pc, pr}));
  // d/dpc = -beta sigmoid(-beta z) / P: the policy's chosen log-probability is pushed up.
  pc.zero_grad();
  pr.zero_grad();
  rc.set_requires_grad(true);
  dpo_loss(pc, pr, rc, rr, 0.7).backward();
  const std::vector<double> a = pc.to_vector<double>(), b = pr.to_vector<double>(), c = rc.to_vector<double>(),
                            d = rr.to_vector<double>(), g = pc.grad().to_vector<double>();
  for (size_t k = 0; k < 4; ++k) {
    const double z = (a[k] - c[k]) - (b[k] - d[k]);
    EXPECT_NEAR(g[k], -0.7 / (1 + std::exp(0.7 * z)) / 4, 1e-12);
  }
  EXPECT_FALSE(rc.grad().defined() && rc.grad().to_vector<double>() != std::vector<double>(4, 0.0));
}

TEST(DpoLoss, PreferenceStatsCountTiesAsHalf) {
  const PreferenceStats s = preference_stats({-1, -2, -3}, {-2, -2, -1}, {0, 0, 0}, {0, 0, 0}, 0.5);
  EXPECT_DOUBLE_EQ(s.accuracy, (1 + 0.5 + 0) / 3);
  EXPECT_DOUBLE_EQ(s.margin, 0.5 * ((1) + (0) + (-2)) / 3);
  EXPECT_DOUBLE_EQ(s.chosen_reward, 0.5 * (-1 - 2 - 3) / 3.0);
  EXPECT_EQ(s.pairs, 3);
}

// ---- the KL to the reference ------------------------------------------------------------------

// A tiny float64 decoder-only model over `V` ids, drawn from `seed`.
std::shared_ptr<models::Model> tiny_lm(int64_t V, uint64_t seed) {
  models::ModelConfig c;
  c.arch = models::Arch::DecoderOnly;
  c.src_vocab_size = c.tgt_vocab_size = V;
  c.d_model = 16;
  c.n_heads = 2;
  c.n_decoder_layers = 1;
  c.d_ff = 32;
  c.dtype = DType::F64;
  c.seed = seed;
  return models::make_model(c);
}

// The mean over response positions of sum_v pi(v) (log pi(v) - log ref(v)), every example run
// alone (no padding) through both models, the softmax written out in plain doubles.
double brute_force_kl(models::Model& pi, models::Model& ref, const std::vector<io::Example>& data, SpecialIds ids) {
  double sum = 0;
  int64_t positions = 0;
  for (const io::Example& e : data) {
    std::vector<int64_t> row = {ids.bos};
    row.insert(row.end(), e.src.begin(), e.src.end());
    row.insert(row.end(), e.tgt.begin(), e.tgt.end());
    const int64_t L = static_cast<int64_t>(row.size());
    const Tensor input = Tensor::from_vector<int64_t>(row, {1, L});
    const std::vector<double> a = dynamic_cast<models::DecoderOnlyModel&>(pi).forward(input).to_vector<double>();
    const std::vector<double> b = dynamic_cast<models::DecoderOnlyModel&>(ref).forward(input).to_vector<double>();
    const size_t V = a.size() / static_cast<size_t>(L);
    // Positions |prompt| .. L-1 predict the response tokens and <eos>.
    for (size_t i = e.src.size(); i < static_cast<size_t>(L); ++i) {
      double za = 0, zb = 0;
      for (size_t v = 0; v < V; ++v) {
        za += std::exp(a[i * V + v]);
        zb += std::exp(b[i * V + v]);
      }
      for (size_t v = 0; v < V; ++v) {
        const double p = std::exp(a[i * V + v]) / za, q = std::exp(b[i * V + v]) / zb;
        sum += p * (std::log(p) - std::log(q));
      }
      ++positions;
    }
  }
  return sum / static_cast<double>(positions);
}

TEST(ResponseKl, MatchesABruteForceSumAndItsControls) {
  const int64_t V = 12;
  const SpecialIds ids{0, 1, 2};
  const auto pi = tiny_lm(V, 21), ref = tiny_lm(V, 22);
  pi->eval();
  ref->eval();
  // Prompts and responses of different lengths: batched rows are padded.
  const std::vector<io::Example> data = {{{5, 6, 7}, {8, 9}}, {{10}, {4, 5, 6, 11}}, {{3, 4}, {7}}};
  double expected = 0;
  {
    NoGradGuard no_grad;
    expected = brute_force_kl(*pi, *ref, data, ids);
  }
  for (int64_t batch : {1, 2, 3}) EXPECT_NEAR(response_kl(*pi, *ref, data, batch, ids), expected, 1e-12) << batch;
  // Controls: the KL is clearly non-zero here, so a reference compared with itself (0) would be
  // caught, and so would the reversed direction KL(ref || pi).
  EXPECT_GT(expected, 1e-3);
  EXPECT_NEAR(response_kl(*pi, *pi, data, 2, ids), 0.0, 1e-12);
  double reversed = 0;
  {
    NoGradGuard no_grad;
    reversed = brute_force_kl(*ref, *pi, data, ids);
  }
  EXPECT_GT(std::fabs(reversed - expected), 1e-4 * expected);
  EXPECT_NEAR(response_kl(*ref, *pi, data, 2, ids), reversed, 1e-12);
  EXPECT_TRUE(std::isnan(response_kl(*pi, *ref, {}, 2, ids)));
}

// ---- packed SFT rows -------------------------------------------------------------------------

TEST(PackedSft, RowsSegmentsAndPositionsRestartPerPair) {
  const std::vector<io::Example> data = {{{10, 11}, {20}}, {{12}, {21, 22}}, {{13, 14, 15}, {23, 24}}};
  const SpecialIds ids{0, 1, 2};
  // Pieces of 4, 4 and 6 tokens (<bos> prompt response): the first two share a row of 8.
  const PackedSftBatch p = make_packed_sft_batch(data, {0, 1, 2}, ids, 8);
  ASSERT_EQ(p.batch.tgt_in.shape(), (Shape{2, 8}));
  EXPECT_EQ(p.batch.tgt_in.to_vector<int64_t>(), (Ids{1, 10, 11, 20, 1, 12, 21, 22, 1, 13, 14, 15, 23, 24, 0, 0}));
  const int64_t X = kIgnoreTarget;
  EXPECT_EQ(p.batch.tgt_out.to_vector<int64_t>(), (Ids{X, X, 20, 2, X, 21, 22, 2, X, X, X, 23, 24, 2, X, X}));
  EXPECT_EQ(p.positions.to_vector<int64_t>(), (Ids{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 0, 0}));
  EXPECT_EQ(p.segments.to_vector<int64_t>(), (Ids{0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, -1, -1}));
  EXPECT_EQ(p.batch.n_tgt_tokens, make_sft_batch(data, {0, 1, 2}, ids).n_tgt_tokens);
  EXPECT_EQ(p.pairs, 3);
}

TEST(PackedSft, APairsLogitsInAPackedRowEqualItsLogitsAlone) {
  const auto model = tiny_lm(30, 23);
  model->eval();
  auto& lm = dynamic_cast<models::DecoderOnlyModel&>(*model);
  const std::vector<io::Example> data = {{{10, 11, 12}, {20, 21}}, {{13}, {22, 23, 24}}, {{14, 15}, {25}}};
  const SpecialIds ids{0, 1, 2};
  NoGradGuard no_grad;
  const PackedSftBatch p = make_packed_sft_batch(data, {0, 1, 2}, ids, 64);  // one row of 6 + 5 + 4 tokens
  ASSERT_EQ(p.batch.tgt_in.size(0), 1);
  const int64_t T = p.batch.tgt_in.size(1), V = 30;
  const std::vector<double> packed =
      lm.forward_packed(p.batch.tgt_in, p.positions, p.segments).to_vector<double>();  // [1, T, V]
  const std::vector<double> plain = lm.forward(p.batch.tgt_in).to_vector<double>();   // a plain causal mask
  double worst = 0, plain_diff = 0;
  int64_t at = 0;
  for (size_t k = 0; k < data.size(); ++k) {
    const Batch one = make_sft_batch(data, {static_cast<int64_t>(k)}, ids);
    const int64_t L = one.tgt_in.size(1);
    const std::vector<double> alone = lm.forward(one.tgt_in).to_vector<double>();  // [1, L, V]
    for (int64_t i = 0; i < L; ++i)
      for (int64_t v = 0; v < V; ++v) {
        const size_t a = static_cast<size_t>((at + i) * V + v), b = static_cast<size_t>(i * V + v);
        worst = std::max(worst, std::fabs(packed[a] - alone[b]));
        if (k > 0) plain_diff = std::max(plain_diff, std::fabs(plain[a] - alone[b]));
      }
    at += L;
  }
  ASSERT_EQ(at, T);
  EXPECT_LT(worst, 1e-12);
  // Control: the same packed row under a plain causal mask (later pairs attend to earlier ones,
  // and their positions continue) gives the later pairs other logits.
  EXPECT_GT(plain_diff, 1e-3);
}

TEST(PackedSft, PackedLossEqualsTheUnpackedLoss) {
  const auto model = tiny_lm(30, 24);
  model->eval();
  const std::vector<io::Example> data = {{{10, 11, 12}, {20, 21}}, {{13}, {22, 23, 24}}, {{14, 15}, {25}}, {{16}, {26}}};
  ObjectiveOptions o;
  o.kind = ObjectiveKind::Sft;
  o.ids = SpecialIds{0, 1, 2};
  const auto plain = make_objective(*model, o);
  o.sft_pack = 9;
  const auto packed = make_objective(*model, o);
  const BatchLoss a = plain->loss(data, {0, 1, 2, 3}, 0), b = packed->loss(data, {0, 1, 2, 3}, 0);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NEAR(a.loss.item(), b.loss.item(), 1e-12);
}

// ---- tiny runs --------------------------------------------------------------------------------------

TrainConfig tiny_sft(const std::string& pairs) {
  TrainConfig c;
  c.task = "";
  c.objective = ObjectiveKind::Sft;
  c.pairs_path = pairs;
  c.model.arch = models::Arch::DecoderOnly;
  c.model.d_model = 16;
  c.model.n_heads = 2;
  c.model.n_decoder_layers = 1;
  c.model.d_ff = 32;
  c.epochs = 1;
  c.batch_size = 4;
  c.schedule = ScheduleKind::Constant;
  c.lr = 0.01;
  c.warmup = 0;
  c.threads = 1;
  c.label_smoothing = 0;
  return c;
}

TEST(FinetuneRun, DpoFromAnSftFolderStartsAtLogTwoAndRefusesAnotherVocabulary) {
  TempDir tmp("attn_finetune");
  io::write_file_atomic(tmp.file("sft.tsv"), "rev ab\tba\nrev abc\tcba\nup ab\tAB\nup b\tB\n");
  io::write_file_atomic(tmp.file("dpo.tsv"), "rev ab\tba\tab\nup ab\tAB\tab\nrev abc\tcba\tabc\n");
  Trainer sft(tiny_sft(tmp.file("sft.tsv")), tmp.file("sft"));
  const auto& m = sft.run();
  ASSERT_EQ(m.size(), 1u);
  EXPECT_TRUE(std::isfinite(m[0].loss));

  TrainConfig d = tiny_sft(tmp.file("dpo.tsv"));
  d.objective = ObjectiveKind::Dpo;
  d.init = tmp.file("sft");
  d.dpo_beta = 0.5;
  d.model = TrainConfig::default_model();  // replaced by the init folder's
  Trainer dpo(d, tmp.file("dpo"));
  EXPECT_EQ(dpo.config().model.arch, models::Arch::DecoderOnly);
  EXPECT_EQ(dpo.config().model.d_model, 16);
  EXPECT_EQ(dpo.config().model.dropout, 0.0);  // DPO trains without dropout
  ASSERT_NE(dpo.train_preferences(), nullptr);
  EXPECT_EQ(dpo.train_preferences()->ref_chosen.size(), 3u);
  dpo.run(1);
  ASSERT_EQ(dpo.step_losses().size(), 1u);
  // At step 1 the policy is the reference: every margin is 0 and the loss is log 2.
  EXPECT_NEAR(dpo.step_losses()[0], std::log(2.0), 1e-6);

  // A reference model of another vocabulary is refused, naming it; nothing is trained.
  io::write_file_atomic(tmp.file("other.tsv"), "xyz\tzyx\n");
  Trainer other(tiny_sft(tmp.file("other.tsv")), tmp.file("other"));
  other.run();
  d.ref = tmp.file("other");
  const std::string e = error_of([&] { Trainer t(d, tmp.file("dpo2")); });
  EXPECT_TRUE(contains(e, "reference model '" + tmp.file("other") + "'") && contains(e, "vocabulary")) << e;
  EXPECT_FALSE(std::filesystem::exists(tmp.file("dpo2")));
}

TEST(FinetuneRun, PretrainingTextFromAnInitFolderIsReadWithItsVocabulary) {
  TempDir tmp("attn_finetune_text");
  io::write_file_atomic(tmp.file("sft.tsv"), "rev ab\tba\nup b\tB\n");
  Trainer sft(tiny_sft(tmp.file("sft.tsv")), tmp.file("sft"));
  sft.run();
  const io::Vocab& vocab = sft.data().vocab;
  io::write_file_atomic(tmp.file("text.txt"), "up ba\nrev z\n");  // 'z' is not in the folder's vocabulary
  TrainConfig c;
  c.task = "";
  c.text_path = tmp.file("text.txt");
  c.init = tmp.file("sft");
  c.epochs = 1;
  c.threads = 1;
  Trainer lm(c, tmp.file("lm"));
  EXPECT_EQ(lm.config().model.arch, models::Arch::DecoderOnly);
  EXPECT_TRUE(lm.data().vocab == vocab);
  EXPECT_EQ(lm.data().train_unknown_tokens, 1);
  EXPECT_EQ(lm.data().train[0].tgt, vocab.encode("up ba"));
  EXPECT_EQ(lm.data().train[1].tgt, vocab.encode("rev z", true));
  lm.run(1);
  EXPECT_TRUE(std::isfinite(lm.step_losses()[0]));
}

TEST(FinetuneRun, EncoderDecoderSftIsSeq2SeqAndDpoScoresTargets) {
  TempDir tmp("attn_finetune_s2s");
  io::write_file_atomic(tmp.file("sft.tsv"), "ab\tba\nabc\tcba\nb\tb\n");
  io::write_file_atomic(tmp.file("dpo.tsv"), "ab\tba\tab\nabc\tcba\tabc\n");
  io::write_file_atomic(tmp.file("dpo_valid.tsv"), "ba\tab\tba\n");
  TrainConfig s = tiny_sft(tmp.file("sft.tsv"));
  s.model.arch = models::Arch::EncoderDecoder;
  s.model.n_encoder_layers = 1;
  Trainer sft(s, tmp.file("sft"));
  EXPECT_EQ(sft.data().train[0].src, sft.data().vocab.encode("ab"));  // no template for seq2seq
  sft.run();

  TrainConfig d = tiny_sft(tmp.file("dpo.tsv"));
  d.objective = ObjectiveKind::Dpo;
  d.valid_pairs_path = tmp.file("dpo_valid.tsv");
  d.init = tmp.file("sft");
  Trainer dpo(d, tmp.file("dpo"));
  EXPECT_EQ(dpo.config().model.arch, models::Arch::EncoderDecoder);
  // Before any step the policy is the reference (a frozen copy of the init weights): KL 0.
  EXPECT_NEAR(dpo.objective().validate(dpo.data().valid, 4).kl_ref, 0.0, 1e-9);
  dpo.run(1);
  EXPECT_NEAR(dpo.step_losses()[0], std::log(2.0), 1e-6);
  const ValidationResult v = dpo.objective().validate(dpo.data().valid, 4);
  EXPECT_TRUE(v.has_preference);
  // After a step the policy has moved and the reference has not (were the reference the
  // policy itself, this would stay 0); the epoch's metrics carry the same value.
  EXPECT_GT(v.kl_ref, 1e-9);
  EXPECT_NEAR(dpo.metrics().back().val_kl_ref, v.kl_ref, 1e-9);
  EXPECT_EQ(v.preference.pairs, 1);
  EXPECT_TRUE(std::isfinite(v.preference.margin) && std::isfinite(v.nll));
}

}  // namespace
}  // namespace attn::train
