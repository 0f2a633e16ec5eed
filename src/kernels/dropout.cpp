// kernels/dropout.cpp — inverted dropout with a mask drawn serially from attn::Rng (§5.4);
// serial on purpose, so the mask does not depend on the thread count. The draw steps
// xoshiro256** on a local copy of the generator's state and compares integers instead of
// calling Rng::uniform per element (the same mask, bit for bit, several times faster); the
// masking runs the active ISA's vector kernel (float), threaded from kParallelMin elements.
// Not done here: a counter-based (Philox) generator that would allow a parallel draw.
#include "kernels/dropout.h"

#include <cmath>
#include <type_traits>

#include "kernels/simd/parallel_chunks.h"
#include "kernels/simd/vector_kernels.h"

namespace attn::kernels {

namespace {

constexpr int64_t kParallelMin = 32768;

// xoshiro256** (Blackman & Vigna), exactly Rng::next_u64 of src/core/rng.cpp, on a local copy
// of the state so that the loop keeps it in registers. tests/unit/kernels/dropout_kernel_test.cpp
// checks the masks against Rng::uniform.
struct LocalXoshiro {
  uint64_t s[4];
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next() {
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
  }
};

}  // namespace

// Rng::uniform() is (r >> 11) * 2^-53 for the raw draw r, and for an integer k and a real x, k * 2^-53 < x exactly when k < ceil(x * 2^53) (the
// scaling by 2^53 is exact), so one integer comparison per element decides it.
void dropout_mask(uint8_t* keep, int64_t n, double p, Rng& rng) {
  const Rng::State st = rng.state();
  LocalXoshiro g{{st.s[0], st.s[1], st.s[2], st.s[3]}};
  const uint64_t threshold = static_cast<uint64_t>(std::ceil(p * 0x1.0p53));
  for (int64_t i = 0; i < n; ++i) keep[i] = (g.next() >> 11) < threshold ? 0 : 1;
  rng.set_state({{g.s[0], g.s[1], g.s[2], g.s[3]}});
}

template <class T>
void dropout_forward(T* out, uint8_t* keep, const T* x, int64_t n, double p, Rng& rng) {
  dropout_mask(keep, n, p, rng);
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    simd::for_chunks(n, kParallelMin,
                     [&](int64_t i, int64_t k) { vk.dropout_forward(out + i, keep + i, x + i, scale, k); });
  } else {
#pragma omp parallel for if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) out[i] = keep[i] ? x[i] * scale : T(0);
  }
}

// forward: out = x * keep * scale;  d out / dx = keep * scale.
template <class T>
void dropout_backward(T* dx, const T* dout, const uint8_t* keep, T scale, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    simd::for_chunks(n, kParallelMin,
                     [&](int64_t i, int64_t k) { vk.dropout_backward(dx + i, dout + i, keep + i, scale, k); });
  } else {
#pragma omp parallel for if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) dx[i] += keep[i] ? dout[i] * scale : T(0);
  }
}

#define ATTN_INSTANTIATE(T)                                                                 \
  template void dropout_forward<T>(T*, uint8_t*, const T*, int64_t, double, Rng&);          \
  template void dropout_backward<T>(T*, const T*, const uint8_t*, T, int64_t);
ATTN_INSTANTIATE(float)
ATTN_INSTANTIATE(double)
#undef ATTN_INSTANTIATE

}  // namespace attn::kernels
