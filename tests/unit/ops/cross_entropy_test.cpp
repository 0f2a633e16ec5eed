// cross_entropy: values against a brute-force double loop written from
// torch.nn.CrossEntropyLoss's definition (label smoothing 0 and 0.1, ignored rows, a custom
// ignore_index), float64 gradient checks, the explicit gradient formula times an incoming
// gradient, all rows ignored, the parallel path, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attn/ops/ops.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"
#include "support/tolerances.h"

namespace attn {
namespace {

const DType kDtypes[] = {DType::F32, DType::F64};

double tol(DType dt) { return dt == DType::F32 ? test::kAbsF32 : test::kAbsF64; }

// log p[n, v] in double, computed without shortcuts.
std::vector<double> log_probs(const Tensor& logits) {
  const int64_t N = logits.size(0), V = logits.size(1);
  const auto x = logits.to_vector<double>();
  std::vector<double> out(x.size());
  for (int64_t n = 0; n < N; ++n) {
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(x[static_cast<size_t>(n * V + v)]);
    for (int64_t v = 0; v < V; ++v)
      out[static_cast<size_t>(n * V + v)] = x[static_cast<size_t>(n * V + v)] - std::log(s);
  }
  return out;
}

// The loss as PyTorch defines it: (1 - eps) * NLL + eps / V * sum_v -log p, averaged over
// the rows whose target is not ignore_index.
double reference_loss(const Tensor& logits, const std::vector<int64_t>& targets, int64_t ignore,
                      double eps) {
  const int64_t V = logits.size(1);
  const auto lp = log_probs(logits);
  double total = 0;
  int64_t valid = 0;
  for (size_t n = 0; n < targets.size(); ++n) {
    if (targets[n] == ignore) continue;
    ++valid;
    double smooth = 0;
    for (int64_t v = 0; v < V; ++v) smooth -= lp[n * static_cast<size_t>(V) + static_cast<size_t>(v)];
    total += (1 - eps) * -lp[n * static_cast<size_t>(V) + static_cast<size_t>(targets[n])] +
             eps / static_cast<double>(V) * smooth;
  }
  return valid ? total / static_cast<double>(valid) : 0.0;
}

// d loss / d logits = (softmax - ((1 - eps) onehot + eps / V)) / n_valid, 0 on ignored rows.
Tensor reference_grad(const Tensor& logits, const std::vector<int64_t>& targets, int64_t ignore,
                      double eps, double upstream) {
  const int64_t N = logits.size(0), V = logits.size(1);
  const auto lp = log_probs(logits);
  int64_t valid = 0;
  for (int64_t t : targets) valid += t != ignore;
  std::vector<double> g(lp.size(), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = targets[static_cast<size_t>(n)];
    if (t == ignore) continue;
    for (int64_t v = 0; v < V; ++v) {
      const double target = (1 - eps) * (v == t ? 1.0 : 0.0) + eps / static_cast<double>(V);
      g[static_cast<size_t>(n * V + v)] =
          upstream * (std::exp(lp[static_cast<size_t>(n * V + v)]) - target) / static_cast<double>(valid);
    }
  }
  return Tensor::from_vector<double>(g, {N, V});
}

Tensor ids(const std::vector<int64_t>& v) {
  return Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())});
}

TEST(CrossEntropy, MatchesTorchDefinitionWithAndWithoutLabelSmoothing) {
  const std::vector<int64_t> targets = {0, 4, -100, 2, 3, -100};
  for (DType dt : kDtypes) {
    for (double eps : {0.0, 0.1}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " eps " + std::to_string(eps));
      Rng rng(1);
      Tensor logits = Tensor::randn({6, 5}, rng, dt, 0.0, 2.0);
      Tensor loss = cross_entropy(logits, ids(targets), -100, eps);
      EXPECT_EQ(loss.dim(), 0);
      EXPECT_EQ(loss.dtype(), dt);
      EXPECT_NEAR(loss.item(), reference_loss(logits, targets, -100, eps), tol(dt));
    }
  }
}

TEST(CrossEntropy, IgnoreIndexInsideTheVocabularyDropsThoseRows) {
  // With ignore_index 2, the rows targeting class 2 neither add loss nor count in the mean.
  const std::vector<int64_t> targets = {2, 1, 2, 0};
  Rng rng(2);
  Tensor logits = Tensor::randn({4, 3}, rng, DType::F64);
  const double loss = cross_entropy(logits, ids(targets), 2, 0.1).item();
  EXPECT_NEAR(loss, reference_loss(logits, targets, 2, 0.1), test::kAbsF64);
  EXPECT_GT(std::fabs(loss - reference_loss(logits, targets, -100, 0.1)), 1e-3);
}

TEST(CrossEntropy, LargeLogitsAreStable) {
  Tensor logits = Tensor::from_vector<float>({1000, 0, -1000, 500, 501, 502}, {2, 3});
  const double loss = cross_entropy(logits, ids({1, 2}), -100, 0.0).item();
  EXPECT_TRUE(std::isfinite(loss));
  // Row 0: -log p[1] = 1000; row 1: -log p[2] = log(1 + e^-1 + e^-2).
  EXPECT_NEAR(loss, (1000 + std::log(1 + std::exp(-1.0) + std::exp(-2.0))) / 2, 1e-3);
}

TEST(CrossEntropy, GradcheckWithoutLabelSmoothingAndIgnoredRows) {
  Rng rng(3);
  Tensor logits = Tensor::randn({5, 4}, rng, DType::F64);
  logits.set_requires_grad(true);
  const Tensor t = ids({3, -100, 0, 1, -100});
  EXPECT_TRUE(test::gradcheck(
      [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, -100, 0.0); }, {logits}));
}

TEST(CrossEntropy, GradcheckWithLabelSmoothing) {
  Rng rng(4);
  Tensor logits = Tensor::randn({4, 6}, rng, DType::F64, 0.0, 2.0);
  logits.set_requires_grad(true);
  const Tensor t = ids({5, 0, -100, 2});
  EXPECT_TRUE(test::gradcheck(
      [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, -100, 0.1); }, {logits}));
}

TEST(CrossEntropy, GradientIsSoftmaxMinusSmoothedTargetOverValidRowsTimesUpstream) {
  const std::vector<int64_t> targets = {1, -100, 3, 0};
  for (DType dt : kDtypes) {
    for (double eps : {0.0, 0.1}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " eps " + std::to_string(eps));
      Rng rng(5);
      Tensor logits = Tensor::randn({4, 5}, rng, dt);
      logits.set_requires_grad(true);
      cross_entropy(logits, ids(targets), -100, eps).backward(Tensor::scalar(2.5, dt));
      EXPECT_TRUE(test::all_close(logits.grad(), reference_grad(logits, targets, -100, eps, 2.5),
                                  tol(dt), 0, "dlogits"));
      // The ignored row gets exactly zero.
      for (int64_t v = 0; v < 5; ++v) EXPECT_EQ(logits.grad().at({1, v}), 0.0);
    }
  }
}

TEST(CrossEntropy, AllRowsIgnoredGivesZeroLossAndZeroGradient) {
  Rng rng(6);
  Tensor logits = Tensor::randn({3, 4}, rng, DType::F64);
  logits.set_requires_grad(true);
  Tensor loss = cross_entropy(logits, ids({-1, -1, -1}), -1, 0.1);
  EXPECT_EQ(loss.item(), 0.0);
  loss.backward();
  EXPECT_TRUE(test::all_close(logits.grad(), Tensor::zeros({3, 4}, DType::F64), 0, 0, "dlogits"));
}

TEST(CrossEntropy, LargeInputsTakeTheParallelPathAndStillMatch) {
  const int64_t N = 64, V = 1024;
  Rng rng(7);
  std::vector<int64_t> targets(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n)
    targets[static_cast<size_t>(n)] = n % 7 == 3 ? -100 : static_cast<int64_t>(rng.below(V));
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor logits = Tensor::randn({N, V}, rng, dt, 0.0, 3.0);
    logits.set_requires_grad(true);
    Tensor loss = cross_entropy(logits, ids(targets), -100, 0.1);
    EXPECT_NEAR(loss.item(), reference_loss(logits, targets, -100, 0.1), 10 * tol(dt));
    loss.backward();
    EXPECT_TRUE(test::all_close(logits.grad(), reference_grad(logits, targets, -100, 0.1, 1.0),
                                tol(dt), 0, "dlogits"));
  }
}

TEST(CrossEntropy, OutOfRangeTargetIsAnErrorNamingTheTargetAndRow) {
  Tensor logits = Tensor::zeros({3, 4});
  try {
    (void)cross_entropy(logits, ids({0, 1, 4}), -100, 0.0);
    FAIL() << "target 4 with V = 4 should throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[cross_entropy]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("target 4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("row 2"), std::string::npos) << msg;
  }
  EXPECT_THROW((void)cross_entropy(logits, ids({0, -1, 2}), -100, 0.0), Error);  // -1 is not ignored
  EXPECT_NO_THROW((void)cross_entropy(logits, ids({0, -1, 2}), -1, 0.0));
}

TEST(CrossEntropy, BadShapesDtypesAndOptionsAreErrors) {
  Tensor logits = Tensor::zeros({3, 4});
  EXPECT_THROW((void)cross_entropy(logits, Tensor::zeros({3}, DType::F32), -100, 0.0), Error);
  EXPECT_THROW((void)cross_entropy(logits, ids({0, 1}), -100, 0.0), Error);            // N differs
  EXPECT_THROW((void)cross_entropy(logits, Tensor::zeros({3, 1}, DType::I64), -100, 0.0), Error);
  EXPECT_THROW((void)cross_entropy(Tensor::zeros({1, 3, 4}), ids({0}), -100, 0.0), Error);  // rank 3
  EXPECT_THROW((void)cross_entropy(Tensor::zeros({3, 4}, DType::I64), ids({0, 1, 2}), -100, 0.0),
               Error);
  EXPECT_THROW((void)cross_entropy(logits, ids({0, 1, 2}), -100, -0.1), Error);
  EXPECT_THROW((void)cross_entropy(logits, ids({0, 1, 2}), -100, 1.5), Error);
}

}  // namespace
}  // namespace attn
