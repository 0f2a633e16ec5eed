// Storage: aligned heap blocks recycled through a size-class cache, or foreign memory kept
// alive by an owner. The cache is what makes a training step allocation-free once it has run
// a few times: every block a step frees comes back for the same request of the next step.
// Deliberately simple: one mutex, and per size class one free list for each of a few thread
// slots: a thread takes back the blocks it freed first (they are likely still in its core's
// caches; with batch-split training each thread runs its own replica), then any other slot's.
// No splitting or merging of blocks.
#include "attn/core/storage.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "attn/core/error.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <unistd.h>

namespace attn {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kSmall = 4096;  // exact multiples of 64 bytes up to here
constexpr int kMaxStepsUp = 8;   // larger classes a request may take when its own is empty
constexpr int kSlots = 8;        // free-list slots; threads are assigned one each, round robin

// This thread's slot (assigned on first use).
int thread_slot() {
  static std::atomic<int> next{0};
  thread_local const int slot = next.fetch_add(1, std::memory_order_relaxed) % kSlots;
  return slot;
}

StorageCacheMode mode_from_env() {
  const char* v = std::getenv("ATTN_STORAGE_CACHE");
  if (!v || !*v) return StorageCacheMode::On;
  const std::string s = v;
  if (s == "1" || s == "on") return StorageCacheMode::On;
  if (s == "0" || s == "off") return StorageCacheMode::Off;
  if (s == "poison") return StorageCacheMode::Poison;
  fail("ATTN_STORAGE_CACHE", "unknown value '", s, "' (expected 1, 0 or poison)");
}

size_t limit_from_env() {
  const char* v = std::getenv("ATTN_STORAGE_CACHE_LIMIT_MB");
  if (!v || !*v) return size_t{4096} << 20;
  char* end = nullptr;
  const unsigned long long mb = std::strtoull(v, &end, 10);
  ATTN_CHECK(end && *end == '\0' && mb < (1ull << 40), "ATTN_STORAGE_CACHE_LIMIT_MB",
             "expected a number of MiB, got '", v, "'");
  return static_cast<size_t>(mb) << 20;
}

class StorageCache {
 public:
  // Never destroyed (a leaked singleton), so storages freed by static destructors in other
  // translation units still find it.
  static StorageCache& get() {
    static StorageCache* cache = new StorageCache();
    return *cache;
  }

  // A block of at least `capacity` bytes (a size class); `capacity` becomes the class of the
  // block handed out. Its own class first, then the next kMaxStepsUp classes (at most about
  // twice the size): with sequence lengths that vary from batch to batch, a step may need
  // more blocks of one class than any step before while larger ones wait idle.
  void* take(size_t& capacity) {
    const int own = thread_slot();
    std::unique_lock lock(mu_);
    const bool poison = mode_ == StorageCacheMode::Poison;
    if (mode_ != StorageCacheMode::Off && cached_blocks_ > 0) {
      // This thread's own blocks first, then the other slots', each from the exact class up.
      for (int k = 0; k < kSlots; ++k) {
        auto& lists = lists_[static_cast<size_t>((own + k) % kSlots)];
        if (lists.empty()) continue;
        size_t c = capacity;
        for (int up = 0; up <= kMaxStepsUp; ++up, c = storage_size_class(c + 1)) {
          auto it = lists.find(c);
          if (it == lists.end() || it->second.empty()) continue;
          void* p = it->second.back();
          it->second.pop_back();
          cached_bytes_ -= c;
          --cached_blocks_;
          ++hits_;
          lock.unlock();
          capacity = c;
          if (poison) std::memset(p, 0xFF, c);
          return p;
        }
      }
    }
    ++misses_;
    lock.unlock();
    void* p = std::aligned_alloc(kAlign, capacity);
    if (!p) throw std::bad_alloc();
    if (poison) std::memset(p, 0xFF, capacity);
    return p;
  }

  void give(void* p, size_t capacity) {
    const int own = thread_slot();
    {
      std::lock_guard lock(mu_);
      if (mode_ != StorageCacheMode::Off && cached_bytes_ + capacity <= limit_) {
        // push_back may throw bad_alloc when the list grows; then the block is freed below.
        try {
          lists_[static_cast<size_t>(own)][capacity].push_back(p);
          cached_bytes_ += capacity;
          ++cached_blocks_;
          ++returned_;
          return;
        } catch (const std::bad_alloc&) {
        }
      }
      ++freed_;
    }
    std::free(p);
  }

  StorageCacheStats stats() {
    std::lock_guard lock(mu_);
    StorageCacheStats s;
    s.hits = hits_;
    s.misses = misses_;
    s.returned = returned_;
    s.freed = freed_;
    s.cached_blocks = cached_blocks_;
    s.cached_bytes = cached_bytes_;
    s.limit_bytes = limit_;
    return s;
  }

  // Frees cached blocks until at most `keep` bytes remain.
  void trim(size_t keep) {
    std::vector<void*> doomed;
    {
      std::lock_guard lock(mu_);
      for (auto& lists : lists_)
        for (auto& [capacity, list] : lists) {
          while (!list.empty() && cached_bytes_ > keep) {
            doomed.push_back(list.back());
            list.pop_back();
            cached_bytes_ -= capacity;
            --cached_blocks_;
            ++freed_;
          }
          if (list.empty()) list.shrink_to_fit();
        }
    }
    for (void* p : doomed) std::free(p);
  }

  StorageCacheMode mode() {
    std::lock_guard lock(mu_);
    return mode_;
  }
  void set_mode(StorageCacheMode m) {
    {
      std::lock_guard lock(mu_);
      mode_ = m;
    }
    if (m == StorageCacheMode::Off) trim(0);
  }
  void set_limit(size_t bytes) {
    {
      std::lock_guard lock(mu_);
      limit_ = bytes;
    }
    trim(bytes);
  }

 private:
  StorageCache() : mode_(mode_from_env()), limit_(limit_from_env()) {}

  std::mutex mu_;
  StorageCacheMode mode_;
  size_t limit_;
  // Per thread slot: size class -> free blocks.
  std::array<std::unordered_map<size_t, std::vector<void*>>, kSlots> lists_;
  size_t cached_bytes_ = 0, cached_blocks_ = 0;
  uint64_t hits_ = 0, misses_ = 0, returned_ = 0, freed_ = 0;
};

}  // namespace

size_t storage_size_class(size_t nbytes) {
  if (nbytes > (~size_t{0} >> 2)) throw std::bad_alloc();
  if (nbytes <= kSmall) return (nbytes + kAlign - 1) / kAlign * kAlign;
  // Eight classes per power of two: round up to a multiple of 2^(k-3), 2^k <= nbytes < 2^(k+1).
  size_t top = size_t{1} << (8 * sizeof(size_t) - 1 - static_cast<size_t>(__builtin_clzl(nbytes)));
  const size_t step = top / 8;
  return (nbytes + step - 1) / step * step;
}

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

std::string format_bytes(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 6) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[48];
  if (u == 0) std::snprintf(buf, sizeof buf, "%.0f bytes", bytes);
  else std::snprintf(buf, sizeof buf, "%.1f %s", bytes, units[u]);
  return buf;
}

std::shared_ptr<Storage> Storage::allocate(size_t nbytes) {
  auto s = std::make_shared<Storage>();
  if (nbytes == 0) return s;
  size_t capacity = storage_size_class(nbytes);
  s->data_ = StorageCache::get().take(capacity);  // may raise capacity to a larger class
  s->nbytes_ = nbytes;
  s->capacity_ = capacity;
  return s;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, std::shared_ptr<void> owner) {
  auto s = std::make_shared<Storage>();
  s->data_ = data;
  s->nbytes_ = nbytes;
  s->owner_ = std::move(owner);
  return s;
}

void Storage::materialize() {
  if (data_ != nullptr || nbytes_ == 0 || owner_ != nullptr) return;
  size_t capacity = storage_size_class(nbytes_);
  data_ = StorageCache::get().take(capacity);
  capacity_ = capacity;
  std::memset(data_, 0, nbytes_);
}

Storage::~Storage() {
  if (capacity_) StorageCache::get().give(data_, capacity_);
}

StorageCacheStats storage_cache_stats() { return StorageCache::get().stats(); }
void release_cached_memory() {
  StorageCache::get().trim(0);
#if defined(__GLIBC__)
  // The freed blocks coalesce in glibc's heap, where they would stay resident; hand the free
  // pages back to the system too.
  malloc_trim(0);
#endif
}
StorageCacheMode storage_cache_mode() { return StorageCache::get().mode(); }
void set_storage_cache_mode(StorageCacheMode mode) { StorageCache::get().set_mode(mode); }
void set_storage_cache_limit(size_t bytes) { StorageCache::get().set_limit(bytes); }

}  // namespace attn
