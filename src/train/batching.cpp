// Padding, target shifting and epoch planning (paper §5.1 batching by length, §5.3
// teacher forcing). A plan is a list of batches of dataset indices, made once per epoch
// from the iterator's generator, which is what makes a position (epoch, index, generator
// state at the epoch's start) enough to resume exactly. Not here: masks or the loss.
#include "attn/train/batching.h"

#include <algorithm>
#include <numeric>

#include "attn/core/error.h"

namespace attn::train {

namespace {

// Fisher-Yates with rng.below, portable bit for bit.
template <class T>
void shuffle_in_place(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.below(i));
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace

int64_t example_tokens(const io::Example& example) {
  return std::max(static_cast<int64_t>(example.src.size()), static_cast<int64_t>(example.tgt.size()) + 1);
}

Batch make_batch(const std::vector<io::Example>& dataset, const std::vector<int64_t>& indices, SpecialIds ids) {
  const char* op = "make_batch";
  ATTN_CHECK(!indices.empty(), op, "a batch needs at least one example");
  const int64_t n = static_cast<int64_t>(dataset.size());
  int64_t S = 0, T = 0;
  for (int64_t k : indices) {
    ATTN_CHECK(k >= 0 && k < n, op, "example index ", k, " out of range [0, ", n, ")");
    const io::Example& ex = dataset[static_cast<size_t>(k)];
    ATTN_CHECK(!ex.src.empty(), op, "example ", k, " has an empty source");
    for (const auto* seq : {&ex.src, &ex.tgt})
      for (int64_t id : *seq) ATTN_CHECK(id >= 0, op, "example ", k, " holds a negative id ", id);
    S = std::max(S, static_cast<int64_t>(ex.src.size()));
    T = std::max(T, static_cast<int64_t>(ex.tgt.size()) + 1);
  }
  const int64_t B = static_cast<int64_t>(indices.size());
  Batch b;
  b.src = Tensor::full({B, S}, static_cast<double>(ids.pad), DType::I64);      // [B, S]
  b.tgt_in = Tensor::full({B, T}, static_cast<double>(ids.pad), DType::I64);   // [B, T]
  b.tgt_out = Tensor::full({B, T}, static_cast<double>(ids.pad), DType::I64);  // [B, T]
  int64_t* src = b.src.data<int64_t>();
  int64_t* tin = b.tgt_in.data<int64_t>();
  int64_t* tout = b.tgt_out.data<int64_t>();
  for (int64_t r = 0; r < B; ++r) {
    const io::Example& ex = dataset[static_cast<size_t>(indices[static_cast<size_t>(r)])];
    const int64_t ls = static_cast<int64_t>(ex.src.size());
    const int64_t lt = static_cast<int64_t>(ex.tgt.size());
    std::copy(ex.src.begin(), ex.src.end(), src + r * S);
    tin[r * T] = ids.bos;  // <bos> y1 ... yn
    std::copy(ex.tgt.begin(), ex.tgt.end(), tin + r * T + 1);
    std::copy(ex.tgt.begin(), ex.tgt.end(), tout + r * T);  // y1 ... yn <eos>
    tout[r * T + lt] = ids.eos;
    b.src_lengths.push_back(ls);
    b.tgt_lengths.push_back(lt);
    b.n_src_tokens += ls;
    b.n_tgt_tokens += lt + 1;
  }
  b.indices = indices;
  return b;
}

Batch make_lm_batch(const std::vector<io::Example>& dataset, const std::vector<int64_t>& indices, SpecialIds ids) {
  const char* op = "make_lm_batch";
  ATTN_CHECK(!indices.empty(), op, "a batch needs at least one example");
  const int64_t n = static_cast<int64_t>(dataset.size());
  int64_t T = 0;
  for (int64_t k : indices) {
    ATTN_CHECK(k >= 0 && k < n, op, "example index ", k, " out of range [0, ", n, ")");
    const io::Example& ex = dataset[static_cast<size_t>(k)];
    ATTN_CHECK(!ex.tgt.empty(), op, "example ", k, " has no tokens (a language-model example holds them in tgt)");
    for (int64_t id : ex.tgt) ATTN_CHECK(id >= 0, op, "example ", k, " holds a negative id ", id);
    T = std::max(T, static_cast<int64_t>(ex.tgt.size()) + 1);
  }
  const int64_t B = static_cast<int64_t>(indices.size());
  Batch b;
  b.tgt_in = Tensor::full({B, T}, static_cast<double>(ids.pad), DType::I64);   // [B, T]
  b.tgt_out = Tensor::full({B, T}, static_cast<double>(ids.pad), DType::I64);  // [B, T]
  int64_t* tin = b.tgt_in.data<int64_t>();
  int64_t* tout = b.tgt_out.data<int64_t>();
  for (int64_t r = 0; r < B; ++r) {
    const io::Example& ex = dataset[static_cast<size_t>(indices[static_cast<size_t>(r)])];
    const int64_t len = static_cast<int64_t>(ex.tgt.size());
    tin[r * T] = ids.bos;  // <bos> x1 ... xn
    std::copy(ex.tgt.begin(), ex.tgt.end(), tin + r * T + 1);
    std::copy(ex.tgt.begin(), ex.tgt.end(), tout + r * T);  // x1 ... xn <eos>
    tout[r * T + len] = ids.eos;
    b.src_lengths.push_back(0);
    b.tgt_lengths.push_back(len);
    b.n_tgt_tokens += len + 1;
  }
  b.indices = indices;
  return b;
}

Batch make_batch(const std::vector<io::Example>& examples, SpecialIds ids) {
  std::vector<int64_t> all(examples.size());
  std::iota(all.begin(), all.end(), int64_t{0});
  return make_batch(examples, all, ids);
}

// ---- BatchPosition ----------------------------------------------------------------------

nlohmann::json BatchPosition::to_json() const {
  return nlohmann::json{{"epoch", epoch},
                        {"index", index},
                        {"rng", {rng.s[0], rng.s[1], rng.s[2], rng.s[3]}},
                        {"dataset_size", dataset_size}};
}

BatchPosition BatchPosition::from_json(const nlohmann::json& j) {
  const char* op = "BatchPosition";
  ATTN_CHECK(j.is_object(), op, "expected a JSON object");
  BatchPosition p;
  for (auto [key, slot] : {std::pair{"epoch", &p.epoch}, std::pair{"index", &p.index},
                           std::pair{"dataset_size", &p.dataset_size}}) {
    ATTN_CHECK(j.contains(key) && j[key].is_number_integer(), op, "missing integer \"", key, "\"");
    *slot = j[key].get<int64_t>();
    ATTN_CHECK(*slot >= 0, op, "\"", key, "\" is negative");
  }
  ATTN_CHECK(j.contains("rng") && j["rng"].is_array() && j["rng"].size() == 4, op,
             "\"rng\" must be an array of 4 unsigned integers");
  for (size_t i = 0; i < 4; ++i) {
    ATTN_CHECK(j["rng"][i].is_number_unsigned(), op, "\"rng\" must be an array of 4 unsigned integers");
    p.rng.s[i] = j["rng"][i].get<uint64_t>();
  }
  return p;
}

bool BatchPosition::operator==(const BatchPosition& o) const {
  return epoch == o.epoch && index == o.index && dataset_size == o.dataset_size &&
         std::equal(std::begin(rng.s), std::end(rng.s), std::begin(o.rng.s));
}

// ---- BatchIterator ------------------------------------------------------------------------

BatchIterator::BatchIterator(const std::vector<io::Example>& dataset, BatchingOptions options, SpecialIds ids)
    : dataset_(&dataset), options_(options), ids_(ids), rng_(options.seed) {
  const char* op = "BatchIterator";
  ATTN_CHECK(!dataset.empty(), op, "the dataset is empty");
  ATTN_CHECK(options.batch_size >= 0, op, "batch_size must be >= 0, got ", options.batch_size);
  ATTN_CHECK(options.max_tokens >= 0, op, "max_tokens must be >= 0, got ", options.max_tokens);
  ATTN_CHECK(options.bucket_size >= 0, op, "bucket_size must be >= 0, got ", options.bucket_size);
  ATTN_CHECK(options.batch_size > 0 || options.max_tokens > 0, op,
             "batch_size and max_tokens are both 0 (set at least one)");
  for (size_t k = 0; k < dataset.size(); ++k) {
    const io::Example& ex = dataset[k];
    ATTN_CHECK(!ex.src.empty() || !ex.tgt.empty(), op, "example ", k, " has no tokens");
    if (options.max_tokens > 0)
      ATTN_CHECK(example_tokens(ex) <= options.max_tokens, op, "example ", k, " alone costs ",
                 example_tokens(ex), " tokens (source ", ex.src.size(), ", target ", ex.tgt.size(),
                 " + <eos>), more than max_tokens = ", options.max_tokens);
  }
  plan_epoch();
}

void BatchIterator::plan_epoch() {
  const std::vector<io::Example>& data = *dataset_;
  epoch_state_ = rng_.state();
  std::vector<int64_t> order(data.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  if (options_.shuffle) shuffle_in_place(order, rng_);

  const size_t n = order.size();
  const size_t bucket = options_.group_by_length && options_.bucket_size > 0
                            ? static_cast<size_t>(options_.bucket_size)
                            : n;
  plan_.clear();
  for (size_t begin = 0; begin < n; begin += bucket) {
    const size_t end = std::min(n, begin + bucket);
    if (options_.group_by_length)
      std::stable_sort(order.begin() + static_cast<std::ptrdiff_t>(begin),
                       order.begin() + static_cast<std::ptrdiff_t>(end), [&](int64_t a, int64_t b) {
                         const io::Example& ea = data[static_cast<size_t>(a)];
                         const io::Example& eb = data[static_cast<size_t>(b)];
                         if (ea.src.size() != eb.src.size()) return ea.src.size() < eb.src.size();
                         return ea.tgt.size() < eb.tgt.size();
                       });
    // Greedy cut: add examples while both caps hold.
    std::vector<int64_t> current;
    int64_t widest = 0;
    for (size_t i = begin; i < end; ++i) {
      const int64_t k = order[i];
      const int64_t cost = example_tokens(data[static_cast<size_t>(k)]);
      const int64_t count = static_cast<int64_t>(current.size());
      const bool full_count = options_.batch_size > 0 && count >= options_.batch_size;
      const bool full_tokens =
          options_.max_tokens > 0 && (count + 1) * std::max(widest, cost) > options_.max_tokens;
      if (!current.empty() && (full_count || full_tokens)) {
        plan_.push_back(std::move(current));
        current.clear();
        widest = 0;
      }
      current.push_back(k);
      widest = std::max(widest, cost);
    }
    if (!current.empty()) plan_.push_back(std::move(current));
  }
  // Sorted buckets would hand out short batches first; mix the batch order instead.
  if (options_.group_by_length && options_.shuffle) shuffle_in_place(plan_, rng_);
}

std::optional<std::vector<int64_t>> BatchIterator::next_indices() {
  if (index_ < num_batches()) return plan_[static_cast<size_t>(index_++)];
  ++epoch_;
  index_ = 0;
  plan_epoch();
  return std::nullopt;
}

std::optional<Batch> BatchIterator::next() {
  std::optional<std::vector<int64_t>> indices = next_indices();
  if (!indices) return std::nullopt;
  return make_batch(*dataset_, *indices, ids_);
}

BatchPosition BatchIterator::position() const {
  BatchPosition p;
  p.epoch = epoch_;
  p.index = index_;
  p.rng = epoch_state_;
  p.dataset_size = static_cast<int64_t>(dataset_->size());
  return p;
}

void BatchIterator::set_position(const BatchPosition& pos) {
  const char* op = "BatchIterator::set_position";
  const int64_t n = static_cast<int64_t>(dataset_->size());
  ATTN_CHECK(pos.dataset_size == n, op, "the position is for a dataset of ", pos.dataset_size,
             " examples, this one has ", n);
  ATTN_CHECK(pos.epoch >= 0 && pos.index >= 0, op, "negative epoch or index");
  // Replan on a copy first, so that a bad index leaves the iterator unchanged.
  const Rng saved = rng_;
  const auto saved_plan = plan_;
  const Rng::State saved_state = epoch_state_;
  rng_.set_state(pos.rng);
  plan_epoch();
  if (pos.index > num_batches()) {
    const int64_t planned = num_batches();
    rng_ = saved;
    plan_ = saved_plan;
    epoch_state_ = saved_state;
    fail(op, "index ", pos.index, " is past the ", planned, " batches of epoch ", pos.epoch);
  }
  epoch_ = pos.epoch;
  index_ = pos.index;
}

// ---- DatasetBatches -----------------------------------------------------------------------

std::vector<int64_t> DatasetBatches::next() {
  ATTN_CHECK(has_next(), "DatasetBatches", "epoch ", it_.epoch(), " has no batch left");
  return *it_.next_indices();
}

void DatasetBatches::next_epoch() {
  ATTN_CHECK(!has_next(), "DatasetBatches", "epoch ", it_.epoch(), " still has batches");
  (void)it_.next_indices();  // nullopt: moves to the next epoch and plans it
}

}  // namespace attn::train
