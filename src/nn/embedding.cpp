// Embedding: rows of weight [V, D] picked by token ids (nn.Embedding, no padding_idx).
#include "attn/nn/embedding.h"

#include "attn/nn/init.h"
#include "attn/ops/ops.h"

namespace attn::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t dim, DType dtype, Rng& rng, double init_std)
    : num_(num_embeddings), dim_(dim) {
  ATTN_CHECK(num_embeddings > 0 && dim > 0, "Embedding", "sizes must be positive, got V ",
             num_embeddings, ", D ", dim);
  ATTN_CHECK(is_floating(dtype), "Embedding", "dtype must be f32 or f64, got ", dtype_name(dtype));
  weight_ = register_parameter("weight", Tensor::zeros({num_, dim_}, dtype));  // [V, D]
  normal_(weight_, 0.0, init_std, rng);
}

Tensor Embedding::forward(const Tensor& ids) const {
  ATTN_CHECK(ids.dtype() == DType::I64, "Embedding", "ids must be i64, got ", ids.str());
  return embedding(weight_, ids);  // [..., D]
}

void Embedding::tie_weight(const Tensor& w) {
  replace_parameter("weight", w);
  weight_ = w;
}

}  // namespace attn::nn
