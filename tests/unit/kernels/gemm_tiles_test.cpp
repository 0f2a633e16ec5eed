// The register-tiled small-M kernels of kernels/gemm.cpp (gemm_tiles.inc) keep the bits of the
// one-weight-row AVX2 kernel they replaced: that kernel is kept below as the reference, and
// gemm_small_m (M <= 8) and gemm_invariant (M = 1..17 and the serving shapes up to 49) must give
// exactly its bits on the AVX2 and AVX-512 ISAs, for lengths with every kind of tail (K not a
// multiple of 8 or 16, K < 8), odd N, padded strides, alpha/beta (beta = 0 ignoring NaN in C)
// and threaded weights. Control: the scalar ISA, which sums in another order, gives other bits
// on the same cases, so the comparison can tell orders apart.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attn/core/rng.h"
#include "kernels/gemm.h"
#include "kernels/simd/isa.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace attn::kernels {
namespace {

// ---- the reference: the one-weight-row kernel as it was, unchanged ----------------------------

inline float ref_finish(float s, float alpha, float beta, float c) {
  const float v = alpha * s;
  return beta == 0.0f ? v : v + beta * c;
}

__attribute__((target("avx2,fma"))) float ref_hsum256(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <int R>
__attribute__((target("avx2,fma"))) inline void ref_rows_avx2(float* c, int64_t ldc, const float* a, int64_t lda,
                                                              const float* b, int64_t K, float alpha, float beta) {
  __m256 even[R], odd[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) even[r] = odd[r] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m256 w0 = _mm256_loadu_ps(b + k), w1 = _mm256_loadu_ps(b + k + 8);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      even[r] = _mm256_fmadd_ps(_mm256_loadu_ps(a + r * lda + k), w0, even[r]);
      odd[r] = _mm256_fmadd_ps(_mm256_loadu_ps(a + r * lda + k + 8), w1, odd[r]);
    }
  }
  if (k + 8 <= K) {
    const __m256 w0 = _mm256_loadu_ps(b + k);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) even[r] = _mm256_fmadd_ps(_mm256_loadu_ps(a + r * lda + k), w0, even[r]);
    k += 8;
  }
  for (int r = 0; r < R; ++r) {
    float s = ref_hsum256(_mm256_add_ps(even[r], odd[r]));
    for (int64_t j = k; j < K; ++j) s += a[r * lda + j] * b[j];
    c[r * ldc] = ref_finish(s, alpha, beta, c[r * ldc]);
  }
}

__attribute__((target("avx2,fma"))) void ref_row_avx2(float* c, int64_t ldc, const float* a, int64_t lda,
                                                      const float* b, int64_t M, int64_t K, float alpha,
                                                      float beta) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) ref_rows_avx2<4>(c + m * ldc, ldc, a + m * lda, lda, b, K, alpha, beta);
  switch (M - m) {
    case 3: ref_rows_avx2<3>(c + m * ldc, ldc, a + m * lda, lda, b, K, alpha, beta); break;
    case 2: ref_rows_avx2<2>(c + m * ldc, ldc, a + m * lda, lda, b, K, alpha, beta); break;
    case 1: ref_rows_avx2<1>(c + m * ldc, ldc, a + m * lda, lda, b, K, alpha, beta); break;
    default: break;
  }
}

// ---- cases ------------------------------------------------------------------------------------

std::vector<float> random_values(int64_t n, Rng& rng) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.uniform() * 2.0 - 1.0);
  return v;
}

// One product's operands: A [M, K] rows lda apart, B [N, K] rows ldb apart, C [M, N] rows ldc
// apart (padding included: it must stay untouched).
struct Case {
  int64_t M, N, K, lda, ldb, ldc;
  float alpha, beta;
  std::vector<float> A, B, C;
};

Case make_case(int64_t M, int64_t N, int64_t K, int64_t pad, float alpha, float beta, bool nan_c, Rng& rng) {
  Case c{M, N, K, K + pad, K + 2 * pad, N + pad, alpha, beta, {}, {}, {}};
  c.A = random_values(M * c.lda, rng);
  c.B = random_values(N * c.ldb, rng);
  c.C = random_values(M * c.ldc, rng);
  if (nan_c)
    for (float& x : c.C) x = std::numeric_limits<float>::quiet_NaN();
  return c;
}

// The reference's C: the old kernel once per weight row, over all M rows.
std::vector<float> reference(const Case& c) {
  std::vector<float> out(c.C);
  for (int64_t n = 0; n < c.N; ++n)
    ref_row_avx2(out.data() + n, c.ldc, c.A.data(), c.lda, c.B.data() + n * c.ldb, c.M, c.K, c.alpha, c.beta);
  return out;
}

enum class Path { SmallM, Invariant };

std::vector<float> run(const Case& c, Path path) {
  std::vector<float> out(c.C);
  if (path == Path::SmallM)
    gemm_small_m<float>(c.M, c.N, c.K, c.alpha, c.A.data(), c.lda, c.B.data(), c.ldb, c.beta, out.data(), c.ldc);
  else
    gemm_invariant<float>(c.M, c.N, c.K, c.alpha, c.A.data(), c.lda, c.B.data(), c.ldb, c.beta, out.data(), c.ldc);
  return out;
}

// Outputs (padding included) whose bits differ.
int64_t differing(const std::vector<float>& x, const std::vector<float>& y) {
  int64_t d = 0;
  for (size_t i = 0; i < x.size(); ++i) d += std::memcmp(&x[i], &y[i], sizeof(float)) != 0;
  return d;
}

// The vector ISAs this CPU runs (AVX2 takes the tiled 256-bit kernel, AVX-512 the 512-bit one).
std::vector<simd::Isa> vector_isas() {
  std::vector<simd::Isa> out;
  for (simd::Isa isa : simd::supported_isas())
    if (isa != simd::Isa::Scalar) out.push_back(isa);
  return out;
}

const int64_t kLengths[] = {1, 3, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33, 47, 100, 203};
const int64_t kWidths[] = {1, 2, 3, 4, 5, 7, 16, 17, 33};

TEST(GemmTiles, SmallMAndInvariantKeepTheOldKernelsBitsOnEveryTail) {
  if (vector_isas().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  Rng rng(21);
  int64_t compared = 0;
  for (int64_t M = 1; M <= 17; ++M)
    for (int64_t K : kLengths)
      for (int64_t N : kWidths) {
        // Alternate strides and alpha/beta over the cases (all of them meet every M).
        const int64_t pad = (M + K + N) % 3 == 0 ? 0 : (M + N) % 5 + 1;
        const int which = static_cast<int>((M * 7 + K + N) % 4);
        const float alpha = which == 1 ? 0.5f : which == 2 ? -2.0f : 1.0f;
        const float beta = which == 1 ? 1.0f : which == 2 ? 0.25f : 0.0f;
        const Case c = make_case(M, N, K, pad, alpha, beta, /*nan_c=*/which == 3, rng);
        const auto want = reference(c);
        for (simd::Isa isa : vector_isas()) {
          simd::IsaGuard guard(isa);
          if (M <= kSmallMMaxRows) {
            ASSERT_EQ(differing(run(c, Path::SmallM), want), 0)
                << "gemm_small_m " << simd::isa_name(isa) << " M " << M << " N " << N << " K " << K << " pad " << pad
                << " alpha " << alpha << " beta " << beta;
          }
          ASSERT_EQ(differing(run(c, Path::Invariant), want), 0)
              << "gemm_invariant " << simd::isa_name(isa) << " M " << M << " N " << N << " K " << K << " pad " << pad
              << " alpha " << alpha << " beta " << beta;
          ++compared;
        }
      }
  RecordProperty("cases_compared", static_cast<int>(compared));
}

TEST(GemmTiles, ThreadedAndServingShapesKeepTheOldKernelsBits) {
  if (vector_isas().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  Rng rng(22);
  // [N, K] weights: threaded with odd tails, and the base model's x W^T (in-projection, FFN
  // up, FFN down, the output projection).
  const int64_t shapes[][2] = {{300, 515}, {1536, 512}, {2048, 512}, {512, 2048}, {512, 512}};
  for (const auto& s : shapes)
    for (int64_t M : {1, 2, 3, 4, 5, 8, 9, 16, 25, 49}) {  // 25, 49: more than one chunk of rows
      const Case c = make_case(M, s[0], s[1], M % 2, 1.0f, M % 3 == 0 ? 1.0f : 0.0f, false, rng);
      const auto want = reference(c);
      for (simd::Isa isa : vector_isas()) {
        simd::IsaGuard guard(isa);
        if (M <= kSmallMMaxRows) {
          ASSERT_EQ(differing(run(c, Path::SmallM), want), 0)
              << "gemm_small_m " << simd::isa_name(isa) << " M " << M << " N " << s[0] << " K " << s[1];
        }
        ASSERT_EQ(differing(run(c, Path::Invariant), want), 0)
            << "gemm_invariant " << simd::isa_name(isa) << " M " << M << " N " << s[0] << " K " << s[1];
      }
    }
}

// Control: the same comparison tells another summation order apart (the scalar kernel's four
// interleaved sums): it must flag outputs of these cases, or the tests above prove nothing.
TEST(GemmTiles, ControlAnotherSummationOrderGivesOtherBits) {
  Rng rng(21);
  simd::IsaGuard guard(simd::Isa::Scalar);
  int64_t flagged = 0, cases = 0;
  for (int64_t M : {1, 4, 9})
    for (int64_t K : {17, 100, 203}) {
      const Case c = make_case(M, 33, K, 1, 1.0f, 0.0f, false, rng);
      flagged += differing(run(c, Path::SmallM), reference(c)) > 0;
      ++cases;
    }
  EXPECT_EQ(flagged, cases) << "the scalar order gave the reference's bits on some case";
}

}  // namespace
}  // namespace attn::kernels

#endif  // __x86_64__
