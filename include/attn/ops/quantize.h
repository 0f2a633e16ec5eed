// attn/ops/quantize.h — reduced-precision weights for inference: int8 with a float scale per
// row (CTranslate2's scheme) or bfloat16, and the products that use them. A quantized weight is
// a pair of tensors: I8 [R, C] with F32 scales [R] (row r ~ scale[r] * q[r, :]), or BF16 [R, C]
// with no scale. The numerics (rounding, the order of the bf16 sums, which paths give the same
// bits) are those of kernels/quantized_gemm.h; the paths follow the active ISA (ATTN_ISA).
// None of these ops records gradients: they refuse inputs that require grad while grad mode
// is on (run inference under NoGradGuard). Training stays float32 (ops.h); not here: which
// layers are quantized (nn/quantize.h) or how they are stored (docs/checkpoint.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "attn/core/tensor.h"

namespace attn {

enum class Quantization : uint8_t { None, Int8, BF16 };

// "none", "int8", "bf16".
const char* quantization_name(Quantization q);
// The quantization a name denotes ("none", "int8", "bf16"); an attn::Error naming the
// choices for any other name.
Quantization parse_quantization(std::string_view name);
// The weight dtype of a quantization: I8, BF16 (F32 for None).
DType quantized_dtype(Quantization q);

// A weight in reduced precision: I8 [R, C] + F32 scale [R], or BF16 [R, C] + undefined scale.
struct QuantizedWeight {
  Tensor weight;
  Tensor scale;
};

// Quantizes an F32 matrix w [R, C] row by row (I8: amax / 127 scales, ties to even; BF16: round
// to nearest even, subnormals to zero). A NaN or Inf in w is an error naming `what`, the row
// and the column. The results do not require grad.
QuantizedWeight quantize_weight(const Tensor& w, Quantization q, const std::string& what);
// A weight pair's dtypes and shapes as `q` needs them: I8 [R, C] with F32 [R], or BF16 [R, C]
// with no scale; errors name `what`.
void check_quantized_pair(const Tensor& w, const Tensor& scale, Quantization q, const std::string& what);
// Checks a loaded weight's values, in place where the kernels need it: an I8 weight must lie
// in [-127, 127] and its scales be finite and >= 0; a BF16 weight's subnormals are flushed to
// zero (what vdpbf16ps reads). Errors name `what`.
void validate_quantized_values(const Tensor& w, const Tensor& scale, const std::string& what);
// The float32 matrix a quantized weight stands for: scale[r] * q[r, c], or the bf16 values.
Tensor dequantize_weight(const Tensor& w, const Tensor& scale);

// x [..., In] F32 -> [..., Out]: x W^T + b with W I8 [Out, In] and scale F32 [Out], or W BF16
// [Out, In] (scale undefined); b F32 [Out] or undefined. x's rows are quantized per row
// (int8) or rounded to bf16 at each call, so a row's result does not depend on the others.
Tensor quantized_linear(const Tensor& x, const Tensor& w, const Tensor& scale, const Tensor& b);
// relu(quantized_linear(x, w, scale, b)) with the ReLU applied as the product stores its
// outputs (one pass less over the result; the same bits as relu() after it).
Tensor quantized_linear_relu(const Tensor& x, const Tensor& w, const Tensor& scale, const Tensor& b);
// quantized_linear(quantized_linear_relu(x, w1, s1, b1), w2, s2, b2), the same bits: a
// feed-forward block's two products (w1 [F, In], w2 [Out, F], each I8 or BF16). When both are
// BF16 the hidden rows pass from one product to the other in bf16, never as float32 (the
// rounding the second product applies anyway).
Tensor quantized_feed_forward(const Tensor& x, const Tensor& w1, const Tensor& s1, const Tensor& b1,
                              const Tensor& w2, const Tensor& s2, const Tensor& b2);
// Rows of a quantized table w [V, D] picked by I64 ids [...] -> F32 [..., D], dequantized
// (scale[id] * q[id, :] in float32, or the bf16 values). Ids outside [0, V) are an error.
Tensor quantized_embedding(const Tensor& w, const Tensor& scale, const Tensor& ids);
// x W^T + b for a weight of any kind: a floating w takes linear(x, w, b) (scale must be
// undefined), an I8 or BF16 w takes quantized_linear.
Tensor linear_any(const Tensor& x, const Tensor& w, const Tensor& scale, const Tensor& b);
// embedding(w, ids) for a floating w, quantized_embedding otherwise.
Tensor embedding_any(const Tensor& w, const Tensor& scale, const Tensor& ids);

}  // namespace attn
