// The per-ISA vector kernels (src/kernels/simd/) against the scalar build of the same source:
// every kernel on every ISA this CPU runs, on lengths around the vector widths (tails), with
// sentinels after each output (masked stores must not write past the end) and NaN after each
// input (masked loads must not let it into a sum or a max). The exp and GELU approximations
// are also measured against double precision. Element-wise kernels and Adam must give the
// same bits on every ISA; reductions may differ by their summation order (bounds below).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kernels/adam.h"
#include "simd_test_util.h"

namespace attn::test {
namespace {

using kernels::simd::vector_kernels;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// A row case runs one kernel on length-n inputs drawn from `seed` and returns everything it
// wrote (outputs and saved statistics), after checking the output's sentinels.
using RowCase = std::function<std::vector<float>(const VectorKernels&, int64_t n, uint64_t seed)>;

struct NamedCase {
  const char* name;
  RowCase run;
};

std::vector<float> concat(std::vector<float> a, const std::vector<float>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The output after the kernel, failing the test if a sentinel changed.
std::vector<float> checked(const Guarded& g, const char* what) {
  EXPECT_TRUE(g.guard_intact()) << what << " wrote past the end of its span (n = " << g.n << ")";
  return g.values();
}

// Kernels whose results depend only on the values (reductions and transcendental functions).
std::vector<NamedCase> row_cases() {
  std::vector<NamedCase> cases;
  cases.push_back({"exp", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     const auto x = nan_padded(random_floats(n, rng, -90.0, 88.0));
                     Guarded y(n);
                     vk.exp(y.data(), x.data(), n);
                     return checked(y, "exp");
                   }});
  cases.push_back({"softmax_forward", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     const auto x = nan_padded(random_floats(n, rng, -8.0, 8.0));
                     Guarded y(n);
                     vk.softmax_forward(y.data(), x.data(), n);
                     return checked(y, "softmax_forward");
                   }});
  cases.push_back({"softmax_backward", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     const auto x = random_floats(n, rng, -4.0, 4.0);
                     std::vector<float> y(static_cast<size_t>(n));
                     vector_kernels(Isa::Scalar).softmax_forward(y.data(), x.data(), n);
                     const auto dy = nan_padded(random_floats(n, rng, -1.0, 1.0));
                     Guarded dx(random_floats(n, rng, -1.0, 1.0));
                     vk.softmax_backward(dx.data(), dy.data(), nan_padded(y).data(), n);
                     return checked(dx, "softmax_backward");
                   }});
  cases.push_back({"log_softmax_forward", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     const auto x = nan_padded(random_floats(n, rng, -8.0, 8.0));
                     Guarded y(n);
                     vk.log_softmax_forward(y.data(), x.data(), n);
                     return checked(y, "log_softmax_forward");
                   }});
  cases.push_back({"log_softmax_backward", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     const auto x = random_floats(n, rng, -4.0, 4.0);
                     std::vector<float> y(static_cast<size_t>(n));
                     vector_kernels(Isa::Scalar).log_softmax_forward(y.data(), x.data(), n);
                     const auto dy = nan_padded(random_floats(n, rng, -1.0, 1.0));
                     Guarded dx(random_floats(n, rng, -1.0, 1.0));
                     vk.log_softmax_backward(dx.data(), dy.data(), nan_padded(y).data(), n);
                     return checked(dx, "log_softmax_backward");
                   }});
  cases.push_back({"cross_entropy_stats", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     // Positive logits: sum_x has no cancellation that would magnify the
                     // difference in summation order.
                     const auto x = nan_padded(random_floats(n, rng, 1.0, 9.0));
                     float lse = 0, sum_x = 0;
                     vk.cross_entropy_stats(&lse, &sum_x, x.data(), n);
                     return std::vector<float>{lse, sum_x};
                   }});
  cases.push_back({"cross_entropy_backward", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     const auto x = nan_padded(random_floats(n, rng, -8.0, 8.0));
                     float lse = 0, sum_x = 0;
                     vector_kernels(Isa::Scalar).cross_entropy_stats(&lse, &sum_x, x.data(), n);
                     Guarded dx(random_floats(n, rng, -0.1, 0.1));
                     vk.cross_entropy_backward(dx.data(), x.data(), n, lse, 0.25f, 0.01f);
                     return checked(dx, "cross_entropy_backward");
                   }});
  for (bool affine : {true, false}) {
    cases.push_back({affine ? "layer_norm_forward" : "layer_norm_forward (no w, b)",
                     [affine](const VectorKernels& vk, int64_t n, uint64_t seed) {
                       Rng rng(seed);
                       const auto x = nan_padded(random_floats(n, rng, -3.0, 5.0));
                       const auto w = nan_padded(random_floats(n, rng, 0.5, 1.5));
                       const auto b = nan_padded(random_floats(n, rng, -0.5, 0.5));
                       Guarded y(n);
                       float mean = 0, rstd = 0;
                       vk.layer_norm_forward(y.data(), &mean, &rstd, x.data(),
                                             affine ? w.data() : nullptr, affine ? b.data() : nullptr,
                                             n, 1e-5f);
                       return concat(checked(y, "layer_norm_forward"), {mean, rstd});
                     }});
    cases.push_back({affine ? "layer_norm_backward" : "layer_norm_backward (no w)",
                     [affine](const VectorKernels& vk, int64_t n, uint64_t seed) {
                       Rng rng(seed);
                       const auto x = random_floats(n, rng, -3.0, 5.0);
                       const auto w = nan_padded(random_floats(n, rng, 0.5, 1.5));
                       std::vector<float> y(static_cast<size_t>(n));
                       float mean = 0, rstd = 0;
                       vector_kernels(Isa::Scalar)
                           .layer_norm_forward(y.data(), &mean, &rstd, x.data(), nullptr, nullptr, n, 1e-5f);
                       const auto dy = nan_padded(random_floats(n, rng, -1.0, 1.0));
                       Guarded dx(random_floats(n, rng, -1.0, 1.0));
                       vk.layer_norm_backward(dx.data(), dy.data(), nan_padded(x).data(),
                                              affine ? w.data() : nullptr, mean, rstd, n);
                       return checked(dx, "layer_norm_backward");
                     }});
    cases.push_back({affine ? "rms_norm_forward" : "rms_norm_forward (no w)",
                     [affine](const VectorKernels& vk, int64_t n, uint64_t seed) {
                       Rng rng(seed);
                       const auto x = nan_padded(random_floats(n, rng, -3.0, 5.0));
                       const auto w = nan_padded(random_floats(n, rng, 0.5, 1.5));
                       Guarded y(n);
                       float rstd = 0;
                       vk.rms_norm_forward(y.data(), &rstd, x.data(), affine ? w.data() : nullptr, n,
                                           1e-6f);
                       return concat(checked(y, "rms_norm_forward"), {rstd});
                     }});
    cases.push_back({affine ? "rms_norm_backward" : "rms_norm_backward (no w)",
                     [affine](const VectorKernels& vk, int64_t n, uint64_t seed) {
                       Rng rng(seed);
                       const auto x = random_floats(n, rng, -3.0, 5.0);
                       const auto w = nan_padded(random_floats(n, rng, 0.5, 1.5));
                       std::vector<float> y(static_cast<size_t>(n));
                       float rstd = 0;
                       vector_kernels(Isa::Scalar).rms_norm_forward(y.data(), &rstd, x.data(), nullptr, n, 1e-6f);
                       const auto dy = nan_padded(random_floats(n, rng, -1.0, 1.0));
                       Guarded dx(random_floats(n, rng, -1.0, 1.0));
                       vk.rms_norm_backward(dx.data(), dy.data(), nan_padded(x).data(),
                                            affine ? w.data() : nullptr, rstd, n);
                       return checked(dx, "rms_norm_backward");
                     }});
  }
  cases.push_back({"gelu_forward", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     const auto x = nan_padded(random_floats(n, rng, -7.0, 7.0));
                     Guarded y(n);
                     vk.gelu_forward(y.data(), x.data(), n);
                     return checked(y, "gelu_forward");
                   }});
  cases.push_back({"gelu_backward", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     const auto x = nan_padded(random_floats(n, rng, -7.0, 7.0));
                     const auto dy = nan_padded(random_floats(n, rng, -1.0, 1.0));
                     Guarded dx(random_floats(n, rng, -1.0, 1.0));
                     vk.gelu_backward(dx.data(), dy.data(), x.data(), n);
                     return checked(dx, "gelu_backward");
                   }});
  cases.push_back({"gelu_tanh_forward", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     const auto x = nan_padded(random_floats(n, rng, -7.0, 7.0));
                     Guarded y(n);
                     vk.gelu_tanh_forward(y.data(), x.data(), n);
                     return checked(y, "gelu_tanh_forward");
                   }});
  cases.push_back({"gelu_tanh_backward", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     const auto x = nan_padded(random_floats(n, rng, -7.0, 7.0));
                     const auto dy = nan_padded(random_floats(n, rng, -1.0, 1.0));
                     Guarded dx(random_floats(n, rng, -1.0, 1.0));
                     vk.gelu_tanh_backward(dx.data(), dy.data(), x.data(), n);
                     return checked(dx, "gelu_tanh_backward");
                   }});
  // The tiled attention's rows: scores with masked (-inf) entries, as the tiles hold them.
  cases.push_back({"row_max", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     auto x = random_floats(n, rng, -8.0, 8.0);
                     for (int64_t i = 2; i < n; i += 3) x[static_cast<size_t>(i)] = -kInf;
                     // Once below every entry, once above the largest (the running max wins),
                     // then with the largest entry last (a tail lane) and first.
                     std::vector<float> out = {vk.row_max(nan_padded(x).data(), n, -kInf),
                                               vk.row_max(nan_padded(x).data(), n, 8.5f)};
                     x.back() = 9.5f;
                     out.push_back(vk.row_max(nan_padded(x).data(), n, -kInf));
                     x.back() = 0.0f;
                     x.front() = 9.25f;
                     out.push_back(vk.row_max(nan_padded(x).data(), n, -kInf));
                     EXPECT_EQ(out[2], 9.5f) << "row_max missed the last entry, n = " << n;
                     EXPECT_EQ(out[3], 9.25f) << "row_max missed the first entry, n = " << n;
                     return out;
                   }});
  cases.push_back({"exp_shifted_sum", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     auto x = random_floats(n, rng, -8.0, 8.0);
                     for (int64_t i = 1; i < n; i += 4) x[static_cast<size_t>(i)] = -kInf;
                     const auto xp = nan_padded(x);
                     Guarded y(n);
                     const float sum = vk.exp_shifted_sum(y.data(), xp.data(), 8.0f, n);
                     return concat(checked(y, "exp_shifted_sum"), {sum});
                   }});
  cases.push_back({"dot", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     // Positive terms: no cancellation to magnify the summation order.
                     const auto x = nan_padded(random_floats(n, rng, 0.1, 2.0));
                     const auto y = nan_padded(random_floats(n, rng, 0.1, 2.0));
                     return std::vector<float>{vk.dot(x.data(), y.data(), n)};
                   }});
  return cases;
}

// Kernels made of single IEEE operations per element: every ISA must give the scalar bits.
std::vector<NamedCase> exact_cases() {
  std::vector<NamedCase> cases;
  using Binary = void (*)(float*, const float*, const float*, int64_t);
  for (const auto& entry : {std::pair<const char*, Binary VectorKernels::*>{"add", &VectorKernels::add},
                             {"sub", &VectorKernels::sub},
                             {"mul", &VectorKernels::mul}}) {
    const Binary VectorKernels::*pick = entry.second;  // a plain variable: lambdas capture no bindings before C++20
    cases.push_back({entry.first, [pick](const VectorKernels& vk, int64_t n, uint64_t seed) {
                       Rng rng(seed);
                       const auto a = random_floats(n, rng, -3.0, 3.0);
                       const auto b = random_floats(n, rng, -3.0, 3.0);
                       Guarded out(n);
                       (vk.*pick)(out.data(), a.data(), b.data(), n);
                       return checked(out, "binary");
                     }});
  }
  cases.push_back({"scale", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     const auto x = random_floats(n, rng, -3.0, 3.0);
                     Guarded out(n);
                     vk.scale(out.data(), x.data(), 0.37f, n);
                     return checked(out, "scale");
                   }});
  cases.push_back({"accumulate", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     const auto g = random_floats(n, rng, -3.0, 3.0);
                     Guarded dx(random_floats(n, rng, -1.0, 1.0));
                     vk.accumulate(dx.data(), g.data(), -1.7f, n);
                     return checked(dx, "accumulate");
                   }});
  cases.push_back({"accumulate_mul", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     const auto g = random_floats(n, rng, -3.0, 3.0);
                     const auto o = random_floats(n, rng, -3.0, 3.0);
                     Guarded dx(random_floats(n, rng, -1.0, 1.0));
                     vk.accumulate_mul(dx.data(), g.data(), o.data(), n);
                     return checked(dx, "accumulate_mul");
                   }});
  cases.push_back({"relu_forward", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     auto x = random_floats(n, rng, -3.0, 3.0);
                     x[0] = kNaN;  // passes through, as PyTorch
                     Guarded y(n);
                     vk.relu_forward(y.data(), x.data(), n);
                     auto out = checked(y, "relu_forward");
                     EXPECT_TRUE(std::isnan(out[0])) << "relu must pass NaN through";
                     return out;
                   }});
  cases.push_back({"relu_backward", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     auto x = random_floats(n, rng, -3.0, 3.0);
                     x[0] = 0.0f;  // the derivative at 0 is 0
                     const auto dy = random_floats(n, rng, -1.0, 1.0);
                     Guarded dx(random_floats(n, rng, -1.0, 1.0));
                     const float before = dx.buf[0];
                     vk.relu_backward(dx.data(), dy.data(), x.data(), n);
                     EXPECT_EQ(dx.buf[0], before) << "relu's gradient at 0 must be 0";
                     return checked(dx, "relu_backward");
                   }});
  cases.push_back({"softmax_grad_shifted", [](const VectorKernels& vk, int64_t n, uint64_t seed) {
                     Rng rng(seed);
                     const auto p = random_floats(n, rng, 0.0, 1.0);
                     const auto dp = random_floats(n, rng, -2.0, 2.0);
                     Guarded ds(n);
                     vk.softmax_grad_shifted(ds.data(), p.data(), dp.data(), 0.3f, n);
                     return checked(ds, "softmax_grad_shifted");
                   }});
  for (auto [decay, decoupled] : {std::pair{0.0, true}, std::pair{0.01, true}, std::pair{0.01, false}}) {
    cases.push_back({"adam_update", [decay = decay, decoupled = decoupled](const VectorKernels& vk,
                                                                           int64_t n, uint64_t seed) {
                       Rng rng(seed);
                       Guarded p(random_floats(n, rng, -1.0, 1.0));
                       Guarded m(random_floats(n, rng, -0.1, 0.1));
                       Guarded v(random_floats(n, rng, 0.0, 0.01));
                       const auto g = random_floats(n, rng, -1.0, 1.0);
                       const auto s = kernels::adam_step_scalars<float>(1e-3, 7, 0.9, 0.98, 1e-9,
                                                                        decay, decoupled);
                       vk.adam_update(p.data(), m.data(), v.data(), g.data(), n, s);
                       return concat(concat(checked(p, "adam p"), checked(m, "adam m")),
                                     checked(v, "adam v"));
                     }});
  }
  return cases;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v)
    if (std::isfinite(x)) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// Measured on an AVX-512 machine over these cases, the largest difference between an ISA and
// the scalar build, relative to the output's largest |value|:
// 1.0e-6 for softmax_forward (rows of 1000: summation order), 4.7e-7 layer_norm_forward,
// 2.8e-7 rms_norm_forward, 1.9e-7 log_softmax, 1.0e-7 the backward kernels, 7.5e-8 exp
// (1 ulp), 1.7e-8 GELU. The bound leaves room for other inputs without hiding a wrong lane
// or tail (those give errors of order 1).
constexpr double kIsaVsScalar = 2e-6;

TEST(VectorKernels, EveryIsaMatchesTheScalarBuildOnOddLengths) {
  const auto isas = vector_isas();
  if (isas.empty()) GTEST_SKIP() << "this CPU runs only the scalar build";
  const VectorKernels& scalar = vector_kernels(Isa::Scalar);
  for (const NamedCase& c : row_cases()) {
    for (int64_t n : kSpanLengths) {
      const auto ref = c.run(scalar, n, static_cast<uint64_t>(n));
      const double atol = kIsaVsScalar * max_abs(ref);
      for (Isa isa : isas) {
        const auto got = c.run(vector_kernels(isa), n, static_cast<uint64_t>(n));
        EXPECT_TRUE(close_rel(got, ref, 0.0, atol,
                              std::string(c.name) + " on " + kernels::simd::isa_name(isa) +
                                  ", n = " + std::to_string(n)));
      }
    }
  }
}

TEST(VectorKernels, ElementwiseKernelsAndAdamGiveTheScalarBitsOnEveryIsa) {
  const auto isas = vector_isas();
  if (isas.empty()) GTEST_SKIP() << "this CPU runs only the scalar build";
  const VectorKernels& scalar = vector_kernels(Isa::Scalar);
  for (const NamedCase& c : exact_cases()) {
    for (int64_t n : kSpanLengths) {
      const auto ref = c.run(scalar, n, static_cast<uint64_t>(n) + 100);
      for (Isa isa : isas)
        EXPECT_TRUE(same_bits(c.run(vector_kernels(isa), n, static_cast<uint64_t>(n) + 100), ref,
                              std::string(c.name) + " on " + kernels::simd::isa_name(isa) +
                                  ", n = " + std::to_string(n)));
    }
  }
}

TEST(VectorKernels, BatchedDotsAndAccumulationsGiveTheBitsOfOneRowAtATime) {
  // dots and accumulate_rows (the batch-invariant attention's scores and weighted values) must
  // be exactly dot and accumulate row after row, on every ISA: rows counts around the four
  // chains of dots, lengths around the vector widths, NaN past every input row.
  for (Isa isa : kernels::simd::supported_isas()) {
    const VectorKernels& vk = vector_kernels(isa);
    for (int64_t n : kSpanLengths) {
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{4}, int64_t{7}, int64_t{9}}) {
        const std::string where = std::string(kernels::simd::isa_name(isa)) + ", n = " + std::to_string(n) +
                                  ", rows = " + std::to_string(count);
        Rng rng(static_cast<uint64_t>(n * 31 + count));
        const auto x = nan_padded(random_floats(n, rng, -2.0, 2.0));
        std::vector<std::vector<float>> rows;
        std::vector<const float*> ptrs;
        std::vector<float> weights;
        for (int64_t j = 0; j < count; ++j) {
          rows.push_back(nan_padded(random_floats(n, rng, -2.0, 2.0)));
          weights.push_back(static_cast<float>(rng.uniform() * 4.0 - 2.0));
        }
        for (const auto& r : rows) ptrs.push_back(r.data());
        std::vector<float> batched(static_cast<size_t>(count) + 1, 7.0f), single;
        vk.dots(batched.data(), x.data(), ptrs.data(), count, n);
        for (int64_t j = 0; j < count; ++j) single.push_back(vk.dot(x.data(), ptrs[static_cast<size_t>(j)], n));
        single.push_back(7.0f);  // not written past count
        EXPECT_TRUE(same_bits(batched, single, "dots on " + where));

        const auto start = random_floats(n, rng, -1.0, 1.0);
        Guarded one_pass(n), in_turn(n);
        std::copy(start.begin(), start.end(), one_pass.data());
        std::copy(start.begin(), start.end(), in_turn.data());
        vk.accumulate_rows(one_pass.data(), ptrs.data(), weights.data(), count, n);
        for (int64_t t = 0; t < count; ++t)
          vk.accumulate(in_turn.data(), ptrs[static_cast<size_t>(t)], weights[static_cast<size_t>(t)], n);
        EXPECT_TRUE(same_bits(checked(one_pass, "accumulate_rows"), checked(in_turn, "accumulate"),
                              "accumulate_rows on " + where));
      }
    }
  }
}

TEST(VectorKernels, EveryKernelWorksOnAnEmptySpan) {
  for (Isa isa : kernels::simd::supported_isas()) {
    const VectorKernels& vk = vector_kernels(isa);
    Guarded out(0);
    const auto in = nan_padded({});
    vk.exp(out.data(), in.data(), 0);
    vk.add(out.data(), in.data(), in.data(), 0);
    vk.gelu_forward(out.data(), in.data(), 0);
    vk.relu_backward(out.data(), in.data(), in.data(), 0);
    EXPECT_EQ(vk.row_max(in.data(), 0, -1.5f), -1.5f);
    EXPECT_EQ(vk.exp_shifted_sum(out.data(), in.data(), 0.0f, 0), 0.0f);
    EXPECT_EQ(vk.dot(in.data(), in.data(), 0), 0.0f);
    vk.softmax_grad_shifted(out.data(), in.data(), in.data(), 0.5f, 0);
    EXPECT_TRUE(out.guard_intact()) << kernels::simd::isa_name(isa);
  }
}

// exp against double precision over its whole range, on every ISA (the AVX builds' polynomial,
// the scalar build's expf): at most 1 ulp (measured: 1); results below FLT_MIN (x < -87.34)
// within one subnormal step; exact 1 at 0; inf, 0 and NaN at the ends.
TEST(VectorKernels, ExpIsWithinOneUlpOfDoubleExpOverItsRange) {
  std::vector<float> x;
  for (double v = -103.9; v <= 88.72; v += 0.0007) x.push_back(static_cast<float>(v));
  // Near the reduction's boundaries (odd multiples of ln2 / 2) and tiny arguments.
  for (int k = -140; k <= 127; ++k)
    for (double d : {-1e-6, 0.0, 1e-6}) x.push_back(static_cast<float>((k + 0.5) * M_LN2 + d));
  for (float t : {1e-30f, -1e-30f, 1e-7f, -1e-7f, 0.0f, -0.0f}) x.push_back(t);
  const float ln_flt_min = std::log(std::numeric_limits<float>::min());
  for (Isa isa : kernels::simd::supported_isas()) {
    SCOPED_TRACE(kernels::simd::isa_name(isa));
    std::vector<float> y(x.size());
    vector_kernels(isa).exp(y.data(), x.data(), static_cast<int64_t>(x.size()));
    int64_t worst_ulp = 0;
    double worst_subnormal = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double ref = std::exp(static_cast<double>(x[i]));
      if (x[i] < ln_flt_min) {
        worst_subnormal = std::max(worst_subnormal, std::fabs(y[i] - ref));
      } else {
        worst_ulp = std::max(worst_ulp, ulp_distance(y[i], static_cast<float>(ref)));
      }
    }
    EXPECT_LE(worst_ulp, 1);
    EXPECT_LE(worst_subnormal, std::numeric_limits<float>::denorm_min());
    const std::vector<float> special = {0.0f, 88.8f, 89.0f, 1000.0f, kInf, -104.0f, -1000.0f, -kInf, kNaN};
    std::vector<float> out(special.size());
    vector_kernels(isa).exp(out.data(), special.data(), static_cast<int64_t>(special.size()));
    EXPECT_EQ(out[0], 1.0f);
    for (size_t i = 1; i <= 4; ++i) EXPECT_EQ(out[i], kInf) << "exp(" << special[i] << ")";
    for (size_t i = 5; i <= 7; ++i) EXPECT_EQ(out[i], 0.0f) << "exp(" << special[i] << ")";
    EXPECT_TRUE(std::isnan(out[8]));
  }
}

// GELU (erf form) and its tanh approximation against double precision on [-10, 10]:
// |error| <= 1e-6 * |y| + 1e-7. Measured: absolute errors up to 3.8e-7 (erf) and 5.2e-7 (tanh)
// where |y| is near 10, i.e. below 1e-7 relative there; relative errors up to 2.4e-6 only in
// the far left tail, where |y| < 2e-6 and the absolute error is below 1e-11. The local
// derivatives: absolute errors up to 2e-7.
TEST(VectorKernels, GeluMatchesDoublePrecisionOnEveryIsa) {
  std::vector<float> x;
  for (double v = -10.0; v <= 10.0; v += 0.001) x.push_back(static_cast<float>(v));
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<float> ones(x.size(), 1.0f);
  auto gelu = [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); };
  auto gelu_grad = [](double v) {
    return 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
  };
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  auto gelu_tanh = [&](double v) { return 0.5 * v * (1.0 + std::tanh(k * (v + c * v * v * v))); };
  auto gelu_tanh_grad = [&](double v) {
    const double t = std::tanh(k * (v + c * v * v * v));
    return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * c * v * v);
  };
  for (Isa isa : kernels::simd::supported_isas()) {
    SCOPED_TRACE(kernels::simd::isa_name(isa));
    const VectorKernels& vk = vector_kernels(isa);
    std::vector<float> y(x.size()), t(x.size()), dy(x.size(), 0.0f), dt(x.size(), 0.0f);
    vk.gelu_forward(y.data(), x.data(), n);
    vk.gelu_tanh_forward(t.data(), x.data(), n);
    vk.gelu_backward(dy.data(), ones.data(), x.data(), n);  // dx = 0 + 1 * local derivative
    vk.gelu_tanh_backward(dt.data(), ones.data(), x.data(), n);
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x[i];
      ASSERT_NEAR(y[i], gelu(v), 1e-6 * std::fabs(gelu(v)) + 1e-7) << "gelu(" << v << ")";
      ASSERT_NEAR(t[i], gelu_tanh(v), 1e-6 * std::fabs(gelu_tanh(v)) + 1e-7) << "gelu_tanh(" << v << ")";
      ASSERT_NEAR(dy[i], gelu_grad(v), 1e-6 * std::fabs(gelu_grad(v)) + 1e-7) << "gelu'(" << v << ")";
      ASSERT_NEAR(dt[i], gelu_tanh_grad(v), 1e-6 * std::fabs(gelu_tanh_grad(v)) + 1e-7)
          << "gelu_tanh'(" << v << ")";
    }
  }
}

// softmax and log_softmax may write over their input (y == x), on every ISA.
TEST(VectorKernels, SoftmaxRowsMayRunInPlace) {
  for (Isa isa : kernels::simd::supported_isas()) {
    const VectorKernels& vk = vector_kernels(isa);
    for (int64_t n : kSpanLengths) {
      Rng rng(static_cast<uint64_t>(n));
      const auto x = random_floats(n, rng, -6.0, 6.0);
      std::vector<float> want(x.size()), got(x);
      vk.softmax_forward(want.data(), x.data(), n);
      vk.softmax_forward(got.data(), got.data(), n);
      EXPECT_TRUE(same_bits(got, want, std::string("softmax in place on ") + kernels::simd::isa_name(isa)));
      got = x;
      vk.log_softmax_forward(want.data(), x.data(), n);
      vk.log_softmax_forward(got.data(), got.data(), n);
      EXPECT_TRUE(same_bits(got, want, std::string("log_softmax in place on ") + kernels::simd::isa_name(isa)));
    }
  }
}

// The tiled attention computes P = exp(S - m) and dS = P (dP - D) in place, on every ISA; the
// row sum of exp_shifted_sum equals the sum of what it stored up to rounding, and references
// computed in double bound both (exp within 1 ulp).
TEST(VectorKernels, AttentionRowKernelsRunInPlaceAndMatchDouble) {
  for (Isa isa : kernels::simd::supported_isas()) {
    const VectorKernels& vk = vector_kernels(isa);
    for (int64_t n : kSpanLengths) {
      Rng rng(static_cast<uint64_t>(n) + 7);
      auto x = random_floats(n, rng, -6.0, 6.0);
      if (n > 1) x[0] = -kInf;  // a masked score (the kernels' callers skip all-masked rows)
      const float m = vk.row_max(x.data(), n, -kInf);
      std::vector<float> want(x.size()), got(x);
      const float sum_want = vk.exp_shifted_sum(want.data(), x.data(), m, n);
      const float sum_got = vk.exp_shifted_sum(got.data(), got.data(), m, n);
      const std::string where = std::string(kernels::simd::isa_name(isa)) + ", n = " + std::to_string(n);
      EXPECT_TRUE(same_bits(got, want, "exp_shifted_sum in place on " + where));
      EXPECT_EQ(sum_got, sum_want) << where;
      double sum = 0, max = -kInf;
      for (int64_t i = 0; i < n; ++i) max = std::max(max, static_cast<double>(x[static_cast<size_t>(i)]));
      EXPECT_EQ(static_cast<double>(m), max) << where;
      for (int64_t i = 0; i < n; ++i) {
        // The float subtraction as the kernel does it, then exp in double: within 1 ulp.
        const double e = std::exp(static_cast<double>(x[static_cast<size_t>(i)] - m));
        ASSERT_NEAR(got[static_cast<size_t>(i)], e, 2.5e-7 * e) << where << ", i = " << i;
        sum += e;
      }
      if (n > 1) {
        EXPECT_EQ(got[0], 0.0f) << "exp(-inf - m) must be 0 on " << where;
      }
      EXPECT_NEAR(sum_got, sum, 1e-6 * sum) << where;
      const auto dp = random_floats(n, rng, -2.0, 2.0);
      std::vector<float> ds = dp;
      vk.softmax_grad_shifted(ds.data(), got.data(), ds.data(), 0.25f, n);
      for (int64_t i = 0; i < n; ++i) {
        const size_t u = static_cast<size_t>(i);
        ASSERT_EQ(ds[u], got[u] * (dp[u] - 0.25f)) << where << ", i = " << i;
      }
      double dot = 0, abs_dot = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const double term = static_cast<double>(got[i]) * dp[i];
        dot += term;
        abs_dot += std::fabs(term);
      }
      EXPECT_NEAR(vk.dot(got.data(), dp.data(), n), dot, 1e-6 * abs_dot + 1e-30) << where;
    }
  }
}

// A fully masked row: softmax gives zeros, log_softmax -inf and its backward nothing, on
// every ISA and every length (the -inf row is detected before any exp).
TEST(VectorKernels, FullyMaskedRowsGiveZerosOnEveryIsa) {
  for (Isa isa : kernels::simd::supported_isas()) {
    const VectorKernels& vk = vector_kernels(isa);
    for (int64_t n : kSpanLengths) {
      const auto x = nan_padded(std::vector<float>(static_cast<size_t>(n), -kInf));
      Guarded y(n, 7.0f), ly(n, 7.0f), dx(n, 0.5f);
      vk.softmax_forward(y.data(), x.data(), n);
      vk.log_softmax_forward(ly.data(), x.data(), n);
      const auto dy = nan_padded(std::vector<float>(static_cast<size_t>(n), 1.0f));
      vk.log_softmax_backward(dx.data(), dy.data(), ly.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(y.buf[static_cast<size_t>(i)], 0.0f) << kernels::simd::isa_name(isa) << " n=" << n;
        ASSERT_EQ(ly.buf[static_cast<size_t>(i)], -kInf) << kernels::simd::isa_name(isa);
        ASSERT_EQ(dx.buf[static_cast<size_t>(i)], 0.5f) << kernels::simd::isa_name(isa);
      }
      EXPECT_TRUE(y.guard_intact() && ly.guard_intact() && dx.guard_intact());
    }
  }
}

}  // namespace
}  // namespace attn::test
