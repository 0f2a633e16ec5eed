// kernels/dropout.cpp — inverted dropout with a mask drawn serially from attn::Rng (§5.4);
// serial on purpose, so the mask does not depend on the thread count. The draw steps
// xoshiro256** on a local copy of the generator's state (kept in registers) into a small block
// of raw draws, and the active ISA's vector kernel turns each draw's four 16-bit fields into
// four mask bytes; the masking runs on the vector kernels too (float), threaded from
// kParallelMin elements. Not done here: a counter-based (Philox) generator for a parallel draw.
#include "kernels/dropout.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/simd/parallel_chunks.h"
#include "kernels/simd/vector_kernels.h"

namespace attn::kernels {

namespace {

constexpr int64_t kParallelMin = 32768;
// Draws per block: 4 KiB on the stack, 2048 mask bytes per call of the vector kernel.
constexpr int64_t kBlockDraws = 512;

// xoshiro256** (Blackman & Vigna), exactly Rng::next_u64 of src/core/rng.cpp, on a local copy
// of the state so that the loop keeps it in registers. tests/unit/kernels/dropout_kernel_test.cpp
// checks the masks and the final state against Rng::next_u64.
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

// dx[i] = keep[i] ? g[i] * scale : 0: the forward's masking, and the writing backward.
template <class T>
void apply_mask(T* out, const uint8_t* keep, const T* g, T scale, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    simd::for_chunks(n, kParallelMin,
                     [&](int64_t i, int64_t k) { vk.dropout_forward(out + i, keep + i, g + i, scale, k); });
  } else {
#pragma omp parallel for if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) out[i] = keep[i] ? g[i] * scale : T(0);
  }
}

}  // namespace

// p * 2^16 is exact (a power-of-two scaling of a double far from overflow and underflow), and
// std::round is exact too, so t is the true nearest integer with halves rounded up.
uint32_t dropout_threshold(double p) {
  if (!(p > 0.0)) return 0;
  const double t = std::round(p * 65536.0);
  return static_cast<uint32_t>(std::clamp(t, 1.0, 65535.0));
}

void dropout_mask(uint8_t* keep, int64_t n, double p, Rng& rng) {
  const uint32_t t = dropout_threshold(p);
  const auto& vk = simd::vector_kernels();
  const Rng::State st = rng.state();
  LocalXoshiro g{{st.s[0], st.s[1], st.s[2], st.s[3]}};
  uint64_t draws[kBlockDraws];
  for (int64_t i = 0; i < n; i += 4 * kBlockDraws) {
    const int64_t m = std::min<int64_t>(4 * kBlockDraws, n - i);  // elements of this block
    const int64_t nd = (m + 3) / 4;                                // draws, a partial group whole
    for (int64_t j = 0; j < nd; ++j) draws[j] = g.next();
    vk.dropout_keep_from_draws(keep + i, draws, m, t);
  }
  rng.set_state({{g.s[0], g.s[1], g.s[2], g.s[3]}});
}

template <class T>
void dropout_forward(T* out, uint8_t* keep, const T* x, int64_t n, double p, Rng& rng) {
  dropout_mask(keep, n, p, rng);
  apply_mask<T>(out, keep, x, static_cast<T>(1.0 / (1.0 - p)), n);
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

// forward: out = x * keep * scale;  d out / dx = keep * scale, written: dx = dout * keep * scale.
template <class T>
void dropout_backward_write(T* dx, const T* dout, const uint8_t* keep, T scale, int64_t n) {
  apply_mask<T>(dx, keep, dout, scale, n);
}

#define ATTN_INSTANTIATE(T)                                                                 \
  template void dropout_forward<T>(T*, uint8_t*, const T*, int64_t, double, Rng&);          \
  template void dropout_backward<T>(T*, const T*, const uint8_t*, T, int64_t);              \
  template void dropout_backward_write<T>(T*, const T*, const uint8_t*, T, int64_t);
ATTN_INSTANTIATE(float)
ATTN_INSTANTIATE(double)
#undef ATTN_INSTANTIATE

}  // namespace attn::kernels
