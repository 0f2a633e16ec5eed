// KV cache (nn/kv_cache.h) and EncoderDecoderModel::forward_cached: step-by-step logits equal the
// teacher-forced forward at every position (post-/pre-norm, sinusoidal/learned positions, f32/f64,
// padded sources and targets); reordered caches decode like those prefixes from scratch; the
// TransformerDecoder adapter gives the same greedy and beam results with and without the cache;
// memory_bytes counts self-attention K/V per row and cross-attention K/V per source (rows of
// one source share them); misuse is an error. A wider float32 model, whose step
// projections take the small-M product, matches the forward and decodes a row alone as in its
// batch, within float32 rounding.
#include "attn/nn/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "attn/core/autograd.h"
#include "attn/decode/beam_search.h"
#include "attn/decode/greedy.h"
#include "attn/decode/transformer_decoder.h"
#include "attn/models/encoder_decoder.h"
#include "attn/ops/ops.h"
#include "unit/decode/mock_decoder.h"

namespace attn::decode {
namespace {

constexpr int64_t kPad = 0, kBos = 1, kEos = 2;

// D=16, 2 heads, 2+3 layers, d_ff 32, vocabulary 11 (PAD 0, BOS 1, EOS 2), no dropout.
models::ModelConfig tiny_config(DType dtype, bool norm_first, nn::PositionalKind positional) {
  models::ModelConfig c;
  c.d_model = 16;
  c.n_heads = 2;
  c.n_encoder_layers = 2;
  c.n_decoder_layers = 3;
  c.d_ff = 32;
  c.dropout = 0.0;
  c.attention_dropout = 0.0;
  c.max_len = 32;
  c.src_vocab_size = c.tgt_vocab_size = 11;
  c.pad_id = kPad;
  c.bos_id = kBos;
  c.eos_id = kEos;
  c.dtype = dtype;
  c.norm_first = norm_first;
  c.positional = positional;
  c.seed = 5;
  return c;
}

// Redraws matrices N(0, 1/fan_in) and embeddings N(0, 0.25^2) so that outputs depend on the
// source and the prefix (a fresh model predicts nearly the same thing everywhere).
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
// Teacher-forced targets (BOS first); the second is right-padded like a real target batch.
const std::vector<std::vector<int64_t>> kTargets = {{kBos, 5, 4, 3, 9, 10}, {kBos, 6, 7, kPad, kPad, kPad},
                                                    {kBos, 8, 3, 7, 4, 4}};

Tensor column(const Tensor& ids, int64_t t) {
  return ids.slice(1, t, t + 1).contiguous();  // [N, 1]
}

Tensor rows_of(const Tensor& x, const std::vector<int64_t>& rows) {
  std::vector<Tensor> parts;
  for (int64_t r : rows) parts.push_back(x.slice(0, r, r + 1));
  return concat(parts, 0).contiguous();
}

TEST(KVCache, StepByStepLogitsEqualTheTeacherForcedForwardAtEveryPosition) {
  for (DType dtype : {DType::F32, DType::F64})
    for (bool norm_first : {false, true})
      for (nn::PositionalKind pos : {nn::PositionalKind::Sinusoidal, nn::PositionalKind::Learned}) {
        models::EncoderDecoderModel model(tiny_config(dtype, norm_first, pos));
        randomize(model, 17);
        const double tol = dtype == DType::F32 ? 1e-5 : 1e-10;
        NoGradGuard no_grad;
        const Tensor src = test::padded_batch(kSources, kPad);
        const Tensor tgt = test::padded_batch(kTargets, kPad);  // [3, 6]
        const Tensor full = model.forward(src, tgt);            // [3, 6, V]
        const int64_t n = tgt.size(0), t_len = tgt.size(1), v = full.size(2);
        const auto want = full.to_vector<double>();
        nn::KVCache cache = model.init_cache(model.encode(src), model.padding_mask(src));
        double worst = 0;
        for (int64_t t = 0; t < t_len; ++t) {
          const Tensor logits = model.forward_cached(column(tgt, t), cache);  // [N, V]
          ASSERT_EQ(logits.shape(), (Shape{n, v}));
          ASSERT_EQ(cache.length(), t + 1);
          const auto got = logits.to_vector<double>();
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < v; ++j) {
              const double d = std::abs(got[i * v + j] - want[(i * t_len + t) * v + j]);
              worst = std::max(worst, d);  // PAD target positions too: both sides mask PAD keys
            }
        }
        EXPECT_LE(worst, tol) << dtype_name(dtype) << " norm_first " << norm_first << " positional "
                              << nn::positional_kind_name(pos);
        // Guard against a vacuous comparison: positions must differ from each other.
        EXPECT_GT(std::abs(want[0] - want[v]), 1e-3);
        EXPECT_EQ(cache.layer(0).self.k.shape(), (Shape{n, 2, t_len, 8}));
      }
}

// The self-attention K/V grow inside buffers with spare room (nn::append_positions): a step
// writes its position there, so every layer keeps its buffers from step to step.
TEST(KVCache, StepsAppendInPlaceWithoutMovingTheSelfAttentionBuffers) {
  models::EncoderDecoderModel model(tiny_config(DType::F32, false, nn::PositionalKind::Sinusoidal));
  randomize(model, 17);
  NoGradGuard no_grad;
  const Tensor src = test::padded_batch(kSources, kPad);
  const Tensor tgt = test::padded_batch(kTargets, kPad);  // [3, 6]
  nn::KVCache cache = model.init_cache(model.encode(src), model.padding_mask(src));
  std::vector<const void*> buffers;
  for (int64_t t = 0; t < tgt.size(1); ++t) {
    model.forward_cached(column(tgt, t), cache);
    for (int64_t i = 0; i < cache.num_layers(); ++i)
      for (const Tensor* x : {&cache.layer(i).self.k, &cache.layer(i).self.v}) {
        const size_t slot = static_cast<size_t>(2 * i + (x == &cache.layer(i).self.v ? 1 : 0));
        if (t == 0) {
          buffers.push_back(x->storage()->data());
        } else {
          EXPECT_EQ(x->storage()->data(), buffers[slot]) << "layer " << i << " step " << t;
        }
        EXPECT_EQ(x->size(2), t + 1);
      }
  }
}

// D=256, 4 heads, 1+2 layers, d_ff 512, vocabulary 300: every projection of a step is a weight
// of at least 256 x 256, which float32 sends through the small-M product (kernels/gemm.h),
// while the teacher-forced forward multiplies all positions at once through BLAS.
models::ModelConfig wide_config(bool norm_first) {
  models::ModelConfig c = tiny_config(DType::F32, norm_first, nn::PositionalKind::Sinusoidal);
  c.d_model = 256;
  c.n_heads = 4;
  c.n_encoder_layers = 1;
  c.n_decoder_layers = 2;
  c.d_ff = 512;
  c.src_vocab_size = c.tgt_vocab_size = 300;
  return c;
}

TEST(KVCache, WideFloatStepsEqualTheForwardAndARowDecodesAloneAsInItsBatch) {
  for (bool norm_first : {false, true}) {
    models::EncoderDecoderModel model(wide_config(norm_first));
    randomize(model, 23);
    NoGradGuard no_grad;
    const Tensor src = test::padded_batch(kSources, kPad);
    const Tensor tgt = test::padded_batch(kTargets, kPad);  // [3, 6]
    const Tensor full = model.forward(src, tgt);            // [3, 6, V]
    const int64_t n = tgt.size(0), t_len = tgt.size(1), v = full.size(2);
    const auto want = full.to_vector<double>();
    // Logits reach about 18 here; float32 rounding of sums over 256 and 512 terms is a few
    // parts in 1e7 of that, so the bound is relative to the largest logit.
    double scale = 1.0;
    for (double w : want) scale = std::max(scale, std::abs(w));
    const double tol = 2e-6 * scale;
    nn::KVCache cache = model.init_cache(model.encode(src), model.padding_mask(src));
    std::vector<std::vector<float>> batch_steps;
    double worst = 0;
    for (int64_t t = 0; t < t_len; ++t) {
      batch_steps.push_back(model.forward_cached(column(tgt, t), cache).to_vector<float>());  // [N, V]
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < v; ++j)
          worst = std::max(worst, std::abs(batch_steps.back()[i * v + j] - want[(i * t_len + t) * v + j]));
    }
    EXPECT_LE(worst, tol) << "norm_first " << norm_first << " largest logit " << scale;
    EXPECT_GT(std::abs(want[0] - want[v]), 1e-3);  // positions differ: the comparison means something
    // Source 2 alone decodes like its row of the batch.
    const Tensor src2 = rows_of(src, {2}), tgt2 = rows_of(tgt, {2});
    nn::KVCache alone = model.init_cache(model.encode(src2), model.padding_mask(src2));
    double worst_alone = 0;
    for (int64_t t = 0; t < t_len; ++t) {
      const auto got = model.forward_cached(column(tgt2, t), alone).to_vector<float>();  // [1, V]
      for (int64_t j = 0; j < v; ++j) worst_alone = std::max(worst_alone, double(std::abs(got[j] - batch_steps[t][2 * v + j])));
    }
    EXPECT_LE(worst_alone, tol) << "norm_first " << norm_first;
  }
}

TEST(KVCache, ReorderedRowsDecodeLikeThosePrefixesFromScratch) {
  models::EncoderDecoderModel model(tiny_config(DType::F64, false, nn::PositionalKind::Sinusoidal));
  randomize(model, 23);
  NoGradGuard no_grad;
  const Tensor src = test::padded_batch(kSources, kPad);
  nn::KVCache cache = model.init_cache(model.encode(src), model.padding_mask(src));
  std::vector<std::vector<int64_t>> prefixes = {{kBos, 5}, {kBos, 6}, {kBos, 8}};
  std::vector<int64_t> source = {0, 1, 2};
  for (int64_t t = 0; t < 2; ++t) {
    std::vector<int64_t> tok;
    for (const auto& p : prefixes) tok.push_back(p[static_cast<size_t>(t)]);
    model.forward_cached(Tensor::from_vector<int64_t>(tok, {3, 1}), cache);
  }
  // Beam-style: row 2 twice, row 0 once, row 1 dropped; then a single row.
  const std::vector<std::vector<int64_t>> reorders = {{2, 0, 2}, {1}};
  const std::vector<std::vector<int64_t>> next_tokens = {{3, 9, 10}, {7}};
  for (size_t r = 0; r < reorders.size(); ++r) {
    cache.reorder(reorders[r]);
    std::vector<std::vector<int64_t>> p2;
    std::vector<int64_t> s2;
    for (int64_t i : reorders[r]) {
      p2.push_back(prefixes[static_cast<size_t>(i)]);
      s2.push_back(source[static_cast<size_t>(i)]);
    }
    prefixes = p2;
    source = s2;
    for (size_t i = 0; i < prefixes.size(); ++i) prefixes[i].push_back(next_tokens[r][i]);
    const int64_t m = static_cast<int64_t>(prefixes.size());
    const int64_t t = static_cast<int64_t>(prefixes[0].size()) - 1;
    EXPECT_EQ(cache.length(), t);  // the step's position, taken from the cache
    const Tensor logits = model.forward_cached(Tensor::from_vector<int64_t>(next_tokens[r], {m, 1}), cache);  // [M, V]
    const auto got = logits.to_vector<double>();
    const int64_t v = logits.size(1);
    for (int64_t i = 0; i < m; ++i) {
      const Tensor row_src = rows_of(src, {source[static_cast<size_t>(i)]});  // [1, S]
      const Tensor full = model.forward(row_src, Tensor::from_vector<int64_t>(prefixes[static_cast<size_t>(i)], {1, t + 1}));
      const auto want = full.to_vector<double>();
      for (int64_t j = 0; j < v; ++j) EXPECT_NEAR(got[i * v + j], want[t * v + j], 1e-10) << "reorder " << r << " row " << i;
    }
  }
}

TEST(KVCache, AdapterGreedyAndBeamResultsEqualTheRecomputePath) {
  for (bool norm_first : {false, true}) {
    models::EncoderDecoderModel model(tiny_config(DType::F64, norm_first, nn::PositionalKind::Learned));
    randomize(model, 31);
    TransformerDecoder cached(model), recompute(model, false);
    EXPECT_TRUE(cached.uses_kv_cache());
    EXPECT_FALSE(recompute.uses_kv_cache());
    const Tensor src = test::padded_batch(kSources, kPad);
    const GreedyOptions g{.bos = kBos, .eos = kEos, .pad = kPad, .max_extra = 5};
    const auto g1 = greedy_search(cached, src, g);
    const auto g2 = greedy_search(recompute, src, g);
    ASSERT_EQ(g1.size(), g2.size());
    for (size_t b = 0; b < g1.size(); ++b) {
      EXPECT_EQ(g1[b].tokens, g2[b].tokens);
      EXPECT_EQ(g1[b].finished, g2[b].finished);
      EXPECT_NEAR(g1[b].logprob, g2[b].logprob, 1e-9);
    }
    const BeamOptions bo{.beam = 3, .n_best = 3, .bos = kBos, .eos = kEos, .pad = kPad, .max_extra = 5};
    const auto b1 = beam_search(cached, src, bo);
    const auto b2 = beam_search(recompute, src, bo);
    ASSERT_EQ(b1.size(), b2.size());
    for (size_t b = 0; b < b1.size(); ++b) {
      ASSERT_EQ(b1[b].size(), b2[b].size());
      for (size_t k = 0; k < b1[b].size(); ++k) {
        EXPECT_EQ(b1[b][k].tokens, b2[b][k].tokens) << "source " << b << " hypothesis " << k;
        EXPECT_NEAR(b1[b][k].logprob, b2[b][k].logprob, 1e-9);
        EXPECT_NEAR(b1[b][k].score, b2[b][k].score, 1e-9);
      }
    }
  }
}

TEST(KVCache, MemoryBytesCountsSelfKeysAndValuesPerRowAndCrossOnesPerSource) {
  for (DType dtype : {DType::F32, DType::F64}) {
    models::EncoderDecoderModel model(tiny_config(dtype, false, nn::PositionalKind::Sinusoidal));
    model.eval();
    NoGradGuard no_grad;
    const Tensor src = test::padded_batch(kSources, kPad);  // [3, 5]
    nn::KVCache cache = model.init_cache(model.encode(src), model.padding_mask(src));
    const int64_t layers = 3, h = 2, dh = 8, s = 5, size = static_cast<int64_t>(dtype_size(dtype));
    auto expected = [&](int64_t n, int64_t t) { return 2 * layers * n * h * t * dh * size + 2 * layers * n * h * s * dh * size; };
    EXPECT_EQ(cache.memory_bytes(), expected(3, 0));
    for (int64_t t = 0; t < 4; ++t) model.forward_cached(Tensor::from_vector<int64_t>({kBos, 4, 5}, {3, 1}), cache);
    EXPECT_EQ(cache.memory_bytes(), expected(3, 4));
    // The planning formula (attn info --batch --length) agrees with the real cache.
    const nn::KVCacheSize planned = nn::kv_cache_size(layers, 3, h, dh, 4, s, dtype);
    EXPECT_EQ(planned.total(), cache.memory_bytes());
    EXPECT_EQ(planned.cross_bytes, 2 * layers * 3 * h * s * dh * size);
    // Rows that repeat share their source's cross-attention K/V: self-attention grows to 5 rows,
    // cross-attention stays 3 sources, until a source no row reads any more is dropped.
    auto shared = [&](int64_t n, int64_t sources, int64_t t) {
      return 2 * layers * n * h * t * dh * size + 2 * layers * sources * h * s * dh * size;
    };
    cache.reorder({0, 0, 1, 2, 2});
    EXPECT_EQ(cache.rows(), 5);
    EXPECT_EQ(cache.sources(), 3);
    EXPECT_EQ(cache.row_sources(), (std::vector<int64_t>{0, 0, 1, 2, 2}));
    EXPECT_EQ(cache.memory_bytes(), shared(5, 3, 4));
    EXPECT_NE(cache.memory_bytes(), expected(5, 4));  // what copies per row would hold
    cache.reorder({4, 0, 3, 3});  // source 1 is no longer read
    EXPECT_EQ(cache.rows(), 4);
    EXPECT_EQ(cache.sources(), 2);
    EXPECT_EQ(cache.row_sources(), (std::vector<int64_t>{1, 0, 1, 1}));
    EXPECT_EQ(cache.memory_padding().size(0), 2);
    EXPECT_EQ(cache.memory_bytes(), shared(4, 2, 4));
    cache.reorder({1, 0});  // one row per source, in order: the map is the identity again
    EXPECT_TRUE(cache.row_sources().empty());
    EXPECT_EQ(cache.rows(), 2);
    cache.reorder({});  // every hypothesis finished
    EXPECT_EQ(cache.rows(), 0);
    EXPECT_EQ(cache.memory_bytes(), 0);
  }
}

TEST(KVCache, MisuseIsAnError) {
  models::EncoderDecoderModel model(tiny_config(DType::F64, false, nn::PositionalKind::Sinusoidal));
  model.eval();
  const Tensor src = test::padded_batch(kSources, kPad);
  const Tensor memory = [&] {
    NoGradGuard no_grad;
    return model.encode(src);
  }();
  EXPECT_THROW(model.init_cache(memory, model.padding_mask(src)), attn::Error);  // grad mode on
  NoGradGuard no_grad;
  nn::KVCache cache = model.init_cache(memory, model.padding_mask(src));
  const Tensor bos = Tensor::from_vector<int64_t>({kBos, kBos, kBos}, {3, 1});
  const Tensor two_positions = Tensor::from_vector<int64_t>({kBos, kBos, kBos, kBos, kBos, kBos}, {3, 2});
  EXPECT_THROW(model.forward_cached(bos.reshape({3}), cache), attn::Error);                            // [N], not [N, 1]
  EXPECT_THROW(model.forward_cached(two_positions, cache), attn::Error);                               // [N, 2]
  EXPECT_THROW(model.forward_cached(Tensor::from_vector<int64_t>({kBos}, {1, 1}), cache), attn::Error);  // wrong rows
  EXPECT_THROW(model.forward_cached(bos.to(DType::F64), cache), attn::Error);                          // wrong dtype
  EXPECT_THROW(cache.reorder({0, 3}), attn::Error);                                               // row out of range
  EXPECT_THROW(cache.layer(3), attn::Error);
  model.train();
  EXPECT_THROW(model.forward_cached(bos, cache), attn::Error);  // training mode
  model.eval();
  EXPECT_NO_THROW(model.forward_cached(bos, cache));
}

}  // namespace
}  // namespace attn::decode
