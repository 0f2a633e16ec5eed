// attn/core/dtype.h — element types.
// F32 is the working type, F64 exists for gradient checks and reference comparisons,
// I64 carries token ids and Bool carries masks (PyTorch's convention: true = masked out).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace attn {

enum class DType : uint8_t { F32, F64, I64, Bool };

// Bytes per element.
size_t dtype_size(DType dtype);
// "f32", "f64", "i64", "bool".
const char* dtype_name(DType dtype);
// True for F32 and F64.
inline bool is_floating(DType d) { return d == DType::F32 || d == DType::F64; }

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::Bool; };
template <class T> inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace attn
