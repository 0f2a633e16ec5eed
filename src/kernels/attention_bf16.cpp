// kernels/attention_bf16.cpp — attention with bf16 products on AMX tiles (attention_bf16.h).
// One (batch row, head) slice per work item. Per slice, the keys and values are rounded to
// bf16 once and laid out as the tiles' B operands:
//   kp: S = Q K^T takes K^T in pairs of features: block (key block n of 16, feature chunk c of
//       32) is 16 rows (feature pair i) x 16 dwords (key), kp[(n Cd + c) 256 + 16 i + j] =
//       (k[16 n + j][32 c + 2 i], k[16 n + j][32 c + 2 i + 1]);
//   vp: O = P V takes V in pairs of keys: block (key chunk kc of 32, column block db of 16) is
//       16 rows (key pair i) x 16 dwords (column), (v[32 kc + 2 i][16 db + j],
//       v[32 kc + 2 i + 1][16 db + j]);
// keys past Tk and features past Dh or Dv are zeros. Then for each block of up to 32 queries:
// their bf16 rows (the A operand of S), S for every key (tiles of 16 x 16, summed over the
// feature chunks in order), the row-wise softmax in float32 (scale, mask, max, exp, the sum over
// keys in 16-lane chunks from key 0 and a fixed tree), the probabilities rounded to bf16 (the A
// operand of O), O over the key chunks in order, and out = O / l.
// Tiles: 0-3 sums (two 16-row blocks of queries x two blocks of 16 keys or columns), 4-5 A
// (the two query blocks), 6-7 B (the two key or column blocks); all 16 rows x 64 bytes.
#include "kernels/attention_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attn/core/dtype.h"  // bf16_from_float
#include "attn/core/error.h"
#include "kernels/parallel_for.h"
#include "kernels/quantized_gemm.h"  // bf16_path
#include "kernels/simd/vector_kernels.h"
#include "kernels/thread_scratch.h"
#include "kernels/transpose16.h"

namespace attn::kernels {

bool attention_bf16_path_supported(AttentionBf16Path path) {
  return path == AttentionBf16Path::Portable || quant_path_supported(QuantPath::Amx);
}

bool attention_bf16_available() { return bf16_path() == QuantPath::Amx; }

namespace {

// Without tiles: slice (b, h)'s rows, each score and each output a float32 sum in order (fused
// multiply-adds of exact bf16 products), the row-wise work as the tile path does it. row holds
// Tp floats (Tk rounded up to 16, the keys past Tk -inf), kb and vb the slice's bf16 keys and
// values, qb one query row.
void slice_forward_portable(float* out, float* lse, const float* q, const float* k, const float* v,
                            const AttentionMask<float>& mask, int64_t b, int64_t h, float scale, const AttentionDims& d,
                            const AttentionLayout& layout, int64_t Tp, float* row, float* kb, float* vb, float* qb,
                            float* acc, const simd::VectorKernels& vk) {
  const auto bf = [](float x) { return float_from_bf16(bf16_from_float(x)); };
  for (int64_t j = 0; j < d.Tk; ++j) {
    for (int64_t c = 0; c < d.Dh; ++c) kb[j * d.Dh + c] = bf(k[j * layout.k.row + c]);
    for (int64_t c = 0; c < d.Dv; ++c) vb[j * d.Dv + c] = bf(v[j * layout.v.row + c]);
  }
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < d.Tq; ++i) {
    for (int64_t c = 0; c < d.Dh; ++c) qb[c] = bf(q[i * layout.q.row + c]);
    for (int64_t j = 0; j < Tp; ++j) {
      if (j >= d.Tk) {
        row[j] = kNegInf;
        continue;
      }
      float s = 0.0f;
      for (int64_t c = 0; c < d.Dh; ++c) s = std::fma(qb[c], kb[j * d.Dh + c], s);
      row[j] = s * scale;
    }
    apply_attention_mask_row(row, mask, b, h, i, 0, d.Tk, d.Tq, d.Tk);
    const float m = vk.row_max(row, Tp, kNegInf);
    float* const o = out + i * layout.out.row;
    if (m == kNegInf) {  // every key masked
      std::fill(o, o + d.Dv, 0.0f);
      if (lse != nullptr) lse[i] = m;
      continue;
    }
    const float l = vk.exp_shifted_sum(row, row, m, Tp);
    std::fill(acc, acc + d.Dv, 0.0f);
    for (int64_t j = 0; j < d.Tk; ++j) {
      const float p = bf(row[j]);
      for (int64_t c = 0; c < d.Dv; ++c) acc[c] = std::fma(p, vb[j * d.Dv + c], acc[c]);
    }
    const float inv = 1.0f / l;
    for (int64_t c = 0; c < d.Dv; ++c) o[c] = acc[c] * inv;
    if (lse != nullptr) lse[i] = m + std::log(l);
  }
}

void attention_bf16_portable(float* out, float* lse, const float* q, const float* k, const float* v,
                             const AttentionMask<float>& mask, const AttentionDims& d, float scale,
                             const AttentionLayout& layout) {
  const int64_t Tp = std::max<int64_t>(16, (d.Tk + 15) / 16 * 16);
  const simd::VectorKernels& vk = simd::vector_kernels();
  const bool parallel = d.B * d.H * d.Tq * d.Tk * (d.Dh + d.Dv) >= (int64_t{1} << 16);
  parallel_ranges(d.B * d.H, parallel, [&](int64_t begin, int64_t end) {
    float* const row = thread_scratch<float, 14>(Tp);
    float* const kb = thread_scratch<float, 15>(d.Tk * d.Dh);
    float* const vb = thread_scratch<float, 16>(d.Tk * d.Dv);
    float* const qb = thread_scratch<float, 17>(d.Dh);
    float* const acc = thread_scratch<float, 18>(d.Dv);
    for (int64_t bh = begin; bh < end; ++bh) {
      const ForwardSlice<float> sl = forward_slice(bh, d, layout, out, q, k, v);
      slice_forward_portable(sl.out, lse != nullptr ? lse + bh * d.Tq : nullptr, sl.q, sl.k, sl.v, mask, sl.b, sl.h,
                             scale, d, layout, Tp, row, kb, vb, qb, acc, vk);
    }
  });
}

}  // namespace

#if defined(__x86_64__)

// GCC 12's AVX-512 headers self-initialise undefined registers, which -Wuninitialized flags.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define ATTN_AMX_ATTENTION __attribute__((target("avx512f,avx512bw,avx512bf16,avx2,fma,amx-tile,amx-bf16")))

namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

ATTN_AMX_ATTENTION void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  // GCC's ldtilecfg asm names only the first bytes of the 64 as its input: keep the stores.
  __asm__ volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

ATTN_AMX_ATTENTION void release_tiles() { _tile_release(); }

ATTN_AMX_ATTENTION inline __mmask16 live16(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
}

ATTN_AMX_ATTENTION inline __m512i as_words(__m512bh h) {
  __m512i w;
  std::memcpy(&w, &h, sizeof w);
  return w;
}

// The bf16 words of x[0, 32) (zeros from n on), in order.
ATTN_AMX_ATTENTION inline __m512i bf16_words32(const float* x, int64_t n) {
  const __m512 lo = _mm512_maskz_loadu_ps(live16(n), x), hi = _mm512_maskz_loadu_ps(live16(n - 16), x + 16);
  return as_words(_mm512_cvtne2ps_pbh(hi, lo));
}

// out[0, padded) = bf16(x[0, n)), zeros from n on (padded a multiple of 32).
ATTN_AMX_ATTENTION void bf16_row(uint16_t* out, const float* x, int64_t n, int64_t padded) {
  for (int64_t c = 0; c < padded; c += 32) _mm512_store_si512(out + c, bf16_words32(x + c, n - c));
}

// The dword pairs (a[j], b[j]) of 16 columns as bf16 (zeros where absent): a and b are two
// consecutive key rows at one column block, null for a key past Tk.
ATTN_AMX_ATTENTION inline __m512i bf16_pairs16(const float* a, const float* b, int64_t n) {
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                              6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512 va = a != nullptr ? _mm512_maskz_loadu_ps(live16(n), a) : _mm512_setzero_ps();
  const __m512 vb = b != nullptr ? _mm512_maskz_loadu_ps(live16(n), b) : _mm512_setzero_ps();
  return _mm512_permutexvar_epi16(interleave, as_words(_mm512_cvtne2ps_pbh(vb, va)));
}

struct Sizes {
  int64_t Tq, Tk, Dh, Dv, Tp, Dhp, Dvp;  // Tp, Dhp, Dvp: Tk, Dh, Dv rounded up to 32
  int64_t ldq, ldk, ldv, ldo;            // row strides of the slice's operands
};

// kp and vp of one slice (the layout above).
ATTN_AMX_ATTENTION void pack_keys_values(uint32_t* kp, uint32_t* vp, uint32_t* krow, const float* k, const float* v,
                                         const Sizes& z) {
  const int64_t Cd = z.Dhp / 32, Db = z.Dvp / 16;
  for (int64_t j = 0; j < z.Tp; ++j) {
    uint16_t* const row = reinterpret_cast<uint16_t*>(krow + j * (z.Dhp / 2));
    if (j < z.Tk)
      bf16_row(row, k + j * z.ldk, z.Dh, z.Dhp);
    else
      std::memset(row, 0, static_cast<size_t>(z.Dhp) * 2);
  }
  for (int64_t n = 0; n < z.Tp / 16; ++n)
    for (int64_t c = 0; c < Cd; ++c) {
      __m512 r[16];
      for (int j = 0; j < 16; ++j)
        r[j] = _mm512_castsi512_ps(_mm512_load_si512(krow + (16 * n + j) * (z.Dhp / 2) + 16 * c));
      transpose16_avx512(r);
      for (int i = 0; i < 16; ++i) _mm512_store_ps(reinterpret_cast<float*>(kp + ((n * Cd + c) * 16 + i) * 16), r[i]);
    }
  for (int64_t kc = 0; kc < z.Tp / 32; ++kc)
    for (int i = 0; i < 16; ++i) {
      const int64_t j0 = 32 * kc + 2 * i, j1 = j0 + 1;
      for (int64_t db = 0; db < Db; ++db) {
        const float* a = j0 < z.Tk ? v + j0 * z.ldv + 16 * db : nullptr;
        const float* b = j1 < z.Tk ? v + j1 * z.ldv + 16 * db : nullptr;
        _mm512_store_si512(vp + ((kc * Db + db) * 16 + i) * 16, bf16_pairs16(a, b, z.Dv - 16 * db));
      }
    }
}

// out [32 rows, 32 columns] (row stride ldo floats) = the sums over `chunks` chunks of A x B:
// A's chunk c is rows [16, or 32 with `two`] x 32 bf16 at a + 32 c (row stride lda elements),
// B's the two 16-column blocks b(c, 0) and b(c, 1) (16 pair rows x 16 dwords each). Each sum runs
// over the chunks in order from +0.
template <class BlockOf>
ATTN_AMX_ATTENTION inline void product_2x2(float* out, int64_t ldo, const uint16_t* a, int64_t lda, int64_t chunks,
                                           const BlockOf& b, bool two) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t c = 0; c < chunks; ++c) {
    _tile_loadd(4, a + 32 * c, lda * 2);
    _tile_loadd(6, b(c, 0), 64);
    _tile_loadd(7, b(c, 1), 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if (two) {
      _tile_loadd(5, a + 16 * lda + 32 * c, lda * 2);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, out, ldo * 4);
  _tile_stored(1, out + 16, ldo * 4);
  if (two) {
    _tile_stored(2, out + 16 * ldo, ldo * 4);
    _tile_stored(3, out + 16 * ldo + 16, ldo * 4);
  }
}

// S [32 rows, Tp] (row stride Tp) of the query rows q16 [32, Dhp] against kp; `two`: rows 16-31 too.
ATTN_AMX_ATTENTION void scores(float* s, const uint16_t* q16, const uint32_t* kp, const Sizes& z, bool two) {
  const int64_t Cd = z.Dhp / 32;
  for (int64_t kb = 0; kb < z.Tp / 32; ++kb)
    product_2x2(
        s + 32 * kb, z.Tp, q16, z.Dhp, Cd, [&](int64_t c, int j) { return kp + ((2 * kb + j) * Cd + c) * 256; }, two);
  __asm__ volatile("" ::: "memory");  // s is read after the tile stores
}

// O [32 rows, Dvp] (row stride Dvp) = P16 [32, Tp] V, over the key chunks in order.
ATTN_AMX_ATTENTION void weighted_values(float* o, const uint16_t* p16, const uint32_t* vp, const Sizes& z, bool two) {
  const int64_t Db = z.Dvp / 16;
  for (int64_t half = 0; half < z.Dvp / 32; ++half)
    product_2x2(
        o + 32 * half, z.Dvp, p16, z.Tp, z.Tp / 32,
        [&](int64_t kc, int j) { return vp + (kc * Db + 2 * half + j) * 256; }, two);
  __asm__ volatile("" ::: "memory");  // o is read after the tile stores
}

// One score row of query i (Tp entries, from the tiles) made its bf16 probabilities p16 [Tp];
// returns the row's max m and sum l (m = -inf when every key is masked: p16 is then zeros).
ATTN_AMX_ATTENTION void softmax_row(float* row, uint16_t* p16, float& m_out, float& l_out,
                                    const AttentionMask<float>& mask, int64_t b, int64_t h, int64_t i, float scale,
                                    const Sizes& z, const simd::VectorKernels& vk) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const __m512 sc = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(kNegInf);
  for (int64_t j = 0; j < z.Tp; j += 16)  // scaled; keys past Tk -inf
    _mm512_store_ps(row + j, _mm512_mask_mul_ps(ninf, live16(z.Tk - j), _mm512_load_ps(row + j), sc));
  apply_attention_mask_row(row, mask, b, h, i, 0, z.Tk, z.Tq, z.Tk);
  __m512 mx = ninf;
  for (int64_t j = 0; j < z.Tp; j += 16) mx = _mm512_max_ps(mx, _mm512_load_ps(row + j));
  const float m = _mm512_reduce_max_ps(mx);
  m_out = m;
  if (m == kNegInf) {
    std::memset(p16, 0, static_cast<size_t>(z.Tp) * 2);
    l_out = 0.0f;
    return;
  }
  // e = exp(s - m) and their sum, one 16-lane accumulator over the keys in order from key 0 (a
  // fixed tree at the end): masked keys and keys past Tk give exp(-inf) = 0 and add nothing.
  l_out = vk.exp_shifted_sum(row, row, m, z.Tp);
  for (int64_t j = 0; j < z.Tp; j += 32) _mm512_store_si512(p16 + j, bf16_words32(row + j, 32));
}

struct Scratch {
  uint32_t *kp, *vp, *krow;
  uint16_t *q16, *p16;
  float *s, *o;
};

ATTN_AMX_ATTENTION void slice_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                      const AttentionMask<float>& mask, int64_t b, int64_t h, float scale,
                                      const Sizes& z, const Scratch& w, const simd::VectorKernels& vk) {
  pack_keys_values(w.kp, w.vp, w.krow, k, v, z);
  float m[32], l[32];
  for (int64_t i0 = 0; i0 < z.Tq; i0 += 32) {
    const int64_t rows = std::min<int64_t>(32, z.Tq - i0);
    const bool two = rows > 16;
    for (int64_t r = 0; r < (two ? 32 : 16); ++r) {
      uint16_t* const qrow = w.q16 + r * z.Dhp;
      if (r < rows)
        bf16_row(qrow, q + (i0 + r) * z.ldq, z.Dh, z.Dhp);
      else
        std::memset(qrow, 0, static_cast<size_t>(z.Dhp) * 2);
    }
    scores(w.s, w.q16, w.kp, z, two);
    for (int64_t r = 0; r < (two ? 32 : 16); ++r) {
      if (r < rows)
        softmax_row(w.s + r * z.Tp, w.p16 + r * z.Tp, m[r], l[r], mask, b, h, i0 + r, scale, z, vk);
      else
        std::memset(w.p16 + r * z.Tp, 0, static_cast<size_t>(z.Tp) * 2);
    }
    weighted_values(w.o, w.p16, w.vp, z, two);
    for (int64_t r = 0; r < rows; ++r) {
      float* const orow = out + (i0 + r) * z.ldo;
      const bool none = m[r] == -std::numeric_limits<float>::infinity();
      const __m512 inv = _mm512_set1_ps(none ? 0.0f : 1.0f / l[r]);
      for (int64_t c = 0; c < z.Dv; c += 16)
        _mm512_mask_storeu_ps(orow + c, live16(z.Dv - c), _mm512_mul_ps(_mm512_load_ps(w.o + r * z.Dvp + c), inv));
      if (lse != nullptr) lse[i0 + r] = none ? m[r] : m[r] + std::log(l[r]);
    }
  }
}

void attention_bf16_tiles(float* out, float* lse, const float* q, const float* k, const float* v,
                          const AttentionMask<float>& mask, const AttentionDims& d, float scale,
                          const AttentionLayout& layout) {
  const auto up32 = [](int64_t n) { return std::max<int64_t>(32, (n + 31) / 32 * 32); };
  const Sizes z{d.Tq,       d.Tk,         d.Dh,         d.Dv,         up32(d.Tk),    up32(d.Dh),
                up32(d.Dv), layout.q.row, layout.k.row, layout.v.row, layout.out.row};
  const simd::VectorKernels& vk = simd::vector_kernels();
  const bool parallel = d.B * d.H * d.Tq * d.Tk * (d.Dh + d.Dv) >= (int64_t{1} << 16);
  parallel_ranges(d.B * d.H, parallel, [&](int64_t begin, int64_t end) {
    Scratch w;
    w.kp = thread_scratch<uint32_t, 11>(z.Tp * z.Dhp / 2);
    w.vp = thread_scratch<uint32_t, 12>(z.Tp * z.Dvp / 2);
    w.krow = thread_scratch<uint32_t, 13>(z.Tp * z.Dhp / 2);
    w.q16 = thread_scratch<uint16_t, 11>(32 * z.Dhp);
    w.p16 = thread_scratch<uint16_t, 12>(32 * z.Tp);
    w.s = thread_scratch<float, 11>(32 * z.Tp);
    w.o = thread_scratch<float, 12>(32 * z.Dvp);
    configure_tiles();
    for (int64_t bh = begin; bh < end; ++bh) {
      const ForwardSlice<float> sl = forward_slice(bh, d, layout, out, q, k, v);
      slice_forward(sl.out, lse != nullptr ? lse + bh * d.Tq : nullptr, sl.q, sl.k, sl.v, mask, sl.b, sl.h, scale, z, w,
                    vk);
    }
    release_tiles();
  });
}

}  // namespace

#else  // not x86-64: no tiles (attention_bf16_path_supported says so)

namespace {
void attention_bf16_tiles(float*, float*, const float*, const float*, const float*, const AttentionMask<float>&,
                          const AttentionDims&, float, const AttentionLayout&) {
  fail("attention_bf16", "AMX tiles exist on x86-64 only");
}
}  // namespace

#endif

void attention_bf16_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                            const AttentionMask<float>& mask, const AttentionDims& d, float scale,
                            const AttentionLayout& layout, AttentionBf16Path path) {
  ATTN_CHECK(attention_bf16_path_supported(path), "attention_bf16",
             "this CPU or OS has no AMX-BF16 tiles for the tiles path");
  if (d.B * d.H * d.Tq == 0) return;
  if (path == AttentionBf16Path::Tiles)
    attention_bf16_tiles(out, lse, q, k, v, mask, d, scale, layout);
  else
    attention_bf16_portable(out, lse, q, k, v, mask, d, scale, layout);
}

void attention_bf16_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                            const AttentionMask<float>& mask, const AttentionDims& d, float scale,
                            const AttentionLayout& layout) {
  attention_bf16_forward(
      out, lse, q, k, v, mask, d, scale, layout,
      attention_bf16_path_supported(AttentionBf16Path::Tiles) ? AttentionBf16Path::Tiles : AttentionBf16Path::Portable);
}

}  // namespace attn::kernels
