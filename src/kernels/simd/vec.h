// kernels/simd/vec.h — a float vector type per ISA, after CTranslate2's cpu/vec.h: VecF<Isa>
// wraps one register (a float for Scalar, __m256 for AVX2, __m512 for AVX-512) behind the
// same static functions, so vector_kernels.cpp is written once and compiled per ISA.
// This file holds the portable Scalar version; vec_avx2.h and vec_avx512.h are included when
// the translation unit is compiled with those ISAs enabled. Scalar's fma is an unfused
// a * b + c. Not here: float64 vectors, integer kernels, anything with OpenMP.
#pragma once

#include <cstdint>

#include "kernels/simd/isa.h"

namespace attn::kernels::simd {

template <Isa I>
struct VecF;

template <>
struct VecF<Isa::Scalar> {
  using reg = float;    // one lane
  using ireg = int32_t;  // the lane's bits as an integer
  using mask = bool;
  static constexpr int64_t width = 1;

  static reg load(const float* p) { return *p; }
  // The first k lanes from p (k < width), `fill` in the others.
  static reg load_partial(const float* p, int64_t k, float fill) { return k > 0 ? *p : fill; }
  static void store(float* p, reg v) { *p = v; }
  static void store_partial(float* p, reg v, int64_t k) {
    if (k > 0) *p = v;
  }
  static reg set1(float v) { return v; }
  static reg zero() { return 0.0f; }

  static reg add(reg a, reg b) { return a + b; }
  static reg sub(reg a, reg b) { return a - b; }
  static reg mul(reg a, reg b) { return a * b; }
  static reg div(reg a, reg b) { return a / b; }
  static reg fma(reg a, reg b, reg c) { return a * b + c; }  // two roundings here
  static reg sqrt(reg a) { return __builtin_sqrtf(a); }
  // x86 semantics: the second operand is returned when either is NaN.
  static reg max(reg a, reg b) { return a > b ? a : b; }
  static reg min(reg a, reg b) { return a < b ? a : b; }

  // Ordered comparisons (false when either is NaN) and a lane-wise choice.
  static mask lt(reg a, reg b) { return a < b; }
  static mask gt(reg a, reg b) { return a > b; }
  static reg select(mask m, reg if_true, reg if_false) { return m ? if_true : if_false; }

  // Lanes whose byte at p (one per lane, 0 or 1) is non-zero; reads exactly `width` bytes.
  static mask nonzero_u8(const uint8_t* p) { return *p != 0; }

  static float reduce_add(reg v) { return v; }
  static float reduce_max(reg v) { return v; }

  // Bit casts and 32-bit integer arithmetic for exp's exponent tricks.
  static ireg as_int(reg v) { return __builtin_bit_cast(int32_t, v); }
  static reg as_float(ireg v) { return __builtin_bit_cast(float, v); }
  static ireg add_i(ireg a, ireg b) { return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b)); }
  static ireg sub_i(ireg a, ireg b) { return static_cast<int32_t>(static_cast<uint32_t>(a) - static_cast<uint32_t>(b)); }
  static ireg set1_i(int32_t v) { return v; }
  static ireg shl_i(ireg a, int s) { return static_cast<int32_t>(static_cast<uint32_t>(a) << s); }
  static ireg sra_i(ireg a, int s) { return a >> s; }
};

}  // namespace attn::kernels::simd

#if defined(__AVX2__) && defined(__FMA__)
#include "kernels/simd/vec_avx2.h"
#endif
#if defined(__AVX512F__)
#include "kernels/simd/vec_avx512.h"
#endif
