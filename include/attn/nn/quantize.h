// attn/nn/quantize.h — a model's weights in reduced precision for inference (int8 with a float
// scale per row, or bf16: ops/quantize.h). quantize_module swaps, in place, every quantizable
// weight of a module tree for its quantized copy:
//   - Linear "weight" [Out, In] (the FFN, attention out_proj, the output projection, MoE
//     router) and MultiHeadAttention "in_proj_weight" [3D, D]: int8 per output row, or bf16;
//   - Embedding "weight" [V, D]: int8 per token row (the same rows as a tied output
//     projection), or bf16.
// An int8 weight gains a parameter "<name>_scale" F32 [rows] next to it ("weight_scale",
// "in_proj_weight_scale"). Tied weights stay tied: the tensor is quantized once and both names
// get the same pair. Biases, norms, learned position tables, linear attention's projections and
// the experts of a mixture stay float32, and so does the arithmetic between the products (a bf16
// model's bidirectional self-attention also takes its two products in bf16 where the CPU has AMX
// tiles: SdpaOptions::bf16_products). The model then serves inference only (the quantized ops
// refuse to record gradients).
#pragma once

#include <map>
#include <string>

#include "attn/nn/module.h"
#include "attn/ops/quantize.h"

namespace attn::nn {

// The state of one quantize_module pass.
class QuantizeContext {
 public:
  QuantizeContext(Quantization q, bool compute) : q_(q), compute_(compute) {}
  Quantization quantization() const { return q_; }
  // The quantized pair for the float weight `w`, computed once per tensor (tied weights share
  // it). When the pass only prepares the layout (compute = false), a zero pair of the right
  // dtypes and shapes instead. `what` names the weight in errors (NaN/Inf).
  const QuantizedWeight& get(const Tensor& w, const std::string& what);
  // The dotted name of the module being quantized ("" for the root), for messages.
  std::string prefix;

 private:
  Quantization q_;
  bool compute_;
  std::map<const TensorImpl*, std::pair<Tensor, QuantizedWeight>> done_;  // float tensor kept alive
};

// While a QuantizedLayoutGuard lives on this thread, the float weights that
// prepare_quantized_module replaces (Linear and Embedding "weight", MultiHeadAttention
// "in_proj_weight", made with quantizable_weight) get no memory (ShapesOnlyGuard tensors), so
// that a quantized model laid out for a loader never holds their float32 copies: they would be
// zero-filled, then freed into the storage cache and stay resident (2x a bf16 model's bytes,
// 4x an int8 model's). models::make_model sets it for a quantized config it does not
// initialise; such a module must go through prepare_quantized_module before it is used.
class QuantizedLayoutGuard {
 public:
  QuantizedLayoutGuard();
  ~QuantizedLayoutGuard();
  QuantizedLayoutGuard(const QuantizedLayoutGuard&) = delete;
  QuantizedLayoutGuard& operator=(const QuantizedLayoutGuard&) = delete;

 private:
  bool previous_;
};
// A float weight that quantization may replace: Tensor::zeros(shape, dtype), without memory
// under a QuantizedLayoutGuard.
Tensor quantizable_weight(const Shape& shape, DType dtype);

// Quantizes every quantizable weight of `root` (see above) from its current float32 values.
// Errors: a module that is already quantized, an f64 model, a NaN or Inf weight (named).
void quantize_module(Module& root, Quantization q);
// The same layout with zero values, for a loader that fills every tensor from a file next.
// Parameters still without memory afterwards (float weights that stay float, made under a
// QuantizedLayoutGuard) get theirs, zero-filled; under a ShapesOnlyGuard nothing gets memory.
void prepare_quantized_module(Module& root, Quantization q);

}  // namespace attn::nn
