// MultiHeadAttention (paper §3.2.2): project, split heads, (rotate q and k), attend, join
// heads, project. Masks arrive in nn.MultiheadAttention's forms and are brought to the forms
// the fused op takes (ops/attention.h): a 3-D [B*H, Tq, Tk] mask becomes [B, H, Tq, Tk], and a
// float key padding mask is folded into an additive attn_mask. Grouped-query K/V heads, ALiBi
// and the sliding window are handed to the fused op, which handles them inside its kernels.
// Self-attention (without RoPE) projects q, k, v in one product and attends them where they lie
// in it (scaled_dot_product_attention_packed); split and joined heads are views, not copies.
#include "attn/nn/attention.h"

#include <cmath>
#include <limits>

#include "attn/nn/init.h"
#include "attn/nn/kv_cache.h"
#include "attn/nn/quantize.h"
#include "attn/ops/ops.h"
#include "attn/ops/quantize.h"

namespace attn::nn {

namespace {

constexpr const char* kOp = "MultiHeadAttention";

// A bool mask (true = masked) as an additive float mask of `dtype` (-inf / 0); a float mask as is.
Tensor additive_mask(const Tensor& m, DType dtype) {
  if (m.dtype() != DType::Bool) return m;
  std::vector<double> values = m.to_vector<double>();
  for (double& v : values) v = v != 0.0 ? -std::numeric_limits<double>::infinity() : 0.0;
  return Tensor::from_vector<double>(values, m.shape()).to(dtype);  // same shape as m
}

// start .. start + n-1 as I64 [n]: the default positions of RoPE.
Tensor arange_positions(int64_t start, int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = start + i;
  return Tensor::from_vector<int64_t>(p, {n});  // [n]
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(int64_t d_model, int64_t n_heads, double dropout, DType dtype,
                                       Rng& rng, const AttentionOptions& options)
    : d_model_(d_model), n_heads_(n_heads), n_kv_heads_(options.n_kv_heads > 0 ? options.n_kv_heads : n_heads),
      head_dim_(n_heads > 0 ? d_model / n_heads : 0), dropout_(dropout), options_(options) {
  ATTN_CHECK(d_model > 0 && n_heads > 0, kOp, "d_model and n_heads must be positive, got ", d_model,
             " and ", n_heads);
  ATTN_CHECK(d_model % n_heads == 0, kOp, "d_model ", d_model, " is not divisible by n_heads ", n_heads);
  ATTN_CHECK(dropout >= 0.0 && dropout < 1.0, kOp, "dropout must be in [0, 1), got ", dropout);
  ATTN_CHECK(is_floating(dtype), kOp, "dtype must be f32 or f64, got ", dtype_name(dtype));
  ATTN_CHECK(options.n_kv_heads >= 0 && n_kv_heads_ <= n_heads && n_heads % n_kv_heads_ == 0, kOp,
             "n_kv_heads ", options.n_kv_heads, " must divide n_heads ", n_heads, " (0 = n_heads)");
  ATTN_CHECK(!options.rope || head_dim_ % 2 == 0, kOp, "RoPE pairs features: the head dimension d_model / n_heads = ",
             head_dim_, " must be even");
  ATTN_CHECK(!options.rope || (options.rope_options.theta > 0.0 && std::isfinite(options.rope_options.theta)), kOp,
             "rope theta must be positive, got ", options.rope_options.theta);
  ATTN_CHECK(!(options.rope && options.alibi), kOp, "RoPE and ALiBi are alternatives; choose one");
  ATTN_CHECK(options.window >= 0, kOp, "window must be >= 0 (0 = none), got ", options.window);
  const int64_t D = d_model_, rows = D + 2 * n_kv_heads_ * head_dim_;  // 3D without grouping
  in_proj_weight_ = register_parameter("in_proj_weight", quantizable_weight({rows, D}, dtype));  // [D + 2*Hkv*Dh, D]
  in_proj_bias_ = register_parameter("in_proj_bias", Tensor::zeros({rows}, dtype));        // [D + 2*Hkv*Dh]
  out_proj_ = register_module("out_proj", std::make_shared<Linear>(D, D, true, dtype, rng));
  // nn.MultiheadAttention._reset_parameters: xavier on the packed matrix, zero biases.
  xavier_uniform_(in_proj_weight_, rng);
  constant_(out_proj_->bias(), 0.0);
  rng_.seed_with(rng.next_u64());
  if (options.alibi) alibi_ = Tensor::from_vector<double>(alibi_slopes(n_heads_), {n_heads_}).to(dtype);  // [H]
}

Tensor MultiHeadAttention::project(const Tensor& x, int64_t i) const {
  const int64_t D = d_model_, kv = n_kv_heads_ * head_dim_;
  const int64_t begin = i == 0 ? 0 : D + (i - 1) * kv, end = i == 0 ? D : begin + kv;
  Tensor b = slice(in_proj_bias_, 0, begin, end);    // [D or Hkv*Dh]
  if (!is_floating(in_proj_weight_.dtype())) {       // quantized: plain views of the rows and their scales
    const Tensor s = in_proj_weight_scale_.defined() ? in_proj_weight_scale_.slice(0, begin, end) : Tensor();
    return quantized_linear(x, in_proj_weight_.slice(0, begin, end), s, b);  // [B, T, D or Hkv*Dh]
  }
  Tensor w = slice(in_proj_weight_, 0, begin, end);  // [D or Hkv*Dh, D], rows of W_Q, W_K or W_V
  return linear(x, w, b);                            // [B, T, D or Hkv*Dh]
}

void MultiHeadAttention::quantize_own(QuantizeContext& ctx) {
  const QuantizedWeight& q = ctx.get(in_proj_weight_, ctx.prefix + "in_proj_weight");
  swap_parameter("in_proj_weight", q.weight);
  in_proj_weight_ = q.weight;
  if (q.scale.defined()) in_proj_weight_scale_ = register_constant("in_proj_weight_scale", q.scale);
}

Tensor MultiHeadAttention::split_heads(const Tensor& x) const { return split_heads(x, n_heads_); }

Tensor MultiHeadAttention::split_heads(const Tensor& x, int64_t heads) const {
  const int64_t B = x.size(0), T = x.size(1);
  Tensor split = reshape(x, {B, T, heads, head_dim_});  // [B, T, heads, Dh]
  return transpose(split, 1, 2);                        // [B, heads, T, Dh]
}

Tensor MultiHeadAttention::join_heads(const Tensor& x) const {
  const int64_t B = x.size(0), T = x.size(2);
  Tensor swapped = transpose(x, 1, 2);          // [B, T, H, Dh]
  // [B, T, D]: a view when swapped is packed, as the attention op's output is; else a copy.
  return reshape(swapped, {B, T, d_model_});
}

SdpaOptions MultiHeadAttention::base_options() const {
  SdpaOptions o;
  o.alibi_slopes = alibi_;  // [H] or undefined
  return o;
}

Tensor MultiHeadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const AttentionMasks& masks) {
  return run(query, key, value, masks, false).out;
}

AttentionOutput MultiHeadAttention::forward_with_weights(const Tensor& query, const Tensor& key,
                                                         const Tensor& value,
                                                         const AttentionMasks& masks) {
  return run(query, key, value, masks, true);
}

AttentionOutput MultiHeadAttention::run(const Tensor& query, const Tensor& key, const Tensor& value,
                                        const AttentionMasks& masks, bool need_weights) {
  const int64_t D = d_model_, H = n_heads_;
  ATTN_CHECK(query.defined() && key.defined() && value.defined(), kOp, "query, key and value must be defined");
  ATTN_CHECK(query.dim() == 3 && query.size(2) == D, kOp, "query must be [B, Tq, ", D, "], got ", query.str());
  ATTN_CHECK(key.dim() == 3 && key.size(2) == D && key.size(0) == query.size(0), kOp, "key must be [",
             query.size(0), ", Tk, ", D, "], got ", key.str(), " with query ", query.str());
  ATTN_CHECK(value.shape() == key.shape(), kOp, "value must have key's shape ", shape_str(key.shape()),
             ", got ", value.str());
  const DType dtype = in_proj_bias_.dtype();
  ATTN_CHECK(query.dtype() == dtype && key.dtype() == dtype && value.dtype() == dtype, kOp,
             "inputs must be ", dtype_name(dtype), " like the parameters; got query ", query.str(),
             ", key ", key.str(), ", value ", value.str());
  const int64_t B = query.size(0), Tq = query.size(1), Tk = key.size(1);

  // Masks: bring nn.MultiheadAttention's forms to the fused op's.
  SdpaOptions options = base_options();
  options.causal = masks.causal;
  if (options_.window > 0) {
    ATTN_CHECK(masks.causal, kOp, "a sliding window (", options_.window, ") needs causal self-attention");
    options.window = options_.window;
  }
  Tensor attn_mask = masks.attn_mask;
  if (attn_mask.defined() && attn_mask.dim() == 3) {
    ATTN_CHECK(attn_mask.shape() == (Shape{B * H, Tq, Tk}), kOp, "a 3-D attn_mask must be [B*H, Tq, Tk] = ",
               shape_str({B * H, Tq, Tk}), ", got ", attn_mask.str());
    attn_mask = reshape(attn_mask, {B, H, Tq, Tk});  // [B, H, Tq, Tk]
  }
  if (masks.key_padding_mask.defined()) {
    const Tensor& kpm = masks.key_padding_mask;
    ATTN_CHECK(kpm.shape() == (Shape{B, Tk}), kOp, "key_padding_mask must be [B, Tk] = ",
               shape_str({B, Tk}), ", got ", kpm.str());
    if (kpm.dtype() == DType::Bool) {
      options.key_padding_mask = kpm;
    } else {
      ATTN_CHECK(kpm.dtype() == dtype, kOp, "a float key_padding_mask must be ", dtype_name(dtype),
                 ", got ", kpm.str());
      Tensor bias = reshape(kpm, {B, 1, 1, Tk});  // [B, 1, 1, Tk]
      attn_mask = attn_mask.defined() ? add(additive_mask(attn_mask, dtype), bias) : bias;
    }
  }
  options.attn_mask = attn_mask;
  options.dropout_p = is_training() ? dropout_ : 0.0;
  options.rng = &rng_;
  options.need_weights = need_weights || capture_;

  // softmax(q k^T / sqrt(Dh) + mask) v per head, with the paper's Q W_Q, K W_K, V W_V split
  // into H query heads and Hkv key/value heads of Dh = D / H.
  SdpaResult attended;
  if (!options_.rope && query.same(key) && key.same(value)) {
    // Self-attention: the three projections as one product with the stacked in_proj_weight,
    // attended where they lie in it; the gradient comes back as one [B, T, D + 2*Hkv*Dh] tensor.
    Tensor qkv = linear_any(query, in_proj_weight_, in_proj_weight_scale_, in_proj_bias_);  // [B, T, D + 2*Hkv*Dh]
    if (capture_) {
      const int64_t kv = n_kv_heads_ * head_dim_;
      const Tensor d = qkv.detach();  // [B, T, D + 2*Hkv*Dh]: q, then k, then v
      last_query_ = split_heads(d.slice(2, 0, D).contiguous());                          // [B, H, T, Dh]
      last_key_ = split_heads(d.slice(2, D, D + kv).contiguous(), n_kv_heads_);          // [B, Hkv, T, Dh]
      last_value_ = split_heads(d.slice(2, D + kv, D + 2 * kv).contiguous(), n_kv_heads_);  // [B, Hkv, T, Dh]
    }
    // A bf16 model's bidirectional self-attention (an encoder's) takes its products on bf16 as
    // its projections do. Causal self-attention stays float32: decoding runs it one position at
    // a time over a cache, and a model scored whole must give decoding's log-probabilities.
    options.bf16_products = in_proj_weight_.dtype() == DType::BF16 && !options.causal && options.window == 0;
    attended = scaled_dot_product_attention_packed(qkv, H, n_kv_heads_, options);  // out [B, H, T, Dh]
  } else {
    Tensor q = split_heads(project(query, 0));                // [B, H, Tq, Dh]
    Tensor k = split_heads(project(key, 1), n_kv_heads_);     // [B, Hkv, Tk, Dh]
    Tensor v = split_heads(project(value, 2), n_kv_heads_);   // [B, Hkv, Tk, Dh]
    if (options_.rope) {
      ATTN_CHECK(Tq == Tk, kOp, "RoPE is for self-attention; got query ", query.str(), " and key ", key.str());
      const Tensor positions = masks.positions.defined() ? masks.positions : arange_positions(0, Tq);  // [B, T] or [T]
      q = rotary_embedding(q, positions, options_.rope_options);  // [B, H, T, Dh]
      k = rotary_embedding(k, positions, options_.rope_options);  // [B, Hkv, T, Dh]
    }
    if (capture_) {
      last_query_ = q.detach();
      last_key_ = k.detach();
      last_value_ = v.detach();
    }
    attended = scaled_dot_product_attention(q, k, v, options);  // out [B, H, Tq, Dh]
  }
  Tensor concat_heads = join_heads(attended.out);  // [B, Tq, D]
  AttentionOutput result;
  result.out = out_proj_->forward(concat_heads);  // [B, Tq, D], the W_O projection
  if (attended.weights.defined()) {
    Tensor weights = attended.weights.detach();  // [B, H, Tq, Tk]
    if (capture_) last_attention_ = weights;
    if (need_weights) result.weights = weights;
  }
  return result;
}

CrossKV MultiHeadAttention::project_memory_kv(const Tensor& memory) const {
  ATTN_CHECK(memory.defined() && memory.dim() == 3 && memory.size(2) == d_model_, kOp,
             "memory must be [B, S, ", d_model_, "], got ", memory.defined() ? memory.str() : "undefined");
  ATTN_CHECK(memory.dtype() == in_proj_bias_.dtype(), kOp, "memory must be ", dtype_name(in_proj_bias_.dtype()),
             ", got ", memory.str());
  CrossKV kv;
  kv.k = split_heads(project(memory, 1), n_kv_heads_).contiguous();  // [B, Hkv, S, Dh]
  kv.v = split_heads(project(memory, 2), n_kv_heads_).contiguous();  // [B, Hkv, S, Dh]
  return kv;
}

Tensor MultiHeadAttention::forward_cached(const Tensor& x, SelfKV& kv, const AttentionMasks& masks) {
  Tensor& k_cache = kv.k;
  Tensor& v_cache = kv.v;
  ATTN_CHECK(x.defined() && x.dim() == 3 && x.size(2) == d_model_, kOp, "cached self-attention's x must be [N, T, ",
             d_model_, "], got ", x.defined() ? x.str() : "undefined");
  ATTN_CHECK(x.dtype() == in_proj_bias_.dtype(), kOp, "x must be ", dtype_name(in_proj_bias_.dtype()),
             ", got ", x.str());
  const int64_t N = x.size(0), T = x.size(1), Hkv = n_kv_heads_;
  if (k_cache.defined())
    ATTN_CHECK(k_cache.dim() == 4 && k_cache.size(0) == N && k_cache.size(1) == Hkv && k_cache.size(3) == head_dim_ &&
                   v_cache.defined() && v_cache.shape() == k_cache.shape(),
               kOp, "cached keys must be [", N, ", ", Hkv, ", T, ", head_dim_, "] like the values, got ", k_cache.str(),
               " and ", v_cache.defined() ? v_cache.str() : "undefined");
  const int64_t held = kv.positions();
  // W_Q, W_K and W_V are stored stacked (in_proj_weight), so one product projects all three: a
  // decoding step reads the weight in one pass, each output the same dot product as alone.
  // The heads are views into qkv ([N, T, H + 2*Hkv, Dh] seen as [N, H + 2*Hkv, T, Dh]), not copies.
  Tensor qkv = linear_any(x, in_proj_weight_, in_proj_weight_scale_, in_proj_bias_);  // [N, T, D + 2*Hkv*Dh]
  Tensor heads = split_heads(qkv, n_heads_ + 2 * Hkv);                    // [N, H + 2*Hkv, T, Dh]
  Tensor q = slice(heads, 1, 0, n_heads_);                                 // [N, H, T, Dh]
  Tensor k_new = slice(heads, 1, n_heads_, n_heads_ + Hkv);                // [N, Hkv, T, Dh]
  Tensor v_new = slice(heads, 1, n_heads_ + Hkv, n_heads_ + 2 * Hkv);      // [N, Hkv, T, Dh]
  if (options_.rope) {
    // Keys are cached rotated: each is rotated once, by its own position.
    const Tensor positions = masks.positions.defined() ? masks.positions : arange_positions(held, T);  // [N, T] or [T]
    q = rotary_embedding(q, positions, options_.rope_options);          // [N, H, T, Dh]
    k_new = rotary_embedding(k_new, positions, options_.rope_options);  // [N, Hkv, T, Dh]
  }
  if (kv.paged != nullptr) return forward_paged(q, k_new, v_new, kv, masks);
  // Into the caches' spare room, in place (nn/kv_cache.h); the attention reads them there.
  k_cache = append_positions(k_cache, k_new);  // [N, Hkv, T' + T, Dh]
  v_cache = append_positions(v_cache, v_new);  // [N, Hkv, T' + T, Dh]
  const int64_t Tk = k_cache.size(2);
  SdpaOptions options = base_options();
  options.causal = T > 1;  // bottom-right: new query i sees the cache and new keys <= i
  if (options_.window > 0) options.window = options_.window;  // and only the last W of those
  if (masks.key_padding_mask.defined()) {
    ATTN_CHECK(masks.key_padding_mask.dtype() == DType::Bool && masks.key_padding_mask.shape() == (Shape{N, Tk}),
               kOp, "cached self-attention's key_padding_mask must be bool [", N, ", ", Tk, "], got ",
               masks.key_padding_mask.str());
    options.key_padding_mask = masks.key_padding_mask;
  }
  SdpaResult attended = scaled_dot_product_attention(q, k_cache, v_cache, options);  // out [N, H, T, Dh]
  if (options_.window > 0 && Tk > options_.window) {
    // Positions older than the window are never seen again: a view of the last W (the next
    // append moves them to a new buffer once the room behind them runs out).
    k_cache = k_cache.slice(2, Tk - options_.window, Tk);  // [N, Hkv, W, Dh]
    v_cache = v_cache.slice(2, Tk - options_.window, Tk);  // [N, Hkv, W, Dh]
  }
  return out_proj_->forward(join_heads(attended.out));  // [N, T, D]
}

Tensor MultiHeadAttention::forward_paged(const Tensor& q, const Tensor& k_new, const Tensor& v_new, SelfKV& kv,
                                         const AttentionMasks& masks) {
  PagedSelf& ps = *kv.paged;
  const int64_t N = q.size(0), T = q.size(2), Hkv = n_kv_heads_;
  const BlockPool& pool = *ps.pool;
  // A bf16 pool (an f32 model's --kv-dtype bf16) stores the keys and values rounded; the
  // attention reads them widened back to f32.
  const bool dtype_ok = pool.dtype() == q.dtype() || (pool.dtype() == DType::BF16 && q.dtype() == DType::F32);
  ATTN_CHECK(pool.kv_heads() == Hkv && pool.head_dim() == head_dim_ && dtype_ok && kv.layer < pool.layers(),
             kOp, "the KV pool holds ", pool.layers(), " layers of ", pool.kv_heads(), " heads of ", pool.head_dim(),
             " (", dtype_name(pool.dtype()), "); this attention has ", Hkv, " heads of ", head_dim_, " (",
             dtype_name(q.dtype()), ")");
  ATTN_CHECK(static_cast<int64_t>(ps.origin.size()) == N, kOp, "the paged cache has ", ps.origin.size(),
             " rows for ", N, " new rows (append the positions' padding flags to the cache first)");
  // The cache's length already counts the new positions (KVCache::append_self_padding, which
  // also allocated their blocks): they go to cache indices [len - T, len).
  const int64_t held = kv.held, Tk = held + T, at = ps.length - T;
  ATTN_CHECK(at >= held, kOp, "the paged cache holds ", ps.length, " positions, fewer than ", held, " + ", T,
             " (append the positions' padding flags to the cache first)");
  ps.write(kv.layer, k_new, at, false);
  ps.write(kv.layer, v_new, at, true);
  SdpaOptions options = base_options();
  options.causal = T > 1;
  if (options_.window > 0) options.window = options_.window;
  if (masks.key_padding_mask.defined()) {
    ATTN_CHECK(masks.key_padding_mask.dtype() == DType::Bool && masks.key_padding_mask.shape() == (Shape{N, Tk}),
               kOp, "cached self-attention's key_padding_mask must be bool [", N, ", ", Tk, "], got ",
               masks.key_padding_mask.str());
    options.key_padding_mask = masks.key_padding_mask;
  }
  PagedKVRef ref;
  ref.k_pool = pool.k(kv.layer);
  ref.v_pool = pool.v(kv.layer);
  ref.tables = ps.flat.data();
  ref.table_stride = ps.stride;
  ref.origin = ps.origin.data();
  ref.first = at + T - Tk;
  ref.keys = Tk;
  ref.block = pool.block_size();
  const Tensor attended = paged_attention(q, ref, N, options);  // [N, H, T, Dh]
  kv.held = options_.window > 0 ? std::min(Tk, options_.window) : Tk;
  return out_proj_->forward(join_heads(attended));  // [N, T, D]
}

Tensor MultiHeadAttention::forward_cached(const Tensor& query, const CrossKV& kv, const Tensor& key_padding_mask,
                                          const std::vector<int64_t>& row_sources) {
  const Tensor& k = kv.k;
  const Tensor& v = kv.v;
  const int64_t D = d_model_, Hkv = n_kv_heads_;
  ATTN_CHECK(!options_.rope && !options_.alibi && options_.window == 0, kOp,
             "cached attention over memory is cross-attention, which has no rope, alibi or window");
  ATTN_CHECK(query.defined() && query.dim() == 3 && query.size(1) >= 1 && query.size(2) == D, kOp,
             "the new positions' query must be [N, T, ", D, "], got ", query.defined() ? query.str() : "undefined");
  const int64_t N = query.size(0), T = query.size(1);
  const bool shared = !row_sources.empty();
  ATTN_CHECK(!shared || static_cast<int64_t>(row_sources.size()) == N, kOp, "row_sources has ",
             row_sources.size(), " entries for ", N, " query rows");
  const int64_t Ns = shared ? (k.defined() && k.dim() == 4 ? k.size(0) : 0) : N;
  ATTN_CHECK(k.defined() && v.defined() && k.dim() == 4 && k.size(0) == Ns && k.size(1) == Hkv &&
                 k.size(3) == head_dim_ && v.shape() == k.shape(),
             kOp, "cached k and v must be [", Ns, ", ", Hkv, ", Tk, ", head_dim_, "], got ",
             k.defined() ? k.str() : "undefined", " and ", v.defined() ? v.str() : "undefined");
  for (int64_t s : row_sources)
    ATTN_CHECK(s >= 0 && s < Ns, kOp, "row source ", s, " out of range [0, ", Ns, ")");
  ATTN_CHECK(query.dtype() == in_proj_bias_.dtype() && k.dtype() == query.dtype() && v.dtype() == query.dtype(),
             kOp, "query, k and v must be ", dtype_name(in_proj_bias_.dtype()), ", got ", query.str(), ", ",
             k.str(), ", ", v.str());
  SdpaOptions options;
  if (key_padding_mask.defined()) {
    ATTN_CHECK(key_padding_mask.dtype() == DType::Bool && key_padding_mask.shape() == (Shape{Ns, k.size(2)}), kOp,
               "a step's key_padding_mask must be bool [", Ns, ", ", k.size(2), "], got ", key_padding_mask.str());
    options.key_padding_mask = key_padding_mask;
  }
  if (!shared) {
    Tensor q = split_heads(project(query, 0));                             // [N, H, T, Dh]
    SdpaResult attended = scaled_dot_product_attention(q, k, v, options);  // out [N, H, T, Dh]
    return out_proj_->forward(join_heads(attended.out));                   // [N, T, D]
  }
  // Source s with rows r_0 .. r_{c-1} (c <= G, the most rows of any source) becomes G * H query
  // heads of T queries each, head h * G + j holding head h of row r_j; query head h * G + j
  // reads K/V head (h * G + j) / (G * H / Hkv) = h / (H / Hkv), the one row r_j reads alone.
  // Slots of a source with fewer than G rows repeat a row; their outputs are dropped. Every
  // memory key is visible to every query (no causal mask over memory), so T > 1 new positions
  // (speculative decoding's verification) attend exactly as T single steps would.
  const int64_t H = n_heads_, Dh = head_dim_;
  std::vector<int64_t> count(static_cast<size_t>(Ns), 0), row_slot(static_cast<size_t>(N));
  int64_t G = 0;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t s = row_sources[static_cast<size_t>(r)];
    row_slot[static_cast<size_t>(r)] = s;  // the source for now; its slot below
    G = std::max(G, ++count[static_cast<size_t>(s)]);
  }
  std::vector<int64_t> slot_row(static_cast<size_t>(Ns * G), 0), filled(static_cast<size_t>(Ns), 0);
  for (int64_t r = 0; r < N; ++r) {
    const int64_t s = row_slot[static_cast<size_t>(r)];
    const int64_t slot = s * G + filled[static_cast<size_t>(s)]++;
    row_slot[static_cast<size_t>(r)] = slot;
    for (int64_t j = slot; j < (s + 1) * G; ++j) slot_row[static_cast<size_t>(j)] = r;  // later rows overwrite
  }
  const Tensor q_rows = project(query, 0).reshape({N, T * D});                                 // [N, T*D]
  const Tensor slots = embedding(q_rows, Tensor::from_vector<int64_t>(slot_row, {Ns * G}));    // [Ns*G, T*D]
  // [Ns, G, T, H, Dh] -> [Ns, H, G, T, Dh] -> [Ns, H*G, T, Dh]
  const Tensor q = slots.reshape({Ns, G, T, H, Dh}).transpose(1, 3).transpose(2, 3).contiguous().reshape(
      {Ns, H * G, T, Dh});
  SdpaResult attended = scaled_dot_product_attention(q, k, v, options);  // out [Ns, H*G, T, Dh]
  // [Ns, H, G, T, Dh] -> [Ns, G, T, H, Dh] -> [Ns*G, T*D]
  const Tensor by_slot = attended.out.contiguous()
                             .reshape({Ns, H, G, T, Dh})
                             .transpose(1, 2)
                             .transpose(2, 3)
                             .contiguous()
                             .reshape({Ns * G, T * D});
  const Tensor out = embedding(by_slot, Tensor::from_vector<int64_t>(row_slot, {N}));  // [N, T*D]
  return out_proj_->forward(out.reshape({N, T, D}));                                    // [N, T, D]
}

void set_capture_attention(Module& root, bool on) {
  for (auto& [name, m] : root.named_modules())
    if (auto* mha = dynamic_cast<MultiHeadAttention*>(m)) mha->set_capture_attention(on);
}

std::vector<std::pair<std::string, Tensor>> captured_attention(Module& root) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, m] : root.named_modules())
    if (auto* mha = dynamic_cast<MultiHeadAttention*>(m))
      if (mha->last_attention().defined()) out.emplace_back(name, mha->last_attention());
  return out;
}

}  // namespace attn::nn
