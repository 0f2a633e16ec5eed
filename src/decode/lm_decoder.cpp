// LmDecoder: DecoderOnlyModel behind the IncrementalDecoder interface (see the header). start()
// moves each prompt's padding to the front and runs the prompts through the cache in one pass with their lengths;
// the first step hands back that pass's distribution, later steps run one cached forward of one token per row.
#include "attn/decode/lm_decoder.h"

#include <algorithm>

#include "attn/core/autograd.h"
#include "attn/ops/ops.h"

namespace attn::decode {

namespace {
constexpr const char* kOp = "LmDecoder";
}

LmDecoder::LmDecoder(models::DecoderOnlyModel& model) : model_(model) {}

int64_t LmDecoder::vocab_size() const { return model_.config().vocab_size(); }

namespace {
void check_prompt_ids(const Tensor& prompt_ids) {
  ATTN_CHECK(prompt_ids.defined() && prompt_ids.dtype() == DType::I64 && prompt_ids.dim() == 2 &&
                 prompt_ids.size(0) >= 1 && prompt_ids.size(1) >= 1,
             kOp, "prompt_ids must be i64 [B, S] with B, S >= 1, got ",
             prompt_ids.defined() ? prompt_ids.str() : "undefined");
}
}  // namespace

void LmDecoder::start(const Tensor& prompt_ids) {
  if (!pending_lengths_.empty()) {
    const std::vector<int64_t> lengths = std::move(pending_lengths_);
    pending_lengths_.clear();
    start(prompt_ids, lengths);
    return;
  }
  check_prompt_ids(prompt_ids);
  const int64_t b = prompt_ids.size(0), s = prompt_ids.size(1);
  const int64_t pad = model_.config().pad_id;
  const auto ids = prompt_ids.to_vector<int64_t>();
  // Each prompt without its PAD tokens (with pad_id -1, the whole row).
  std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(b));
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t j = 0; j < s; ++j)
      if (pad < 0 || ids[static_cast<size_t>(r * s + j)] != pad) prompts[r].push_back(ids[static_cast<size_t>(r * s + j)]);
    ATTN_CHECK(!prompts[r].empty(), kOp, "prompt ", r, " is empty (only PAD): give every row at least one token, ",
               "e.g. BOS");
  }
  start_prompts(prompts);
}

void LmDecoder::start(const Tensor& prompt_ids, const std::vector<int64_t>& lengths) {
  check_prompt_ids(prompt_ids);
  const int64_t b = prompt_ids.size(0), s = prompt_ids.size(1);
  ATTN_CHECK(static_cast<int64_t>(lengths.size()) == b, kOp, "lengths has ", lengths.size(), " entries for ",
             b, " prompts ", prompt_ids.str());
  const auto ids = prompt_ids.to_vector<int64_t>();
  std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(b));
  for (int64_t r = 0; r < b; ++r) {
    const int64_t len = lengths[static_cast<size_t>(r)];
    ATTN_CHECK(len >= 1 && len <= s, kOp, "prompt ", r, "'s length ", len, " is outside [1, ", s, "] of ",
               prompt_ids.str());
    prompts[r].assign(ids.begin() + r * s, ids.begin() + r * s + len);
  }
  start_prompts(prompts);
}

void LmDecoder::start(const std::vector<std::vector<int64_t>>& prompts) {
  ATTN_CHECK(!prompts.empty(), kOp, "start() needs at least one prompt");
  for (size_t r = 0; r < prompts.size(); ++r)
    ATTN_CHECK(!prompts[r].empty(), kOp, "prompt ", r, " is empty: give every row at least one token, e.g. BOS");
  start_prompts(prompts);
}

void LmDecoder::start_prompts(const std::vector<std::vector<int64_t>>& prompts) {
  ATTN_CHECK(!model_.is_training(), kOp, "the model is in training mode (dropout on); call eval() before decoding");
  const int64_t b = static_cast<int64_t>(prompts.size());
  int64_t width = 0;
  for (const auto& p : prompts) width = std::max<int64_t>(width, static_cast<int64_t>(p.size()));
  // Left-aligned: filler first, then the prompt, so that every row ends at cache index width - 1.
  // The filler is masked by the lengths, whatever its id (PAD, or 0 for a model without one).
  const int64_t pad = model_.config().pad_id;
  std::vector<int64_t> left(static_cast<size_t>(b * width), pad >= 0 ? pad : 0);
  std::vector<int64_t> lengths(static_cast<size_t>(b));
  for (int64_t r = 0; r < b; ++r) {
    const int64_t n = static_cast<int64_t>(prompts[r].size());
    lengths[static_cast<size_t>(r)] = n;
    std::copy(prompts[r].begin(), prompts[r].end(), left.begin() + r * width + (width - n));
  }
  NoGradGuard no_grad;
  cache_ = model_.init_cache(b);
  if (pool_) cache_.use_pool(pool_);
  const Tensor logits =
      model_.forward_cached(Tensor::from_vector<int64_t>(left, {b, width}), lengths, cache_);  // [B, V]
  first_ = log_softmax(logits);                                                               // [B, V]
  started_ = true;
}

void LmDecoder::join(const std::vector<int64_t>& prefix, int64_t share_row, int64_t share_positions) {
  ATTN_CHECK(!model_.is_training(), kOp, "the model is in training mode (dropout on); call eval() before decoding");
  ATTN_CHECK(!first_.defined(), kOp, "join() while start()'s first distribution is pending: step first");
  const int64_t len = static_cast<int64_t>(prefix.size());
  ATTN_CHECK(share_positions == 0 || (pool_ && started_ && share_positions > 0 && share_positions <= len), kOp,
             "join sharing ", share_positions, " positions of a prefix of ", len,
             ": needs the paged cache, a running batch and 0 < positions <= the prefix's length");
  NoGradGuard no_grad;
  nn::KVCache fresh = model_.init_cache(1);  // one row, no positions yet
  if (pool_) fresh.use_pool(pool_);
  if (share_positions > 0) fresh.share_prefix(cache_, share_row, share_positions);
  if (len > share_positions) {
    const std::vector<int64_t> rest(prefix.begin() + share_positions, prefix.end());
    model_.forward_cached_hidden(Tensor::from_vector<int64_t>(rest, {1, len - share_positions}),
                                 fresh);  // [1, L', D], only the cache is kept
  }
  if (!started_) {
    cache_ = std::move(fresh);
    started_ = true;
  } else {
    cache_.append_rows(fresh);
  }
}

Tensor LmDecoder::step(const Tensor& last_tokens) {
  ATTN_CHECK(started_, kOp, "step() before start()");
  const int64_t n = cache_.rows();
  ATTN_CHECK(last_tokens.defined() && last_tokens.dtype() == DType::I64 && last_tokens.shape() == Shape{n}, kOp,
             "last_tokens must be i64 [N = ", n, "], got ", last_tokens.defined() ? last_tokens.str() : "undefined");
  ATTN_CHECK(n >= 1, kOp, "step() with no rows left");
  if (first_.defined()) {
    Tensor out = first_;  // [N, V], the prompts' distribution (the tokens are the search's BOS)
    first_ = Tensor();
    return out;
  }
  NoGradGuard no_grad;
  const Tensor logits = model_.forward_cached(last_tokens.reshape({n, 1}), cache_);  // [N, V]
  return log_softmax(logits);                                                         // [N, V]
}

Tensor LmDecoder::step_many(const Tensor& tokens) {
  ATTN_CHECK(started_, kOp, "step_many() before start()");
  ATTN_CHECK(!first_.defined(), kOp, "step_many() as the first step after start(): step() first");
  const int64_t n = cache_.rows();
  ATTN_CHECK(tokens.defined() && tokens.dtype() == DType::I64 && tokens.dim() == 2 && tokens.size(0) == n &&
                 tokens.size(1) >= 1,
             kOp, "tokens must be i64 [N = ", n, ", T >= 1], got ", tokens.defined() ? tokens.str() : "undefined");
  NoGradGuard no_grad;
  const Tensor hidden = model_.forward_cached_hidden(tokens, cache_);  // [N, T, D]
  return log_softmax(model_.logits(hidden));                           // [N, T, V]
}

void LmDecoder::rollback(int64_t count) {
  ATTN_CHECK(started_, kOp, "rollback() before start()");
  ATTN_CHECK(count >= 0 && count <= cache_.length(), kOp, "rollback(", count, ") of a cache of ", cache_.length(),
             " positions");
  cache_.truncate(cache_.length() - count);
}

void LmDecoder::reorder(const std::vector<int64_t>& rows) {
  ATTN_CHECK(started_, kOp, "reorder() before start()");
  const int64_t n = cache_.rows();
  for (int64_t r : rows) ATTN_CHECK(r >= 0 && r < n, kOp, "reorder row ", r, " out of range [0, ", n, ")");
  NoGradGuard no_grad;
  if (first_.defined()) {
    const Tensor ids = Tensor::from_vector<int64_t>(rows, {static_cast<int64_t>(rows.size())});  // [M]
    first_ = embedding(first_, ids);  // [M, V]
  }
  cache_.reorder(rows);
}

}  // namespace attn::decode
