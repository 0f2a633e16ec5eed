// attn/decode/kv_pool.h — the block pool of a paged KV cache (nn/kv_cache.h: BlockPool) sized
// for a model: its decoder layers, key/value heads, head size and dtype, in blocks of
// `block_size` positions, as many as fit in `bytes`.
#pragma once

#include <cstdint>
#include <memory>

#include "attn/models/config.h"
#include "attn/nn/kv_cache.h"

namespace attn::decode {

// The KV cache layout of a run (the CLI's --kv-cache, --kv-block, --kv-pool-mb).
struct KvCacheOptions {
  bool paged = false;
  int64_t block_size = 16;  // positions per block
  int64_t pool_bytes = 0;   // 0 = automatic (the caller's worst case)
};

// Bytes of one block of `block_size` positions for `config`'s decoder (K and V, every layer).
int64_t kv_block_bytes(const models::ModelConfig& config, int64_t block_size);
// Blocks the worst case of `rows` rows of up to `positions` positions each needs (every row
// holding its own blocks: nothing shared).
int64_t kv_blocks_for(int64_t rows, int64_t positions, int64_t block_size);
// A pool of floor(bytes / kv_block_bytes) blocks (an Error naming the sizes when that is 0).
std::shared_ptr<nn::BlockPool> make_kv_pool(const models::ModelConfig& config, int64_t block_size, int64_t bytes);

// The pool options ask for, for a batch of up to `rows` rows of up to `positions` cached
// positions each; null when options.paged is false. pool_bytes 0 sizes it for that worst case
// (every row with blocks of its own: never full; memory is touched only as blocks are used).
std::shared_ptr<nn::BlockPool> kv_pool_for(const models::ModelConfig& config, const KvCacheOptions& options,
                                           int64_t rows, int64_t positions);

}  // namespace attn::decode
