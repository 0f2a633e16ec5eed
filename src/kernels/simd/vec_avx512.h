// kernels/simd/vec_avx512.h — VecF<Isa::Avx512>: sixteen floats in a __m512 (AVX-512F only,
// no DQ/BW/VL), with opmask registers for comparisons and tails.
// Included by vec.h only in translation units compiled with -mavx512f (the AVX-512 build of
// vector_kernels.cpp); nothing else in the library is compiled with AVX-512 enabled, so the
// binary runs on CPUs without it.
#pragma once

#include <immintrin.h>

namespace attn::kernels::simd {

template <>
struct VecF<Isa::Avx512> {
  using reg = __m512;
  using ireg = __m512i;
  using mask = __mmask16;
  static constexpr int64_t width = 16;

  static __mmask16 lanes_below(int64_t k) { return static_cast<__mmask16>((1u << k) - 1u); }

  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static reg load_partial(const float* p, int64_t k, float fill) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), lanes_below(k), p);
  }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static void store_partial(float* p, reg v, int64_t k) { _mm512_mask_storeu_ps(p, lanes_below(k), v); }
  static reg set1(float v) { return _mm512_set1_ps(v); }
  static reg zero() { return _mm512_setzero_ps(); }

  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm512_div_ps(a, b); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg sqrt(reg a) { return _mm512_sqrt_ps(a); }
  static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  static reg min(reg a, reg b) { return _mm512_min_ps(a, b); }

  static mask lt(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static mask gt(reg a, reg b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static reg select(mask m, reg if_true, reg if_false) { return _mm512_mask_blend_ps(m, if_false, if_true); }

  static mask nonzero_u8(const uint8_t* p) {
    const __m512i w = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_test_epi32_mask(w, w);
  }

  // The two 256-bit halves (AVX-512F has no float 256-bit extract; go through doubles).
  static __m256 high_half(reg v) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  }
  static float reduce_add(reg v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), high_half(v));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(reg v) {
    const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v), high_half(v));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }

  static ireg as_int(reg v) { return _mm512_castps_si512(v); }
  static reg as_float(ireg v) { return _mm512_castsi512_ps(v); }
  static ireg add_i(ireg a, ireg b) { return _mm512_add_epi32(a, b); }
  static ireg sub_i(ireg a, ireg b) { return _mm512_sub_epi32(a, b); }
  static ireg set1_i(int32_t v) { return _mm512_set1_epi32(v); }
  static ireg shl_i(ireg a, int s) { return _mm512_slli_epi32(a, static_cast<unsigned>(s)); }
  static ireg sra_i(ireg a, int s) { return _mm512_srai_epi32(a, static_cast<unsigned>(s)); }
};

}  // namespace attn::kernels::simd
