// BERT's masked-LM corruption and loss (see masking.h). Every random choice is drawn from
// attn::Rng in a fixed order (choose positions, then one draw per chosen position for its
// action, then one for a random token), so masks are the same on every platform.
// Not here: the model or the optimizer step (train/objective.cpp).
#include "attn/train/masking.h"

#include <algorithm>
#include <cmath>

#include "attn/core/error.h"
#include "attn/ops/ops.h"

namespace attn::train {

namespace {
constexpr const char* kOp = "masking";
}  // namespace

void validate(const MaskingOptions& o) {
  ATTN_CHECK(o.prob > 0 && o.prob < 1, kOp, "mask_prob must be in (0, 1), got ", o.prob);
  ATTN_CHECK(o.mask_share >= 0 && o.random_share >= 0 && o.mask_share + o.random_share <= 1, kOp,
             "the [MASK] and random shares must be >= 0 with a sum <= 1, got ", o.mask_share, " and ",
             o.random_share);
  ATTN_CHECK(o.mask_id >= 0 && o.mask_id < o.first_symbol, kOp, "the [MASK] id must be a special id in [0, ",
             o.first_symbol, "), got ", o.mask_id);
  ATTN_CHECK(o.first_symbol < o.vocab_size, kOp, "the vocabulary [", o.first_symbol, ", ", o.vocab_size,
             ") holds no symbol to draw random tokens from");
}

MaskedSequence mask_sequence(const std::vector<int64_t>& ids, const MaskingOptions& o, Rng& rng) {
  MaskedSequence m;
  m.input = ids;
  std::vector<int64_t> candidates;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= o.first_symbol) candidates.push_back(static_cast<int64_t>(i));
  if (candidates.empty()) return m;
  const int64_t n_cand = static_cast<int64_t>(candidates.size());
  const int64_t n = std::clamp<int64_t>(std::llround(o.prob * static_cast<double>(n_cand)), 1, n_cand);
  // A partial Fisher-Yates shuffle: the first n entries become a uniform n-subset.
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = i + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n_cand - i)));
    std::swap(candidates[static_cast<size_t>(i)], candidates[static_cast<size_t>(j)]);
  }
  m.positions.assign(candidates.begin(), candidates.begin() + n);
  std::sort(m.positions.begin(), m.positions.end());
  const uint64_t n_symbols = static_cast<uint64_t>(o.vocab_size - o.first_symbol);
  for (int64_t p : m.positions) {
    const size_t k = static_cast<size_t>(p);
    m.targets.push_back(ids[k]);
    const double u = rng.uniform();
    if (u < o.mask_share)
      m.input[k] = o.mask_id;
    else if (u < o.mask_share + o.random_share)
      m.input[k] = o.first_symbol + static_cast<int64_t>(rng.below(n_symbols));
    // else: the token stays itself (but is still predicted)
  }
  return m;
}

uint64_t masking_seed(uint64_t seed, int64_t epoch, int64_t index) {
  // Stream 3 of the run seed (streams 0-2 are the data's and the batch order's); the epoch is
  // shifted by one so that validation's -1 maps to 0.
  const uint64_t run = stream_seed(seed, 3);
  return stream_seed(stream_seed(run, static_cast<uint64_t>(epoch + 1)), static_cast<uint64_t>(index));
}

MaskedBatch make_masked_batch(const std::vector<io::Example>& dataset, const std::vector<int64_t>& indices,
                              const MaskingOptions& options, uint64_t seed, int64_t epoch, int64_t pad) {
  validate(options);
  ATTN_CHECK(!indices.empty(), kOp, "a batch needs at least one example");
  const int64_t n = static_cast<int64_t>(dataset.size());
  int64_t S = 0;
  for (int64_t k : indices) {
    ATTN_CHECK(k >= 0 && k < n, kOp, "example index ", k, " out of range [0, ", n, ")");
    const io::Example& ex = dataset[static_cast<size_t>(k)];
    ATTN_CHECK(!ex.src.empty(), kOp, "example ", k, " is empty (a masked-LM example holds its line in src)");
    S = std::max(S, static_cast<int64_t>(ex.src.size()));
  }
  const int64_t B = static_cast<int64_t>(indices.size());
  MaskedBatch b;
  b.input = Tensor::full({B, S}, static_cast<double>(pad), DType::I64);   // [B, S]
  b.labels = Tensor::full({B, S}, static_cast<double>(pad), DType::I64);  // [B, S]
  int64_t* input = b.input.data<int64_t>();
  int64_t* labels = b.labels.data<int64_t>();
  for (int64_t r = 0; r < B; ++r) {
    const int64_t k = indices[static_cast<size_t>(r)];
    Rng rng(masking_seed(seed, epoch, k));
    const MaskedSequence m = mask_sequence(dataset[static_cast<size_t>(k)].src, options, rng);
    std::copy(m.input.begin(), m.input.end(), input + r * S);
    for (size_t i = 0; i < m.positions.size(); ++i) labels[r * S + m.positions[i]] = m.targets[i];
    b.n_chosen += static_cast<int64_t>(m.positions.size());
  }
  b.indices = indices;
  return b;
}

Tensor masked_lm_loss(const Tensor& logits, const Tensor& labels, int64_t ignore, double label_smoothing) {
  ATTN_CHECK(logits.defined() && labels.defined() && logits.dim() == 3 && labels.dim() == 2 &&
                 logits.size(0) == labels.size(0) && logits.size(1) == labels.size(1),
             "masked_lm_loss", "expected logits [B, S, V] and labels [B, S], got ",
             logits.defined() ? logits.str() : "undefined", " and ", labels.defined() ? labels.str() : "undefined");
  const int64_t rows = logits.size(0) * logits.size(1), V = logits.size(2);
  // cross_entropy skips rows whose target is ignore_index: they add nothing to the mean and get
  // a zero gradient, which is exactly "the loss only at the chosen positions".
  return cross_entropy(logits.reshape({rows, V}), labels.reshape({rows}), ignore, label_smoothing);
}

}  // namespace attn::train
