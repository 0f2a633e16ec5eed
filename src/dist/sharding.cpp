// Batch shares per rank and the token-weighted loss of attn/dist/sharding.h.
// Not here: any choice of which examples form a global batch (train/batching.h).
#include "attn/dist/sharding.h"

namespace attn::dist {

Range shard_range(int64_t n, int rank, int size) {
  ATTN_CHECK(n >= 0, "shard_range", "item count ", n, " < 0");
  ATTN_CHECK(size >= 1, "shard_range", "world size ", size, " < 1");
  ATTN_CHECK(rank >= 0 && rank < size, "shard_range", "rank ", rank, " is outside 0..", size - 1);
  const int64_t base = n / size, extra = n % size, r = rank;
  // Ranks below `extra` take base + 1 items each, the others base.
  const int64_t begin = r * base + (r < extra ? r : extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

TokenShare share_tokens(int64_t local_tokens, const Communicator& comm) {
  ATTN_CHECK(local_tokens >= 0, "share_tokens", comm.describe(), ": token count ", local_tokens, " < 0");
  return {local_tokens, comm.all_reduce_value(local_tokens)};
}

double global_mean(double local_mean, const TokenShare& share, const Communicator& comm) {
  const double local_sum = share.local > 0 ? local_mean * static_cast<double>(share.local) : 0.0;
  const double sum = comm.all_reduce_value(local_sum);
  return share.global > 0 ? sum / static_cast<double>(share.global) : 0.0;
}

}  // namespace attn::dist
