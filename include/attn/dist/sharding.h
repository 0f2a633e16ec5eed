// attn/dist/sharding.h — how N ranks split each global batch, and how a loss that is a mean
// over tokens stays the same mean when its tokens are spread over ranks: N ranks with
// per-rank batch b compute what one process computes with batch N*b (docs/distributed.md).
// Deterministic: the split depends only on the batch, the rank and the world size. Not here:
// the batch order itself (train/batching.h plans global batches the same way on every rank).
#pragma once

#include <cstdint>
#include <vector>

#include "attn/core/error.h"
#include "attn/dist/communicator.h"

namespace attn::dist {

// Half-open range [begin, end).
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Rank `rank`'s contiguous share of n items split over `size` ranks: the first n % size ranks
// take ceil(n / size) items and the others floor(n / size), in rank order, so the shares
// cover 0..n-1 exactly once. A rank's share is empty when n < size and rank >= n.
// Errors: n < 0, size < 1, rank outside 0..size-1.
Range shard_range(int64_t n, int rank, int size);

// items[shard_range(items.size(), rank, size)], e.g. the dataset indices of one global batch.
template <class T>
std::vector<T> shard(const std::vector<T>& items, int rank, int size) {
  const Range r = shard_range(static_cast<int64_t>(items.size()), rank, size);
  return std::vector<T>(items.begin() + r.begin, items.begin() + r.end);
}

// One step's loss-token counts: this rank's and the sum over all ranks.
struct TokenShare {
  int64_t local = 0;
  int64_t global = 0;
  // local / global (0 when global is 0). Backpropagating weight() * (this rank's mean loss
  // over its `local` tokens) and summing the gradients over ranks (Reduction::Sum) gives the
  // gradient of the mean over all `global` tokens, as one process with the whole batch.
  double weight() const {
    return global > 0 ? static_cast<double>(local) / static_cast<double>(global) : 0.0;
  }
};

// All-reduces the local token count (a blocking collective of one int64; local >= 0).
TokenShare share_tokens(int64_t local_tokens, const Communicator& comm);

// The mean over all ranks' tokens of a per-token loss, from this rank's mean over its own
// tokens: sum over ranks of local_mean * local, divided by global (0 when global is 0; a rank
// with no tokens contributes nothing, whatever its local_mean). A NaN or infinite local mean
// makes the result non-finite on every rank, so all ranks stop together. One collective.
double global_mean(double local_mean, const TokenShare& share, const Communicator& comm);

}  // namespace attn::dist
