// TransformerDecoder: EncoderDecoderModel behind the IncrementalDecoder interface (see the
// header). The KV path runs one cached forward per step and reorders the cache with the rows; the
// recompute path decodes the full prefix of every row again, with memory rows gathered from
// the per-source encoder output only when the row-to-source map has changed.
#include "attn/decode/transformer_decoder.h"

#include "attn/core/autograd.h"
#include "attn/ops/ops.h"

namespace attn::decode {

namespace {
const char* kOp = "TransformerDecoder";
}

TransformerDecoder::TransformerDecoder(models::EncoderDecoderModel& model, bool use_kv_cache)
    : model_(model), use_kv_cache_(use_kv_cache) {}

int64_t TransformerDecoder::vocab_size() const { return model_.config().tgt_vocab_size; }

void TransformerDecoder::start(const Tensor& src_ids) {
  ATTN_CHECK(!model_.is_training(), kOp,
             "the model is in training mode (dropout on); call eval() before decoding");
  ATTN_CHECK(src_ids.defined() && src_ids.dtype() == DType::I64 && src_ids.dim() == 2 && src_ids.size(0) >= 1,
             kOp, "src_ids must be i64 [B, S] with B >= 1, got ", src_ids.defined() ? src_ids.str() : "undefined");
  NoGradGuard no_grad;
  memory_ = model_.encode(src_ids);                 // [B, S, D]
  memory_padding_ = model_.padding_mask(src_ids);   // [B, S] or undefined
  rows_.assign(static_cast<size_t>(src_ids.size(0)), Row{});
  for (size_t b = 0; b < rows_.size(); ++b) rows_[b].source = static_cast<int64_t>(b);
  rows_gathered_ = false;
  cache_ = use_kv_cache_ ? model_.init_cache(memory_, memory_padding_) : nn::KVCache();  // cross K/V [B, H, S, Dh]
  if (use_kv_cache_ && pool_) cache_.use_pool(pool_);
}

void TransformerDecoder::join(const Tensor& src_ids) {
  ATTN_CHECK(use_kv_cache_, kOp, "join() needs the KV-cache path");
  ATTN_CHECK(!model_.is_training(), kOp,
             "the model is in training mode (dropout on); call eval() before decoding");
  ATTN_CHECK(src_ids.defined() && src_ids.dtype() == DType::I64 && src_ids.dim() == 2 && src_ids.size(0) >= 1,
             kOp, "src_ids must be i64 [B, S] with B >= 1, got ", src_ids.defined() ? src_ids.str() : "undefined");
  NoGradGuard no_grad;
  const Tensor memory = model_.encode(src_ids);          // [B', S', D]
  const Tensor padding = model_.padding_mask(src_ids);   // [B', S'] or undefined
  nn::KVCache fresh = model_.init_cache(memory, padding);  // cross K/V [B', H, S', Dh]
  if (pool_) fresh.use_pool(pool_);
  fresh.set_left_pad(std::vector<int64_t>(static_cast<size_t>(src_ids.size(0)), 0));  // per-row positions
  cache_.append_rows(fresh);
  memory_ = memory;  // the KV path reads the cache; this only marks the batch as started
  for (int64_t b = 0; b < src_ids.size(0); ++b) rows_.push_back(Row{});
  rows_gathered_ = false;
}

void TransformerDecoder::gather_memory() {
  const int64_t n = static_cast<int64_t>(rows_.size());
  const int64_t b = memory_.size(0), s = memory_.size(1), d = memory_.size(2);
  std::vector<int64_t> src(static_cast<size_t>(n));
  bool identity = n == b;
  for (int64_t i = 0; i < n; ++i) {
    src[i] = rows_[i].source;
    identity = identity && src[i] == i;
  }
  if (identity) {
    row_memory_ = memory_;
    row_padding_ = memory_padding_;
  } else {
    // Row i takes source src[i]'s memory: an embedding lookup into memory viewed as [B, S*D].
    const Tensor ids = Tensor::from_vector<int64_t>(src, {n});                       // [N]
    row_memory_ = embedding(memory_.reshape({b, s * d}), ids).reshape({n, s, d});    // [N, S, D]
    if (memory_padding_.defined()) {
      const auto pad = memory_padding_.to_vector<int64_t>();
      std::vector<int> rows_pad(static_cast<size_t>(n * s));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < s; ++j) rows_pad[i * s + j] = static_cast<int>(pad[src[i] * s + j]);
      row_padding_ = Tensor::from_bools(rows_pad, {n, s});  // [N, S]
    } else {
      row_padding_ = Tensor();
    }
  }
  rows_gathered_ = true;
}

Tensor TransformerDecoder::step(const Tensor& last_tokens) {
  ATTN_CHECK(memory_.defined(), kOp, "step() before start()");
  const int64_t n = static_cast<int64_t>(rows_.size());
  ATTN_CHECK(last_tokens.defined() && last_tokens.dtype() == DType::I64 && last_tokens.shape() == Shape{n}, kOp,
             "last_tokens must be i64 [N = ", n, "], got ", last_tokens.defined() ? last_tokens.str() : "undefined");
  ATTN_CHECK(n >= 1, kOp, "step() with no rows left");
  return use_kv_cache_ ? step_cached(last_tokens) : step_recompute(last_tokens);
}

Tensor TransformerDecoder::step_cached(const Tensor& last_tokens) {
  NoGradGuard no_grad;
  const Tensor logits = model_.forward_cached(last_tokens.reshape({last_tokens.size(0), 1}), cache_);  // [N, V]
  return log_softmax(logits);                                                                          // [N, V]
}

Tensor TransformerDecoder::step_recompute(const Tensor& last_tokens) {
  const int64_t n = static_cast<int64_t>(rows_.size());
  const auto last = last_tokens.to_vector<int64_t>();
  for (int64_t i = 0; i < n; ++i) rows_[i].prefix.push_back(last[i]);
  const int64_t t = static_cast<int64_t>(rows_[0].prefix.size());
  std::vector<int64_t> prefixes;
  prefixes.reserve(static_cast<size_t>(n * t));
  for (const Row& r : rows_) {
    ATTN_CHECK(static_cast<int64_t>(r.prefix.size()) == t, kOp, "rows have prefixes of different lengths");
    prefixes.insert(prefixes.end(), r.prefix.begin(), r.prefix.end());
  }

  NoGradGuard no_grad;
  if (!rows_gathered_) gather_memory();
  const Tensor tgt = Tensor::from_vector<int64_t>(prefixes, {n, t});    // [N, T]
  const Tensor logits = model_.decode(tgt, row_memory_, row_padding_);  // [N, T, V]
  const Tensor last_logits = logits.slice(1, t - 1, t).reshape({n, logits.size(2)});  // [N, V]
  return log_softmax(last_logits);                                      // [N, V]
}

Tensor TransformerDecoder::step_many(const Tensor& tokens) {
  ATTN_CHECK(use_kv_cache_, kOp, "step_many() needs the KV-cache path");
  ATTN_CHECK(memory_.defined(), kOp, "step_many() before start()");
  const int64_t n = static_cast<int64_t>(rows_.size());
  ATTN_CHECK(tokens.defined() && tokens.dtype() == DType::I64 && tokens.dim() == 2 && tokens.size(0) == n &&
                 tokens.size(1) >= 1,
             kOp, "tokens must be i64 [N = ", n, ", T >= 1], got ", tokens.defined() ? tokens.str() : "undefined");
  NoGradGuard no_grad;
  return log_softmax(model_.forward_cached_all(tokens, cache_));  // [N, T, V]
}

void TransformerDecoder::rollback(int64_t count) {
  ATTN_CHECK(use_kv_cache_, kOp, "rollback() needs the KV-cache path");
  ATTN_CHECK(count >= 0 && count <= cache_.length(), kOp, "rollback(", count, ") of a cache of ", cache_.length(),
             " positions");
  cache_.truncate(cache_.length() - count);
}

void TransformerDecoder::reorder(const std::vector<int64_t>& rows) {
  const int64_t n = static_cast<int64_t>(rows_.size());
  std::vector<Row> next;
  next.reserve(rows.size());
  for (int64_t r : rows) {
    ATTN_CHECK(r >= 0 && r < n, kOp, "reorder row ", r, " out of range [0, ", n, ")");
    next.push_back(rows_[r]);
  }
  rows_ = std::move(next);
  rows_gathered_ = false;
  if (use_kv_cache_) cache_.reorder(rows);
}

}  // namespace attn::decode
