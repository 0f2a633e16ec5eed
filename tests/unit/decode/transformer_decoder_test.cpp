// TransformerDecoder (the EncoderDecoderModel adapter): greedy decoding through it equals an
// argmax loop over full forward() calls; rows follow reorder() to the right source and prefix;
// beam hypotheses' log-probabilities agree with forward(); misuse is an error.
#include "attn/decode/transformer_decoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "attn/decode/beam_search.h"
#include "attn/decode/greedy.h"
#include "attn/ops/ops.h"
#include "unit/decode/mock_decoder.h"

namespace attn::decode {
namespace {

constexpr int64_t kPad = 0, kBos = 1, kEos = 2;

// D=16, 2 heads, 2+2 layers, d_ff 32, vocabulary 9 (PAD 0, BOS 1, EOS 2), no dropout.
models::ModelConfig tiny_config(DType dtype) {
  models::ModelConfig c;
  c.d_model = 16;
  c.n_heads = 2;
  c.n_encoder_layers = 2;
  c.n_decoder_layers = 2;
  c.d_ff = 32;
  c.dropout = 0.0;
  c.attention_dropout = 0.0;
  c.max_len = 32;
  c.src_vocab_size = c.tgt_vocab_size = 9;
  c.pad_id = kPad;
  c.bos_id = kBos;
  c.eos_id = kEos;
  c.dtype = dtype;
  c.seed = 7;
  return c;
}

// A freshly initialised model predicts nearly the same token for every source. Redrawing the
// matrices from N(0, 1/fan_in) and the embeddings from N(0, 0.25^2) (norms untouched) makes the
// outputs depend on the source and the prefix, so the comparisons below mean something.
void randomize(models::EncoderDecoderModel& model, uint64_t seed) {
  Rng rng(seed);
  for (auto& [name, p] : model.named_parameters()) {
    if (name.find("norm") != std::string::npos) continue;
    const double sd = name.find("embedding") != std::string::npos ? 0.25 : 1.0 / std::sqrt(static_cast<double>(p.size(-1)));
    p.copy_from(Tensor::randn(p.shape(), rng, p.dtype(), 0.0, sd));
  }
  model.eval();
}

const std::vector<std::vector<int64_t>> kSources = {{3, 4, 5}, {6}, {4, 4, 7, 3, 8}};

// log_softmax of the last position of model.forward(src [1, S], prefix) in double.
std::vector<double> next_log_probs(models::EncoderDecoderModel& model, const Tensor& src,
                                   const std::vector<int64_t>& prefix) {
  NoGradGuard no_grad;
  const int64_t t = static_cast<int64_t>(prefix.size());
  const Tensor logits = model.forward(src, Tensor::from_vector<int64_t>(prefix, {1, t}));  // [1, T, V]
  const auto all = logits.to_vector<double>();
  const int64_t v = logits.size(2);
  return test::log_softmax_of(std::vector<double>(all.end() - v, all.end()));
}

TEST(TransformerDecoder, GreedyDecodingEqualsAnArgmaxLoopOverForward) {
  for (uint64_t seed : {2u, 6u, 11u}) {
    models::ModelConfig c = tiny_config(DType::F64);
    c.seed = seed;
    models::EncoderDecoderModel model(c);
    randomize(model, seed);
    TransformerDecoder dec(model);
    const Tensor src = test::padded_batch(kSources, kPad);
    const auto got = greedy_search(dec, src, GreedyOptions{.bos = kBos, .eos = kEos, .pad = kPad, .max_extra = 4});
    std::set<int64_t> seen;  // guards against a degenerate model that makes the comparison vacuous
    for (const Hypothesis& h : got) seen.insert(h.tokens.begin(), h.tokens.end());
    EXPECT_GE(seen.size(), 2u) << "seed " << seed;
    for (size_t b = 0; b < kSources.size(); ++b) {
      const Tensor row = src.slice(0, static_cast<int64_t>(b), static_cast<int64_t>(b) + 1).contiguous();  // [1, S]
      std::vector<int64_t> prefix{kBos}, tokens;
      double logprob = 0;
      bool finished = false;
      const size_t limit = kSources[b].size() + 4;
      while (tokens.size() < limit) {
        const auto lp = next_log_probs(model, row, prefix);
        int64_t best = 0;
        for (int64_t t = 1; t < static_cast<int64_t>(lp.size()); ++t)
          if (lp[t] > lp[best]) best = t;
        logprob += lp[best];
        if (best == kEos) {
          finished = true;
          break;
        }
        tokens.push_back(best);
        prefix.push_back(best);
      }
      EXPECT_EQ(got[b].tokens, tokens) << "seed " << seed << " source " << b;
      EXPECT_EQ(got[b].finished, finished);
      EXPECT_NEAR(got[b].logprob, logprob, 1e-9);
    }
  }
}

TEST(TransformerDecoder, RowsFollowReorderToTheirSourceAndPrefix) {
  models::EncoderDecoderModel model(tiny_config(DType::F64));
  randomize(model, 3);
  TransformerDecoder dec(model);
  EXPECT_EQ(dec.vocab_size(), 9);
  const Tensor src = test::padded_batch({kSources[0], kSources[2]}, kPad);
  dec.start(src);
  const Tensor first = dec.step(Tensor::from_vector<int64_t>({kBos, kBos}, {2}));
  ASSERT_EQ(first.shape(), (Shape{2, 9}));
  dec.reorder({1, 1, 0});
  const Tensor second = dec.step(Tensor::from_vector<int64_t>({5, 6, 7}, {3}));  // [3, V]
  ASSERT_EQ(second.shape(), (Shape{3, 9}));
  const std::vector<std::pair<int64_t, std::vector<int64_t>>> want = {{1, {kBos, 5}}, {1, {kBos, 6}}, {0, {kBos, 7}}};
  const auto got = second.to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) {
    const Tensor row = src.slice(0, want[i].first, want[i].first + 1).contiguous();
    const auto lp = next_log_probs(model, row, want[i].second);
    for (int64_t t = 0; t < 9; ++t) EXPECT_NEAR(got[i * 9 + t], lp[t], 1e-10) << "row " << i << " token " << t;
  }
  // Dropping every row but one, then stepping again.
  dec.reorder({2});
  const Tensor third = dec.step(Tensor::from_vector<int64_t>({3}, {1}));
  const auto lp = next_log_probs(model, src.slice(0, 0, 1).contiguous(), {kBos, 7, 3});
  for (int64_t t = 0; t < 9; ++t) EXPECT_NEAR(third.to_vector<double>()[t], lp[t], 1e-10);
}

TEST(TransformerDecoder, BeamHypothesesScoreWhatForwardSays) {
  models::EncoderDecoderModel model(tiny_config(DType::F32));
  randomize(model, 4);
  TransformerDecoder dec(model);
  const Tensor src = test::padded_batch(kSources, kPad);
  const auto got = beam_search(dec, src, BeamOptions{.beam = 3, .n_best = 3, .bos = kBos, .eos = kEos, .pad = kPad,
                                                     .max_extra = 3});
  for (size_t b = 0; b < kSources.size(); ++b) {
    ASSERT_EQ(got[b].size(), 3u);
    const Tensor row = src.slice(0, static_cast<int64_t>(b), static_cast<int64_t>(b) + 1).contiguous();
    for (const Hypothesis& h : got[b]) {
      std::vector<int64_t> prefix{kBos};
      double lp = 0;
      for (int64_t t : h.tokens) {
        lp += next_log_probs(model, row, prefix)[t];
        prefix.push_back(t);
      }
      if (h.finished) lp += next_log_probs(model, row, prefix)[kEos];
      EXPECT_NEAR(h.logprob, lp, 1e-4) << "source " << b;
      EXPECT_NEAR(h.score, lp / length_penalty(LengthPenalty::Gnmt, 0.6, h.length()), 1e-4);
    }
  }
  // Beam 1 without a penalty is greedy, through the model too.
  const auto beam1 = beam_search(dec, src, BeamOptions{.beam = 1, .alpha = 0.0, .bos = kBos, .eos = kEos,
                                                       .pad = kPad, .max_extra = 3});
  const auto greedy = greedy_search(dec, src, GreedyOptions{.bos = kBos, .eos = kEos, .pad = kPad, .max_extra = 3});
  for (size_t b = 0; b < kSources.size(); ++b) EXPECT_EQ(beam1[b][0].tokens, greedy[b].tokens);
}

TEST(TransformerDecoder, MisuseIsAnError) {
  models::EncoderDecoderModel model(tiny_config(DType::F64));
  TransformerDecoder dec(model);
  const Tensor src = test::padded_batch(kSources, kPad);
  EXPECT_THROW(dec.start(src), Error);  // still in training mode
  model.eval();
  EXPECT_THROW(dec.step(Tensor::from_vector<int64_t>({kBos}, {1})), Error);  // before start
  dec.start(src);
  EXPECT_THROW(dec.step(Tensor::from_vector<int64_t>({kBos}, {1})), Error);  // 3 rows, 1 token
  EXPECT_THROW(dec.reorder({0, 3}), Error);
  EXPECT_THROW(dec.start(Tensor::zeros({2, 3})), Error);
}

}  // namespace
}  // namespace attn::decode
