// attn/core/tensor.h — the n-dimensional array and its autograd hooks.
// A Tensor is a cheap handle (shared_ptr) to a TensorImpl: storage + offset + shape +
// strides + dtype, plus what reverse-mode autograd needs (requires_grad, the Node that
// produced it, the accumulated gradient of a leaf). Views share storage. Kernels want
// contiguous inputs: ops call contiguous() first. Mathematical ops live in attn/ops/ops.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attn/core/dtype.h"
#include "attn/core/error.h"
#include "attn/core/rng.h"
#include "attn/core/shape.h"
#include "attn/core/storage.h"

namespace attn {

class Node;  // attn/core/autograd.h
class Tensor;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;  // in elements
  DType dtype = DType::F32;
  // autograd
  bool requires_grad = false;        // a leaf that wants .grad, or a result of such
  std::shared_ptr<Node> grad_fn;     // the node that produced this tensor (null for leaves)
  std::shared_ptr<TensorImpl> grad;  // accumulated gradient of a leaf
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- construction -------------------------------------------------------------------
  // The shape is taken by value: a temporary ({B, T, D}) moves into the tensor uncopied.
  static Tensor empty(Shape shape, DType dtype = DType::F32);  // uninitialised
  static Tensor zeros(Shape shape, DType dtype = DType::F32);
  static Tensor ones(Shape shape, DType dtype = DType::F32);
  static Tensor full(Shape shape, double value, DType dtype = DType::F32);
  static Tensor scalar(double value, DType dtype = DType::F32);  // rank 0
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  // Bool tensor from 0/1 values.
  static Tensor from_bools(const std::vector<int>& values, const Shape& shape);
  // Standard normal * std + mean, or uniform in [lo, hi), drawn in row-major order.
  static Tensor randn(const Shape& shape, Rng& rng, DType dtype = DType::F32, double mean = 0,
                      double std = 1);
  static Tensor uniform(const Shape& shape, Rng& rng, double lo, double hi,
                        DType dtype = DType::F32);
  // View of existing storage (no copy).
  static Tensor from_storage(std::shared_ptr<Storage> storage, int64_t offset, const Shape& shape,
                             DType dtype);

  // ---- metadata -----------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(impl().shape); }
  DType dtype() const { return impl().dtype; }
  int64_t offset() const { return impl().offset; }
  bool is_contiguous() const;
  std::string str() const;  // "f32[2, 3]"
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  TensorImpl& impl() const {  // throws on an undefined tensor; inline, as every accessor uses it
    if (!impl_) [[unlikely]] throw_undefined();
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- element access (checks dtype) --------------------------------------------------
  template <class T> T* data() const;  // pointer to the first element (offset applied)
  void* raw_data() const;
  template <class T> std::vector<T> to_vector() const;  // row-major copy, any strides
  double item() const;                                  // the value of a one-element tensor
  double at(const std::vector<int64_t>& index) const;   // one element as double

  // ---- copies and conversions (not recorded by autograd) -------------------------------
  Tensor clone() const;       // contiguous deep copy, detached
  Tensor to(DType d) const;   // converted contiguous copy, detached (same tensor if same dtype and contiguous)
  void copy_from(const Tensor& src) const;  // element-wise copy into this tensor (same shape; any strides)
  void fill(double value) const;

  // ---- autograd -----------------------------------------------------------------------
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& set_requires_grad(bool value);  // only on leaves
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  Tensor grad() const;  // undefined until backward reached this leaf
  void set_grad(const Tensor& g) const;
  void zero_grad() const;  // drops the gradient
  Tensor detach() const;  // same storage, no history
  // Reverse-mode sweep from this tensor. With no argument it must hold one element
  // and the seed gradient is 1.
  void backward(const Tensor& grad_output = Tensor()) const;

  // ---- views (recorded by autograd; src/core/view.cpp) ---------------------------------
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end) const;
  Tensor contiguous() const;

 private:
  [[noreturn]] static void throw_undefined();

  std::shared_ptr<TensorImpl> impl_;
};

// While a ShapesOnlyGuard lives on this thread, new tensors (empty, zeros, ones, full) get a
// shape, dtype and byte count but no memory: their data pointer is null and nothing is written.
// For laying a model out to list its parameters without allocating them (models::
// make_model_layout); such a tensor must never be read, written or computed with.
class ShapesOnlyGuard {
 public:
  ShapesOnlyGuard();
  ~ShapesOnlyGuard();
  ShapesOnlyGuard(const ShapesOnlyGuard&) = delete;
  ShapesOnlyGuard& operator=(const ShapesOnlyGuard&) = delete;

 private:
  bool previous_;
};
// True while a ShapesOnlyGuard is alive on this thread.
bool shapes_only();

}  // namespace attn
