// LmDecoder (decode/lm_decoder.h): a decoder-only model behind IncrementalDecoder. Greedy
// search continues each prompt exactly as a brute-force loop over the full forward does; the
// same prompt gives the same greedy and beam outputs alone or in a batch of right-padded
// prompts; the first step returns the distribution after the prompt whatever tokens it gets;
// reorder works before and after the first step; sampling runs and top-k 1 is greedy; a
// LLaMA-style model (RoPE, one K/V head, a window, SwiGLU, RMSNorm) decodes like its full
// forward; a model without a PAD token (pad_id -1, as GPT-2) takes prompts of different
// lengths as token lists or lengths and gives the same output alone or in a batch; misuse is an
// error.
#include "attn/decode/lm_decoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "attn/core/autograd.h"
#include "attn/decode/beam_search.h"
#include "attn/decode/greedy.h"
#include "attn/decode/sampler.h"
#include "attn/ops/ops.h"
#include "support/expect_close.h"
#include "unit/decode/mock_decoder.h"

namespace attn::decode {
namespace {

constexpr int64_t kPad = 0, kBos = 1, kEos = 2, kVocab = 11;

models::ModelConfig lm_config(nn::PositionalKind positional) {
  models::ModelConfig c;
  c.arch = models::Arch::DecoderOnly;
  c.d_model = 16;
  c.n_heads = 2;
  c.n_decoder_layers = 2;
  c.d_ff = 32;
  c.dropout = 0.0;
  c.attention_dropout = 0.0;
  c.max_len = 32;
  c.src_vocab_size = kVocab;
  c.tgt_vocab_size = 0;
  c.pad_id = kPad;
  c.bos_id = kBos;
  c.eos_id = kEos;
  c.dtype = DType::F64;
  c.norm_first = true;
  c.positional = positional;
  c.seed = 3;
  return c;
}

// Matrices N(0, 1/fan_in), embeddings N(0, 0.5^2): continuations then depend on the prompt.
void randomize(models::DecoderOnlyModel& model, uint64_t seed) {
  Rng rng(seed);
  for (auto& [name, p] : model.named_parameters()) {
    if (name.find("norm") != std::string::npos) continue;
    const double sd = name.find("embedding") != std::string::npos ? 0.5 : 1.0 / std::sqrt(static_cast<double>(p.size(-1)));
    p.copy_from(Tensor::randn(p.shape(), rng, p.dtype(), 0.0, sd));
  }
  model.eval();
}

const std::vector<std::vector<int64_t>> kPrompts = {{kBos, 5, 9, 4}, {kBos, 8}, {kBos, 6, 6, 10, 3, 7}};

// Greedy continuation of one prompt by re-running the full forward on the growing sequence.
std::vector<int64_t> brute_force_greedy(models::DecoderOnlyModel& model, std::vector<int64_t> seq, int64_t max_new) {
  NoGradGuard no_grad;
  std::vector<int64_t> out;
  for (int64_t k = 0; k < max_new; ++k) {
    const int64_t t = static_cast<int64_t>(seq.size());
    const Tensor logits = model.forward(Tensor::from_vector<int64_t>(seq, {1, t}));  // [1, T, V]
    const auto last = logits.slice(1, t - 1, t).contiguous().to_vector<double>();
    int64_t best = 0;
    for (int64_t j = 1; j < kVocab; ++j)
      if (last[static_cast<size_t>(j)] > last[static_cast<size_t>(best)]) best = j;
    if (best == kEos) break;
    out.push_back(best);
    seq.push_back(best);
  }
  return out;
}

GreedyOptions greedy_options(int64_t max_len) {
  GreedyOptions o;
  o.bos = kBos;
  o.eos = kEos;
  o.pad = kPad;
  o.max_len = max_len;
  return o;
}

TEST(LmDecoder, GreedyContinuesEachPromptLikeTheFullForwardRerunEveryStep) {
  for (nn::PositionalKind pos : {nn::PositionalKind::Sinusoidal, nn::PositionalKind::Learned, nn::PositionalKind::None}) {
    models::DecoderOnlyModel model(lm_config(pos));
    randomize(model, 11);
    LmDecoder decoder(model);
    const auto hyps = greedy_search(decoder, test::padded_batch(kPrompts, kPad), greedy_options(8));
    ASSERT_EQ(hyps.size(), kPrompts.size());
    bool any_tokens = false;
    for (size_t b = 0; b < kPrompts.size(); ++b) {
      EXPECT_EQ(hyps[b].tokens, brute_force_greedy(model, kPrompts[b], 8)) << nn::positional_kind_name(pos) << " row " << b;
      any_tokens = any_tokens || !hyps[b].tokens.empty();
    }
    EXPECT_TRUE(any_tokens);
  }
}

TEST(LmDecoder, GreedyMatchesTheFullForwardForALlamaStyleModelWithAWindow) {
  models::ModelConfig c = lm_config(nn::PositionalKind::Rope);
  c.rope_pairing = RopePairing::Half;
  c.n_kv_heads = 1;
  c.sliding_window = 4;
  c.activation = nn::Activation::SwiGLU;
  c.norm = nn::NormKind::RMS;
  models::DecoderOnlyModel model(c);
  randomize(model, 29);
  LmDecoder decoder(model);
  const auto hyps = greedy_search(decoder, test::padded_batch(kPrompts, kPad), greedy_options(8));
  for (size_t b = 0; b < kPrompts.size(); ++b)
    EXPECT_EQ(hyps[b].tokens, brute_force_greedy(model, kPrompts[b], 8)) << "row " << b;
  EXPECT_LE(decoder.cache().layer(0).self.k.size(2), 4);  // the window's cache
  EXPECT_EQ(decoder.cache().layer(0).self.k.size(1), 1);  // one key/value head
}

TEST(LmDecoder, SamePromptSameOutputAloneOrInABatch) {
  models::DecoderOnlyModel model(lm_config(nn::PositionalKind::Learned));
  randomize(model, 13);
  const Tensor batch = test::padded_batch(kPrompts, kPad);
  LmDecoder decoder(model);
  BeamOptions beam;
  beam.beam = 3;
  beam.n_best = 2;
  beam.bos = kBos;
  beam.eos = kEos;
  beam.pad = kPad;
  beam.max_len = 6;
  const auto greedy_batch = greedy_search(decoder, batch, greedy_options(6));
  const auto beam_batch = beam_search(decoder, batch, beam);
  for (size_t b = 0; b < kPrompts.size(); ++b) {
    const Tensor alone = test::padded_batch({kPrompts[b]}, kPad);
    const auto g = greedy_search(decoder, alone, greedy_options(6));
    EXPECT_EQ(g[0].tokens, greedy_batch[b].tokens) << "row " << b;
    EXPECT_NEAR(g[0].logprob, greedy_batch[b].logprob, 1e-9) << "row " << b;
    const auto bs = beam_search(decoder, alone, beam);
    ASSERT_EQ(bs[0].size(), beam_batch[b].size());
    for (size_t k = 0; k < bs[0].size(); ++k) {
      EXPECT_EQ(bs[0][k].tokens, beam_batch[b][k].tokens) << "row " << b << " hypothesis " << k;
      EXPECT_NEAR(bs[0][k].score, beam_batch[b][k].score, 1e-9) << "row " << b << " hypothesis " << k;
    }
  }
}

TEST(LmDecoder, FirstStepReturnsTheDistributionAfterThePromptWhateverItIsFed) {
  models::DecoderOnlyModel model(lm_config(nn::PositionalKind::Sinusoidal));
  randomize(model, 17);
  const Tensor prompts = test::padded_batch(kPrompts, kPad);
  LmDecoder a(model), b(model);
  a.start(prompts);
  b.start(prompts);
  const Tensor first_a = a.step(Tensor::from_vector<int64_t>({kBos, kBos, kBos}, {3}));
  const Tensor first_b = b.step(Tensor::from_vector<int64_t>({7, 3, 9}, {3}));
  EXPECT_TRUE(test::all_close(first_a, first_b, 0.0, 0.0, "first step"));
  NoGradGuard no_grad;
  for (size_t r = 0; r < kPrompts.size(); ++r) {
    const int64_t t = static_cast<int64_t>(kPrompts[r].size());
    const Tensor full = model.forward(Tensor::from_vector<int64_t>(kPrompts[r], {1, t}));  // [1, T, V]
    const Tensor want = log_softmax(full.slice(1, t - 1, t).reshape({1, kVocab}));
    EXPECT_TRUE(test::all_close(first_a.slice(0, static_cast<int64_t>(r), static_cast<int64_t>(r) + 1), want, 1e-10, 0,
                                "row " + std::to_string(r)));
    // Log-probabilities: they exponentiate to a distribution.
    double mass = 0;
    for (double v : want.to_vector<double>()) mass += std::exp(v);
    EXPECT_NEAR(mass, 1.0, 1e-12);
  }
  // The second step feeds tokens: the distribution after prompt + token.
  const Tensor second = a.step(Tensor::from_vector<int64_t>({4, 5, 6}, {3}));
  std::vector<int64_t> seq = kPrompts[1];
  seq.push_back(5);
  const int64_t t = static_cast<int64_t>(seq.size());
  const Tensor full = model.forward(Tensor::from_vector<int64_t>(seq, {1, t}));
  EXPECT_TRUE(test::all_close(second.slice(0, 1, 2), log_softmax(full.slice(1, t - 1, t).reshape({1, kVocab})), 1e-10, 0,
                              "second step"));
}

TEST(LmDecoder, ReorderBeforeAndAfterTheFirstStepMovesRowsWithTheirPrompts) {
  models::DecoderOnlyModel model(lm_config(nn::PositionalKind::Learned));
  randomize(model, 19);
  LmDecoder decoder(model);
  decoder.start(test::padded_batch(kPrompts, kPad));
  decoder.reorder({2, 2, 0});  // before the first step: the pending distribution follows
  const Tensor first = decoder.step(Tensor::from_vector<int64_t>({kBos, kBos, kBos}, {3}));  // [3, V]
  EXPECT_TRUE(test::all_close(first.slice(0, 0, 1), first.slice(0, 1, 2), 0.0, 0.0, "duplicated row"));
  decoder.reorder({2, 1});  // row 2 = prompt 0, row 1 = prompt 2
  const Tensor next = decoder.step(Tensor::from_vector<int64_t>({4, 9}, {2}));  // [2, V]
  NoGradGuard no_grad;
  const std::vector<std::vector<int64_t>> seqs = {{kBos, 5, 9, 4, 4}, {kBos, 6, 6, 10, 3, 7, 9}};
  for (int64_t r = 0; r < 2; ++r) {
    const auto& seq = seqs[static_cast<size_t>(r)];
    const int64_t t = static_cast<int64_t>(seq.size());
    const Tensor full = model.forward(Tensor::from_vector<int64_t>(seq, {1, t}));
    EXPECT_TRUE(test::all_close(next.slice(0, r, r + 1), log_softmax(full.slice(1, t - 1, t).reshape({1, kVocab})), 1e-10,
                                0, "row " + std::to_string(r)));
  }
  EXPECT_EQ(decoder.cache().rows(), 2);
}

TEST(LmDecoder, SamplingRunsAndTopKOneIsGreedy) {
  models::DecoderOnlyModel model(lm_config(nn::PositionalKind::Sinusoidal));
  randomize(model, 23);
  LmDecoder decoder(model);
  const Tensor prompts = test::padded_batch(kPrompts, kPad);
  SamplingOptions s;
  s.top_k = 1;
  s.seed = 5;
  s.bos = kBos;
  s.eos = kEos;
  s.pad = kPad;
  s.max_len = 6;
  const auto sampled = sample(decoder, prompts, s);
  const auto greedy = greedy_search(decoder, prompts, greedy_options(6));
  for (size_t b = 0; b < kPrompts.size(); ++b) EXPECT_EQ(sampled[b].tokens, greedy[b].tokens) << b;
  s.top_k = 0;
  s.temperature = 1.5;
  for (const auto& h : sample(decoder, prompts, s)) EXPECT_LE(h.length(), 6);
}

TEST(LmDecoder, RejectsEmptyPromptsStepsBeforeStartAndTrainingMode) {
  models::DecoderOnlyModel model(lm_config(nn::PositionalKind::Sinusoidal));
  LmDecoder decoder(model);
  EXPECT_THROW(decoder.start(test::padded_batch(kPrompts, kPad)), Error);  // training mode
  model.eval();
  EXPECT_THROW(decoder.step(Tensor::from_vector<int64_t>({kBos}, {1})), Error);  // before start
  EXPECT_THROW(decoder.reorder({0}), Error);
  EXPECT_THROW(decoder.start(test::padded_batch({{kBos, 4}, {kPad, kPad}}, kPad)), Error);  // empty prompt
  EXPECT_THROW(decoder.start(Tensor::zeros({1, 3})), Error);                               // not i64
  EXPECT_THROW(decoder.start(test::padded_batch({{kBos, 40}}, kPad)), Error);              // id outside V
  decoder.start(test::padded_batch(kPrompts, kPad));
  EXPECT_THROW(decoder.step(Tensor::from_vector<int64_t>({kBos}, {1})), Error);  // 1 token for 3 rows
  EXPECT_THROW(decoder.reorder({3}), Error);
  EXPECT_EQ(decoder.vocab_size(), kVocab);
  try {
    decoder.start(test::padded_batch({{kBos, 4}, {kPad}}, kPad));
    ADD_FAILURE() << "an empty prompt was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt 1 is empty"), std::string::npos) << e.what();
  }
}

// pad_id -1 (GPT-2): token 0 is an ordinary token, so padding can only come from lengths.
TEST(LmDecoder, PadlessModelGivesTheSameGreedyOutputAloneOrInABatchOfDifferentLengths) {
  models::ModelConfig c = lm_config(nn::PositionalKind::Learned);
  c.pad_id = -1;
  models::DecoderOnlyModel model(c);
  randomize(model, 31);
  // Prompts that contain token 0, the filler of the left padding.
  const std::vector<std::vector<int64_t>> prompts = {{kBos, 0, 9, 4}, {kBos, 8}, {0, 6, 6, 10, 3, 7}};
  GreedyOptions o = greedy_options(8);
  o.pad = 0;
  std::vector<int64_t> lengths;
  for (const auto& p : prompts) lengths.push_back(static_cast<int64_t>(p.size()));
  LmDecoder decoder(model);
  decoder.set_prompt_lengths(lengths);
  const auto batch = greedy_search(decoder, test::padded_batch(prompts, 0), o);
  ASSERT_EQ(batch.size(), prompts.size());
  bool any_tokens = false;
  for (size_t b = 0; b < prompts.size(); ++b) {
    const auto alone = greedy_search(decoder, test::padded_batch({prompts[b]}, 0), o);
    EXPECT_EQ(alone[0].tokens, batch[b].tokens) << "row " << b;
    EXPECT_NEAR(alone[0].logprob, batch[b].logprob, 1e-9) << "row " << b;
    EXPECT_EQ(batch[b].tokens, brute_force_greedy(model, prompts[b], 8)) << "row " << b;
    any_tokens = any_tokens || !batch[b].tokens.empty();
  }
  EXPECT_TRUE(any_tokens);
  // The token-list overload and the explicit lengths agree with the search's start.
  LmDecoder lists(model), explicit_lengths(model);
  lists.start(prompts);
  explicit_lengths.start(test::padded_batch(prompts, 5), lengths);
  const Tensor bos = Tensor::from_vector<int64_t>({kBos, kBos, kBos}, {3});
  EXPECT_TRUE(test::all_close(lists.step(bos), explicit_lengths.step(bos), 0.0, 0.0, "lists vs lengths"));
  // Without lengths every token of a pad-less row is a prompt token: the 0s are not dropped.
  LmDecoder whole(model);
  whole.start(test::padded_batch({prompts[0]}, 0));
  LmDecoder listed(model);
  listed.start({prompts[0]});
  EXPECT_TRUE(test::all_close(whole.step(Tensor::from_vector<int64_t>({kBos}, {1})),
                              listed.step(Tensor::from_vector<int64_t>({kBos}, {1})), 0.0, 0.0, "whole row"));
}

TEST(LmDecoder, RejectsBadPromptLengths) {
  models::ModelConfig c = lm_config(nn::PositionalKind::Sinusoidal);
  c.pad_id = -1;
  models::DecoderOnlyModel model(c);
  model.eval();
  LmDecoder decoder(model);
  const Tensor ids = test::padded_batch({{kBos, 4, 5}, {kBos, 3}}, 0);
  EXPECT_THROW(decoder.start(ids, {3}), Error);      // one length for two rows
  EXPECT_THROW(decoder.start(ids, {3, 0}), Error);   // an empty prompt
  EXPECT_THROW(decoder.start(ids, {4, 2}), Error);   // longer than the batch
  EXPECT_THROW(decoder.start(std::vector<std::vector<int64_t>>{}), Error);
  EXPECT_THROW(decoder.start(std::vector<std::vector<int64_t>>{{kBos}, {}}), Error);
  NoGradGuard no_grad;
  nn::KVCache cache = model.init_cache(2);
  EXPECT_THROW(model.forward_cached(ids, {3, 2, 1}, cache), Error);
  model.forward_cached(ids, {3, 2}, cache);
  EXPECT_THROW(model.forward_cached(ids, {3, 2}, cache), Error);  // lengths only start a batch
}

}  // namespace
}  // namespace attn::decode
