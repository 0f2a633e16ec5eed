// kernels/embedding.cpp — embedding gather and its scatter-add backward (§3.4).
// The gather is threaded over tokens from kParallelMin elements. The scatter-add is serial:
// repeated ids would race, and it is one pass over N * D elements. Not done here: sorting ids
// to thread the backward, or sparse gradients.
#include "kernels/embedding.h"

#include <cstring>

#include "kernels/parallel_for.h"

namespace attn::kernels {

namespace {
constexpr int64_t kParallelMin = 32768;
}  // namespace

template <class T>
void embedding_forward(T* out, const T* weight, const int64_t* ids, int64_t N, int64_t D) {
  parallel_for(N, N * D >= kParallelMin,
               [&](int64_t n) { std::memcpy(out + n * D, weight + ids[n] * D, static_cast<size_t>(D) * sizeof(T)); });
}

template <class T>
void embedding_backward(T* dweight, const T* dout, const int64_t* ids, int64_t N, int64_t D) {
  for (int64_t n = 0; n < N; ++n) {
    T* row = dweight + ids[n] * D;  // [D]
    const T* g = dout + n * D;       // [D]
    for (int64_t d = 0; d < D; ++d) row[d] += g[d];
  }
}

#define ATTN_INSTANTIATE(T)                                                                  \
  template void embedding_forward<T>(T*, const T*, const int64_t*, int64_t, int64_t);        \
  template void embedding_backward<T>(T*, const T*, const int64_t*, int64_t, int64_t);
ATTN_INSTANTIATE(float)
ATTN_INSTANTIATE(double)
#undef ATTN_INSTANTIATE

}  // namespace attn::kernels
