// embedding: weight [V, D] rows picked by I64 ids of any shape -> [..., D] (§3.4), with a
// backward that scatter-adds into dweight (the ids get no gradient). Every id is checked
// against [0, V) first; the error names the id and its flat position. Not here: padding_idx,
// max_norm, or the sqrt(D) scaling (nn/embedding.h).
#include "attn/ops/ops.h"
#include "kernels/embedding.h"

namespace attn {

namespace {

struct EmbeddingBackward : Node {
  Tensor ids;  // contiguous I64 [...]
  Shape weight_shape;
  const char* name() const override { return "EmbeddingBackward"; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    NoGradGuard guard;
    const Tensor g = g_in.contiguous();
    Tensor dw = Tensor::zeros(weight_shape, g.dtype());
    const int64_t N = ids.numel(), D = weight_shape[1];
    if (g.dtype() == DType::F32)
      kernels::embedding_backward<float>(dw.data<float>(), g.data<float>(), ids.data<int64_t>(), N, D);
    else
      kernels::embedding_backward<double>(dw.data<double>(), g.data<double>(), ids.data<int64_t>(),
                                          N, D);
    return {dw};
  }
  void release() override { ids = Tensor(); }
};

}  // namespace

Tensor embedding(const Tensor& weight_in, const Tensor& ids_in) {
  ATTN_CHECK(weight_in.defined() && ids_in.defined(), "embedding", "undefined input tensor");
  ATTN_CHECK(is_floating(weight_in.dtype()) && weight_in.dim() == 2, "embedding",
             "weight must be a floating [V, D] matrix, got ", weight_in.str());
  ATTN_CHECK(ids_in.dtype() == DType::I64, "embedding", "ids must be i64, got ", ids_in.str());
  const Tensor weight = weight_in.contiguous();
  const Tensor ids = ids_in.contiguous();
  const int64_t V = weight.size(0), D = weight.size(1), N = ids.numel();
  const int64_t* pid = ids.data<int64_t>();
  for (int64_t n = 0; n < N; ++n)
    ATTN_CHECK(pid[n] >= 0 && pid[n] < V, "embedding", "id ", pid[n], " at flat position ", n,
               " of ids ", ids.str(), " is outside [0, ", V, ") for weight ", weight.str());
  Shape out_shape = ids.shape();
  out_shape.push_back(D);
  Tensor out = Tensor::empty(out_shape, weight.dtype());
  if (weight.dtype() == DType::F32)
    kernels::embedding_forward<float>(out.data<float>(), weight.data<float>(), pid, N, D);
  else
    kernels::embedding_forward<double>(out.data<double>(), weight.data<double>(), pid, N, D);
  if (needs_grad({&weight})) {
    auto node = std::make_shared<EmbeddingBackward>();
    // A private copy: the caller may reuse its ids buffer before backward runs.
    node->ids = ids.same(ids_in) ? ids_in.clone() : ids;
    node->weight_shape = weight.shape();
    attach_node(out, node, {weight});
  }
  return out;
}

}  // namespace attn
