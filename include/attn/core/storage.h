// attn/core/storage.h — a reference-counted block of bytes.
// Storage either owns 64-byte-aligned heap memory or keeps alive whatever `owner` holds
// (for example a memory-mapped safetensors file), so tensors can view mapped weights.
#pragma once

#include <cstddef>
#include <memory>

namespace attn {

class Storage {
 public:
  // Allocates `nbytes` of 64-byte-aligned, uninitialised memory.
  static std::shared_ptr<Storage> allocate(size_t nbytes);
  // Wraps foreign memory; `owner` is kept alive as long as the storage lives.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, std::shared_ptr<void> owner);

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  std::shared_ptr<void> owner_;
};

}  // namespace attn
