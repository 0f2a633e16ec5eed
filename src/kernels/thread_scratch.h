// kernels/thread_scratch.h — a buffer that the calling thread keeps from one call to the next:
// a kernel's scratch is allocated (and its pages faulted in, ~11 us each) once per thread, not
// once per call.
#pragma once

#include <cstdint>
#include <vector>

namespace attn::kernels {

// A buffer of at least n elements of T that the calling thread keeps between calls; `slot` tells
// apart the buffers of one type that a call holds at the same time. Call it outside parallel
// loops, or inside one for a buffer per worker. The contents are left from the previous call.
template <class T, int slot>
T* thread_scratch(int64_t n) {
  thread_local std::vector<T> buf;
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

}  // namespace attn::kernels
