// MultiHeadAttention (paper §3.2.2): project, split heads, attend, join heads, project.
// Masks arrive in nn.MultiheadAttention's forms and are brought to the forms the fused op
// takes (ops/attention.h): a 3-D [B*H, Tq, Tk] mask becomes [B, H, Tq, Tk], and a float key
// padding mask is folded into an additive attn_mask.
#include "attn/nn/attention.h"

#include <cmath>
#include <limits>

#include "attn/nn/init.h"
#include "attn/ops/ops.h"

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

}  // namespace

MultiHeadAttention::MultiHeadAttention(int64_t d_model, int64_t n_heads, double dropout, DType dtype,
                                       Rng& rng)
    : d_model_(d_model), n_heads_(n_heads), head_dim_(n_heads > 0 ? d_model / n_heads : 0),
      dropout_(dropout) {
  ATTN_CHECK(d_model > 0 && n_heads > 0, kOp, "d_model and n_heads must be positive, got ", d_model,
             " and ", n_heads);
  ATTN_CHECK(d_model % n_heads == 0, kOp, "d_model ", d_model, " is not divisible by n_heads ", n_heads);
  ATTN_CHECK(dropout >= 0.0 && dropout < 1.0, kOp, "dropout must be in [0, 1), got ", dropout);
  ATTN_CHECK(is_floating(dtype), kOp, "dtype must be f32 or f64, got ", dtype_name(dtype));
  const int64_t D = d_model_;
  in_proj_weight_ = register_parameter("in_proj_weight", Tensor::zeros({3 * D, D}, dtype));  // [3D, D]
  in_proj_bias_ = register_parameter("in_proj_bias", Tensor::zeros({3 * D}, dtype));        // [3D]
  out_proj_ = register_module("out_proj", std::make_shared<Linear>(D, D, true, dtype, rng));
  // nn.MultiheadAttention._reset_parameters: xavier on the packed matrix, zero biases.
  xavier_uniform_(in_proj_weight_, rng);
  constant_(out_proj_->bias(), 0.0);
  rng_.seed_with(rng.next_u64());
}

Tensor MultiHeadAttention::project(const Tensor& x, int64_t i) const {
  const int64_t D = d_model_;
  Tensor w = slice(in_proj_weight_, 0, i * D, (i + 1) * D);  // [D, D], rows of W_Q, W_K or W_V
  Tensor b = slice(in_proj_bias_, 0, i * D, (i + 1) * D);    // [D]
  return linear(x, w, b);                                    // [B, T, D]
}

Tensor MultiHeadAttention::split_heads(const Tensor& x) const {
  const int64_t B = x.size(0), T = x.size(1);
  Tensor heads = reshape(x, {B, T, n_heads_, head_dim_});  // [B, T, H, Dh]
  return transpose(heads, 1, 2);                            // [B, H, T, Dh]
}

Tensor MultiHeadAttention::join_heads(const Tensor& x) const {
  const int64_t B = x.size(0), T = x.size(2);
  Tensor swapped = transpose(x, 1, 2);          // [B, T, H, Dh]
  return reshape(swapped, {B, T, d_model_});    // [B, T, D] (a copy: swapped is strided)
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
  const DType dtype = in_proj_weight_.dtype();
  ATTN_CHECK(query.dtype() == dtype && key.dtype() == dtype && value.dtype() == dtype, kOp,
             "inputs must be ", dtype_name(dtype), " like the parameters; got query ", query.str(),
             ", key ", key.str(), ", value ", value.str());
  const int64_t B = query.size(0), Tq = query.size(1), Tk = key.size(1);

  // Masks: bring nn.MultiheadAttention's forms to the fused op's.
  SdpaOptions options;
  options.causal = masks.causal;
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

  // The paper's Q W_Q, K W_K, V W_V, each split into H heads of Dh = D / H.
  Tensor q = split_heads(project(query, 0));  // [B, H, Tq, Dh]
  Tensor k = split_heads(project(key, 1));    // [B, H, Tk, Dh]
  Tensor v = split_heads(project(value, 2));  // [B, H, Tk, Dh]
  // softmax(q k^T / sqrt(Dh) + mask) v per head.
  SdpaResult attended = scaled_dot_product_attention(q, k, v, options);  // out [B, H, Tq, Dh]
  Tensor concat_heads = join_heads(attended.out);                         // [B, Tq, D]
  AttentionOutput result;
  result.out = out_proj_->forward(concat_heads);  // [B, Tq, D], the W_O projection
  if (attended.weights.defined()) {
    Tensor weights = attended.weights.detach();  // [B, H, Tq, Tk]
    if (capture_) last_attention_ = weights;
    if (need_weights) result.weights = weights;
  }
  return result;
}

void MultiHeadAttention::project_memory_kv(const Tensor& memory, Tensor& k, Tensor& v) const {
  ATTN_CHECK(memory.defined() && memory.dim() == 3 && memory.size(2) == d_model_, kOp,
             "memory must be [B, S, ", d_model_, "], got ", memory.defined() ? memory.str() : "undefined");
  ATTN_CHECK(memory.dtype() == in_proj_weight_.dtype(), kOp, "memory must be ", dtype_name(in_proj_weight_.dtype()),
             ", got ", memory.str());
  k = split_heads(project(memory, 1)).contiguous();  // [B, H, S, Dh]
  v = split_heads(project(memory, 2)).contiguous();  // [B, H, S, Dh]
}

Tensor MultiHeadAttention::forward_step_self(const Tensor& x, Tensor& k_cache, Tensor& v_cache,
                                             const Tensor& key_padding_mask) {
  ATTN_CHECK(x.defined() && x.dim() == 3 && x.size(1) == 1 && x.size(2) == d_model_, kOp,
             "a step's x must be [N, 1, ", d_model_, "], got ", x.defined() ? x.str() : "undefined");
  ATTN_CHECK(x.dtype() == in_proj_weight_.dtype(), kOp, "x must be ", dtype_name(in_proj_weight_.dtype()),
             ", got ", x.str());
  Tensor k_new = split_heads(project(x, 1));  // [N, H, 1, Dh]
  Tensor v_new = split_heads(project(x, 2));  // [N, H, 1, Dh]
  if (k_cache.defined()) {
    ATTN_CHECK(k_cache.dim() == 4 && k_cache.size(0) == x.size(0) && v_cache.shape() == k_cache.shape(), kOp,
               "cached keys must be [", x.size(0), ", H, T, Dh] like the values, got ", k_cache.str(), " and ",
               v_cache.defined() ? v_cache.str() : "undefined");
    k_cache = concat({k_cache, k_new}, 2);  // [N, H, T+1, Dh]
    v_cache = concat({v_cache, v_new}, 2);  // [N, H, T+1, Dh]
  } else {
    k_cache = k_new.contiguous();  // [N, H, 1, Dh]
    v_cache = v_new.contiguous();  // [N, H, 1, Dh]
  }
  return forward_step_cached(x, k_cache, v_cache, key_padding_mask);  // [N, 1, D]
}

Tensor MultiHeadAttention::forward_step_cached(const Tensor& query, const Tensor& k, const Tensor& v,
                                               const Tensor& key_padding_mask) {
  const int64_t D = d_model_, H = n_heads_;
  ATTN_CHECK(query.defined() && query.dim() == 3 && query.size(1) == 1 && query.size(2) == D, kOp,
             "a step's query must be [N, 1, ", D, "], got ", query.defined() ? query.str() : "undefined");
  const int64_t N = query.size(0);
  ATTN_CHECK(k.defined() && v.defined() && k.dim() == 4 && k.size(0) == N && k.size(1) == H &&
                 k.size(3) == head_dim_ && v.shape() == k.shape(),
             kOp, "cached k and v must be [", N, ", ", H, ", Tk, ", head_dim_, "], got ",
             k.defined() ? k.str() : "undefined", " and ", v.defined() ? v.str() : "undefined");
  ATTN_CHECK(query.dtype() == in_proj_weight_.dtype() && k.dtype() == query.dtype() && v.dtype() == query.dtype(),
             kOp, "query, k and v must be ", dtype_name(in_proj_weight_.dtype()), ", got ", query.str(), ", ",
             k.str(), ", ", v.str());
  SdpaOptions options;
  if (key_padding_mask.defined()) {
    ATTN_CHECK(key_padding_mask.dtype() == DType::Bool && key_padding_mask.shape() == (Shape{N, k.size(2)}), kOp,
               "a step's key_padding_mask must be bool [", N, ", ", k.size(2), "], got ", key_padding_mask.str());
    options.key_padding_mask = key_padding_mask;
  }
  Tensor q = split_heads(project(query, 0));                               // [N, H, 1, Dh]
  SdpaResult attended = scaled_dot_product_attention(q, k, v, options);    // out [N, H, 1, Dh]
  return out_proj_->forward(join_heads(attended.out));                     // [N, 1, D]
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
