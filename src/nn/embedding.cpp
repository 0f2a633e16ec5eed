// Embedding: rows of weight [V, D] picked by token ids (nn.Embedding, no padding_idx).
#include "attn/nn/embedding.h"

#include "attn/nn/init.h"
#include "attn/nn/quantize.h"
#include "attn/ops/ops.h"
#include "attn/ops/quantize.h"

namespace attn::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t dim, DType dtype, Rng& rng, double init_std)
    : num_(num_embeddings), dim_(dim) {
  ATTN_CHECK(num_embeddings > 0 && dim > 0, "Embedding", "sizes must be positive, got V ",
             num_embeddings, ", D ", dim);
  ATTN_CHECK(is_floating(dtype), "Embedding", "dtype must be f32 or f64, got ", dtype_name(dtype));
  weight_ = register_parameter("weight", quantizable_weight({num_, dim_}, dtype));  // [V, D]
  normal_(weight_, 0.0, init_std, rng);
}

Tensor Embedding::forward(const Tensor& ids) const {
  ATTN_CHECK(ids.dtype() == DType::I64, "Embedding", "ids must be i64, got ", ids.str());
  return embedding_any(weight_, weight_scale_, ids);  // [..., D]: embedding(W, ids) for a float W
}

void Embedding::quantize_own(QuantizeContext& ctx) {
  const QuantizedWeight& q = ctx.get(weight_, ctx.prefix + "weight");
  swap_parameter("weight", q.weight);
  weight_ = q.weight;
  if (q.scale.defined()) weight_scale_ = register_constant("weight_scale", q.scale);
}

void Embedding::tie_weight(const Tensor& w) {
  replace_parameter("weight", w);
  weight_ = w;
}

}  // namespace attn::nn
