// attn/ops/precision.h — the precision of the matrix products, a per-thread setting in the
// manner of an autocast scope: while a PrecisionGuard(Precision::BF16) is alive on a thread,
// every float32 linear and matmul that thread runs (forward, and the two backward products of
// its node, whichever thread runs the backward) rounds both operands to bfloat16 and sums in
// float32 (kernels/quantized_gemm.h, gemm_bf16_f32; the output stays float32). Everything else
// stays float32: attention's own products (scaled_dot_product_attention), norms, softmax,
// losses, the residual stream, and the weights, gradients and optimizer state. float64 products
// are never affected (the reference dtype).
// The setting is read when a linear or matmul runs forward and recorded in its backward node,
// so a backward pass computes its products in the precision of the forward pass. Threads do
// not inherit it: code that runs a forward pass on other threads (the trainer's replicas)
// enters the caller's precision on each of them.
#pragma once

#include <cstdint>
#include <string_view>

namespace attn {

enum class Precision : uint8_t { F32, BF16 };

// "f32", "bf16".
const char* precision_name(Precision p);
// The precision a name denotes; an attn::Error naming the choices for any other name.
Precision parse_precision(std::string_view name);

// The calling thread's precision of the matrix products (F32 unless a guard says otherwise).
Precision matmul_precision();

// Sets the calling thread's precision for the guard's lifetime, then restores the previous
// one. Guards nest.
class PrecisionGuard {
 public:
  explicit PrecisionGuard(Precision p);
  ~PrecisionGuard();
  PrecisionGuard(const PrecisionGuard&) = delete;
  PrecisionGuard& operator=(const PrecisionGuard&) = delete;

 private:
  Precision previous_;
};

}  // namespace attn
