// Storage: aligned heap blocks, or foreign memory kept alive by an owner.
#include "attn/core/storage.h"

#include <cstdlib>
#include <new>

namespace attn {

std::shared_ptr<Storage> Storage::allocate(size_t nbytes) {
  auto s = std::make_shared<Storage>();
  const size_t rounded = ((nbytes + 63) / 64) * 64;
  void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  if (rounded && !p) throw std::bad_alloc();
  s->data_ = p;
  s->nbytes_ = nbytes;
  s->owner_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  return s;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, std::shared_ptr<void> owner) {
  auto s = std::make_shared<Storage>();
  s->data_ = data;
  s->nbytes_ = nbytes;
  s->owner_ = std::move(owner);
  return s;
}

}  // namespace attn
