// attn/core/storage.h — a reference-counted block of bytes, and the cache that recycles them.
// Storage either owns 64-byte-aligned heap memory or keeps alive whatever `owner` holds
// (for example a memory-mapped safetensors file), so tensors can view mapped weights.
// Owned blocks come from a size-class cache: a freed block waits there for the next request
// of its class, so a training step in the steady state makes no fresh allocation and touches
// no fresh page. The cache is bounded, thread-safe, and can be emptied or switched off.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace attn {

class Storage {
 public:
  // Allocates `nbytes` of 64-byte-aligned, uninitialised memory (a recycled block may hold
  // anything; ask Tensor::zeros for zeros).
  static std::shared_ptr<Storage> allocate(size_t nbytes);
  // Wraps foreign memory; `owner` is kept alive as long as the storage lives.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, std::shared_ptr<void> owner);

  Storage() = default;
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  // A storage made under a ShapesOnlyGuard (attn/core/tensor.h: a byte count, no memory) gets
  // its memory, zero-filled; every view of it sees it. Any other storage is left as it is.
  void materialize();

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  size_t capacity_ = 0;  // bytes of an owned block (its size class); 0 for wrapped memory
  std::shared_ptr<void> owner_;
};

// ---- the storage cache --------------------------------------------------------------------
// Requests are rounded up to a size class (multiples of 64 bytes up to 4 KiB, then eight
// classes per power of two, so at most 12.5% is wasted). Blocks freed while the cache holds
// less than its limit are kept for the next request of their class; the rest go back to the
// C library. The environment variable ATTN_STORAGE_CACHE sets the mode at start-up: `1` (the
// default) caches, `0` frees every block at once (for memory debuggers), `poison` caches and
// fills every block handed out with 0xFF bytes (NaN in floating point) to expose reads of
// uninitialised memory. ATTN_STORAGE_CACHE_LIMIT_MB sets the limit (default 4096 MiB).

enum class StorageCacheMode { Off, On, Poison };

struct StorageCacheStats {
  uint64_t hits = 0;            // requests served from the cache
  uint64_t misses = 0;          // requests that allocated a fresh block
  uint64_t returned = 0;        // blocks put back into the cache
  uint64_t freed = 0;           // blocks given back to the C library (cache full or off)
  size_t cached_blocks = 0;     // blocks waiting in the cache now
  size_t cached_bytes = 0;      // their bytes
  size_t limit_bytes = 0;       // the cache's limit
};

// The machine's physical memory in bytes (0 when it cannot be read). Size checks compare
// what an input implies with it, so that a model or a batch that cannot fit is refused by
// name before its allocation starts filling the machine.
uint64_t physical_memory_bytes();
// "1.5 GiB", "37.0 TiB": a byte count for messages.
std::string format_bytes(double bytes);

// Rounded size of a request of `nbytes` (what the block really holds).
size_t storage_size_class(size_t nbytes);
StorageCacheStats storage_cache_stats();
// Gives every cached block back to the C library, and the C library's free pages to the
// system (glibc's malloc_trim); blocks in use are not affected.
void release_cached_memory();
StorageCacheMode storage_cache_mode();
// Switching to Off also releases the cached blocks.
void set_storage_cache_mode(StorageCacheMode mode);
// Blocks beyond the limit are freed when they come back; a lower limit releases at once
// whatever exceeds it.
void set_storage_cache_limit(size_t bytes);

}  // namespace attn
