// nn/quantize.cpp — see attn/nn/quantize.h: the pass over the module tree and its cache of
// quantized tensors (so that tied weights stay one tensor).
#include "attn/nn/quantize.h"

#include "attn/core/error.h"

namespace attn::nn {

namespace {
thread_local bool quantized_layout = false;
}  // namespace

QuantizedLayoutGuard::QuantizedLayoutGuard() : previous_(quantized_layout) { quantized_layout = true; }
QuantizedLayoutGuard::~QuantizedLayoutGuard() { quantized_layout = previous_; }

Tensor quantizable_weight(const Shape& shape, DType dtype) {
  if (!quantized_layout) return Tensor::zeros(shape, dtype);
  const ShapesOnlyGuard no_memory;
  return Tensor::zeros(shape, dtype);
}

const QuantizedWeight& QuantizeContext::get(const Tensor& w, const std::string& what) {
  ATTN_CHECK(w.defined() && w.dtype() == DType::F32, "quantize", "'", what,
             "' must be an f32 weight to quantize, got ", w.defined() ? w.str() : "undefined",
             is_floating(w.dtype()) ? "" : " (the model is quantized already)");
  auto it = done_.find(w.impl_ptr().get());
  if (it != done_.end()) return it->second.second;
  QuantizedWeight qw;
  if (compute_) {
    qw = quantize_weight(w, q_, what);
  } else {
    qw.weight = Tensor::zeros(w.shape(), quantized_dtype(q_));
    if (q_ == Quantization::Int8) qw.scale = Tensor::ones({w.size(0)}, DType::F32);
  }
  return done_.emplace(w.impl_ptr().get(), std::make_pair(w, std::move(qw))).first->second.second;
}

namespace {

void run_pass(Module& root, Quantization q, bool compute) {
  ATTN_CHECK(q != Quantization::None, "quantize", "no quantization given (int8 or bf16)");
  QuantizeContext ctx(q, compute);
  for (auto& [name, module] : root.named_modules()) {
    ctx.prefix = name.empty() ? "" : name + ".";
    module->quantize_own(ctx);
  }
}

}  // namespace

void quantize_module(Module& root, Quantization q) { run_pass(root, q, true); }

void prepare_quantized_module(Module& root, Quantization q) {
  run_pass(root, q, false);
  if (shapes_only()) return;
  for (auto& [name, t] : root.named_parameters()) t.impl_ptr()->storage->materialize();
}

}  // namespace attn::nn
