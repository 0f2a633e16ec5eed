// matmul and linear: values against brute-force double loops in f32 and f64, float64
// gradient checks (batched, shared 2-D b, linear with and without bias), bias gradients summed
// in row order on every ISA and thread count (bit for bit), and bad input.
#include <gtest/gtest.h>
#include <omp.h>

#include <string>
#include <vector>

#include "attn/ops/ops.h"
#include "kernels/simd/isa.h"
#include "kernels/simd/vector_kernels.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"
#include "support/tolerances.h"

namespace attn {
namespace {

const DType kDtypes[] = {DType::F32, DType::F64};

double tol(DType dt) { return dt == DType::F32 ? test::kAbsF32 : test::kAbsF64; }

// Brute-force a [batch, M, K] @ b [batch or 1, K, N] in double; b_shared repeats b.
Tensor reference_matmul(const Tensor& a, const Tensor& b, int64_t batch, int64_t M, int64_t K,
                        int64_t N, bool b_shared, const Shape& out_shape) {
  const auto va = a.to_vector<double>();
  const auto vb = b.to_vector<double>();
  std::vector<double> out(static_cast<size_t>(batch * M * N), 0.0);
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += va[static_cast<size_t>(p * M * K + i * K + k)] *
               vb[static_cast<size_t>((b_shared ? 0 : p) * K * N + k * N + j)];
        out[static_cast<size_t>(p * M * N + i * N + j)] = s;
      }
  return Tensor::from_vector<double>(out, out_shape);
}

// Brute-force x [R, In] @ w [Out, In]^T + b in double.
Tensor reference_linear(const Tensor& x, const Tensor& w, const Tensor& b, const Shape& out_shape) {
  const int64_t In = w.size(1), Out = w.size(0), R = x.numel() / In;
  const auto vx = x.to_vector<double>();
  const auto vw = w.to_vector<double>();
  const auto vb = b.defined() ? b.to_vector<double>() : std::vector<double>(static_cast<size_t>(Out), 0.0);
  std::vector<double> out(static_cast<size_t>(R * Out));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t o = 0; o < Out; ++o) {
      double s = vb[static_cast<size_t>(o)];
      for (int64_t i = 0; i < In; ++i)
        s += vx[static_cast<size_t>(r * In + i)] * vw[static_cast<size_t>(o * In + i)];
      out[static_cast<size_t>(r * Out + o)] = s;
    }
  return Tensor::from_vector<double>(out, out_shape);
}

Tensor leaf(const Shape& shape, Rng& rng) {
  Tensor t = Tensor::randn(shape, rng, DType::F64);
  t.set_requires_grad(true);
  return t;
}

TEST(Matmul, BatchedProductMatchesBruteForce) {
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Rng rng(1);
    Tensor a = Tensor::randn({2, 3, 4, 5}, rng, dt);
    Tensor b = Tensor::randn({2, 3, 5, 6}, rng, dt);
    Tensor c = matmul(a, b);
    EXPECT_EQ(c.dtype(), dt);
    EXPECT_TRUE(test::all_close(c, reference_matmul(a, b, 6, 4, 5, 6, false, {2, 3, 4, 6}), tol(dt),
                                tol(dt), "batched"));
  }
}

TEST(Matmul, TwoDimensionalRightOperandIsSharedByEveryBatch) {
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Rng rng(2);
    Tensor a = Tensor::randn({3, 4, 5}, rng, dt);
    Tensor b = Tensor::randn({5, 2}, rng, dt);
    EXPECT_TRUE(test::all_close(matmul(a, b), reference_matmul(a, b, 3, 4, 5, 2, true, {3, 4, 2}),
                                tol(dt), tol(dt), "shared b"));
  }
}

TEST(Matmul, StridedInputsAreReadAsTheirLogicalValues) {
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Rng rng(3);
    Tensor a = Tensor::randn({5, 4}, rng, dt).transpose(0, 1);        // [4, 5], strided
    Tensor b = Tensor::randn({2, 3, 5}, rng, dt).slice(0, 1, 2).reshape({3, 5}).transpose(0, 1);
    ASSERT_FALSE(a.is_contiguous());
    EXPECT_TRUE(test::all_close(matmul(a, b), reference_matmul(a, b, 1, 4, 5, 3, true, {4, 3}),
                                tol(dt), tol(dt), "strided"));
  }
}

TEST(Matmul, EmptyInnerDimensionGivesZeros) {
  Tensor a = Tensor::zeros({2, 0});
  Tensor b = Tensor::zeros({0, 3});
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 3}));
  EXPECT_EQ(c.to_vector<float>(), std::vector<float>(6, 0.0f));
}

TEST(Matmul, GradcheckBatched) {
  Rng rng(4);
  Tensor a = leaf({2, 3, 4}, rng), b = leaf({2, 4, 5}, rng);
  EXPECT_TRUE(test::gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                              {a, b}));
}

TEST(Matmul, GradcheckSharedRightOperandSumsOverTheBatch) {
  Rng rng(5);
  Tensor a = leaf({2, 2, 3, 4}, rng), b = leaf({4, 3}, rng);
  EXPECT_TRUE(test::gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                              {a, b}));
}

TEST(Matmul, GradcheckThroughATransposedInput) {
  Rng rng(6);
  Tensor a = leaf({4, 3}, rng), b = leaf({4, 2}, rng);
  EXPECT_TRUE(test::gradcheck(
      [](const std::vector<Tensor>& in) { return matmul(in[0].transpose(0, 1), in[1]); }, {a, b}));
}

TEST(Matmul, OnlyTheInputsThatRequireGradGetOne) {
  Rng rng(7);
  Tensor a = Tensor::randn({3, 4}, rng, DType::F64);
  Tensor b = leaf({4, 2}, rng);
  matmul(a, b).backward(Tensor::ones({3, 2}, DType::F64));
  EXPECT_FALSE(a.grad().defined());
  ASSERT_TRUE(b.grad().defined());
  // dB = A^T 1: each row k of dB is the column sum of A's column k.
  const auto va = a.to_vector<double>();
  const auto gb = b.grad().to_vector<double>();
  for (int64_t k = 0; k < 4; ++k) {
    double s = 0;
    for (int64_t i = 0; i < 3; ++i) s += va[static_cast<size_t>(i * 4 + k)];
    EXPECT_NEAR(gb[static_cast<size_t>(k * 2)], s, 1e-12);
    EXPECT_NEAR(gb[static_cast<size_t>(k * 2 + 1)], s, 1e-12);
  }
}

TEST(Matmul, BadShapesAndDtypesAreErrorsNamingBothShapes) {
  Tensor a = Tensor::zeros({2, 3, 4});
  try {
    (void)matmul(a, Tensor::zeros({2, 5, 6}));
    FAIL() << "inner-dimension mismatch should throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[matmul]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[2, 3, 4]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[2, 5, 6]"), std::string::npos) << msg;
  }
  EXPECT_THROW((void)matmul(a, Tensor::zeros({3, 4, 6})), Error);         // batch dims differ
  EXPECT_THROW((void)matmul(Tensor::zeros({3, 4}), Tensor::zeros({2, 4, 6})), Error);
  EXPECT_THROW((void)matmul(Tensor::zeros({4}), Tensor::zeros({4, 2})), Error);  // rank 1
  EXPECT_THROW((void)matmul(a, Tensor::zeros({4, 2}, DType::F64)), Error);       // mixed dtypes
  EXPECT_THROW((void)matmul(Tensor::zeros({2, 2}, DType::I64), Tensor::zeros({2, 2}, DType::I64)),
               Error);
}

TEST(Linear, MatchesBruteForceWithAndWithoutBias) {
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Rng rng(8);
    Tensor x = Tensor::randn({2, 3, 4}, rng, dt);
    Tensor w = Tensor::randn({5, 4}, rng, dt);
    Tensor b = Tensor::randn({5}, rng, dt);
    EXPECT_TRUE(test::all_close(linear(x, w, b), reference_linear(x, w, b, {2, 3, 5}), tol(dt),
                                tol(dt), "with bias"));
    EXPECT_TRUE(test::all_close(linear(x, w, Tensor()), reference_linear(x, w, Tensor(), {2, 3, 5}),
                                tol(dt), tol(dt), "without bias"));
    Tensor v = Tensor::randn({4}, rng, dt);  // a single vector, as nn.Linear accepts
    EXPECT_TRUE(test::all_close(linear(v, w, b), reference_linear(v, w, b, {5}), tol(dt), tol(dt),
                                "vector"));
  }
}

TEST(Linear, GradcheckWithBias) {
  Rng rng(9);
  Tensor x = leaf({2, 3, 4}, rng), w = leaf({5, 4}, rng), b = leaf({5}, rng);
  EXPECT_TRUE(test::gradcheck(
      [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, b}));
}

TEST(Linear, GradcheckWithoutBias) {
  Rng rng(10);
  Tensor x = leaf({3, 4}, rng), w = leaf({2, 4}, rng);
  EXPECT_TRUE(test::gradcheck(
      [](const std::vector<Tensor>& in) { return linear(in[0], in[1], Tensor()); }, {x, w}));
}

TEST(Linear, BiasGradientIsTheColumnSumOverAllRows) {
  Rng rng(11);
  // 1200 x 230 elements: large enough for the threaded path
  Tensor x = Tensor::randn({40, 30, 8}, rng, DType::F64);
  Tensor w = Tensor::randn({230, 8}, rng, DType::F64);
  Tensor b = leaf({230}, rng);
  Tensor dy = Tensor::randn({40, 30, 230}, rng, DType::F64);
  const int before = omp_get_max_threads();
  omp_set_num_threads(3);
  linear(x, w, b).backward(dy);
  omp_set_num_threads(before);
  const auto vdy = dy.to_vector<double>();
  std::vector<double> expect(230, 0.0);
  for (size_t r = 0; r < 1200; ++r)
    for (size_t o = 0; o < 230; ++o) expect[o] += vdy[r * 230 + o];
  EXPECT_TRUE(test::all_close(b.grad(), Tensor::from_vector<double>(expect, {230}), 1e-10, 0, "db"));
}

// init[j] + dy[0, j] + dy[1, j] + ... in float, one row after the other (rows `ld` apart): the
// order of summation every ISA and thread count must keep.
std::vector<float> row_order_sums(std::vector<float> sums, const std::vector<float>& dy,
                                  int64_t rows, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < sums.size(); ++j) sums[j] += dy[static_cast<size_t>(r * ld) + j];
  return sums;
}

// Float sizes that cross four-register blocks, single registers and partial tails of every ISA.
TEST(Linear, FloatBiasGradientAddsTheRowsInOrderOnEveryIsa) {
  for (const kernels::simd::Isa isa : kernels::simd::supported_isas()) {
    const kernels::simd::IsaGuard guard(isa);
    for (const int64_t rows : {1, 5, 33})
      for (const int64_t cols : {1, 3, 15, 17, 63, 64, 65, 130}) {
        SCOPED_TRACE(std::string(kernels::simd::isa_name(isa)) + " rows " + std::to_string(rows) +
                     " cols " + std::to_string(cols));
        Rng rng(static_cast<uint64_t>(100 * rows + cols));
        Tensor x = Tensor::randn({rows, 3}, rng);
        Tensor w = Tensor::randn({cols, 3}, rng);
        Tensor b = Tensor::randn({cols}, rng);
        b.set_requires_grad(true);
        Tensor dy = Tensor::randn({rows, cols}, rng);
        linear(x, w, b).backward(dy);
        const std::vector<float> vdy = dy.to_vector<float>();
        EXPECT_EQ(b.grad().to_vector<float>(),
                  row_order_sums(std::vector<float>(static_cast<size_t>(cols), 0.0f), vdy, rows, cols));
        std::vector<double> exact(static_cast<size_t>(cols), 0.0);  // the sum in double
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < cols; ++j) exact[static_cast<size_t>(j)] += vdy[static_cast<size_t>(r * cols + j)];
        EXPECT_TRUE(test::all_close(b.grad(), Tensor::from_vector<double>(exact, {cols}),
                                    1e-5 * static_cast<double>(rows), 1e-5, "db"));
      }
  }
}

// The kernel adds into what db holds and reads rows `ld` apart (a block of a wider gradient).
TEST(Linear, ColumnSumsKernelAddsIntoDbAndHonoursTheRowStride) {
  const int64_t rows = 7, cols = 37, ld = 50;
  Rng rng(12);
  const std::vector<float> dy = Tensor::randn({rows, ld}, rng).to_vector<float>();
  const std::vector<float> init = Tensor::randn({cols}, rng).to_vector<float>();
  const std::vector<float> expect = row_order_sums(init, dy, rows, ld);
  for (const kernels::simd::Isa isa : kernels::simd::supported_isas()) {
    SCOPED_TRACE(kernels::simd::isa_name(isa));
    std::vector<float> db = init;
    db.push_back(-1.0f);  // a guard element past the end must stay untouched
    kernels::simd::vector_kernels(isa).column_sums(db.data(), dy.data(), rows, cols, ld);
    EXPECT_EQ(db.back(), -1.0f);
    db.pop_back();
    EXPECT_EQ(db, expect);
  }
}

// Large float gradients are split over threads by column blocks; every column still adds its
// rows in order, so one thread and three give the same bits.
TEST(Linear, ThreadedFloatBiasGradientMatchesOneThreadBitForBit) {
  const int64_t rows = 600, cols = 450;  // 270,000 elements: the threaded path
  Rng rng(13);
  Tensor x = Tensor::randn({rows, 2}, rng);
  Tensor w = Tensor::randn({cols, 2}, rng);
  Tensor dy = Tensor::randn({rows, cols}, rng);
  const int before = omp_get_max_threads();
  std::vector<std::vector<float>> results;
  for (const int threads : {1, 3}) {
    omp_set_num_threads(threads);
    Tensor b = Tensor::zeros({cols});
    b.set_requires_grad(true);
    linear(x, w, b).backward(dy);
    results.push_back(b.grad().to_vector<float>());
  }
  omp_set_num_threads(before);
  const std::vector<float> expect =
      row_order_sums(std::vector<float>(static_cast<size_t>(cols), 0.0f), dy.to_vector<float>(), rows, cols);
  EXPECT_EQ(results[0], expect);
  EXPECT_EQ(results[1], expect);
}

TEST(Linear, WrongWeightOrBiasShapesAreErrors) {
  Tensor x = Tensor::zeros({2, 4});
  try {
    (void)linear(x, Tensor::zeros({5, 3}), Tensor());
    FAIL() << "w of the wrong size should throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[linear]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[2, 4]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[5, 3]"), std::string::npos) << msg;
  }
  EXPECT_THROW((void)linear(x, Tensor::zeros({4}), Tensor()), Error);               // w not 2-D
  EXPECT_THROW((void)linear(x, Tensor::zeros({5, 4}), Tensor::zeros({4})), Error);  // b size
  EXPECT_THROW((void)linear(x, Tensor::zeros({5, 4}), Tensor::zeros({1, 5})), Error);
  EXPECT_THROW((void)linear(x, Tensor::zeros({5, 4}, DType::F64), Tensor()), Error);
  EXPECT_THROW((void)linear(x, Tensor::zeros({5, 4}), Tensor::zeros({5}, DType::F64)), Error);
  EXPECT_THROW((void)linear(Tensor::zeros({2, 4}, DType::I64), Tensor::zeros({5, 4}, DType::I64),
                            Tensor()),
               Error);
}

}  // namespace
}  // namespace attn
