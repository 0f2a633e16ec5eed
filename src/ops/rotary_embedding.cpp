// rotary_embedding (RoPE; Su et al. 2021, "RoFormer", Eq. 34): checks, the position table,
// the kernel pair in kernels/rotary_embedding.h and its tape node (the inverse rotation), plus
// the pairing names. Declared in ops/attention.h with the attention ops it feeds; nn/attention
// applies it to q and k. Not here: anything of attention itself.
#include <cmath>
#include <string>
#include <vector>

#include "attn/ops/ops.h"
#include "kernels/rotary_embedding.h"

namespace attn {

namespace {

// Rotates x by the positions' angles (sign +1) or back (the backward, into a zeroed dx).
struct RotaryEmbeddingBackward : Node {
  Tensor positions;  // contiguous I64 [B, T] or [T]
  int64_t pos_stride_b = 0;
  Shape shape;  // x's [B, H, T, Dh]
  RopeOptions options;
  const char* name() const override { return "RotaryEmbeddingBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    NoGradGuard guard;
    ATTN_CHECK(grad_output.shape() == shape, name(), "gradient ", grad_output.str(), " for output ", shape_str(shape));
    const Tensor g = grad_output.contiguous();
    Tensor dx = Tensor::zeros(shape, g.dtype());
    const bool half = options.pairing == RopePairing::Half;
    if (g.dtype() == DType::F32)
      kernels::rotary_embedding_backward<float>(dx.data<float>(), g.data<float>(), positions.data<int64_t>(), pos_stride_b,
                                    shape[0], shape[1], shape[2], shape[3], options.theta, half);
    else
      kernels::rotary_embedding_backward<double>(dx.data<double>(), g.data<double>(), positions.data<int64_t>(), pos_stride_b,
                                     shape[0], shape[1], shape[2], shape[3], options.theta, half);
    return {dx};
  }
  void release() override { positions = Tensor(); }
};

}  // namespace

const char* rope_pairing_name(RopePairing pairing) {
  switch (pairing) {
    case RopePairing::Interleaved: return "interleaved";
    case RopePairing::Half: return "half";
  }
  return "?";
}

RopePairing parse_rope_pairing(const std::string& name) {
  if (name == "interleaved") return RopePairing::Interleaved;
  if (name == "half") return RopePairing::Half;
  fail("rope", "unknown RoPE pairing '", name, "' (expected interleaved or half)");
}

Tensor rotary_embedding(const Tensor& x_in, const Tensor& positions_in, const RopeOptions& options) {
  constexpr const char* op = "rotary_embedding";
  ATTN_CHECK(x_in.defined() && positions_in.defined(), op, "x and positions must be defined");
  ATTN_CHECK(x_in.dim() == 4 && is_floating(x_in.dtype()), op, "x must be f32 or f64 [B, H, T, Dh], got ", x_in.str());
  const int64_t B = x_in.size(0), H = x_in.size(1), T = x_in.size(2), Dh = x_in.size(3);
  ATTN_CHECK(Dh % 2 == 0, op, "the head dimension must be even to pair features, got ", x_in.str());
  ATTN_CHECK(positions_in.dtype() == DType::I64 &&
                 (positions_in.shape() == (Shape{B, T}) || positions_in.shape() == (Shape{T})),
             op, "positions must be i64 [B, T] = [", B, ", ", T, "] or [T] = [", T, "], got ", positions_in.str(),
             " for x ", x_in.str());
  ATTN_CHECK(options.theta > 0.0 && std::isfinite(options.theta), op, "theta must be positive, got ", options.theta);
  const Tensor positions = positions_in.contiguous().clone();  // immune to later edits
  for (int64_t p : positions.to_vector<int64_t>()) ATTN_CHECK(p >= 0, op, "positions must be >= 0, got ", p);
  const int64_t stride = positions.dim() == 2 ? T : 0;
  const bool half = options.pairing == RopePairing::Half;
  Tensor x;
  {
    NoGradGuard guard;
    x = x_in.contiguous().detach();
  }
  Tensor out = Tensor::empty(x.shape(), x.dtype());  // [B, H, T, Dh]
  if (x.dtype() == DType::F32)
    kernels::rotary_embedding_forward<float>(out.data<float>(), x.data<float>(), positions.data<int64_t>(), stride, B, H, T, Dh,
                                 options.theta, half);
  else
    kernels::rotary_embedding_forward<double>(out.data<double>(), x.data<double>(), positions.data<int64_t>(), stride, B, H, T,
                                  Dh, options.theta, half);
  if (needs_grad({&x_in})) {
    auto node = std::make_shared<RotaryEmbeddingBackward>();
    node->positions = positions;
    node->pos_stride_b = stride;
    node->shape = x.shape();
    node->options = options;
    attach_node(out, node, {x_in});
  }
  return out;
}

}  // namespace attn
