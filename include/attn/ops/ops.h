// attn/ops/ops.h — the differentiable operations, one line of documentation each.
// Every op checks shapes and dtypes (errors name the op and the shapes), allocates its
// output, calls a kernel in src/kernels/, and in grad mode records a <Op>Backward node.
// Floating ops accept F32 and F64; all floating inputs of one call share one dtype.
// Shapes use PyTorch's order and letters: B batch, T/S lengths, D model, H heads, V vocab.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/core/rng.h"
#include "attn/core/tensor.h"

namespace attn {

// ---- views and copies ----------------------------------------------------------------
// The views are Tensor's own methods (core, src/core/view.cpp); these are their free spellings.
// reshape: same elements, new shape (one -1 allowed); a view when contiguous, else a copy.
inline Tensor reshape(const Tensor& x, const Shape& shape) { return x.reshape(shape); }
// transpose: swaps two dimensions (a strided view).
inline Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) { return x.transpose(d0, d1); }
// permute: reorders dimensions (a strided view).
inline Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) { return x.permute(dims); }
// slice: x[..., start:end, ...] along `dim` (a strided view); negative indices count from the end.
inline Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end) {
  return x.slice(dim, start, end);
}
// contiguous: x itself when already contiguous, else a row-major copy.
inline Tensor contiguous(const Tensor& x) { return x.contiguous(); }
// concat (src/ops/concat.cpp): joins tensors along `dim`; all other dimensions must agree.
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
// split: cuts x along `dim` into pieces of the given sizes (which must sum to x.size(dim)).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);

// ---- element-wise (src/ops/elementwise.cpp) -------------------------------------------
// add/sub/mul: NumPy broadcasting; the gradient is summed back to each input's shape.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
// scale: x * s for a constant s.
Tensor scale(const Tensor& x, double s);
// relu: max(x, 0); the gradient at 0 is 0 (PyTorch's choice).
Tensor relu(const Tensor& x);
// gelu: x * Phi(x) (exact, erf) or the tanh approximation (GPT-2's "gelu_new").
enum class GeluApprox { None, Tanh };
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::None);
// silu: x * sigmoid(x) (for SwiGLU).
Tensor silu(const Tensor& x);
// tanh_op: tanh(x).
Tensor tanh_op(const Tensor& x);

// ---- reductions (src/ops/reduce.cpp) --------------------------------------------------
// sum/mean of all elements: a rank-0 tensor.
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
// sum over one dimension.
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);

// ---- matrix products (src/ops/matmul.cpp; BLAS in src/kernels/gemm.cpp) ----------------
// float32 products take bf16 operands with float32 sums under PrecisionGuard(Precision::BF16)
// (attn/ops/precision.h), forward and backward.
// matmul: a [..., M, K] @ b [..., K, N] -> [..., M, N]. Batch dimensions must be equal,
// or b may be 2-D [K, N] and is then shared by every batch.
Tensor matmul(const Tensor& a, const Tensor& b);
// linear: x [..., In] @ w[Out, In]^T + b[Out] -> [..., Out] (b may be undefined), as nn.Linear.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);

// ---- normalisation and softmax (src/ops/softmax.cpp, layer_norm.cpp) --------------------
// softmax / log_softmax over the last dimension, max-subtracted. Rows that are all -inf
// give zeros (softmax) and -inf (log_softmax) with zero gradient, never NaN.
Tensor softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x);
// layer_norm over the last dimension: (x - mean) / sqrt(var + eps) * w + b, biased variance
// (nn.LayerNorm). w and b are [D]; either may be undefined (no affine part).
Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps);
// layer_norm(add(x, r), w, b, eps), the same bits; without a gradient to record and with x
// and r of one shape and dtype, in one pass per row that never writes the sum to memory (the
// post-norm sub-layer's "LayerNorm(x + Sublayer(x))" in inference); otherwise the two ops.
Tensor add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& w, const Tensor& b, double eps);
// rms_norm over the last dimension: x / sqrt(mean(x^2) + eps) * w (nn.RMSNorm).
Tensor rms_norm(const Tensor& x, const Tensor& w, double eps);

// ---- regularisation and lookup (src/ops/dropout.cpp, embedding.cpp) ---------------------
// dropout: zeroes each element with probability p and scales survivors by 1/(1-p),
// drawing the mask from rng in row-major order; identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training, Rng& rng);
// dropout_add: residual + dropout(x, p, training, rng) in one pass, the same mask draw and
// bits; residual and x share shape and dtype. add(residual, x) when !training or p == 0.
Tensor dropout_add(const Tensor& residual, const Tensor& x, double p, bool training, Rng& rng);
// relu_dropout: dropout(relu(x), p, training, rng) in one pass, the same mask draw and bits;
// relu(x) when !training or p == 0.
Tensor relu_dropout(const Tensor& x, double p, bool training, Rng& rng);
// embedding: weight [V, D] rows picked by ids (I64, any shape [...]) -> [..., D].
// Ids outside [0, V) are an error naming the id and its position.
Tensor embedding(const Tensor& weight, const Tensor& ids);

// ---- loss (src/ops/cross_entropy.cpp) ---------------------------------------------------
// cross_entropy: logits [N, V], targets I64 [N]; as torch.nn.CrossEntropyLoss with
// reduction='mean', ignore_index and label_smoothing:
//   loss_n = (1 - eps) * (-log p[n, t_n]) + eps / V * sum_v (-log p[n, v])
// averaged over the targets that are not ignore_index (0 when all are ignored).
// Targets outside [0, V) that are not ignore_index are an error.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     double label_smoothing = 0.0);

}  // namespace attn

#include "attn/ops/attention.h"
#include "attn/ops/batch_invariant.h"
#include "attn/ops/precision.h"
