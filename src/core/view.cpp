// Tensor's views: reshape, transpose, permute, slice, contiguous, and their backward nodes.
// A view shares storage with its input; its backward maps the gradient back to the
// input's shape, contiguous unless the node that made the input reads strided gradients
// (Node::reads_strided_grad: the attention op), so other backward kernels never see strides.
#include <numeric>

#include "attn/core/autograd.h"
#include "attn/core/tensor.h"

namespace attn {

namespace {

Tensor make_view(const Tensor& x, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.storage();
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = x.dtype();
  return Tensor(impl);
}

struct ReshapeBackward : Node {
  Shape in_shape;
  const char* name() const override { return "ReshapeBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override { return {g.reshape(in_shape)}; }
};

struct PermuteBackward : Node {
  std::vector<int64_t> inverse;
  const char* name() const override { return "PermuteBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor p = g.permute(inverse);
    const Tensor& x = inputs[0];
    return {x.grad_fn() && x.grad_fn()->reads_strided_grad() ? p : p.contiguous()};
  }
};

struct SliceBackward : Node {
  Shape in_shape;
  int64_t dim = 0, start = 0;
  const char* name() const override { return "SliceBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    NoGradGuard guard;
    Tensor out = Tensor::zeros(in_shape, g.dtype());
    Tensor window = out.slice(dim, start, start + g.size(dim));
    window.copy_from(g);
    return {out};
  }
};

struct ContiguousBackward : Node {
  const char* name() const override { return "ContiguousBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override { return {g}; }
};

}  // namespace

Tensor Tensor::reshape(const Shape& shape_in) const {
  const Tensor& x = *this;
  Shape shape = shape_in;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      ATTN_CHECK(infer < 0, "reshape", "more than one -1 in ", shape_str(shape_in));
      infer = static_cast<int64_t>(i);
    } else {
      ATTN_CHECK(shape[i] >= 0, "reshape", "negative dimension in ", shape_str(shape_in));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    ATTN_CHECK(known > 0 && x.numel() % known == 0, "reshape", "cannot reshape ", x.str(), " to ",
               shape_str(shape_in));
    shape[static_cast<size_t>(infer)] = x.numel() / known;
  }
  ATTN_CHECK(shape_numel(shape) == x.numel(), "reshape", "cannot reshape ", x.str(), " to ",
             shape_str(shape_in));
  Tensor src = x.is_contiguous() ? x : x.contiguous();
  Tensor out = make_view(src, shape, contiguous_strides(shape), src.offset());
  if (needs_grad({&src})) {
    auto node = std::make_shared<ReshapeBackward>();
    node->in_shape = src.shape();
    attach_node(out, node, {src});
  }
  return out;
}

Tensor Tensor::permute(const std::vector<int64_t>& dims_in) const {
  const Tensor& x = *this;
  const int64_t rank = x.dim();
  ATTN_CHECK(static_cast<int64_t>(dims_in.size()) == rank, "permute", dims_in.size(),
             " dimensions given for ", x.str());
  std::vector<int64_t> dims(dims_in.size());
  std::vector<bool> used(dims_in.size(), false);
  for (size_t i = 0; i < dims_in.size(); ++i) {
    dims[i] = wrap_dim(dims_in[i], rank, "permute");
    ATTN_CHECK(!used[static_cast<size_t>(dims[i])], "permute", "dimension ", dims[i], " repeated");
    used[static_cast<size_t>(dims[i])] = true;
  }
  Shape shape(dims.size()), strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    shape[i] = x.shape()[static_cast<size_t>(dims[i])];
    strides[i] = x.strides()[static_cast<size_t>(dims[i])];
  }
  Tensor out = make_view(x, shape, strides, x.offset());
  if (needs_grad({&x})) {
    auto node = std::make_shared<PermuteBackward>();
    node->inverse.resize(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) node->inverse[static_cast<size_t>(dims[i])] = static_cast<int64_t>(i);
    attach_node(out, node, {x});
  }
  return out;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  const Tensor& x = *this;
  const int64_t rank = x.dim();
  d0 = wrap_dim(d0, rank, "transpose");
  d1 = wrap_dim(d1, rank, "transpose");
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[static_cast<size_t>(d0)], dims[static_cast<size_t>(d1)]);
  return x.permute(dims);
}

Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end) const {
  const Tensor& x = *this;
  dim = wrap_dim(dim, x.dim(), "slice");
  const int64_t n = x.shape()[static_cast<size_t>(dim)];
  if (start < 0) start += n;
  if (end < 0) end += n;
  ATTN_CHECK(start >= 0 && end <= n && start <= end, "slice", "range [", start, ", ", end,
             ") out of bounds for dimension ", dim, " of ", x.str());
  Shape shape = x.shape();
  shape[static_cast<size_t>(dim)] = end - start;
  Tensor out = make_view(x, shape, x.strides(), x.offset() + start * x.strides()[static_cast<size_t>(dim)]);
  if (needs_grad({&x})) {
    auto node = std::make_shared<SliceBackward>();
    node->in_shape = x.shape();
    node->dim = dim;
    node->start = start;
    attach_node(out, node, {x});
  }
  return out;
}

Tensor Tensor::contiguous() const {
  const Tensor& x = *this;
  if (x.is_contiguous()) return x;
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  out.copy_from(x);
  if (needs_grad({&x})) attach_node(out, std::make_shared<ContiguousBackward>(), {x});
  return out;
}

}  // namespace attn
