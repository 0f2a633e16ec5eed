// A scope in which the storage cache fills every block it hands out with NaN bytes
// (StorageCacheMode::Poison), restoring the previous mode on exit: a kernel that leaves an
// element of an uninitialised buffer unwritten, or adds to it instead of writing, shows NaN.
#pragma once

#include "attn/core/storage.h"

namespace attn::test {

class PoisonedStorage {
 public:
  PoisonedStorage() { set_storage_cache_mode(StorageCacheMode::Poison); }
  ~PoisonedStorage() { set_storage_cache_mode(before_); }
  PoisonedStorage(const PoisonedStorage&) = delete;
  PoisonedStorage& operator=(const PoisonedStorage&) = delete;

 private:
  StorageCacheMode before_ = storage_cache_mode();
};

}  // namespace attn::test
