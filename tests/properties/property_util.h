// Shared helpers for the property tests (tests/properties/): small model configs of every
// family, seeded random inputs, per-position differences of [B, T, X] outputs, and row
// permutations. The properties themselves are stated in each *_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attn/models/config.h"
#include "attn/nn/layer_options.h"
#include "attn/ops/ops.h"

namespace attn::props {

// Token ids of the small models: PAD 0, BOS 1, EOS 2, ordinary tokens 3 .. kVocab-1.
inline constexpr int64_t kVocab = 13;
inline constexpr int64_t kPad = 0;
inline constexpr int64_t kBos = 1;

// D=16, 4 heads, 2+2 layers, d_ff 32, vocabulary 13, no dropout, sinusoidal positions,
// untied output (set tie_output where a test wants it), evaluation mode is up to the caller.
inline models::ModelConfig small_config(models::Arch arch, DType dtype, bool norm_first = false) {
  models::ModelConfig c;
  c.arch = arch;
  c.d_model = 16;
  c.n_heads = 4;
  c.n_encoder_layers = 2;
  c.n_decoder_layers = 2;
  c.d_ff = 32;
  c.dropout = 0.0;
  c.attention_dropout = 0.0;
  c.norm_first = norm_first;
  c.max_len = 64;
  c.src_vocab_size = kVocab;
  c.tgt_vocab_size = arch == models::Arch::EncoderDecoder ? kVocab : 0;
  c.pad_id = kPad;
  c.bos_id = kBos;
  c.eos_id = 2;
  c.dtype = dtype;
  c.seed = 7;
  return c;
}

// Layer options of the same size as small_config.
inline nn::LayerOptions small_layer(DType dtype, bool norm_first = false) {
  nn::LayerOptions o;
  o.d_model = 16;
  o.n_heads = 4;
  o.d_ff = 32;
  o.dropout = 0.0;
  o.attention_dropout = 0.0;
  o.norm_first = norm_first;
  o.dtype = dtype;
  return o;
}

inline Tensor ids(const std::vector<int64_t>& values, int64_t B, int64_t T) {
  return Tensor::from_vector<int64_t>(values, {B, T});
}

// `n` ordinary (non-special) token ids drawn from Rng(seed).
inline std::vector<int64_t> random_tokens(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (auto& v : out) v = 3 + static_cast<int64_t>(rng.below(kVocab - 3));
  return out;
}

inline Tensor randn(const Shape& shape, uint64_t seed, DType dtype) {
  Rng rng(seed);
  return Tensor::randn(shape, rng, dtype);
}

// Bool [B, T] from 0/1 rows.
inline Tensor bool_mask(const std::vector<int>& values, int64_t B, int64_t T) {
  return Tensor::from_bools(values, {B, T});
}

// For a, b [B, T, ...] of one shape: the largest |a - b| at each (batch, position), [B][T].
inline std::vector<std::vector<double>> position_diffs(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const int64_t B = a.size(0), T = a.size(1), inner = a.numel() / (B * T);
  const auto va = a.to_vector<double>();
  const auto vb = b.to_vector<double>();
  std::vector<std::vector<double>> out(static_cast<size_t>(B), std::vector<double>(static_cast<size_t>(T), 0.0));
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::fabs(va[static_cast<size_t>(i)] - vb[static_cast<size_t>(i)]);
    double& slot = out[static_cast<size_t>(i / (T * inner))][static_cast<size_t>((i / inner) % T)];
    slot = std::isnan(d) ? INFINITY : std::max(slot, d);
  }
  return out;
}

// The largest |a - b| over the positions [lo, hi) of batch row `batch`.
inline double span_diff(const Tensor& a, const Tensor& b, int64_t batch, int64_t lo, int64_t hi) {
  const auto d = position_diffs(a, b);
  double m = 0;
  for (int64_t t = lo; t < hi; ++t) m = std::max(m, d[static_cast<size_t>(batch)][static_cast<size_t>(t)]);
  return m;
}

// The smallest per-position |a - b| over [lo, hi) of batch row `batch` (how surely every one changed).
inline double span_min_diff(const Tensor& a, const Tensor& b, int64_t batch, int64_t lo, int64_t hi) {
  const auto d = position_diffs(a, b);
  double m = INFINITY;
  for (int64_t t = lo; t < hi; ++t) m = std::min(m, d[static_cast<size_t>(batch)][static_cast<size_t>(t)]);
  return m;
}

// x [B, T, ...] with rows reordered along T: out[:, i] = x[:, perm[i]] (the permutation matrix P applied to x).
inline Tensor permute_positions(const Tensor& x, const std::vector<int64_t>& perm) {
  const int64_t B = x.size(0), T = x.size(1), inner = x.numel() / (B * T);
  EXPECT_EQ(static_cast<int64_t>(perm.size()), T);
  const auto v = x.to_vector<double>();
  std::vector<double> out(v.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < inner; ++j)
        out[static_cast<size_t>((b * T + i) * inner + j)] = v[static_cast<size_t>((b * T + perm[static_cast<size_t>(i)]) * inner + j)];
  return Tensor::from_vector<double>(out, x.shape()).to(x.dtype());
}

// A copy of x [B, T, D] whose positions listed for each batch row hold fresh random values.
inline Tensor scramble_positions(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& where,
                                 uint64_t seed, double magnitude = 3.0) {
  Tensor y = x.clone();
  const int64_t D = x.size(2);
  Rng rng(seed);
  for (auto [b, t] : where) {
    Tensor row = y.slice(0, b, b + 1).slice(1, t, t + 1);  // [1, 1, D] view into y
    row.copy_from(Tensor::randn({1, 1, D}, rng, x.dtype(), 0.0, magnitude));
  }
  return y;
}

// Tolerance for comparisons that are mathematically exact but go through differently shaped
// kernels (BLAS blocking, softmax reduction order): 1e-5 in float32, 1e-12 in float64.
inline double reshape_tolerance(DType dtype) { return dtype == DType::F32 ? 1e-5 : 1e-12; }

inline const char* dtype_label(DType dtype) { return dtype == DType::F32 ? "f32" : "f64"; }

}  // namespace attn::props
