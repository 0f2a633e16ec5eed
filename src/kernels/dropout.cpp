// kernels/dropout.cpp — inverted dropout with a mask drawn from eight xoshiro256** lanes (§5.4).
// The draw stays serial (one thread), so the mask does not depend on the thread count, but its
// eight lanes are independent chains that the active ISA's xoshiro_lanes kernel advances
// together in vector registers; dropout_keep_from_draws then turns each block of raw draws
// (already in group order) into mask bytes. The masking runs on the vector kernels too (float),
// threaded from kParallelMin elements, and so do the fused forms (dropout + residual add,
// relu + dropout). Not done here: a threaded draw (lanes jumped ahead).
#include "kernels/dropout.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "attn/core/error.h"
#include "kernels/parallel_for.h"
#include "kernels/simd/parallel_chunks.h"
#include "kernels/simd/vector_kernels.h"

namespace attn::kernels {

namespace {

constexpr int64_t kParallelMin = 32768;
constexpr int64_t kLanes = 8;
// Elements per round (one draw from each lane): the granularity of a stream's chunks.
constexpr int64_t kRoundElems = 4 * kLanes;
// Draws per block: 4 KiB on the stack (64 rounds), 2048 mask bytes per call of the vector kernels.
constexpr int64_t kBlockDraws = 512;
static_assert(kBlockDraws % kLanes == 0, "a block holds whole rounds");

// dx[i] = keep[i] ? g[i] * scale : 0: the forward's masking, and the writing backward.
template <class T>
void apply_mask(T* out, const uint8_t* keep, const T* g, T scale, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    simd::for_chunks(n, kParallelMin,
                     [&](int64_t i, int64_t k) { vk.dropout_forward(out + i, keep + i, g + i, scale, k); });
  } else {
    parallel_for(n, n >= kParallelMin, [&](int64_t i) { out[i] = keep[i] ? g[i] * scale : T(0); });
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

DropoutMaskStream::DropoutMaskStream(double p, Rng& rng) : t_(dropout_threshold(p)) {
  for (int64_t l = 0; l < kLanes; ++l) {
    const Rng::State st = Rng(rng.next_u64()).state();  // lane l, seeded in lane order
    for (int w = 0; w < 4; ++w) state_[w * kLanes + l] = st.s[w];
  }
}

void DropoutMaskStream::next(uint8_t* keep, int64_t n) {
  ATTN_CHECK(n >= 0, "dropout_mask", "negative length ", n);
  if (n == 0) return;
  ATTN_CHECK(last_odd_chunk_ == 0, "dropout_mask", "a chunk of ", n, " elements follows one of ", last_odd_chunk_,
             ": every chunk of a mask stream but the last must be a multiple of ", kRoundElems, " elements");
  if (n % kRoundElems != 0) last_odd_chunk_ = n;
  if (t_ == 0) {  // p <= 0 keeps all; the lanes are private to the stream, so they need not move
    std::memset(keep, 1, static_cast<size_t>(n));
    return;
  }
  const auto& vk = simd::vector_kernels();
  uint64_t draws[kBlockDraws];  // [rounds, 8]: draws[8r + l] = lane l's r-th draw = group 8r + l
  for (int64_t i = 0; i < n; i += 4 * kBlockDraws) {
    const int64_t m = std::min<int64_t>(4 * kBlockDraws, n - i);  // elements of this block
    const int64_t rounds = (m + kRoundElems - 1) / kRoundElems;    // a partial round whole
    vk.xoshiro_lanes(draws, state_, rounds);
    vk.dropout_keep_from_draws(keep + i, draws, m, t_);
  }
}

void dropout_mask(uint8_t* keep, int64_t n, double p, Rng& rng) { DropoutMaskStream(p, rng).next(keep, n); }

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
    parallel_for(n, n >= kParallelMin, [&](int64_t i) { dx[i] += keep[i] ? dout[i] * scale : T(0); });
  }
}

// forward: out = x * keep * scale;  d out / dx = keep * scale, written: dx = dout * keep * scale.
template <class T>
void dropout_backward_write(T* dx, const T* dout, const uint8_t* keep, T scale, int64_t n) {
  apply_mask<T>(dx, keep, dout, scale, n);
}

// out = residual + (keep ? x * scale : 0), threaded like apply_mask.
template <class T>
void dropout_add_forward(T* out, uint8_t* keep, const T* residual, const T* x, int64_t n, double p, Rng& rng) {
  dropout_mask(keep, n, p, rng);
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    simd::for_chunks(n, kParallelMin, [&](int64_t i, int64_t k) {
      vk.dropout_add_forward(out + i, keep + i, residual + i, x + i, scale, k);
    });
  } else {
    parallel_for(n, n >= kParallelMin, [&](int64_t i) { out[i] = residual[i] + (keep[i] ? x[i] * scale : T(0)); });
  }
}

// out = keep ? relu(x) * scale : 0, relu(x) = x < 0 ? 0 : x.
template <class T>
void relu_dropout_forward(T* out, uint8_t* keep, const T* x, int64_t n, double p, Rng& rng) {
  dropout_mask(keep, n, p, rng);
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    simd::for_chunks(n, kParallelMin,
                     [&](int64_t i, int64_t k) { vk.relu_dropout_forward(out + i, keep + i, x + i, scale, k); });
  } else {
    parallel_for(n, n >= kParallelMin,
                 [&](int64_t i) { out[i] = keep[i] ? (x[i] < T(0) ? T(0) : x[i]) * scale : T(0); });
  }
}

// forward: y = keep * relu(x) * scale;  dy/dx = keep * (x > 0) * scale = (y > 0) * scale, so
// dx = 0 + (y > 0 ? dout * scale : 0), written.
template <class T>
void relu_dropout_backward_write(T* dx, const T* dout, const T* y, T scale, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const auto& vk = simd::vector_kernels();
    simd::for_chunks(n, kParallelMin,
                     [&](int64_t i, int64_t k) { vk.relu_dropout_backward_write(dx + i, dout + i, y + i, scale, k); });
  } else {
    parallel_for(n, n >= kParallelMin, [&](int64_t i) { dx[i] = T(0) + (y[i] > T(0) ? dout[i] * scale : T(0)); });
  }
}

#define ATTN_INSTANTIATE(T)                                                                      \
  template void dropout_forward<T>(T*, uint8_t*, const T*, int64_t, double, Rng&);               \
  template void dropout_backward<T>(T*, const T*, const uint8_t*, T, int64_t);                   \
  template void dropout_backward_write<T>(T*, const T*, const uint8_t*, T, int64_t);             \
  template void dropout_add_forward<T>(T*, uint8_t*, const T*, const T*, int64_t, double, Rng&); \
  template void relu_dropout_forward<T>(T*, uint8_t*, const T*, int64_t, double, Rng&);          \
  template void relu_dropout_backward_write<T>(T*, const T*, const T*, T, int64_t);
ATTN_INSTANTIATE(float)
ATTN_INSTANTIATE(double)
#undef ATTN_INSTANTIATE

}  // namespace attn::kernels
