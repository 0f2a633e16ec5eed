// The precision scope of the matrix products (attn/ops/precision.h): guards nest and restore;
// under bf16, linear and matmul (batched and with a shared 2-D b), forward and both backward
// products, equal float64 products of the bf16-rounded operands (the forward's output, dx = dy
// W and dW = dy^T x) within the kernel's bound, and the float32 products miss that bound (the
// control); the backward follows the forward's precision, not the thread's at backward time;
// float64 never changes; bad names are errors. Gradients are not finite-differenced here: the
// bf16 forward is piecewise constant in its inputs, so its "derivative" is the scheme's
// definition, checked above as the products of rounded operands (and in tests/torch/
// bf16_torch_test.cpp against a float64 emulation of a whole layer).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "attn/core/dtype.h"
#include "attn/core/error.h"
#include "attn/ops/ops.h"

namespace attn {
namespace {

Tensor leaf(const Tensor& t) {
  Tensor l = t.clone();
  l.set_requires_grad(true);
  return l;
}

double bf(float v) { return static_cast<double>(float_from_bf16(bf16_from_float(v))); }

// The worst |got - ref| / bound of C[M, N] = sum_k bf(A(m, k)) bf(B(k, n)) (+ bias), bound the
// kernel's (K/16 + 5) 2^-24 (sum |terms| + |bias|); a(m, k) and b(k, n) read the operands.
template <class FA, class FB>
double excess(const std::vector<float>& got, int64_t M, int64_t N, int64_t K, FA a, FB b,
              const std::vector<float>* bias = nullptr) {
  double worst = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = bias ? (*bias)[static_cast<size_t>(n)] : 0.0, mag = std::fabs(s);
      for (int64_t k = 0; k < K; ++k) {
        const double p = bf(a(m, k)) * bf(b(k, n));
        s += p;
        mag += std::fabs(p);
      }
      const double bound = (static_cast<double>(K) / 16.0 + 5.0) * std::ldexp(1.0, -24) * mag + 1e-30;
      worst = std::max(worst, std::fabs(got[static_cast<size_t>(m * N + n)] - s) / bound);
    }
  return worst;
}

TEST(Precision, GuardsNestAndRestoreAndNamesParse) {
  EXPECT_EQ(matmul_precision(), Precision::F32);
  {
    const PrecisionGuard a(Precision::BF16);
    EXPECT_EQ(matmul_precision(), Precision::BF16);
    {
      const PrecisionGuard b(Precision::F32);
      EXPECT_EQ(matmul_precision(), Precision::F32);
    }
    EXPECT_EQ(matmul_precision(), Precision::BF16);
  }
  EXPECT_EQ(matmul_precision(), Precision::F32);
  EXPECT_EQ(parse_precision("bf16"), Precision::BF16);
  EXPECT_EQ(parse_precision("f32"), Precision::F32);
  EXPECT_STREQ(precision_name(Precision::BF16), "bf16");
  EXPECT_THROW(parse_precision("fp16"), Error);
}

// One linear forward and backward; returns y, dx, dw, db as float vectors.
struct LinearRun {
  std::vector<float> y, dx, dw, db;
};

LinearRun run_linear(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& dy, Precision p) {
  Tensor x = leaf(x0), w = leaf(w0), b = leaf(b0);
  Tensor y;
  {
    const PrecisionGuard guard(p);
    y = linear(x, w, b);
  }
  sum(mul(y, dy)).backward();  // outside the guard: the node keeps the forward's precision
  return {y.to_vector<float>(), x.grad().to_vector<float>(), w.grad().to_vector<float>(),
          b.grad().to_vector<float>()};
}

TEST(Precision, Bf16LinearIsTheProductOfRoundedOperandsForwardAndBackward) {
  Rng rng(5);
  const int64_t R = 37, In = 70, Out = 19;  // tails of every block size
  const Tensor x = Tensor::randn({R, In}, rng), w = Tensor::randn({Out, In}, rng, DType::F32, 0, 0.3),
               b = Tensor::randn({Out}, rng), dy = Tensor::randn({R, Out}, rng);
  const auto vx = x.to_vector<float>(), vw = w.to_vector<float>(), vb = b.to_vector<float>(),
             vdy = dy.to_vector<float>();
  auto X = [&](int64_t r, int64_t i) { return vx[static_cast<size_t>(r * In + i)]; };
  auto W = [&](int64_t o, int64_t i) { return vw[static_cast<size_t>(o * In + i)]; };
  auto DY = [&](int64_t r, int64_t o) { return vdy[static_cast<size_t>(r * Out + o)]; };
  for (Precision p : {Precision::BF16, Precision::F32}) {
    const LinearRun run = run_linear(x, w, b, dy, p);
    const double ey = excess(run.y, R, Out, In, X, [&](int64_t i, int64_t o) { return W(o, i); }, &vb);
    const double edx = excess(run.dx, R, In, Out, DY, W);
    const double edw = excess(run.dw, Out, In, R, [&](int64_t o, int64_t r) { return DY(r, o); }, X);
    if (p == Precision::BF16) {
      EXPECT_LE(ey, 1.0);
      EXPECT_LE(edx, 1.0);
      EXPECT_LE(edw, 1.0);
    } else {  // control: float32 products are not those of rounded operands
      EXPECT_GT(ey, 10.0);
      EXPECT_GT(edx, 10.0);
      EXPECT_GT(edw, 10.0);
    }
    // The bias gradient stays a float32 column sum in both.
    for (int64_t o = 0; o < Out; ++o) {
      double s = 0;
      for (int64_t r = 0; r < R; ++r) s += DY(r, o);
      EXPECT_NEAR(run.db[static_cast<size_t>(o)], s, 1e-4);
    }
  }
}

TEST(Precision, Bf16MatmulBatchedAndSharedIsTheProductOfRoundedOperands) {
  Rng rng(7);
  const int64_t B = 3, M = 9, K = 35, N = 18;
  for (bool shared : {false, true}) {
    const Tensor a0 = Tensor::randn({B, M, K}, rng), b0 = shared ? Tensor::randn({K, N}, rng) : Tensor::randn({B, K, N}, rng),
                 dc = Tensor::randn({B, M, N}, rng);
    Tensor a = leaf(a0), b = leaf(b0);
    Tensor c;
    {
      const PrecisionGuard guard(Precision::BF16);
      c = matmul(a, b);
    }
    sum(mul(c, dc)).backward();
    const auto va = a0.to_vector<float>(), vb = b0.to_vector<float>(), vdc = dc.to_vector<float>(),
               vc = c.to_vector<float>(), vda = a.grad().to_vector<float>(), vdb = b.grad().to_vector<float>();
    for (int64_t p = 0; p < B; ++p) {
      const int64_t bo = shared ? 0 : p * K * N;
      auto A = [&](int64_t m, int64_t k) { return va[static_cast<size_t>(p * M * K + m * K + k)]; };
      auto Bm = [&](int64_t k, int64_t n) { return vb[static_cast<size_t>(bo + k * N + n)]; };
      auto DC = [&](int64_t m, int64_t n) { return vdc[static_cast<size_t>(p * M * N + m * N + n)]; };
      const std::vector<float> cp(vc.begin() + p * M * N, vc.begin() + (p + 1) * M * N);
      const std::vector<float> dap(vda.begin() + p * M * K, vda.begin() + (p + 1) * M * K);
      EXPECT_LE(excess(cp, M, N, K, A, Bm), 1.0) << shared;
      EXPECT_LE(excess(dap, M, K, N, DC, [&](int64_t n, int64_t k) { return Bm(k, n); }), 1.0) << shared;
      if (!shared) {
        const std::vector<float> dbp(vdb.begin() + p * K * N, vdb.begin() + (p + 1) * K * N);
        EXPECT_LE(excess(dbp, K, N, M, [&](int64_t k, int64_t m) { return A(m, k); }, DC), 1.0);
      }
    }
    if (shared) {  // dB sums over the batch's rows: one product of [K, B*M] and [B*M, N]
      auto At = [&](int64_t k, int64_t r) { return va[static_cast<size_t>(r * K + k)]; };
      auto DCr = [&](int64_t r, int64_t n) { return vdc[static_cast<size_t>(r * N + n)]; };
      EXPECT_LE(excess(vdb, K, N, B * M, At, DCr), 1.0);
    }
  }
}

TEST(Precision, Float64IsNeverAffected) {
  Rng rng(9);
  const Tensor x = Tensor::randn({6, 20}, rng, DType::F64), w = Tensor::randn({5, 20}, rng, DType::F64);
  const Tensor plain = linear(x, w, Tensor());
  Tensor guarded;
  {
    const PrecisionGuard guard(Precision::BF16);
    guarded = linear(x, w, Tensor());
  }
  EXPECT_EQ(plain.to_vector<double>(), guarded.to_vector<double>());
}

}  // namespace
}  // namespace attn
