// attn/decode/kv_pool.h — the block pool of a paged KV cache (nn/kv_cache.h: BlockPool) sized
// for a model: its decoder layers, key/value heads, head size and dtype (or bf16 blocks, half
// the bytes), in blocks of `block_size` positions, as many as fit in `bytes`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "attn/models/config.h"
#include "attn/nn/kv_cache.h"

namespace attn::decode {

// The KV cache layout of a run (the CLI's --kv-cache, --kv-block, --kv-pool-mb, --kv-dtype).
struct KvCacheOptions {
  bool paged = false;
  int64_t block_size = 16;  // positions per block
  int64_t pool_bytes = 0;   // 0 = automatic (the caller's worst case)
  // The self-attention blocks' element type: F32 = full precision (the model's own dtype, f64
  // for an f64 model); BF16 = keys and values rounded to bf16 as they are written, half the
  // bytes per block (paged only; f32 models). Cross-attention K/V stay in the model's dtype.
  DType dtype = DType::F32;
};

// "f32" / "bf16" (the --kv-dtype values), and back (an Error naming the choices otherwise).
const char* kv_dtype_name(DType kv_dtype);
DType parse_kv_dtype(const std::string& name);

// The element type of `config`'s pool blocks for a KvCacheOptions::dtype: BF16, or the model's
// dtype for F32; an Error for BF16 with a model that is not f32, or any other dtype.
DType kv_block_dtype(const models::ModelConfig& config, DType kv_dtype);
// Bytes of one block of `block_size` positions for `config`'s decoder (K and V, every layer),
// of kv_block_dtype(config, kv_dtype): half as many with BF16 as with F32.
int64_t kv_block_bytes(const models::ModelConfig& config, int64_t block_size, DType kv_dtype = DType::F32);
// Blocks the worst case of `rows` rows of up to `positions` positions each needs (every row
// holding its own blocks: nothing shared).
int64_t kv_blocks_for(int64_t rows, int64_t positions, int64_t block_size);
// A pool of floor(bytes / kv_block_bytes) blocks (an Error naming the sizes when that is 0).
std::shared_ptr<nn::BlockPool> make_kv_pool(const models::ModelConfig& config, int64_t block_size, int64_t bytes,
                                            DType kv_dtype = DType::F32);

// The pool options ask for, for a batch of up to `rows` rows of up to `positions` cached
// positions each; null when options.paged is false. pool_bytes 0 sizes it for that worst case
// (every row with blocks of its own: never full; memory is touched only as blocks are used).
std::shared_ptr<nn::BlockPool> kv_pool_for(const models::ModelConfig& config, const KvCacheOptions& options,
                                           int64_t rows, int64_t positions);

}  // namespace attn::decode
