// attn/io/example.h — one source/target pair of token ids, the unit that corpora, synthetic
// tasks, batching, validation and evaluation pass around. Ids only: <bos>, <eos> and <pad> are
// added where batches are made (a single-stack model's text example fills one side only).
// Not here: tokenizing (vocab.h) or reading files (tsv.h).
#pragma once

#include <cstdint>
#include <vector>

namespace attn::io {

// One source/target pair of token ids (no <bos>, <eos> or <pad>).
struct Example {
  std::vector<int64_t> src;
  std::vector<int64_t> tgt;
  bool operator==(const Example&) const = default;
};

}  // namespace attn::io
