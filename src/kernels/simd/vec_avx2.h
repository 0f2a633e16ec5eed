// kernels/simd/vec_avx2.h — VecF<Isa::Avx2>: eight floats in a __m256, with FMA.
// Included by vec.h only in translation units compiled with -mavx2 -mfma (the AVX2 build of
// vector_kernels.cpp); nothing else may see these intrinsics. Tails use maskload/maskstore,
// which never touch memory in masked-off lanes.
#pragma once

#include <immintrin.h>

namespace attn::kernels::simd {

template <>
struct VecF<Isa::Avx2> {
  using reg = __m256;
  using ireg = __m256i;
  using mask = __m256;  // all-ones lanes where true
  static constexpr int64_t width = 8;

  // Lanes [0, k) set: compare the lane indices against k.
  static __m256i lanes_below(int64_t k) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(k)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }

  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static reg load_partial(const float* p, int64_t k, float fill) {
    const __m256i m = lanes_below(k);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static void store_partial(float* p, reg v, int64_t k) { _mm256_maskstore_ps(p, lanes_below(k), v); }
  static reg set1(float v) { return _mm256_set1_ps(v); }
  static reg zero() { return _mm256_setzero_ps(); }

  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm256_div_ps(a, b); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg sqrt(reg a) { return _mm256_sqrt_ps(a); }
  static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
  static reg min(reg a, reg b) { return _mm256_min_ps(a, b); }

  static mask lt(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static mask gt(reg a, reg b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static reg select(mask m, reg if_true, reg if_false) { return _mm256_blendv_ps(if_false, if_true, m); }

  static mask nonzero_u8(const uint8_t* p) {
    const __m256i w = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(w, _mm256_setzero_si256()));
  }

  static float reduce_add(reg v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(reg v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }

  static ireg as_int(reg v) { return _mm256_castps_si256(v); }
  static reg as_float(ireg v) { return _mm256_castsi256_ps(v); }
  static ireg add_i(ireg a, ireg b) { return _mm256_add_epi32(a, b); }
  static ireg sub_i(ireg a, ireg b) { return _mm256_sub_epi32(a, b); }
  static ireg set1_i(int32_t v) { return _mm256_set1_epi32(v); }
  static ireg shl_i(ireg a, int s) { return _mm256_slli_epi32(a, s); }
  static ireg sra_i(ireg a, int s) { return _mm256_srai_epi32(a, s); }
};

}  // namespace attn::kernels::simd
