// kernels/thread_scratch.h — a buffer that the calling thread keeps from one call to the next:
// a kernel's scratch is allocated (and its pages faulted in, ~11 us each) once per thread, not
// once per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace attn::kernels {

// Allocates on 64-byte boundaries (a cache line). malloc's large blocks start 16 bytes past a
// page, so every row of a buffer taken from it straddled two lines: an AMX tile load of such rows
// took about 5 times as long as one of aligned rows (20 against 4 ns per KiB, measured here).
template <class T>
struct LineAligned {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  LineAligned() = default;
  template <class U>
  LineAligned(const LineAligned<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlign); }
  template <class U>
  bool operator==(const LineAligned<U>&) const {
    return true;
  }
};

// A buffer of at least n elements of T, 64-byte aligned, that the calling thread keeps between
// calls; `slot` tells apart the buffers of one type that a call holds at the same time. Call it
// outside parallel loops, or inside one for a buffer per worker. The contents are left from the
// previous call.
template <class T, int slot>
T* thread_scratch(int64_t n) {
  thread_local std::vector<T, LineAligned<T>> buf;
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

}  // namespace attn::kernels
