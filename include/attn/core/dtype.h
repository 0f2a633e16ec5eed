// attn/core/dtype.h — element types.
// F32 is the working type, F64 exists for gradient checks and reference comparisons,
// I64 carries token ids and Bool carries masks (PyTorch's convention: true = masked out).
// I8 and BF16 hold reduced-precision weights for inference (ops/quantize.h): int8 values
// with a float scale per row, and bfloat16, stored as its 16 raw bits (uint16_t: the top
// half of a float32). Neither takes part in arithmetic ops or autograd; they are stored,
// loaded, viewed and copied. bf16_from_float / float_from_bf16 below are the conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace attn {

enum class DType : uint8_t { F32, F64, I64, Bool, I8, BF16 };

// Bytes per element.
size_t dtype_size(DType dtype);
// "f32", "f64", "i64", "bool", "i8", "bf16".
const char* dtype_name(DType dtype);
// True for F32 and F64.
inline bool is_floating(DType d) { return d == DType::F32 || d == DType::F64; }

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::Bool; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::I8; };
template <> struct DTypeOf<uint16_t> { static constexpr DType value = DType::BF16; };  // raw bits
template <class T> inline constexpr DType dtype_of = DTypeOf<T>::value;


// ---- bfloat16 ------------------------------------------------------------------------------
// The conversion of vcvtneps2bf16 (AVX-512 BF16), which every path reproduces bit for bit
// (kernels/quantized_gemm.h): round to nearest, ties to even, on the float's top 16 bits;
// a zero or subnormal float becomes a zero of the same sign (the instruction's DAZ, so no
// bf16 we make is subnormal); +-Inf stays +-Inf; a finite value that rounds past the largest
// bf16 becomes +-Inf; NaN keeps its sign and top payload bits and is made quiet (bit 6 of the
// bf16 set), so a NaN never turns into Inf. (PyTorch differs on two points: it keeps
// subnormals and maps every NaN to 0x7FC0.)
inline uint16_t bf16_from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7F800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);  // zero, subnormal
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
// Exact: the bf16 bits become the float's top half.
inline float float_from_bf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace attn
