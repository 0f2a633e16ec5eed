// ops/matmul.cpp — matmul and linear: shape checks, BLAS dispatch and their backward nodes.
// Every projection of the model (§3.2.2's W^Q, W^K, W^V, W^O, §3.3's FFN, §3.4's output
// layer) is a linear; attention's Q K^T and P V (§3.2.1) are batched matmuls. All products
// go through kernels::gemm, or, for float32 under PrecisionGuard(Precision::BF16)
// (attn/ops/precision.h), through kernels::gemm_bf16_f32 (bf16 operands, float32 sums); the
// node records which, so the backward products follow the forward's precision. Not done here: NumPy-style broadcasting of batch dimensions
// (only equal batches, or a 2-D b shared by all of them), integer products.
#include <algorithm>
#include <type_traits>

#include "attn/ops/ops.h"
#include "kernels/gemm.h"
#include "kernels/parallel_for.h"
#include "kernels/quantized_gemm.h"
#include "kernels/simd/vector_kernels.h"

namespace attn {

namespace {

// Columns per task in the bias-gradient column sums, and the size from which they use threads
// (a 576 x 256 gradient takes a few microseconds on one core: less than waking a team).
constexpr int64_t kColumnBlock = 64;
constexpr int64_t kColumnSumsParallelMin = int64_t{1} << 18;

// BLAS wants leading dimensions >= 1 even for empty matrices.
int64_t ld(int64_t n) { return std::max<int64_t>(1, n); }

// The incoming gradient as a contiguous tensor of the forward dtype.
Tensor grad_as(const Tensor& g, DType dtype) {
  NoGradGuard guard;
  return g.dtype() == dtype ? contiguous(g) : g.to(dtype);
}

void check_floating(const char* op, const Tensor& x, const char* what) {
  ATTN_CHECK(x.defined(), op, what, " is undefined");
  ATTN_CHECK(is_floating(x.dtype()), op, what, " must be f32 or f64, got ", x.str());
}

// Product of all dimensions but the last `keep`.
int64_t leading(const Shape& s, size_t keep) {
  int64_t n = 1;
  for (size_t i = 0; i + keep < s.size(); ++i) n *= s[i];
  return n;
}

// A buffer that a GEMM with beta = 0 overwrites whole: uninitialised, unless the inner
// dimension is empty (then the product is zero and BLAS is not asked to write anything).
Tensor gemm_output(const Shape& shape, DType dtype, int64_t inner) {
  return inner > 0 ? Tensor::empty(shape, dtype) : Tensor::zeros(shape, dtype);
}

// ---- matmul ------------------------------------------------------------------------------

// Sizes of one matmul: `batch` products of [M, K] @ [K, N]; shared_b when b is 2-D.
struct MatmulDims {
  int64_t batch = 1, M = 0, K = 0, N = 0;
  bool shared_b = false;
};

template <class T>
void matmul_run(const MatmulDims& d, T* c, const T* a, const T* b) {
  if (d.shared_b) {
    // One GEMM over the flattened rows: [batch*M, K] @ [K, N].
    kernels::gemm<T>(false, false, d.batch * d.M, d.N, d.K, T(1), a, ld(d.K), b, ld(d.N), T(0), c,
                     ld(d.N));
  } else {
    kernels::gemm_batched<T>(d.batch, false, false, d.M, d.N, d.K, T(1), a, ld(d.K), d.M * d.K, b,
                             ld(d.N), d.K * d.N, T(0), c, ld(d.N), d.M * d.N);
  }
}

// The same products with bf16 operands and float32 sums (float32 only).
void matmul_run_bf16(const MatmulDims& d, float* c, const float* a, const float* b) {
  if (d.shared_b) {
    kernels::gemm_bf16_f32(false, false, d.batch * d.M, d.N, d.K, a, ld(d.K), b, ld(d.N), false, c, ld(d.N));
  } else {
    for (int64_t i = 0; i < d.batch; ++i)
      kernels::gemm_bf16_f32(false, false, d.M, d.N, d.K, a + i * d.M * d.K, ld(d.K), b + i * d.K * d.N, ld(d.N),
                             false, c + i * d.M * d.N, ld(d.N));
  }
}

// Forward: C = A B. Local derivatives: dA = dC B^T, dB = A^T dC (summed over the batch when
// B is shared). Both are written (beta = 0: no zero fill first); either may be null.
template <class T>
void matmul_backward_run(const MatmulDims& d, T* da, T* db, const T* dc, const T* a, const T* b) {
  if (d.shared_b) {
    if (da)  // [batch*M, N] @ [K, N]^T
      kernels::gemm<T>(false, true, d.batch * d.M, d.K, d.N, T(1), dc, ld(d.N), b, ld(d.N), T(0),
                       da, ld(d.K));
    if (db)  // [batch*M, K]^T @ [batch*M, N]
      kernels::gemm<T>(true, false, d.K, d.N, d.batch * d.M, T(1), a, ld(d.K), dc, ld(d.N), T(0),
                       db, ld(d.N));
  } else {
    if (da)  // per batch: [M, N] @ [K, N]^T
      kernels::gemm_batched<T>(d.batch, false, true, d.M, d.K, d.N, T(1), dc, ld(d.N), d.M * d.N,
                               b, ld(d.N), d.K * d.N, T(0), da, ld(d.K), d.M * d.K);
    if (db)  // per batch: [M, K]^T @ [M, N]
      kernels::gemm_batched<T>(d.batch, true, false, d.K, d.N, d.M, T(1), a, ld(d.K), d.M * d.K,
                               dc, ld(d.N), d.M * d.N, T(0), db, ld(d.N), d.K * d.N);
  }
}

void matmul_backward_run_bf16(const MatmulDims& d, float* da, float* db, const float* dc, const float* a,
                              const float* b) {
  if (d.shared_b) {
    if (da)
      kernels::gemm_bf16_f32(false, true, d.batch * d.M, d.K, d.N, dc, ld(d.N), b, ld(d.N), false, da, ld(d.K));
    if (db)
      kernels::gemm_bf16_f32(true, false, d.K, d.N, d.batch * d.M, a, ld(d.K), dc, ld(d.N), false, db, ld(d.N));
  } else {
    for (int64_t i = 0; i < d.batch; ++i) {
      if (da)
        kernels::gemm_bf16_f32(false, true, d.M, d.K, d.N, dc + i * d.M * d.N, ld(d.N), b + i * d.K * d.N, ld(d.N),
                               false, da + i * d.M * d.K, ld(d.K));
      if (db)
        kernels::gemm_bf16_f32(true, false, d.K, d.N, d.M, a + i * d.M * d.K, ld(d.K), dc + i * d.M * d.N, ld(d.N),
                               false, db + i * d.K * d.N, ld(d.N));
    }
  }
}

// Whether a product of this dtype runs in bf16 on the calling thread.
bool bf16_products(DType dtype) { return dtype == DType::F32 && matmul_precision() == Precision::BF16; }

struct MatmulBackward : Node {
  Tensor a, b;  // contiguous copies (or aliases) of the inputs
  MatmulDims dims;
  bool bf16 = false;  // the forward's precision
  const char* name() const override { return "MatmulBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    const Tensor dc = grad_as(g, a.dtype());
    Tensor da, db;
    if (inputs[0].requires_grad()) da = gemm_output(a.shape(), a.dtype(), dims.N);  // like a
    if (inputs[1].requires_grad())  // like b; its inner dimension runs over the rows of a
      db = gemm_output(b.shape(), b.dtype(), dims.shared_b ? dims.batch * dims.M : dims.M);
    if (bf16)
      matmul_backward_run_bf16(dims, da.defined() ? da.data<float>() : nullptr,
                               db.defined() ? db.data<float>() : nullptr, dc.data<float>(), a.data<float>(),
                               b.data<float>());
    else if (a.dtype() == DType::F32)
      matmul_backward_run<float>(dims, da.defined() ? da.data<float>() : nullptr,
                                 db.defined() ? db.data<float>() : nullptr, dc.data<float>(),
                                 a.data<float>(), b.data<float>());
    else
      matmul_backward_run<double>(dims, da.defined() ? da.data<double>() : nullptr,
                                  db.defined() ? db.data<double>() : nullptr, dc.data<double>(),
                                  a.data<double>(), b.data<double>());
    return {da, db};
  }
  void release() override {
    a = Tensor();
    b = Tensor();
  }
};

// ---- linear ------------------------------------------------------------------------------

// Forward y[r, j] = ... + b[j]: db[j] += sum_r dy[r, j]. Every column adds its rows in
// order, so the result does not depend on the ISA or the thread count; float runs on the
// vector kernels. Large gradients are split over threads by blocks of columns.
template <class T>
void column_sums(T* db, const T* dy, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  const int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
  const bool parallel = blocks > 1 && rows * cols >= kColumnSumsParallelMin;
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = kernels::simd::vector_kernels();  // fetched outside the parallel region
    if (!parallel) return vk.column_sums(db, dy, rows, cols, cols);
    kernels::parallel_for(blocks, true, [&](int64_t blk) {
      const int64_t j0 = blk * kColumnBlock;
      vk.column_sums(db + j0, dy + j0, rows, std::min(kColumnBlock, cols - j0), cols);
    });
  } else {
    kernels::parallel_for(blocks, parallel, [&](int64_t blk) {
      const int64_t j0 = blk * kColumnBlock, n = std::min(kColumnBlock, cols - j0);
      T* __restrict out = db + j0;
      for (int64_t r = 0; r < rows; ++r) {
        const T* __restrict row = dy + r * cols + j0;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) out[j] += row[j];
      }
    });
  }
}

template <class T>
void linear_run(T* y, const T* x, const T* w, const T* b, int64_t R, int64_t In, int64_t Out) {
  kernels::gemm_bias<T>(R, Out, In, x, ld(In), w, ld(In), b, y, ld(Out));  // [R, In] @ [Out, In]^T + b
}

// Forward: y = x w^T + b. Local derivatives: dx = dy w, dw = dy^T x (summed over all rows),
// db = sum over rows of dy. dx and dw are written (beta = 0), db accumulates into a zeroed
// buffer; any may be null.
template <class T>
void linear_backward_run(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, int64_t R,
                         int64_t In, int64_t Out) {
  if (dx)  // [R, Out] @ [Out, In]
    kernels::gemm<T>(false, false, R, In, Out, T(1), dy, ld(Out), w, ld(In), T(0), dx, ld(In));
  if (dw)  // [R, Out]^T @ [R, In]
    kernels::gemm<T>(true, false, Out, In, R, T(1), dy, ld(Out), x, ld(In), T(0), dw, ld(In));
  if (db) column_sums(db, dy, R, Out);
}

void linear_run_bf16(float* y, const float* x, const float* w, const float* b, int64_t R, int64_t In, int64_t Out) {
  kernels::gemm_bf16_f32(false, true, R, Out, In, x, ld(In), w, ld(In), false, y, ld(Out), b);
}

void linear_backward_run_bf16(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                              int64_t R, int64_t In, int64_t Out) {
  if (dx) kernels::gemm_bf16_f32(false, false, R, In, Out, dy, ld(Out), w, ld(In), false, dx, ld(In));
  if (dw) kernels::gemm_bf16_f32(true, false, Out, In, R, dy, ld(Out), x, ld(In), false, dw, ld(In));
  if (db) column_sums(db, dy, R, Out);
}

template <class T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

struct LinearBackward : Node {
  Tensor x, w;  // contiguous
  int64_t R = 0, In = 0, Out = 0;
  bool bf16 = false;  // the forward's precision
  const char* name() const override { return "LinearBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    const Tensor dy = grad_as(g, x.dtype());
    Tensor dx, dw, db;
    if (inputs[0].requires_grad()) dx = gemm_output(x.shape(), x.dtype(), Out);  // [..., In]
    if (inputs[1].requires_grad()) dw = gemm_output(w.shape(), w.dtype(), R);    // [Out, In]
    if (inputs[2].defined() && inputs[2].requires_grad()) db = Tensor::zeros({Out}, x.dtype());
    if (bf16)
      linear_backward_run_bf16(ptr_or_null<float>(dx), ptr_or_null<float>(dw), ptr_or_null<float>(db),
                               dy.data<float>(), x.data<float>(), w.data<float>(), R, In, Out);
    else if (x.dtype() == DType::F32)
      linear_backward_run<float>(ptr_or_null<float>(dx), ptr_or_null<float>(dw),
                                 ptr_or_null<float>(db), dy.data<float>(), x.data<float>(),
                                 w.data<float>(), R, In, Out);
    else
      linear_backward_run<double>(ptr_or_null<double>(dx), ptr_or_null<double>(dw),
                                  ptr_or_null<double>(db), dy.data<double>(), x.data<double>(),
                                  w.data<double>(), R, In, Out);
    return {dx, dw, db};
  }
  void release() override {
    x = Tensor();
    w = Tensor();
  }
};

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_floating("matmul", a, "a");
  check_floating("matmul", b, "b");
  ATTN_CHECK(a.dtype() == b.dtype(), "matmul", "dtypes differ: a ", a.str(), ", b ", b.str());
  ATTN_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul", "needs rank >= 2, got a ", a.str(), ", b ",
             b.str());
  ATTN_CHECK(a.size(-1) == b.size(-2), "matmul", "inner dimensions differ: a ", a.str(), " @ b ",
             b.str());
  MatmulDims d;
  d.M = a.size(-2);
  d.K = a.size(-1);
  d.N = b.size(-1);
  d.batch = leading(a.shape(), 2);
  d.shared_b = b.dim() == 2;
  if (!d.shared_b) {
    const Shape ba(a.shape().begin(), a.shape().end() - 2);
    const Shape bb(b.shape().begin(), b.shape().end() - 2);
    ATTN_CHECK(ba == bb, "matmul", "batch dimensions differ: a ", a.str(), ", b ", b.str(),
               " (they must be equal, or b must be 2-D)");
  }
  const Tensor ac = a.contiguous();
  const Tensor bc = b.contiguous();
  Shape out_shape = a.shape();
  out_shape.back() = d.N;
  Tensor out = gemm_output(out_shape, a.dtype(), d.K);  // [..., M, N]
  const bool bf16 = bf16_products(a.dtype());
  if (bf16)
    matmul_run_bf16(d, out.data<float>(), ac.data<float>(), bc.data<float>());
  else if (a.dtype() == DType::F32)
    matmul_run<float>(d, out.data<float>(), ac.data<float>(), bc.data<float>());
  else
    matmul_run<double>(d, out.data<double>(), ac.data<double>(), bc.data<double>());
  if (needs_grad({&a, &b})) {
    auto node = std::make_shared<MatmulBackward>();
    node->a = ac.detach();
    node->b = bc.detach();
    node->dims = d;
    node->bf16 = bf16;
    attach_node(out, node, {a, b});
  }
  return out;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_floating("linear", x, "x");
  check_floating("linear", w, "w");
  const std::string b_str = b.defined() ? b.str() : std::string("undefined");
  ATTN_CHECK(x.dtype() == w.dtype() && (!b.defined() || b.dtype() == x.dtype()), "linear",
             "dtypes differ: x ", x.str(), ", w ", w.str(), ", b ", b_str);
  ATTN_CHECK(x.dim() >= 1, "linear", "x must have rank >= 1, got ", x.str());
  ATTN_CHECK(w.dim() == 2 && w.size(1) == x.size(-1), "linear", "w must be [Out, ", x.size(-1),
             "] for x ", x.str(), ", got w ", w.str());
  const int64_t In = x.size(-1), Out = w.size(0), R = leading(x.shape(), 1);
  ATTN_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == Out), "linear", "b must be [", Out,
             "] for w ", w.str(), ", got b ", b_str);
  const Tensor xc = x.contiguous();
  const Tensor wc = w.contiguous();
  const Tensor bc = b.defined() ? b.contiguous() : Tensor();
  Shape out_shape = x.shape();
  out_shape.back() = Out;
  // [..., Out]: the bias rows or the GEMM (beta = 0) write every element
  Tensor out = b.defined() ? Tensor::empty(out_shape, x.dtype()) : gemm_output(out_shape, x.dtype(), In);
  const bool bf16 = bf16_products(x.dtype());
  if (bf16)
    linear_run_bf16(out.data<float>(), xc.data<float>(), wc.data<float>(), ptr_or_null<float>(bc), R, In, Out);
  else if (x.dtype() == DType::F32)
    linear_run<float>(out.data<float>(), xc.data<float>(), wc.data<float>(), ptr_or_null<float>(bc),
                      R, In, Out);
  else
    linear_run<double>(out.data<double>(), xc.data<double>(), wc.data<double>(),
                       ptr_or_null<double>(bc), R, In, Out);
  if (needs_grad({&x, &w, &b})) {
    auto node = std::make_shared<LinearBackward>();
    node->x = xc.detach();
    node->w = wc.detach();
    node->R = R;
    node->In = In;
    node->Out = Out;
    node->bf16 = bf16;
    attach_node(out, node, {x, w, b});
  }
  return out;
}

}  // namespace attn
