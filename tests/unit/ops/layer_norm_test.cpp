// layer_norm and rms_norm: values against brute-force double loops in f32 and f64 (with
// and without the affine part), float64 gradient checks for every combination of w and b,
// the parallel path's gradients against the derived formula, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "attn/ops/ops.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"
#include "support/tolerances.h"

namespace attn {
namespace {

const DType kDtypes[] = {DType::F32, DType::F64};
constexpr double kEps = 1e-5;

double tol(DType dt) { return dt == DType::F32 ? test::kAbsF32 : test::kAbsF64; }

std::vector<double> values_or(const Tensor& t, int64_t n, double fill) {
  return t.defined() ? t.to_vector<double>() : std::vector<double>(static_cast<size_t>(n), fill);
}

// nn.LayerNorm in double: biased variance, eps inside the square root.
Tensor reference_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  const int64_t D = x.size(-1), rows = x.numel() / D;
  const auto v = x.to_vector<double>();
  const auto vw = values_or(w, D, 1.0), vb = values_or(b, D, 0.0);
  std::vector<double> out(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = v.data() + r * D;
    double m = 0, var = 0;
    for (int64_t i = 0; i < D; ++i) m += xr[i] / static_cast<double>(D);
    for (int64_t i = 0; i < D; ++i) var += (xr[i] - m) * (xr[i] - m) / static_cast<double>(D);
    for (int64_t i = 0; i < D; ++i)
      out[static_cast<size_t>(r * D + i)] =
          (xr[i] - m) / std::sqrt(var + eps) * vw[static_cast<size_t>(i)] + vb[static_cast<size_t>(i)];
  }
  return Tensor::from_vector<double>(out, x.shape());
}

// nn.RMSNorm in double.
Tensor reference_rms_norm(const Tensor& x, const Tensor& w, double eps) {
  const int64_t D = x.size(-1), rows = x.numel() / D;
  const auto v = x.to_vector<double>();
  const auto vw = values_or(w, D, 1.0);
  std::vector<double> out(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = v.data() + r * D;
    double ms = 0;
    for (int64_t i = 0; i < D; ++i) ms += xr[i] * xr[i] / static_cast<double>(D);
    for (int64_t i = 0; i < D; ++i)
      out[static_cast<size_t>(r * D + i)] = xr[i] / std::sqrt(ms + eps) * vw[static_cast<size_t>(i)];
  }
  return Tensor::from_vector<double>(out, x.shape());
}

Tensor leaf(const Shape& shape, Rng& rng, double mean = 0, double std = 1) {
  Tensor t = Tensor::randn(shape, rng, DType::F64, mean, std);
  t.set_requires_grad(true);
  return t;
}

TEST(LayerNorm, MatchesBruteForceWithAndWithoutAffine) {
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Rng rng(1);
    Tensor x = Tensor::randn({2, 3, 8}, rng, dt, 2.0, 3.0);  // non-zero mean, non-unit variance
    Tensor w = Tensor::randn({8}, rng, dt);
    Tensor b = Tensor::randn({8}, rng, dt);
    EXPECT_TRUE(test::all_close(layer_norm(x, w, b, kEps), reference_layer_norm(x, w, b, kEps),
                                tol(dt), tol(dt), "w and b"));
    EXPECT_TRUE(test::all_close(layer_norm(x, Tensor(), Tensor(), kEps),
                                reference_layer_norm(x, Tensor(), Tensor(), kEps), tol(dt), tol(dt),
                                "no affine"));
    EXPECT_TRUE(test::all_close(layer_norm(x, w, Tensor(), kEps),
                                reference_layer_norm(x, w, Tensor(), kEps), tol(dt), tol(dt), "w only"));
    EXPECT_TRUE(test::all_close(layer_norm(x, Tensor(), b, kEps),
                                reference_layer_norm(x, Tensor(), b, kEps), tol(dt), tol(dt), "b only"));
  }
}

TEST(LayerNorm, EpsSitsInsideTheSquareRoot) {
  // A constant row has zero variance: the output is 0 * w + b, finite only thanks to eps,
  // and a large eps visibly shrinks a unit-variance row by sqrt(1 / (1 + eps)).
  Tensor x = Tensor::from_vector<double>({3, 3, 3, 3, -1, 1, -1, 1}, {2, 4});
  Tensor y = layer_norm(x, Tensor(), Tensor(), 1.0);
  EXPECT_TRUE(test::all_close(y, Tensor::from_vector<double>({0, 0, 0, 0, -std::sqrt(0.5), std::sqrt(0.5),
                                                              -std::sqrt(0.5), std::sqrt(0.5)},
                                                             {2, 4}),
                              1e-15, 0, "eps = 1"));
}

TEST(LayerNorm, GradcheckWithAffine) {
  Rng rng(2);
  Tensor x = leaf({2, 3, 5}, rng, 1.0, 2.0), w = leaf({5}, rng), b = leaf({5}, rng);
  EXPECT_TRUE(test::gradcheck(
      [](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2], kEps); }, {x, w, b}));
}

TEST(LayerNorm, GradcheckWithoutAffine) {
  Rng rng(3);
  Tensor x = leaf({4, 6}, rng, -1.0, 0.5);
  EXPECT_TRUE(test::gradcheck(
      [](const std::vector<Tensor>& in) { return layer_norm(in[0], Tensor(), Tensor(), kEps); }, {x}));
}

TEST(LayerNorm, GradcheckWithScaleOnlyAndBiasOnly) {
  Rng rng(4);
  Tensor x = leaf({3, 4}, rng), w = leaf({4}, rng), b = leaf({4}, rng);
  EXPECT_TRUE(test::gradcheck(
      [](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], Tensor(), kEps); }, {x, w}));
  EXPECT_TRUE(test::gradcheck(
      [](const std::vector<Tensor>& in) { return layer_norm(in[0], Tensor(), in[1], kEps); }, {x, b}));
}

TEST(LayerNorm, GradcheckThroughAStridedInput) {
  Rng rng(5);
  Tensor x = leaf({5, 3}, rng), w = leaf({5}, rng), b = leaf({5}, rng);
  EXPECT_TRUE(test::gradcheck(
      [](const std::vector<Tensor>& in) {
        return layer_norm(in[0].transpose(0, 1), in[1], in[2], kEps);
      },
      {x, w, b}));
}

TEST(LayerNorm, LargeInputGradientsMatchTheDerivedFormula) {
  // [128, 512]: rows and the dw/db column blocks both run in parallel.
  const int64_t R = 128, D = 512;
  Rng rng(6);
  Tensor x = leaf({R, D}, rng, 0.5, 2.0), w = leaf({D}, rng), b = leaf({D}, rng);
  Tensor dy = Tensor::randn({R, D}, rng, DType::F64);
  Tensor y = layer_norm(x, w, b, kEps);
  EXPECT_TRUE(test::all_close(y, reference_layer_norm(x, w, b, kEps), test::kAbsF64, 1e-12, "y"));
  y.backward(dy);
  const auto vx = x.to_vector<double>(), vw = w.to_vector<double>(), vdy = dy.to_vector<double>();
  std::vector<double> dx(vx.size()), dw(static_cast<size_t>(D), 0.0), db(static_cast<size_t>(D), 0.0);
  for (int64_t r = 0; r < R; ++r) {
    const size_t o = static_cast<size_t>(r * D);
    double m = 0, var = 0;
    for (int64_t i = 0; i < D; ++i) m += vx[o + static_cast<size_t>(i)] / static_cast<double>(D);
    for (int64_t i = 0; i < D; ++i) {
      const double c = vx[o + static_cast<size_t>(i)] - m;
      var += c * c / static_cast<double>(D);
    }
    const double rstd = 1 / std::sqrt(var + kEps);
    double g_mean = 0, gx_mean = 0;
    for (size_t i = 0; i < static_cast<size_t>(D); ++i) {
      const double xhat = (vx[o + i] - m) * rstd, g = vdy[o + i] * vw[i];
      g_mean += g / static_cast<double>(D);
      gx_mean += g * xhat / static_cast<double>(D);
      dw[i] += vdy[o + i] * xhat;
      db[i] += vdy[o + i];
    }
    for (size_t i = 0; i < static_cast<size_t>(D); ++i) {
      const double xhat = (vx[o + i] - m) * rstd;
      dx[o + i] = rstd * (vdy[o + i] * vw[i] - g_mean - xhat * gx_mean);
    }
  }
  EXPECT_TRUE(test::all_close(x.grad(), Tensor::from_vector<double>(dx, {R, D}), 1e-10, 1e-10, "dx"));
  EXPECT_TRUE(test::all_close(w.grad(), Tensor::from_vector<double>(dw, {D}), 1e-10, 1e-10, "dw"));
  EXPECT_TRUE(test::all_close(b.grad(), Tensor::from_vector<double>(db, {D}), 1e-10, 1e-10, "db"));
}

TEST(LayerNorm, BadInputIsAnError) {
  Tensor x = Tensor::zeros({2, 4});
  try {
    (void)layer_norm(x, Tensor::ones({3}), Tensor(), kEps);
    FAIL() << "w of the wrong size should throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[layer_norm]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[2, 4]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[3]"), std::string::npos) << msg;
  }
  EXPECT_THROW((void)layer_norm(x, Tensor(), Tensor::zeros({5}), kEps), Error);
  EXPECT_THROW((void)layer_norm(x, Tensor::ones({1, 4}), Tensor(), kEps), Error);
  EXPECT_THROW((void)layer_norm(x, Tensor::ones({4}, DType::F64), Tensor(), kEps), Error);
  EXPECT_THROW((void)layer_norm(Tensor::zeros({2, 4}, DType::I64), Tensor(), Tensor(), kEps), Error);
  EXPECT_THROW((void)layer_norm(x, Tensor(), Tensor(), -1.0), Error);
  EXPECT_THROW((void)layer_norm(Tensor::scalar(1.0), Tensor(), Tensor(), kEps), Error);
}

TEST(RmsNorm, MatchesBruteForceWithAndWithoutScale) {
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Rng rng(7);
    Tensor x = Tensor::randn({3, 2, 6}, rng, dt, 1.0, 2.0);
    Tensor w = Tensor::randn({6}, rng, dt);
    EXPECT_TRUE(test::all_close(rms_norm(x, w, kEps), reference_rms_norm(x, w, kEps), tol(dt), tol(dt),
                                "with w"));
    EXPECT_TRUE(test::all_close(rms_norm(x, Tensor(), kEps), reference_rms_norm(x, Tensor(), kEps),
                                tol(dt), tol(dt), "without w"));
  }
}

TEST(RmsNorm, GradcheckWithAndWithoutScale) {
  Rng rng(8);
  Tensor x = leaf({3, 5}, rng, 0.5, 1.5), w = leaf({5}, rng);
  EXPECT_TRUE(test::gradcheck(
      [](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], kEps); }, {x, w}));
  EXPECT_TRUE(test::gradcheck(
      [](const std::vector<Tensor>& in) { return rms_norm(in[0], Tensor(), kEps); }, {x}));
}

TEST(RmsNorm, LargeInputScaleGradientIsSummedOverRows) {
  const int64_t R = 96, D = 384;
  Rng rng(9);
  Tensor x = Tensor::randn({R, D}, rng, DType::F64);
  Tensor w = leaf({D}, rng);
  Tensor dy = Tensor::randn({R, D}, rng, DType::F64);
  rms_norm(x, w, kEps).backward(dy);
  const auto vx = x.to_vector<double>(), vdy = dy.to_vector<double>();
  std::vector<double> dw(static_cast<size_t>(D), 0.0);
  for (size_t r = 0; r < static_cast<size_t>(R); ++r) {
    const size_t o = r * static_cast<size_t>(D);
    double ms = 0;
    for (size_t i = 0; i < static_cast<size_t>(D); ++i) ms += vx[o + i] * vx[o + i] / static_cast<double>(D);
    const double rstd = 1 / std::sqrt(ms + kEps);
    for (size_t i = 0; i < static_cast<size_t>(D); ++i) dw[i] += vdy[o + i] * vx[o + i] * rstd;
  }
  EXPECT_TRUE(test::all_close(w.grad(), Tensor::from_vector<double>(dw, {D}), 1e-10, 1e-10, "dw"));
}

TEST(RmsNorm, BadInputIsAnError) {
  Tensor x = Tensor::zeros({2, 4});
  EXPECT_THROW((void)rms_norm(x, Tensor::ones({3}), kEps), Error);
  EXPECT_THROW((void)rms_norm(x, Tensor::ones({4}, DType::F64), kEps), Error);
  EXPECT_THROW((void)rms_norm(Tensor::zeros({2, 4}, DType::I64), Tensor(), kEps), Error);
  EXPECT_THROW((void)rms_norm(x, Tensor(), -1e-5), Error);
}

}  // namespace
}  // namespace attn
