// attn/train/batching.h — padded batches for teacher forcing, and an iterator over a
// dataset that shuffles per epoch, can group examples of similar length, caps batches by
// example count or by padded token count, and can resume exactly from an exported position.
// Paper §5.1 ("batched together by approximate sequence length ... approximately 25000
// source tokens and 25000 target tokens"), §5.3 teacher forcing; make_lm_batch is the same
// shift for a decoder-only model. Not here: the loss, attention masks (the models derive
// key-padding masks from ids == <pad>), or BERT's masking (masking.h).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn/core/rng.h"
#include "attn/core/tensor.h"
#include "attn/train/tasks.h"
#include "attn/io/vocab.h"

namespace attn::train {

// The ids make_batch inserts (the io::Vocab's by default).
struct SpecialIds {
  int64_t pad = io::Vocab::kPad;
  int64_t bos = io::Vocab::kBos;
  int64_t eos = io::Vocab::kEos;
};

// A padded batch of B examples. S = longest source, T = longest target + 1.
struct Batch {
  Tensor src;      // [B, S] I64: source ids, then <pad>
  Tensor tgt_in;   // [B, T] I64: <bos>, target ids, then <pad> (the decoder's input)
  Tensor tgt_out;  // [B, T] I64: target ids, <eos>, then <pad> (what it must predict)
  int64_t n_src_tokens = 0;  // non-<pad> entries of src
  int64_t n_tgt_tokens = 0;  // non-<pad> entries of tgt_out (targets + one <eos> each)
  std::vector<int64_t> src_lengths, tgt_lengths;  // per row, without <bos>/<eos>
  std::vector<int64_t> indices;  // the examples' positions in the dataset (make_batch: 0..B-1)
  int64_t size() const { return static_cast<int64_t>(src_lengths.size()); }
};

// The padded batch of `examples` (at least one; every source non-empty; ids >= 0).
Batch make_batch(const std::vector<io::Example>& examples, SpecialIds ids = {});
// The batch of dataset[indices[0]], dataset[indices[1]], ... (indices checked).
Batch make_batch(const std::vector<io::Example>& dataset, const std::vector<int64_t>& indices,
                 SpecialIds ids = {});
// A decoder-only (language-model) batch of examples that hold their sequence as a target
// without a source (text_data.h): tgt_in = <bos> x1 ... xn, tgt_out = x1 ... xn <eos>, padded;
// src is left undefined and n_src_tokens 0. Every target non-empty, ids >= 0, indices checked.
Batch make_lm_batch(const std::vector<io::Example>& dataset, const std::vector<int64_t>& indices,
                    SpecialIds ids = {});

// An example's cost toward max_tokens: max(source length, target length + 1), the longer
// of its rows in src and tgt_in/tgt_out (for a text example: its row length in a decoder-only
// or masked-LM batch). A batch's cost is B times its largest example cost, its padded size.
int64_t example_tokens(const io::Example& example);

struct BatchingOptions {
  int64_t batch_size = 32;  // at most this many examples per batch; 0 = no limit
  int64_t max_tokens = 0;   // at most this padded cost per batch (see example_tokens); 0 = no cap
  bool shuffle = true;      // a new order every epoch, drawn from `seed`
  // Sort examples by (source length, target length) within buckets of `bucket_size`
  // consecutive examples of the (shuffled) order, cut batches within each bucket, then
  // shuffle the batch order (when shuffle). bucket_size 0 = the whole dataset is one bucket.
  bool group_by_length = false;
  int64_t bucket_size = 0;
  uint64_t seed = 0;
};

// Where a BatchIterator stands: exported after any batch, imported to continue with
// exactly the batches that would have followed.
struct BatchPosition {
  int64_t epoch = 0;         // 0-based epoch
  int64_t index = 0;         // batches already handed out in this epoch
  Rng::State rng{};          // the generator's state when this epoch's order was drawn
  int64_t dataset_size = 0;  // checked on import
  nlohmann::json to_json() const;
  static BatchPosition from_json(const nlohmann::json& j);
  bool operator==(const BatchPosition& o) const;
};

// Batches of a dataset, epoch after epoch. Each epoch is planned when it starts: the order
// is shuffled with the iterator's generator (so the order differs per epoch and is the same
// for the same seed), grouped by length if asked, and cut into batches under both caps.
// The dataset must outlive the iterator and stay unchanged.
class BatchIterator {
 public:
  // Errors: an empty dataset, an example with neither source nor target tokens, both caps 0, a
  // negative option, or an example whose own cost exceeds max_tokens (named by its index).
  BatchIterator(const std::vector<io::Example>& dataset, BatchingOptions options, SpecialIds ids = {});

  // The next batch of the current epoch, as dataset indices; std::nullopt when the epoch is
  // exhausted, and the iterator then moves to the next epoch (epoch() + 1, newly planned).
  std::optional<std::vector<int64_t>> next_indices();
  // next_indices() made into an encoder-decoder batch by make_batch.
  std::optional<Batch> next();

  int64_t epoch() const { return epoch_; }
  int64_t index() const { return index_; }
  int64_t num_batches() const { return static_cast<int64_t>(plan_.size()); }  // this epoch
  // This epoch's batches as dataset indices.
  const std::vector<std::vector<int64_t>>& plan() const { return plan_; }
  const BatchingOptions& options() const { return options_; }

  BatchPosition position() const;
  // Continues from `pos` (replans its epoch); a position from another dataset size or past
  // the epoch's end is an error.
  void set_position(const BatchPosition& pos);

 private:
  void plan_epoch();
  const std::vector<io::Example>* dataset_;
  BatchingOptions options_;
  SpecialIds ids_;
  Rng rng_;
  Rng::State epoch_state_{};
  int64_t epoch_ = 0;
  int64_t index_ = 0;
  std::vector<std::vector<int64_t>> plan_;
};

// Where the trainer's batches come from: an in-memory dataset (DatasetBatches) or a corpus
// streamed from disk in chunks (corpus_stream.h). A batch is a list of indices into
// examples(), which stays valid until the next has_next(), next_epoch() or position change.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t epoch() const = 0;        // 0-based
  virtual int64_t index() const = 0;        // batches handed out in this epoch
  virtual int64_t num_batches() const = 0;  // this epoch's batches (a stream: its estimate)
  // Whether this epoch has another batch (a stream may read its next chunk to know).
  virtual bool has_next() = 0;
  // The next batch of this epoch (has_next() must be true).
  virtual std::vector<int64_t> next() = 0;
  // Moves to the start of the next epoch (once has_next() is false).
  virtual void next_epoch() = 0;
  virtual const std::vector<io::Example>& examples() const = 0;
  // The epoch number the objective is given for this batch (the masked LM seeds masks with it).
  virtual int64_t objective_epoch() const = 0;
  virtual nlohmann::json position_json() const = 0;
  virtual void set_position_json(const nlohmann::json& j) = 0;
};

// A BatchIterator over a dataset as a BatchSource (the dataset must outlive it).
class DatasetBatches : public BatchSource {
 public:
  DatasetBatches(const std::vector<io::Example>& dataset, BatchingOptions options, SpecialIds ids = {})
      : dataset_(&dataset), it_(dataset, options, ids) {}
  int64_t epoch() const override { return it_.epoch(); }
  int64_t index() const override { return it_.index(); }
  int64_t num_batches() const override { return it_.num_batches(); }
  bool has_next() override { return it_.index() < it_.num_batches(); }
  std::vector<int64_t> next() override;
  void next_epoch() override;
  const std::vector<io::Example>& examples() const override { return *dataset_; }
  int64_t objective_epoch() const override { return it_.epoch(); }
  nlohmann::json position_json() const override { return it_.position().to_json(); }
  void set_position_json(const nlohmann::json& j) override { it_.set_position(BatchPosition::from_json(j)); }
  const BatchIterator& iterator() const { return it_; }

 private:
  const std::vector<io::Example>* dataset_;
  BatchIterator it_;
};

}  // namespace attn::train
