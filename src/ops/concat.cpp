// concat and split along one dimension. Used to join heads and batches and to cut fused
// projections (e.g. the packed in_proj of §3.2.2 into Q, K, V). concat copies (row blocks
// with memcpy); split returns slice views, whose own SliceBackward nodes carry the gradient.
// Deliberately absent: stack (reshape + concat does it) and type promotion.
#include <cstring>

#include "attn/ops/ops.h"

namespace attn {

namespace {

// dL/dx_i is the slice of dL/d(out) that x_i was copied into.
struct ConcatBackward : Node {
  int64_t dim = 0;
  std::vector<int64_t> sizes;  // each input's extent along dim
  const char* name() const override { return "ConcatBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    NoGradGuard guard;
    std::vector<Tensor> grads(inputs.size());
    int64_t off = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].requires_grad()) grads[i] = contiguous(slice(g, dim, off, off + sizes[i]));
      off += sizes[i];
    }
    return grads;
  }
};

}  // namespace

Tensor concat(const std::vector<Tensor>& xs_in, int64_t dim) {
  ATTN_CHECK(!xs_in.empty(), "concat", "needs at least one tensor");
  for (const Tensor& x : xs_in) ATTN_CHECK(x.defined(), "concat", "undefined input tensor");
  const Tensor& first = xs_in[0];
  dim = wrap_dim(dim, first.dim(), "concat");
  const size_t d = static_cast<size_t>(dim);
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (size_t i = 0; i < xs_in.size(); ++i) {
    const Tensor& x = xs_in[i];
    ATTN_CHECK(x.dtype() == first.dtype(), "concat", "input ", i, " is ", x.str(), " but input 0 is ",
               first.str());
    bool agree = x.dim() == first.dim();
    for (size_t k = 0; agree && k < out_shape.size(); ++k)
      agree = k == d || x.shape()[k] == first.shape()[k];
    ATTN_CHECK(agree, "concat", "input ", i, " ", x.str(), " does not match input 0 ", first.str(),
               " outside dimension ", dim);
    out_shape[d] += x.shape()[d];
  }
  std::vector<Tensor> xs;
  std::vector<int64_t> sizes;
  for (const Tensor& x : xs_in) {
    xs.push_back(x.contiguous());
    sizes.push_back(x.shape()[d]);
  }
  Tensor out = Tensor::empty(out_shape, first.dtype());
  int64_t outer = 1, inner = 1;
  for (size_t k = 0; k < d; ++k) outer *= out_shape[k];
  for (size_t k = d + 1; k < out_shape.size(); ++k) inner *= out_shape[k];
  // out viewed as [outer, total, inner]; input i fills columns [off, off + n_i) of each row.
  const size_t es = dtype_size(first.dtype());
  const int64_t row = out_shape[d] * inner;  // elements per outer index in out
  auto* po = static_cast<unsigned char*>(out.raw_data());
  int64_t off = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const int64_t chunk = sizes[i] * inner;
    const auto* px = static_cast<const unsigned char*>(xs[i].raw_data());
    if (chunk > 0)
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(po + static_cast<size_t>(o * row + off * inner) * es,
                    px + static_cast<size_t>(o * chunk) * es, static_cast<size_t>(chunk) * es);
    off += sizes[i];
  }
  bool grad = false;
  for (const Tensor& x : xs) grad = grad || needs_grad({&x});
  if (grad) {
    auto node = std::make_shared<ConcatBackward>();
    node->dim = dim;
    node->sizes = sizes;
    attach_node(out, node, xs);
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  ATTN_CHECK(x.defined(), "split", "undefined input tensor");
  dim = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    ATTN_CHECK(s >= 0, "split", "negative size ", s, " for ", x.str());
    total += s;
  }
  ATTN_CHECK(total == x.size(dim), "split", "sizes sum to ", total, " but dimension ", dim, " of ",
             x.str(), " is ", x.size(dim));
  std::vector<Tensor> pieces;
  int64_t off = 0;
  for (int64_t s : sizes) {
    pieces.push_back(slice(x, dim, off, off + s));
    off += s;
  }
  return pieces;
}

}  // namespace attn
