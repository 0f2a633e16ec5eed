// kernels/simd/parallel_chunks.h — cuts a span of n elements into chunks for OpenMP threads
// and hands each chunk to a vector kernel. Chunks are multiples of 64 elements (whole cache
// lines, whole AVX-512 registers), so the split does not change any element's result.
// Below `parallel_min` elements the span runs as one call on the calling thread.
// Not here: reductions across chunks (each chunk's result must be independent).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/parallel_for.h"

namespace attn::kernels::simd {

// Elements per chunk once a span is threaded.
inline constexpr int64_t kChunk = 16384;

// Calls f(begin, count) over [0, n) in chunks of kChunk, in parallel when n >= parallel_min.
template <class F>
void for_chunks(int64_t n, int64_t parallel_min, F f) {
  if (n < parallel_min || n <= kChunk) {
    if (n > 0) f(int64_t{0}, n);
    return;
  }
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(chunks, true, [&](int64_t c) {
    const int64_t begin = c * kChunk;
    f(begin, std::min(kChunk, n - begin));
  });
}

}  // namespace attn::kernels::simd
