// Element-wise comparison of tensors with a label and the largest difference in the
// failure message (the llm.c test_gpt2 style, but failing the test for real).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "attn/core/tensor.h"

namespace attn::test {

// Largest |a - b| over all elements (shapes must match).
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector<double>();
  const auto vb = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    const double d = std::fabs(va[i] - vb[i]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

// Passes when shapes are equal and every |a - b| <= atol + rtol * |b|.
inline ::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double atol,
                                            double rtol = 0.0, const std::string& label = "") {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << label << ": shape " << shape_str(a.shape()) << " vs "
                                         << shape_str(b.shape());
  const auto va = a.to_vector<double>();
  const auto vb = b.to_vector<double>();
  double worst = 0;
  size_t worst_i = 0;
  bool ok = true;
  for (size_t i = 0; i < va.size(); ++i) {
    const double d = std::fabs(va[i] - vb[i]);
    const double allowed = atol + rtol * std::fabs(vb[i]);
    if (!(d <= allowed)) ok = false;
    if (!(d <= worst)) {
      worst = d;
      worst_i = i;
    }
  }
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << label << ": max |diff| " << worst << " at flat index "
                                       << worst_i << " (" << va[worst_i] << " vs " << vb[worst_i]
                                       << "), atol " << atol << ", rtol " << rtol;
}

}  // namespace attn::test
