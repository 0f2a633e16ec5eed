// Tensor construction, metadata, element access, copies and the autograd entry point. The
// differentiable view methods (reshape, transpose, ...) are in src/core/view.cpp.
#include "attn/core/tensor.h"

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "attn/core/autograd.h"

namespace attn {

namespace {

std::shared_ptr<TensorImpl> make_impl(Shape&& shape, DType dtype) {
  // Dimensions non-negative and the byte count within int64 before anything is allocated.
  const int64_t bytes = checked_nbytes(shape, static_cast<int64_t>(dtype_size(dtype)), "tensor");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = shapes_only() ? Storage::wrap(nullptr, static_cast<size_t>(bytes), nullptr)
                                : Storage::allocate(static_cast<size_t>(bytes));
  impl->strides = contiguous_strides(shape);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  return impl;
}

// Calls f(linear_index, element_offset) for every element in row-major order.
template <class F>
void for_each_offset(const Shape& shape, const Shape& strides, int64_t base, F&& f) {
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  const size_t rank = shape.size();
  std::vector<int64_t> idx(rank, 0);
  int64_t off = base;
  for (int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

// Copies src into dst element by element (same shape and dtype), walking both stride sets
// together in row-major order; the innermost dimension is a tight loop.
template <class T>
void strided_copy(T* dst, const Shape& dst_strides, const T* src, const Shape& src_strides,
                  const Shape& shape) {
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  const size_t rank = shape.size();
  if (rank == 0) {
    *dst = *src;
    return;
  }
  const int64_t inner = shape[rank - 1], ds = dst_strides[rank - 1], ss = src_strides[rank - 1];
  std::vector<int64_t> idx(rank, 0);
  int64_t doff = 0, soff = 0;
  const bool unit = ds == 1 && ss == 1;  // rows contiguous on both sides (head split/merge)
  for (int64_t outer = 0; outer < n / std::max<int64_t>(inner, 1); ++outer) {
    if (unit)
      std::copy(src + soff, src + soff + inner, dst + doff);
    else
      for (int64_t i = 0; i < inner; ++i) dst[doff + i * ds] = src[soff + i * ss];
    for (size_t d = rank - 1; d-- > 0;) {
      if (++idx[d] < shape[d]) {
        doff += dst_strides[d];
        soff += src_strides[d];
        break;
      }
      doff -= dst_strides[d] * (shape[d] - 1);
      soff -= src_strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

// A double as int64: truncated toward zero, saturated to int64's range, NaN -> 0 (a plain cast
// of an out-of-range double is undefined behaviour).
int64_t int64_from_double(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9223372036854775808.0) return INT64_MAX;  // 2^63
  if (v < -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(v);
}

double load_as_double(const void* base, DType dtype, int64_t off) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(base)[off];
    case DType::F64: return static_cast<const double*>(base)[off];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(base)[off]);
    case DType::Bool: return static_cast<const uint8_t*>(base)[off] ? 1.0 : 0.0;
    case DType::I8: return static_cast<const int8_t*>(base)[off];
    case DType::BF16: return float_from_bf16(static_cast<const uint16_t*>(base)[off]);
  }
  return 0;
}

void store_from_double(void* base, DType dtype, int64_t off, double v) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(base)[off] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(base)[off] = v; break;
    case DType::I64: static_cast<int64_t*>(base)[off] = int64_from_double(v); break;
    case DType::Bool: static_cast<uint8_t*>(base)[off] = v != 0.0; break;
    case DType::I8:  // truncated toward zero as for I64, saturated to [-128, 127], NaN -> 0
      static_cast<int8_t*>(base)[off] = std::isnan(v) ? int8_t{0}
                                                      : static_cast<int8_t>(std::clamp(v, -128.0, 127.0));
      break;
    case DType::BF16: static_cast<uint16_t*>(base)[off] = bf16_from_float(static_cast<float>(v)); break;
  }
}

}  // namespace

namespace {
thread_local bool shapes_only_mode = false;
}  // namespace

ShapesOnlyGuard::ShapesOnlyGuard() : previous_(shapes_only_mode) { shapes_only_mode = true; }
ShapesOnlyGuard::~ShapesOnlyGuard() { shapes_only_mode = previous_; }
bool shapes_only() { return shapes_only_mode; }

void Tensor::throw_undefined() { throw Error("[tensor] use of an undefined tensor"); }

Tensor Tensor::empty(Shape shape, DType dtype) { return Tensor(make_impl(std::move(shape), dtype)); }

Tensor Tensor::zeros(Shape shape, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  if (t.storage()->data() != nullptr && t.storage()->nbytes()) std::memset(t.storage()->data(), 0, t.storage()->nbytes());
  return t;
}

Tensor Tensor::ones(Shape shape, DType dtype) { return full(std::move(shape), 1.0, dtype); }

Tensor Tensor::full(Shape shape, double value, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  t.fill(value);
  return t;
}

Tensor Tensor::scalar(double value, DType dtype) { return full({}, value, dtype); }

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  ATTN_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector", values.size(),
             " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}
template Tensor Tensor::from_vector<float>(const std::vector<float>&, const Shape&);
template Tensor Tensor::from_vector<double>(const std::vector<double>&, const Shape&);
template Tensor Tensor::from_vector<int64_t>(const std::vector<int64_t>&, const Shape&);

Tensor Tensor::from_bools(const std::vector<int>& values, const Shape& shape) {
  ATTN_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_bools", values.size(),
             " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, DType::Bool);
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i] != 0;
  return t;
}

Tensor Tensor::randn(const Shape& shape, Rng& rng, DType dtype, double mean, double std) {
  ATTN_CHECK(is_floating(dtype), "randn", "dtype must be floating, got ", dtype_name(dtype));
  Tensor t = empty(shape, dtype);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) store_from_double(t.raw_data(), dtype, i, mean + std * rng.normal());
  return t;
}

Tensor Tensor::uniform(const Shape& shape, Rng& rng, double lo, double hi, DType dtype) {
  ATTN_CHECK(is_floating(dtype), "uniform", "dtype must be floating, got ", dtype_name(dtype));
  Tensor t = empty(shape, dtype);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) store_from_double(t.raw_data(), dtype, i, lo + (hi - lo) * rng.uniform());
  return t;
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, int64_t offset, const Shape& shape,
                            DType dtype) {
  ATTN_CHECK(offset >= 0, "from_storage", "negative offset ", offset);
  const int64_t elements = checked_add(offset, checked_numel(shape, "from_storage"), "from_storage", "offset + elements");
  const auto need = static_cast<size_t>(checked_mul(elements, static_cast<int64_t>(dtype_size(dtype)), "from_storage",
                                                    "the byte count"));
  ATTN_CHECK(storage && need <= storage->nbytes(), "from_storage", "shape ", shape_str(shape),
             " at offset ", offset, " does not fit in ", storage ? storage->nbytes() : 0, " bytes");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(impl);
}

int64_t Tensor::size(int64_t d) const { return impl().shape[wrap_dim(d, dim(), "size")]; }

bool Tensor::is_contiguous() const {
  const auto& s = impl().shape;
  const auto& st = impl().strides;
  int64_t expected = 1;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= s[i];
  }
  return true;
}

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype())) + shape_str(shape());
}

void* Tensor::raw_data() const {
  return static_cast<char*>(impl().storage->data()) + impl().offset * dtype_size(impl().dtype);
}

template <class T>
T* Tensor::data() const {
  ATTN_CHECK(dtype() == dtype_of<T>, "data", "tensor is ", dtype_name(dtype()), ", requested ",
             dtype_name(dtype_of<T>));
  return static_cast<T*>(raw_data());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int64_t* Tensor::data<int64_t>() const;
template int8_t* Tensor::data<int8_t>() const;
template uint16_t* Tensor::data<uint16_t>() const;
template <>
bool* Tensor::data<bool>() const {
  ATTN_CHECK(dtype() == DType::Bool, "data", "tensor is ", dtype_name(dtype()), ", requested bool");
  return static_cast<bool*>(raw_data());
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  std::vector<T> out(static_cast<size_t>(numel()));
  const void* base = impl().storage->data();
  const DType dt = dtype();
  for_each_offset(shape(), strides(), offset(), [&](int64_t i, int64_t off) {
    if constexpr (std::is_same_v<T, int64_t>) {
      // I64 exactly (a double holds only 53 bits), the rest saturated.
      out[static_cast<size_t>(i)] = dt == DType::I64 ? static_cast<const int64_t*>(base)[off]
                                                     : int64_from_double(load_as_double(base, dt, off));
    } else {
      out[static_cast<size_t>(i)] = static_cast<T>(load_as_double(base, dt, off));
    }
  });
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;

double Tensor::item() const {
  ATTN_CHECK(numel() == 1, "item", "tensor ", str(), " does not hold exactly one element");
  return load_as_double(impl().storage->data(), dtype(), offset());
}

double Tensor::at(const std::vector<int64_t>& index) const {
  ATTN_CHECK(static_cast<int64_t>(index.size()) == dim(), "at", "index of rank ", index.size(),
             " for tensor ", str());
  int64_t off = offset();
  for (size_t i = 0; i < index.size(); ++i) {
    ATTN_CHECK(index[i] >= 0 && index[i] < shape()[i], "at", "index ", index[i],
               " out of range in dimension ", i, " of ", str());
    off += index[i] * strides()[i];
  }
  return load_as_double(impl().storage->data(), dtype(), off);
}

void Tensor::copy_from(const Tensor& src) const {
  ATTN_CHECK(src.shape() == shape(), "copy_from", "shape ", shape_str(src.shape()), " into ",
             shape_str(shape()));
  if (src.dtype() == dtype() && src.is_contiguous() && is_contiguous()) {
    if (numel()) std::memcpy(raw_data(), src.raw_data(), static_cast<size_t>(numel()) * dtype_size(dtype()));
    return;
  }
  if (src.dtype() == dtype()) {
    switch (dtype()) {
      case DType::F32:
        strided_copy(static_cast<float*>(raw_data()), strides(), static_cast<const float*>(src.raw_data()),
                     src.strides(), shape());
        return;
      case DType::F64:
      case DType::I64:
        strided_copy(static_cast<int64_t*>(raw_data()), strides(),
                     static_cast<const int64_t*>(src.raw_data()), src.strides(), shape());
        return;
      case DType::Bool:
      case DType::I8:
        strided_copy(static_cast<uint8_t*>(raw_data()), strides(),
                     static_cast<const uint8_t*>(src.raw_data()), src.strides(), shape());
        return;
      case DType::BF16:
        strided_copy(static_cast<uint16_t*>(raw_data()), strides(),
                     static_cast<const uint16_t*>(src.raw_data()), src.strides(), shape());
        return;
    }
  }
  // General path: gather source into row-major doubles, scatter into destination.
  const std::vector<double> values = src.to_vector<double>();
  void* base = impl().storage->data();
  const DType dt = dtype();
  for_each_offset(shape(), strides(), offset(), [&](int64_t i, int64_t off) {
    store_from_double(base, dt, off, values[static_cast<size_t>(i)]);
  });
}

void Tensor::fill(double value) const {
  if (impl().storage->data() == nullptr) return;  // a ShapesOnlyGuard tensor (or no element)
  void* base = impl().storage->data();
  const DType dt = dtype();
  if (is_contiguous()) {
    const int64_t n = numel();
    if (dt == DType::F32) {
      float* p = static_cast<float*>(raw_data());
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(value);
      return;
    }
  }
  for_each_offset(shape(), strides(), offset(),
                  [&](int64_t, int64_t off) { store_from_double(base, dt, off, value); });
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype());
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType d) const {
  if (d == dtype() && is_contiguous()) return detach();
  Tensor t = empty(shape(), d);
  t.copy_from(*this);
  return t;
}

Tensor& Tensor::set_requires_grad(bool value) {
  ATTN_CHECK(is_leaf(), "set_requires_grad", "only leaf tensors can be marked; this one was produced by ",
             "an op");
  ATTN_CHECK(!value || is_floating(dtype()), "set_requires_grad", "a ", dtype_name(dtype()),
             " tensor cannot require grad");
  impl().requires_grad = value;
  return *this;
}

Tensor Tensor::grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }

void Tensor::set_grad(const Tensor& g) const {
  if (!g.defined()) {
    impl().grad.reset();
    return;
  }
  ATTN_CHECK(g.shape() == shape(), "set_grad", "gradient ", g.str(), " for tensor ", str());
  impl().grad = g.impl_ptr();
}

void Tensor::zero_grad() const { impl().grad.reset(); }

Tensor Tensor::detach() const {
  auto impl2 = std::make_shared<TensorImpl>();
  impl2->storage = impl().storage;
  impl2->offset = impl().offset;
  impl2->shape = impl().shape;
  impl2->strides = impl().strides;
  impl2->dtype = impl().dtype;
  return Tensor(impl2);
}

void Tensor::backward(const Tensor& grad_output) const {
  Tensor seed = grad_output;
  if (!seed.defined()) {
    ATTN_CHECK(numel() == 1, "backward", "called without a gradient on ", str(),
               "; only one-element tensors can seed backward implicitly");
    seed = Tensor::ones(shape(), dtype());
  }
  ATTN_CHECK(seed.shape() == shape(), "backward", "gradient ", seed.str(), " for output ", str());
  run_backward(*this, seed);
}

}  // namespace attn
