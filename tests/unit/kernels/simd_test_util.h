// Helpers of the vector-kernel tests: random float spans, ulp distances, spans padded with
// sentinels (to catch a tail that reads or writes past its end) and comparisons that report
// the worst element.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attn/core/rng.h"
#include "kernels/simd/isa.h"
#include "kernels/simd/vector_kernels.h"

namespace attn::test {

using kernels::simd::Isa;
using kernels::simd::VectorKernels;

// Odd and even lengths around the vector widths (1, 8, 16 lanes) and a few long rows.
inline const std::vector<int64_t> kSpanLengths = {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32,
                                                  33, 63, 64, 65, 100, 257, 1000};

// Floats spaced by ulps: the distance between a and b counted in representable floats
// (0 for equal values, including +0 and -0).
inline int64_t ulp_distance(float a, float b) {
  auto ordered = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? int64_t{std::numeric_limits<int32_t>::min()} - i : int64_t{i};
  };
  return std::llabs(ordered(a) - ordered(b));
}

inline std::vector<float> random_floats(int64_t n, Rng& rng, double lo, double hi) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(lo + (hi - lo) * rng.uniform());
  return v;
}

// A span of n floats followed by kGuard sentinel values that no kernel may touch.
struct Guarded {
  static constexpr int64_t kGuard = 20;
  static constexpr float kSentinel = -12345.5f;
  std::vector<float> buf;
  int64_t n;
  explicit Guarded(int64_t size, float init = 0.0f)
      : buf(static_cast<size_t>(size + kGuard), kSentinel), n(size) {
    for (int64_t i = 0; i < n; ++i) buf[static_cast<size_t>(i)] = init;
  }
  explicit Guarded(const std::vector<float>& values) : Guarded(static_cast<int64_t>(values.size())) {
    std::copy(values.begin(), values.end(), buf.begin());
  }
  float* data() { return buf.data(); }
  std::vector<float> values() const { return {buf.begin(), buf.begin() + n}; }
  bool guard_intact() const {
    for (int64_t i = n; i < n + kGuard; ++i)
      if (buf[static_cast<size_t>(i)] != kSentinel) return false;
    return true;
  }
};

// Inputs padded with NaN past their end: a tail that let those lanes into a sum or a max
// would turn the result into NaN.
inline std::vector<float> nan_padded(const std::vector<float>& v) {
  std::vector<float> out(v);
  out.resize(v.size() + Guarded::kGuard, std::numeric_limits<float>::quiet_NaN());
  return out;
}

// Passes when |a - b| <= rtol * |b| + atol element-wise; reports the worst element.
inline ::testing::AssertionResult close_rel(const std::vector<float>& a, const std::vector<float>& b,
                                            double rtol, double atol, const std::string& label) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << label << ": sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(d <= rtol * std::fabs(static_cast<double>(b[i])) + atol) &&
        !(std::isnan(a[i]) && std::isnan(b[i])) && a[i] != b[i])
      return ::testing::AssertionFailure()
             << label << ": element " << i << " of " << a.size() << ": " << a[i] << " vs " << b[i]
             << " (|diff| " << d << ", rtol " << rtol << ", atol " << atol << ")";
  }
  return ::testing::AssertionSuccess();
}

// Passes when a and b hold the same bits (NaN payloads aside: NaN matches NaN).
inline ::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b,
                                            const std::string& label) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << label << ": sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << label << ": element " << i << ": " << a[i] << " vs "
                                           << b[i] << " differ in their bits";
  }
  return ::testing::AssertionSuccess();
}

// The ISAs other than scalar that this machine can run (empty on a CPU without AVX2).
inline std::vector<Isa> vector_isas() {
  std::vector<Isa> out;
  for (Isa isa : kernels::simd::supported_isas())
    if (isa != Isa::Scalar) out.push_back(isa);
  return out;
}

}  // namespace attn::test
