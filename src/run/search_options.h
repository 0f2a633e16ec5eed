// run/search_options.h (private to run/) — a search's options struct with the model folder's
// special ids (BOS, EOS, PAD) and a length limit filled in, the part every search of the run
// layer shares; the caller sets what is particular to the search (beam, temperature, ...).
#pragma once

#include <cstdint>
#include <optional>

#include "attn/core/error.h"
#include "attn/decode/kv_pool.h"
#include "attn/run/model_folder.h"

namespace attn::run::detail {

template <class Options>
Options search_options(const ModelFolder& folder, std::optional<int64_t> max_len) {
  Options o;
  o.bos = folder.bos;
  o.eos = folder.eos;
  o.pad = folder.pad;
  o.max_len = max_len;
  return o;
}

// The block pool of a batch's paged KV cache (null when contiguous): sized by --kv-pool-mb, or
// for the batch's worst case; a full pool's error names the option.
inline std::shared_ptr<nn::BlockPool> kv_pool(const models::ModelConfig& config, const decode::KvCacheOptions& o,
                                              int64_t rows, int64_t positions) {
  auto pool = decode::kv_pool_for(config, o, rows, positions);
  if (pool)
    pool->set_full_hint(o.pool_bytes > 0 ? str_cat("raise --kv-pool-mb (", o.pool_bytes >> 20,
                                                   " now) or lower --batch-size")
                                         : std::string("lower --batch-size"));
  return pool;
}

}  // namespace attn::run::detail
