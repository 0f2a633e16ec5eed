// kernels/dropout.cpp — inverted dropout with a mask drawn serially from attn::Rng (§5.4).
// The draw is serial on purpose: row-major order makes the mask independent of the thread
// count. Applying the mask is threaded from kParallelMin elements. Not done here: a
// counter-based (Philox) generator that would allow a parallel draw.
#include "kernels/dropout.h"

namespace attn::kernels {

namespace {
constexpr int64_t kParallelMin = 32768;
}  // namespace

template <class T>
void dropout_forward(T* out, uint8_t* keep, const T* x, int64_t n, double p, Rng& rng) {
  for (int64_t i = 0; i < n; ++i) keep[i] = rng.uniform() < p ? 0 : 1;
  const T scale = static_cast<T>(1.0 / (1.0 - p));
#pragma omp parallel for if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = keep[i] ? x[i] * scale : T(0);
}

template <class T>
void dropout_backward(T* dx, const T* dout, const uint8_t* keep, T scale, int64_t n) {
#pragma omp parallel for if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) dx[i] += keep[i] ? dout[i] * scale : T(0);
}

#define ATTN_INSTANTIATE(T)                                                                 \
  template void dropout_forward<T>(T*, uint8_t*, const T*, int64_t, double, Rng&);          \
  template void dropout_backward<T>(T*, const T*, const uint8_t*, T, int64_t);
ATTN_INSTANTIATE(float)
ATTN_INSTANTIATE(double)
#undef ATTN_INSTANTIATE

}  // namespace attn::kernels
