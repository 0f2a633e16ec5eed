// attn/lab/kv_cache.h — `attn lab kv-cache`: incremental decoding with a KV cache gives
// exactly the full causal result (seed 000's last cell, seed 003's inference section; paper §3.2.3).
// A randomly initialised encoder-decoder (the seed's small model: D = 64, 4 heads, 2 + 2 layers)
// decodes a target prefix once in full and once step by step through init_cache / forward_cached,
// and every step's logits are compared with the full pass at that position. Not here: search,
// trained weights, timing (bench/ measures decoding speed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/core/dtype.h"

namespace attn::lab {

struct KvCacheOptions {
  int64_t steps = 8;          // target positions decoded (BOS, then random digits)
  int64_t source_length = 8;  // random digits
  DType dtype = DType::F32;
  uint64_t seed = 0;  // weights and tokens
};

struct KvCacheStep {
  int64_t position = 0;      // t
  int64_t token = 0;         // the target token fed at t
  int64_t cached_keys = 0;   // self-attention keys the step attends over (t + 1)
  int64_t cache_bytes = 0;   // KVCache::memory_bytes() after the step (self and cross K/V)
  double max_abs_diff = 0;   // max |step logits - full logits at t|
  bool same_argmax = false;  // both pick the same next token
};

struct KvCacheDemo {
  std::string model;  // a one-line description of the model
  std::vector<KvCacheStep> steps;
  double max_abs_diff = 0;  // over all steps
  int64_t cross_bytes = 0;  // of the cache before the first step (cross-attention K/V only)
};

// Errors (attn::Error) for non-positive sizes or a non-floating dtype.
KvCacheDemo kv_cache_demo(const KvCacheOptions& options);
std::string format_kv_cache_demo(const KvCacheDemo& demo);

}  // namespace attn::lab
