// ops/quantize.cpp — see attn/ops/quantize.h: int8 and bf16 weights, the checks on them, and
// the forward-only products over kernels/quantized_gemm.h.
#include "attn/ops/quantize.h"

#include <cmath>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/ops/ops.h"
#include "kernels/quantized_gemm.h"

namespace attn {

namespace {

void check_no_grad(const char* op, std::initializer_list<const Tensor*> inputs) {
  ATTN_CHECK(!needs_grad(inputs), op,
             "quantized weights are for inference and record no gradients: run under NoGradGuard "
             "(a model with int8 or bf16 weights cannot be trained)");
}

}  // namespace

const char* quantization_name(Quantization q) {
  switch (q) {
    case Quantization::None: return "none";
    case Quantization::Int8: return "int8";
    case Quantization::BF16: return "bf16";
  }
  return "?";
}

Quantization parse_quantization(std::string_view name) {
  if (name == "none") return Quantization::None;
  if (name == "int8") return Quantization::Int8;
  if (name == "bf16") return Quantization::BF16;
  fail("quantize", "unknown quantization '", std::string(name), "' (expected int8 or bf16)");
}

DType quantized_dtype(Quantization q) {
  switch (q) {
    case Quantization::Int8: return DType::I8;
    case Quantization::BF16: return DType::BF16;
    case Quantization::None: break;
  }
  return DType::F32;
}

QuantizedWeight quantize_weight(const Tensor& w_in, Quantization q, const std::string& what) {
  ATTN_CHECK(w_in.defined() && w_in.dim() == 2 && w_in.dtype() == DType::F32, "quantize",
             "'", what, "' must be an f32 matrix, got ", w_in.defined() ? w_in.str() : "undefined");
  ATTN_CHECK(q != Quantization::None, "quantize", "no quantization given for '", what, "'");
  const Tensor w = w_in.contiguous();
  const int64_t R = w.size(0), C = w.size(1);
  const float* p = w.data<float>();
  for (int64_t i = 0; i < R * C; ++i)
    ATTN_CHECK(std::isfinite(p[i]), "quantize", "'", what, "' holds ", p[i], " at row ", i / C, ", column ", i % C,
               ": only finite weights can be quantized");
  QuantizedWeight out;
  if (q == Quantization::Int8) {
    out.weight = Tensor::empty({R, C}, DType::I8);
    out.scale = Tensor::empty({R}, DType::F32);
    kernels::quantize_rows_s8(out.weight.data<int8_t>(), out.scale.data<float>(), p, R, C, C);
  } else {
    out.weight = Tensor::empty({R, C}, DType::BF16);
    kernels::f32_to_bf16(out.weight.data<uint16_t>(), p, R * C);
  }
  return out;
}

void check_quantized_pair(const Tensor& w, const Tensor& scale, Quantization q, const std::string& what) {
  ATTN_CHECK(q != Quantization::None, "quantize", "'", what, "' is not quantized");
  const DType want = quantized_dtype(q);
  ATTN_CHECK(w.defined() && w.dim() == 2 && w.dtype() == want, "quantize", "'", what, "' must be a ",
             dtype_name(want), " matrix for ", quantization_name(q), ", got ", w.defined() ? w.str() : "undefined");
  if (q == Quantization::Int8) {
    ATTN_CHECK(scale.defined() && scale.dtype() == DType::F32 && scale.dim() == 1 && scale.size(0) == w.size(0),
               "quantize", "the scales of '", what, "' must be f32 [", w.size(0), "], got ",
               scale.defined() ? scale.str() : "undefined");
  } else {
    ATTN_CHECK(!scale.defined(), "quantize", "'", what, "' is bf16 and takes no scales");
  }
}

void validate_quantized_values(const Tensor& w, const Tensor& scale, const std::string& what) {
  ATTN_CHECK(w.defined() && w.is_contiguous(), "quantize", "'", what, "' must be contiguous");
  if (w.dtype() == DType::I8) {
    const int8_t* q = w.data<int8_t>();
    for (int64_t i = 0; i < w.numel(); ++i)
      ATTN_CHECK(q[i] != -128, "quantize", "'", what, "' holds -128 at flat position ", i,
                 ": int8 weights must lie in [-127, 127] (symmetric quantization)");
    const Tensor s = scale.contiguous();
    const float* ps = s.data<float>();
    for (int64_t r = 0; r < s.numel(); ++r)
      ATTN_CHECK(std::isfinite(ps[r]) && ps[r] >= 0.0f, "quantize", "the scale of row ", r, " of '", what, "' is ",
                 ps[r], ": scales must be finite and >= 0");
  } else if (w.dtype() == DType::BF16) {
    uint16_t* b = w.data<uint16_t>();
    for (int64_t i = 0; i < w.numel(); ++i) {
      const bool non_finite = (b[i] & 0x7F80u) == 0x7F80u;
      ATTN_CHECK(!non_finite, "quantize", "'", what, "' holds ", float_from_bf16(b[i]), " at flat position ", i,
                 ": weights must be finite");
    }
    kernels::bf16_flush_subnormals(b, w.numel());
  } else {
    fail("quantize", "'", what, "' is ", w.str(), ", not an i8 or bf16 weight");
  }
}

Tensor dequantize_weight(const Tensor& w_in, const Tensor& scale_in) {
  ATTN_CHECK(w_in.defined() && w_in.dim() == 2, "dequantize", "expected a quantized matrix, got ",
             w_in.defined() ? w_in.str() : "undefined");
  const Tensor w = w_in.contiguous();
  const int64_t R = w.size(0), C = w.size(1);
  Tensor out = Tensor::empty({R, C}, DType::F32);
  float* o = out.data<float>();
  if (w.dtype() == DType::I8) {
    check_quantized_pair(w, scale_in, Quantization::Int8, "dequantize");
    const Tensor s = scale_in.contiguous();
    const int8_t* q = w.data<int8_t>();
    const float* ps = s.data<float>();
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) o[r * C + c] = ps[r] * static_cast<float>(q[r * C + c]);
  } else {
    check_quantized_pair(w, scale_in, Quantization::BF16, "dequantize");
    kernels::bf16_to_f32(o, w.data<uint16_t>(), R * C);
  }
  return out;
}

namespace {

// The checks of a quantized product's weight (with its scales, in the quantization its dtype
// names), its optional f32 bias [Out], and, when x is given, its f32 input [..., In].
void check_product(const char* op, const Tensor* x, const Tensor& w, const Tensor& scale, const Tensor& b) {
  ATTN_CHECK(w.defined() && (!x || x->defined()), op, "undefined input tensor");
  check_quantized_pair(w, scale, w.dtype() == DType::I8 ? Quantization::Int8 : Quantization::BF16, "weight");
  const int64_t Out = w.size(0), In = w.size(1);
  ATTN_CHECK(In > 0, op, "weight ", w.str(), " has no columns");
  ATTN_CHECK(!x || (x->dtype() == DType::F32 && x->dim() >= 1 && x->size(-1) == In), op, "expected f32 input [..., ",
             In, "] for weight ", w.str(), ", got ", x ? x->str() : "");
  ATTN_CHECK(!b.defined() || (b.dtype() == DType::F32 && b.dim() == 1 && b.size(0) == Out), op, "bias must be f32 [",
             Out, "], got ", b.defined() ? b.str() : "");
}

Tensor quantized_linear_impl(const char* op, const Tensor& x_in, const Tensor& w_in, const Tensor& scale_in,
                             const Tensor& b_in, kernels::Epilogue epilogue) {
  check_product(op, &x_in, w_in, scale_in, b_in);
  const Quantization q = w_in.dtype() == DType::I8 ? Quantization::Int8 : Quantization::BF16;
  const int64_t Out = w_in.size(0), In = w_in.size(1);
  check_no_grad(op, {&x_in, &b_in});
  const Tensor x = x_in.contiguous(), w = w_in.contiguous();
  const Tensor b = b_in.defined() ? b_in.contiguous() : Tensor();
  Shape out_shape = x.shape();
  out_shape.back() = Out;
  Tensor y = Tensor::empty(out_shape, DType::F32);
  const int64_t M = x.numel() / In;
  const float* bias = b.defined() ? b.data<float>() : nullptr;
  if (q == Quantization::Int8) {
    const Tensor s = scale_in.contiguous();
    kernels::gemm_s8(M, Out, In, x.data<float>(), In, w.data<int8_t>(), s.data<float>(), bias, y.data<float>(), Out,
                     epilogue);
  } else {
    kernels::gemm_bf16(M, Out, In, x.data<float>(), In, w.data<uint16_t>(), bias, y.data<float>(), Out, epilogue);
  }
  return y;
}

}  // namespace

Tensor quantized_linear(const Tensor& x, const Tensor& w, const Tensor& scale, const Tensor& b) {
  return quantized_linear_impl("quantized_linear", x, w, scale, b, kernels::Epilogue::None);
}

Tensor quantized_linear_relu(const Tensor& x, const Tensor& w, const Tensor& scale, const Tensor& b) {
  return quantized_linear_impl("quantized_linear_relu", x, w, scale, b, kernels::Epilogue::ReLU);
}

Tensor quantized_feed_forward(const Tensor& x_in, const Tensor& w1, const Tensor& s1, const Tensor& b1,
                              const Tensor& w2, const Tensor& s2, const Tensor& b2) {
  const char* op = "quantized_feed_forward";
  ATTN_CHECK(w1.defined() && w2.defined() && w1.dim() == 2 && w2.dim() == 2 && w2.size(1) == w1.size(0), op,
             "the second weight must be [Out, F] for a first weight [F, In], got ", w1.defined() ? w1.str() : "undefined",
             " and ", w2.defined() ? w2.str() : "undefined");
  if (w1.dtype() != DType::BF16 || w2.dtype() != DType::BF16)
    return quantized_linear(quantized_linear_relu(x_in, w1, s1, b1), w2, s2, b2);
  // Both bf16: the hidden rows go from the first product to the second as bf16 (the rounding
  // the second product would apply to their floats), never as float32.
  check_product(op, &x_in, w1, s1, b1);
  check_product(op, nullptr, w2, s2, b2);  // its input, the hidden rows, is [..., F] by the check above
  const int64_t F = w1.size(0), In = w1.size(1), Out = w2.size(0);
  check_no_grad(op, {&x_in, &b1, &b2});
  const Tensor x = x_in.contiguous(), v1 = w1.contiguous(), v2 = w2.contiguous();
  const Tensor c1 = b1.defined() ? b1.contiguous() : Tensor(), c2 = b2.defined() ? b2.contiguous() : Tensor();
  const int64_t M = x.numel() / In, ldh = kernels::bf16_row_pitch(F);
  Tensor hidden = Tensor::empty({M, ldh}, DType::BF16);  // [M, F] and zeros to the row stride
  Shape out_shape = x.shape();
  out_shape.back() = Out;
  Tensor y = Tensor::empty(out_shape, DType::F32);
  kernels::gemm_bf16_output(M, F, In, x.data<float>(), In, v1.data<uint16_t>(), c1.defined() ? c1.data<float>() : nullptr,
                            hidden.data<uint16_t>(), ldh, kernels::Epilogue::ReLU);
  kernels::gemm_bf16_input(M, Out, F, hidden.data<uint16_t>(), ldh, v2.data<uint16_t>(),
                           c2.defined() ? c2.data<float>() : nullptr, y.data<float>(), Out);
  return y;
}

Tensor quantized_embedding(const Tensor& w_in, const Tensor& scale_in, const Tensor& ids_in) {
  const char* op = "quantized_embedding";
  ATTN_CHECK(w_in.defined() && ids_in.defined(), op, "undefined input tensor");
  const Quantization q = w_in.dtype() == DType::I8 ? Quantization::Int8 : Quantization::BF16;
  check_quantized_pair(w_in, scale_in, q, "weight");
  ATTN_CHECK(ids_in.dtype() == DType::I64, op, "ids must be i64, got ", ids_in.str());
  const Tensor w = w_in.contiguous(), ids = ids_in.contiguous();
  const int64_t V = w.size(0), D = w.size(1), N = ids.numel();
  const int64_t* pid = ids.data<int64_t>();
  for (int64_t n = 0; n < N; ++n)
    ATTN_CHECK(pid[n] >= 0 && pid[n] < V, op, "id ", pid[n], " at flat position ", n, " of ids ", ids.str(),
               " is outside [0, ", V, ") for weight ", w.str());
  Shape out_shape = ids.shape();
  out_shape.push_back(D);
  Tensor out = Tensor::empty(out_shape, DType::F32);
  float* o = out.data<float>();
  if (q == Quantization::Int8) {
    const Tensor s = scale_in.contiguous();
    const int8_t* pq = w.data<int8_t>();
    const float* ps = s.data<float>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D; ++d) o[n * D + d] = ps[pid[n]] * static_cast<float>(pq[pid[n] * D + d]);
  } else {
    const uint16_t* pb = w.data<uint16_t>();
    for (int64_t n = 0; n < N; ++n) kernels::bf16_to_f32(o + n * D, pb + pid[n] * D, D);
  }
  return out;
}

Tensor linear_any(const Tensor& x, const Tensor& w, const Tensor& scale, const Tensor& b) {
  if (w.defined() && is_floating(w.dtype())) {
    ATTN_CHECK(!scale.defined(), "linear", "a floating weight takes no scales");
    return linear(x, w, b);
  }
  return quantized_linear(x, w, scale, b);
}

Tensor embedding_any(const Tensor& w, const Tensor& scale, const Tensor& ids) {
  if (w.defined() && is_floating(w.dtype())) {
    ATTN_CHECK(!scale.defined(), "embedding", "a floating weight takes no scales");
    return embedding(w, ids);
  }
  return quantized_embedding(w, scale, ids);
}

}  // namespace attn
