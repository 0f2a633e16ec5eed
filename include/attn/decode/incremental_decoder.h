// attn/decode/incremental_decoder.h — the one interface that search talks to (CTranslate2's
// design, docs/architecture.md principle 6): start a batch of sources, then feed one token per
// live hypothesis and get the next-token log-probabilities back, reordering rows between steps.
// Greedy search, beam search and sampling (paper §6.1) never see a Transformer. This header does
// not say how a decoder keeps its state (full prefix, KV cache): that is the implementation's.
// Speculative decoding also feeds several tokens at once (step_many) and takes tokens back
// (rollback); decoders that cannot refuse both.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/core/tensor.h"

namespace attn::decode {

// A stateful next-token model over a batch of "rows". A row is one live hypothesis: it belongs
// to exactly one source sentence of the batch given to start() and holds a target prefix (the
// tokens fed to it by step() so far). Search calls start() once, then alternates step() and
// reorder(). N below is the current number of rows.
class IncrementalDecoder {
 public:
  virtual ~IncrementalDecoder() = default;

  // Begins a new batch: src_ids I64 [B, S] (B >= 1, padded sources use the model's PAD id).
  // Afterwards N = B: row b belongs to source b and its prefix is empty. Discards any earlier batch.
  virtual void start(const Tensor& src_ids) = 0;

  // last_tokens I64 [N]: appends last_tokens[i] to row i's prefix (the first step after start()
  // is given BOS) and returns the log-probabilities of the next token for every row, F32 or F64
  // [N, V] with V = vocab_size(): each row is log of a distribution (values <= 0, -inf allowed
  // for impossible tokens). N is unchanged.
  virtual Tensor step(const Tensor& last_tokens) = 0;

  // Keeps, duplicates or drops rows: afterwards N = rows.size() and new row i is a copy of old
  // row rows[i] (its source, its prefix and whatever state it caches). Every entry must be in
  // [0, N); entries may repeat (a beam that branches) and rows may be left out (finished or
  // pruned hypotheses, finished sources), so that dropped rows cost nothing in later steps.
  virtual void reorder(const std::vector<int64_t>& rows) = 0;

  // V, the size of the target vocabulary (the last dimension of step()'s result).
  virtual int64_t vocab_size() const = 0;

  // ---- speculative decoding (decode/speculative.h); decoders without it refuse ----
  // tokens I64 [N, T] (T >= 1): appends the T tokens to every row at once, in one forward pass
  // where the decoder can, and returns the log-probabilities after each of them, [N, T, V]:
  // entry [i, t] is what step() would have returned after tokens[i, 0..t] had been fed one by
  // one (the same values; the same bits in the batch-invariant mode, ops/batch_invariant.h).
  // Not as the first step after start() (feed BOS with step() first).
  virtual Tensor step_many(const Tensor& tokens);
  // Forgets the last `count` tokens fed to every row (0 <= count <= the tokens fed since
  // start()), as if they had never been fed: the draft tokens the target rejected.
  virtual void rollback(int64_t count);
};

}  // namespace attn::decode
