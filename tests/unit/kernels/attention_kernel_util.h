// Shared by the attention kernel tests (attention_flash_isa_test, attention_short_test): the
// call's dimensions, one set of masks of every kind (the same values in float32 and float64,
// so a float32 kernel can be compared with the float64 naive kernel on the same inputs),
// normal inputs, and the error measure of those comparisons.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attn/core/rng.h"
#include "kernels/attention_naive.h"

namespace attn::test {

// The kernels' own dimensions struct: {B, H, Hkv, Tq, Tk, Dh, Dv}.
using AttnDims = kernels::AttentionDims;

inline std::string describe(const AttnDims& s) {
  return "B " + std::to_string(s.B) + " H " + std::to_string(s.H) + " Hkv " + std::to_string(s.Hkv) +
         " Tq " + std::to_string(s.Tq) + " Tk " + std::to_string(s.Tk) + " Dh " + std::to_string(s.Dh) +
         " Dv " + std::to_string(s.Dv);
}

enum MaskKind { kNone, kCausal, kPadding, kWindow, kBias, kAlibi, kMaskKinds };

inline const char* mask_name(int kind) {
  static const char* names[] = {"none", "causal", "padding", "causal window 5", "bias", "alibi"};
  return names[kind];
}

// The mask's data in both dtypes, so the float32 and float64 runs see the same values.
struct Masks {
  std::vector<double> bias64, alibi64;
  std::vector<float> bias32, alibi32;
  std::vector<uint8_t> padding;
  kernels::AttentionMask<double> m64;
  kernels::AttentionMask<float> m32;
};

// Padding: every fourth key from the second, and batch entry 1's last three keys (all of its
// keys when Tk <= 3); bias [1, H, Tq, Tk] with about a tenth of the entries -inf.
inline void make_masks(Masks& m, const AttnDims& s, int kind) {
  Rng rng(100 + static_cast<uint64_t>(kind));
  if (kind == kCausal || kind == kWindow) m.m64.causal = m.m32.causal = true;
  if (kind == kWindow) m.m64.window = m.m32.window = 5;
  if (kind == kPadding) {
    m.padding.assign(static_cast<size_t>(s.B * s.Tk), 0);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t j = 0; j < s.Tk; ++j)
        m.padding[static_cast<size_t>(b * s.Tk + j)] = (j % 4 == 1 || (b == 1 && j >= s.Tk - 3)) ? 1 : 0;
    m.m64.key_padding = m.m32.key_padding = m.padding.data();
  }
  if (kind == kBias) {  // [1, H, Tq, Tk], broadcast over the batch
    for (int64_t e = 0; e < s.H * s.Tq * s.Tk; ++e) {
      const double x = rng.uniform() < 0.1 ? -std::numeric_limits<double>::infinity() : rng.uniform() * 2 - 1;
      m.bias32.push_back(static_cast<float>(x));
      m.bias64.push_back(static_cast<double>(m.bias32.back()));
    }
    m.m64.bias = m.bias64.data();
    m.m32.bias = m.bias32.data();
    m.m64.bias_stride_h = m.m32.bias_stride_h = s.Tq * s.Tk;
  }
  if (kind == kAlibi) {
    for (int64_t h = 0; h < s.H; ++h) {
      m.alibi32.push_back(std::pow(2.0f, -2.0f * static_cast<float>(h + 1)));
      m.alibi64.push_back(static_cast<double>(m.alibi32.back()));
    }
    m.m64.alibi = m.alibi64.data();
    m.m32.alibi = m.alibi32.data();
  }
}

inline std::vector<float> normals(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& e : x) e = static_cast<float>(rng.normal());
  return x;
}

inline std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// Largest |got - want| over max(1, max |want|): a float32 kernel against float64.
inline double scaled_error(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, scale = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    err = std::max(err, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
  }
  return err / scale;
}

}  // namespace attn::test
