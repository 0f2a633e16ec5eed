// scaled_dot_product_attention (paper §3.2.1, Eq. 1): checks, mask resolution, dropout
// draw, the choice between the tiled (flash) and the naive kernel pair, and their tape
// nodes (SdpaBackward saves P; FlashSdpaBackward saves only out and the log-sum-exp).
// Masks follow nn.MultiheadAttention (Bool true = masked out; float is added; a -inf float
// entry counts as masked); causal is bottom-right aligned; fully masked rows give zeros.
// Grouped-query K/V heads and ALiBi slopes go to the kernels as they are. In the batch-invariant
// mode (attn/ops/batch_invariant.h) the row-wise kernel (attention_invariant) replaces the tiled
// one, with the tiled one's backward. q, k, v and the
// incoming gradient are read where they lie (split heads, a KV cache); out is written as
// [B, Tq, H, Dv] memory (joining heads is a view) and dq, dk, dv in their inputs' layouts (the
// split's backward copies nothing); the packed variant reads q, k, v inside one projection.
// Also the ALiBi slope schedule (the rotary_embedding op is in rotary_embedding.cpp).
// Multi-head projections live in nn/attention; this op sees heads already split.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "attention_impl.h"
#include "attn/ops/ops.h"
#include "kernels/attention_bf16.h"
#include "kernels/attention_flash.h"
#include "kernels/attention_invariant.h"
#include "kernels/attention_naive.h"
#include "kernels/attention_rows.h"
#include "kernels/attention_short.h"
#include "kernels/batch_invariant.h"
#include "kernels/dropout.h"

namespace attn {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// Sizes of one call, read off q [B, H, Tq, Dh], k [B, Hkv, Tk, Dh], v [B, Hkv, Tk, Dv]: what
// the kernels take.
using SdpaDims = kernels::AttentionDims;

SdpaDims check_inputs(const Tensor& q, const Tensor& k, const Tensor& v) {
  ATTN_CHECK(q.defined() && k.defined() && v.defined(), kOp, "q, k and v must all be defined");
  ATTN_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, kOp,
             "q, k, v must be rank 4 [B, H, T, D]; got q ", q.str(), ", k ", k.str(), ", v ",
             v.str());
  ATTN_CHECK(is_floating(q.dtype()), kOp, "q must be f32 or f64; got ", q.str());
  ATTN_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), kOp,
             "q, k, v must share one dtype; got q ", q.str(), ", k ", k.str(), ", v ", v.str());
  SdpaDims d;
  d.B = q.size(0);
  d.H = q.size(1);
  d.Tq = q.size(2);
  d.Dh = q.size(3);
  d.Hkv = k.size(1);
  d.Tk = k.size(2);
  d.Dv = v.size(3);
  ATTN_CHECK(k.size(0) == d.B && v.size(0) == d.B && v.size(1) == d.Hkv, kOp,
             "batch and head dimensions must agree; got q ", q.str(), ", k ", k.str(), ", v ",
             v.str());
  ATTN_CHECK(d.Hkv >= 1 && d.H % d.Hkv == 0, kOp, "k and v must have H heads or a divisor of H ",
             "(grouped-query attention); got q ", q.str(), ", k ", k.str(), ", v ", v.str());
  ATTN_CHECK(k.size(3) == d.Dh, kOp, "q and k head dimensions differ; got q ", q.str(), ", k ",
             k.str());
  ATTN_CHECK(v.size(2) == d.Tk, kOp, "k and v lengths differ; got k ", k.str(), ", v ", v.str());
  ATTN_CHECK(d.Dh > 0 && d.Dv > 0, kOp, "head dimensions must be positive; got q ", q.str(),
             ", v ", v.str());
  return d;
}

void check_options(const SdpaOptions& o, const SdpaDims& d, DType dtype) {
  const Shape full{d.B, d.H, d.Tq, d.Tk};
  if (o.attn_mask.defined()) {
    const Tensor& m = o.attn_mask;
    ATTN_CHECK(m.dtype() == DType::Bool || m.dtype() == dtype, kOp,
               "attn_mask must be bool or ", dtype_name(dtype), " like q; got ", m.str());
    bool ok = m.dim() >= 2 && m.dim() <= 4;
    for (int64_t i = 1; ok && i <= m.dim(); ++i) {
      const int64_t have = m.size(-i), want = full[static_cast<size_t>(4 - i)];
      ok = have == want || have == 1;
    }
    ATTN_CHECK(ok, kOp, "attn_mask ", m.str(), " must be [Tq, Tk] or broadcastable to ",
               shape_str(full));
  }
  if (o.key_padding_mask.defined()) {
    const Tensor& m = o.key_padding_mask;
    ATTN_CHECK(m.dtype() == DType::Bool, kOp, "key_padding_mask must be bool; got ", m.str());
    ATTN_CHECK(m.shape() == (Shape{d.B, d.Tk}), kOp, "key_padding_mask ", m.str(), " must be [B, Tk] = ",
               shape_str(Shape{d.B, d.Tk}));
  }
  ATTN_CHECK(o.dropout_p >= 0.0 && o.dropout_p <= 1.0, kOp, "dropout_p must be in [0, 1]; got ",
             o.dropout_p);
  ATTN_CHECK(o.dropout_p == 0.0 || o.rng != nullptr, kOp, "dropout_p ", o.dropout_p,
             " > 0 needs options.rng");
  ATTN_CHECK(std::isfinite(o.scale), kOp, "scale must be finite; got ", o.scale);
  if (o.alibi_slopes.defined()) {
    ATTN_CHECK(o.alibi_slopes.dtype() == dtype && o.alibi_slopes.shape() == (Shape{d.H}), kOp,
               "alibi_slopes must be ", dtype_name(dtype), " [H] = [", d.H, "]; got ", o.alibi_slopes.str());
    for (double m : o.alibi_slopes.to_vector<double>())
      ATTN_CHECK(std::isfinite(m), kOp, "alibi_slopes must be finite; got ", m);
  }
  ATTN_CHECK(o.window >= 0, kOp, "window must be >= 0 (0 = none); got ", o.window);
}

// The attn_mask as an additive bias of the compute dtype, [Bm, Hm, Tq, Tk] with Bm in {1, B}
// and Hm in {1, H} (the kernel broadcasts those by stride 0; Tq and Tk are expanded here).
// Bool true becomes -inf, false 0; float values are copied. NaN and +inf are rejected.
template <class T>
Tensor resolve_bias(const Tensor& m, const SdpaDims& d, kernels::AttentionMask<T>& view) {
  Shape ms(4, 1);  // the mask's shape padded on the left to rank 4
  for (int64_t i = 1; i <= m.dim(); ++i) ms[static_cast<size_t>(4 - i)] = m.size(-i);
  const Shape src_strides = contiguous_strides(ms);
  const int64_t Bm = ms[0], Hm = ms[1];
  const int64_t sq = ms[2] == 1 ? 0 : src_strides[2];
  const int64_t sk = ms[3] == 1 ? 0 : src_strides[3];
  const std::vector<double> src = m.to_vector<double>();  // row-major, any strides
  const bool is_bool = m.dtype() == DType::Bool;
  Tensor bias = Tensor::empty({Bm, Hm, d.Tq, d.Tk}, dtype_of<T>);
  T* out = bias.data<T>();
  for (int64_t bh = 0; bh < Bm * Hm; ++bh)
    for (int64_t i = 0; i < d.Tq; ++i)
      for (int64_t j = 0; j < d.Tk; ++j) {
        const double x = src[static_cast<size_t>(bh * src_strides[1] + i * sq + j * sk)];
        if (is_bool) {
          *out++ = x != 0.0 ? -std::numeric_limits<T>::infinity() : T(0);
        } else {
          ATTN_CHECK(!std::isnan(x) && x != std::numeric_limits<double>::infinity(), kOp,
                     "float attn_mask ", m.str(), " holds ", x, "; only finite values and -inf are allowed");
          *out++ = static_cast<T>(x);
        }
      }
  view.bias = bias.data<T>();
  view.bias_stride_b = Bm == 1 ? 0 : Hm * d.Tq * d.Tk;
  view.bias_stride_h = Hm == 1 ? 0 : d.Tq * d.Tk;
  return bias;
}

// ---- operand layouts ------------------------------------------------------------------------
// The kernels read q, k, v and dout through strides (kernels::HeadLayout) and write out, dq,
// dk, dv in a layout chosen here, so the split heads of a projection ([B, T, H*Dh] memory seen
// as [B, H, T, Dh]) cross this op without a copy in either direction.

// One [B, Hs, T, D] operand and where its elements lie.
struct Operand {
  Tensor t;
  kernels::HeadLayout layout;
};

// How the kernels can read x [B, Hs, T, D] where it lies, or nothing when they cannot: the
// features not packed, the rows of a head overlapping (a row stride below D, e.g. a broadcast
// along T), or a negative stride. Strides of dimensions of size 1 are never used and are
// normalised.
std::optional<kernels::HeadLayout> head_layout(const Tensor& x) {
  const Shape& st = x.strides();
  const int64_t B = x.size(0), Hs = x.size(1), T = x.size(2), D = x.size(3);
  if (D > 1 && st[3] != 1) return std::nullopt;
  if (T > 1 && st[2] < D) return std::nullopt;
  if ((B > 1 && st[0] < 0) || (Hs > 1 && st[1] < 0)) return std::nullopt;
  return kernels::HeadLayout{B > 1 ? st[0] : 0, Hs > 1 ? st[1] : 0, T > 1 ? st[2] : D};
}

// x as the kernels read it, detached (the nodes differentiate w.r.t. the caller's tensors
// directly): x itself wherever head_layout accepts it, else a packed copy.
Operand read_operand(const Tensor& x) {
  if (const auto layout = head_layout(x)) return {x.detach(), *layout};
  return {x.clone(), kernels::HeadLayout::packed(x.size(1), x.size(2), x.size(3))};
}

// An uninitialised tensor of x's shape [B, Hs, T, D] whose memory orders B, Hs and T as x's
// strides do (largest first; features last), and its layout: the gradient of a split-heads
// view is itself the split-heads view of a packed [B, T, Hs*D] tensor, which the view ops'
// backward (transpose, then reshape) hand on without a copy. Packed x gives a packed tensor.
Operand empty_like_layout(const Tensor& x) {
  std::array<int64_t, 3> order{0, 1, 2};  // x's dimensions, outermost in memory first
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return x.strides()[static_cast<size_t>(a)] > x.strides()[static_cast<size_t>(b)];
  });
  const Tensor mem = Tensor::empty({x.size(order[0]), x.size(order[1]), x.size(order[2]), x.size(3)},
                                   x.dtype());
  std::vector<int64_t> dims{0, 1, 2, 3};  // x's dimension order[i] is mem's dimension i
  for (int64_t i = 0; i < 3; ++i) dims[static_cast<size_t>(order[static_cast<size_t>(i)])] = i;
  Tensor view = mem.permute(dims);  // [B, Hs, T, D]
  return {view, *head_layout(view)};
}

// The layouts of q, k, v and out (or of dq, dk, dv and dout) for the kernels.
kernels::AttentionLayout layouts(const Operand& q, const Operand& k, const Operand& v, const Operand& out) {
  return {q.layout, k.layout, v.layout, out.layout};
}

// q [B, H, T, Dh], k and v [B, Hkv, T, Dh] as views into qkv [B, T, (H + 2*Hkv) * Dh] (the
// packed projection of self-attention), detached, with their layouts. A qkv that is not
// contiguous is copied first (by the reshape).
std::array<Operand, 3> split_packed(const Tensor& qkv, int64_t H, int64_t Hkv) {
  NoGradGuard guard;
  const int64_t B = qkv.size(0), T = qkv.size(1), Dh = qkv.size(2) / (H + 2 * Hkv);
  const Tensor heads = qkv.detach().reshape({B, T, H + 2 * Hkv, Dh}).transpose(1, 2);  // [B, H + 2*Hkv, T, Dh]
  const Tensor parts[3] = {heads.slice(1, 0, H), heads.slice(1, H, H + Hkv), heads.slice(1, H + Hkv, H + 2 * Hkv)};
  std::array<Operand, 3> out;
  for (size_t i = 0; i < 3; ++i) out[i] = read_operand(parts[i]);
  return out;
}

// How one call's gradients go back: to q, k and v, or (packed) to qkv as one tensor.
struct SdpaGrads {
  Operand g;         // dout, readable by the kernels
  Operand dq, dk, dv;
  Tensor dqkv;       // packed calls: [B, T, (H + 2*Hkv) * Dh], whose views dq, dk, dv are
};

// What both backward nodes share: the operands as the kernels read them, the sizes, and
// whether the call was packed.
struct SdpaNode : Node {
  Operand q, k, v;  // detached, where the caller's tensors lie (or packed copies)
  SdpaDims d;
  double scale = 1.0;
  bool packed = false;  // the one input is qkv [B, T, (H + 2*Hkv) * Dh]

  // begin_backward reads the incoming gradient through its strides (join_heads' transpose
  // hands it on uncopied).
  bool reads_strided_grad() const override { return true; }

  // Checks the incoming gradient's shape, takes it where it lies when the kernels can read it
  // in the inputs' dtype (else a packed copy in that dtype), and allocates dq, dk, dv in the
  // layouts of q, k, v, or one dqkv like qkv (the kernels write every element).
  SdpaGrads begin_backward(const Tensor& grad_output) const {
    const Shape out_shape{d.B, d.H, d.Tq, d.Dv};
    ATTN_CHECK(grad_output.shape() == out_shape, name(), "gradient ", grad_output.str(), " for output ",
               shape_str(out_shape));
    SdpaGrads grads;
    const DType dtype = q.t.dtype();
    grads.g = grad_output.dtype() == dtype
                  ? read_operand(grad_output)
                  : Operand{grad_output.to(dtype), kernels::HeadLayout::packed(d.H, d.Tq, d.Dv)};
    if (packed) {
      grads.dqkv = Tensor::empty({d.B, d.Tq, (d.H + 2 * d.Hkv) * d.Dh}, dtype);  // [B, T, (H + 2*Hkv) * Dh]
      const std::array<Operand, 3> parts = split_packed(grads.dqkv, d.H, d.Hkv);
      grads.dq = parts[0];
      grads.dk = parts[1];
      grads.dv = parts[2];
    } else {
      grads.dq = empty_like_layout(q.t);
      grads.dk = empty_like_layout(k.t);
      grads.dv = empty_like_layout(v.t);
    }
    return grads;
  }
  // One gradient per input of the node.
  std::vector<Tensor> finish_backward(const SdpaGrads& grads) const {
    if (packed) return {grads.dqkv};
    return {grads.dq.t, grads.dk.t, grads.dv.t};
  }
};

struct SdpaBackward : SdpaNode {
  Tensor probs;            // [B, H, Tq, Tk], before dropout
  Tensor dropout_scale;    // [B, H, Tq, Tk] of 0 or 1/(1-p); undefined without dropout
  // The forward's pair: Naive, or for float32 Short (short sequences) or Rows.
  detail::SdpaImpl kernel = detail::SdpaImpl::Naive;

  const char* name() const override { return "SdpaBackward"; }

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    NoGradGuard guard;
    const SdpaGrads grads = begin_backward(grad_output);
    // Named references rather than a structured binding, which lambdas may capture only from
    // C++20 compilers that implement it (not clang 14).
    const Operand &g = grads.g, &dq = grads.dq, &dk = grads.dk, &dv = grads.dv;
    Tensor work = Tensor::empty(probs.shape(), probs.dtype());  // [B, H, Tq, Tk]
    const kernels::AttentionLayout x = layouts(q, k, v, g), dx = layouts(dq, dk, dv, g);  // x.out unused
    auto run = [&](auto tag) {
      using T = decltype(tag);
      const T* ds = dropout_scale.defined() ? dropout_scale.data<T>() : nullptr;
      if constexpr (std::is_same_v<T, float>) {
        if (kernel == detail::SdpaImpl::Short) {
          kernels::attention_short_backward(dq.t.data<T>(), dk.t.data<T>(), dv.t.data<T>(), work.data<T>(),
                                            g.t.data<T>(), probs.data<T>(), ds, q.t.data<T>(), k.t.data<T>(),
                                            v.t.data<T>(), d, static_cast<T>(scale), x, dx);
          return;
        }
        if (kernel == detail::SdpaImpl::Rows) {
          kernels::attention_rows_backward(dq.t.data<T>(), dk.t.data<T>(), dv.t.data<T>(), work.data<T>(),
                                           g.t.data<T>(), probs.data<T>(), ds, q.t.data<T>(), k.t.data<T>(),
                                           v.t.data<T>(), d, static_cast<T>(scale), x, dx);
          return;
        }
      }
      kernels::attention_naive_backward<T>(dq.t.data<T>(), dk.t.data<T>(), dv.t.data<T>(), work.data<T>(),
                                           g.t.data<T>(), probs.data<T>(), ds, q.t.data<T>(), k.t.data<T>(),
                                           v.t.data<T>(), d, static_cast<T>(scale), x, dx);
    };
    if (q.t.dtype() == DType::F32) run(float{}); else run(double{});
    return finish_backward(grads);
  }

  void release() override { q = k = v = Operand{}; probs = dropout_scale = Tensor(); }
};

// The flash path's node: saves q, k, v, out and lse [B, H, Tq] (plus the caller's masks,
// which the backward re-applies tile by tile), never anything of size Tq x Tk.
struct FlashSdpaBackward : SdpaNode {
  Operand out;           // [B, H, Tq, Dv], detached
  Tensor lse;            // [B, H, Tq]
  Tensor bias, padding;  // resolved attn_mask [Bm, Hm, Tq, Tk] and key_padding_mask [B, Tk]; optional
  Tensor alibi;          // ALiBi slopes [H]; optional
  int64_t bias_stride_b = 0, bias_stride_h = 0;
  bool causal = false;
  int64_t window = 0;

  const char* name() const override { return "FlashSdpaBackward"; }

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    NoGradGuard guard;
    const SdpaGrads grads = begin_backward(grad_output);
    // Named references rather than a structured binding, which lambdas may capture only from
    // C++20 compilers that implement it (not clang 14).
    const Operand &g = grads.g, &dq = grads.dq, &dk = grads.dk, &dv = grads.dv;
    const kernels::AttentionLayout x = layouts(q, k, v, out), dx = layouts(dq, dk, dv, g);
    auto run = [&](auto tag) {
      using T = decltype(tag);
      kernels::AttentionMask<T> mask;
      if (bias.defined()) {
        mask.bias = bias.data<T>();
        mask.bias_stride_b = bias_stride_b;
        mask.bias_stride_h = bias_stride_h;
      }
      if (padding.defined()) mask.key_padding = static_cast<const uint8_t*>(padding.raw_data());
      if (alibi.defined()) mask.alibi = alibi.data<T>();
      mask.causal = causal;
      mask.window = window;
      kernels::attention_flash_backward<T>(dq.t.data<T>(), dk.t.data<T>(), dv.t.data<T>(), g.t.data<T>(),
                                           out.t.data<T>(), lse.data<T>(), q.t.data<T>(), k.t.data<T>(),
                                           v.t.data<T>(), mask, d, static_cast<T>(scale), kernels::FlashTiles{}, x, dx);
    };
    if (q.t.dtype() == DType::F32) run(float{}); else run(double{});
    return finish_backward(grads);
  }

  void release() override {
    q = k = v = out = Operand{};
    lse = bias = padding = alibi = Tensor();
  }
};

// out [B, H, Tq, Dv] as a view of [B, Tq, H, Dv] memory: joining the heads afterwards
// (transpose to [B, Tq, H, Dv], reshape to [B, Tq, H*Dv]) is then free.
template <class T>
Operand empty_output(const SdpaDims& d) {
  const Tensor mem = Tensor::empty({d.B, d.Tq, d.H, d.Dv}, dtype_of<T>);  // [B, Tq, H, Dv]
  return {mem.transpose(1, 2), kernels::HeadLayout::split(d.H, d.Tq, d.Dv)};  // [B, H, Tq, Dv]
}

// One call, its inputs already checked and read: q, k, v as the kernels see them, and the
// tensors the tape differentiates ({q, k, v}, or {qkv} when packed).
template <class T>
SdpaResult sdpa_impl(const Operand& q, const Operand& k, const Operand& v, const std::vector<Tensor>& inputs,
                     bool packed, const SdpaOptions& o, const SdpaDims& d, detail::SdpaImpl impl) {
  bool record = false;
  for (const Tensor& x : inputs) record = record || needs_grad({&x});
  const double scale = o.scale != 0.0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(d.Dh));

  kernels::AttentionMask<T> mask;
  Tensor bias, padding;
  if (o.attn_mask.defined()) bias = resolve_bias<T>(o.attn_mask, d, mask);
  if (o.key_padding_mask.defined()) {
    padding = o.key_padding_mask.contiguous().detach();
    mask.key_padding = static_cast<const uint8_t*>(padding.raw_data());
  }
  mask.causal = o.causal || o.window > 0;
  mask.window = o.window;
  Tensor alibi;
  if (o.alibi_slopes.defined()) {
    alibi = o.alibi_slopes.contiguous().clone();  // [H], immune to later edits
    mask.alibi = alibi.data<T>();
  }

  const Operand out = empty_output<T>(d);  // [B, H, Tq, Dv] of [B, Tq, H, Dv] memory
  const kernels::AttentionLayout layout = layouts(q, k, v, out);
  Tensor result_out = out.t;  // the handle the tape node hangs on
  auto fill_node = [&](SdpaNode& node) {
    node.q = q;
    node.k = k;
    node.v = v;
    node.d = d;
    node.scale = scale;
    node.packed = packed;
  };
  // The bf16 products have no backward: with a gradient to record, the float32 pair runs.
  if (impl == detail::SdpaImpl::Bf16 && record) impl = detail::SdpaImpl::Flash;
  if constexpr (std::is_same_v<T, float>) {
    if (impl == detail::SdpaImpl::Bf16) {
      kernels::attention_bf16_forward(out.t.data<T>(), nullptr, q.t.data<T>(), k.t.data<T>(), v.t.data<T>(), mask, d,
                                      static_cast<T>(scale), layout);
      SdpaResult result;
      result.out = result_out;
      return result;
    }
  }
  if (impl == detail::SdpaImpl::Flash || impl == detail::SdpaImpl::Invariant) {
    // Both write out and lse alike, so the flash backward serves both.
    Tensor lse = Tensor::empty({d.B, d.H, d.Tq}, dtype_of<T>);  // [B, H, Tq]
    if (impl == detail::SdpaImpl::Invariant)
      kernels::attention_invariant_forward<T>(out.t.data<T>(), lse.data<T>(), q.t.data<T>(), k.t.data<T>(),
                                              v.t.data<T>(), mask, d, static_cast<T>(scale), layout);
    else
      kernels::attention_flash_forward<T>(out.t.data<T>(), lse.data<T>(), q.t.data<T>(), k.t.data<T>(),
                                          v.t.data<T>(), mask, d, static_cast<T>(scale), kernels::FlashTiles{}, layout);
    if (record) {
      auto node = std::make_shared<FlashSdpaBackward>();
      fill_node(*node);
      node->out = {out.t.detach(), out.layout};
      node->lse = lse;
      node->bias = bias;
      node->padding = padding.defined() ? padding.clone() : padding;  // [B, Tk], cheap; immune to later edits
      node->alibi = alibi;
      node->bias_stride_b = mask.bias_stride_b;
      node->bias_stride_h = mask.bias_stride_h;
      node->causal = mask.causal;
      node->window = mask.window;
      attach_node(result_out, node, inputs);
    }
    SdpaResult result;
    result.out = result_out;
    return result;
  }

  // Dropout keep-scale D: the dropout op's mask over [B, H, Tq, Tk] in row-major order, as one
  // kernels::dropout_mask call over all of it would draw it (kernels/dropout.h: four entries per
  // 64-bit draw of eight seeded lanes, an entry dropped when its 16-bit field is below
  // round(p * 2^16)); kept ones are scaled by 1/(1-p). Drawn from one DropoutMaskStream in
  // chunks (a multiple of 32, so they join up into the one-call mask) to keep the byte mask small.
  Tensor dropout_scale, work;
  if (o.dropout_p > 0.0) {
    dropout_scale = Tensor::empty({d.B, d.H, d.Tq, d.Tk}, dtype_of<T>);  // [B, H, Tq, Tk]
    work = Tensor::empty({d.B, d.H, d.Tq, d.Tk}, dtype_of<T>);           // [B, H, Tq, Tk]
    const T keep_scale = o.dropout_p < 1.0 ? static_cast<T>(1.0 / (1.0 - o.dropout_p)) : T(0);
    T* ds = dropout_scale.data<T>();
    constexpr int64_t kChunk = 16384;
    std::vector<uint8_t> keep(static_cast<size_t>(std::min<int64_t>(kChunk, dropout_scale.numel())));
    static_assert(kChunk % 32 == 0, "every chunk but the last must be whole rounds of the stream");
    kernels::DropoutMaskStream mask_stream(o.dropout_p, *o.rng);
    for (int64_t e0 = 0; e0 < dropout_scale.numel(); e0 += kChunk) {
      const int64_t n = std::min<int64_t>(kChunk, dropout_scale.numel() - e0);
      mask_stream.next(keep.data(), n);
      // keep is 0 or 1, so the product is exactly 0 or keep_scale (and the loop vectorises).
      for (int64_t e = 0; e < n; ++e) ds[e0 + e] = static_cast<T>(keep[static_cast<size_t>(e)]) * keep_scale;
    }
  }

  Tensor probs = Tensor::empty({d.B, d.H, d.Tq, d.Tk}, dtype_of<T>);  // [B, H, Tq, Tk]
  T* const work_data = work.defined() ? work.data<T>() : nullptr;
  const T* const ds = dropout_scale.defined() ? dropout_scale.data<T>() : nullptr;
  // float32: the same algorithm on the vector kernels, whole (short sequences,
  // attention_short.h) or for its row-wise work (attention_rows.h).
  const detail::SdpaImpl kernel = std::is_same_v<T, float> ? impl : detail::SdpaImpl::Naive;
  if constexpr (std::is_same_v<T, float>) {
    if (kernel == detail::SdpaImpl::Short)
      kernels::attention_short_forward(out.t.data<T>(), probs.data<T>(), work_data, q.t.data<T>(),
                                       k.t.data<T>(), v.t.data<T>(), mask, ds, d, static_cast<T>(scale), layout);
    if (kernel == detail::SdpaImpl::Rows)
      kernels::attention_rows_forward(out.t.data<T>(), probs.data<T>(), work_data, q.t.data<T>(), k.t.data<T>(),
                                      v.t.data<T>(), mask, ds, d, static_cast<T>(scale), layout);
  }
  if (kernel == detail::SdpaImpl::Naive)
    kernels::attention_naive_forward<T>(out.t.data<T>(), probs.data<T>(), work_data, q.t.data<T>(),
                                        k.t.data<T>(), v.t.data<T>(), mask, ds, d, static_cast<T>(scale), layout);

  SdpaResult result;
  if (o.need_weights) result.weights = record ? probs.clone() : probs;  // never aliases saved state
  if (record) {
    auto node = std::make_shared<SdpaBackward>();
    fill_node(*node);
    node->probs = probs;
    node->dropout_scale = dropout_scale;
    node->kernel = kernel;
    attach_node(result_out, node, inputs);
  }
  result.out = result_out;
  return result;
}

// Checks the options, settles the kernel, and runs the call in q's dtype.
SdpaResult run_sdpa(const Operand& q, const Operand& k, const Operand& v, const std::vector<Tensor>& inputs,
                    bool packed, const SdpaOptions& options, const SdpaDims& d, detail::SdpaImpl impl) {
  check_options(options, d, q.t.dtype());
  if (impl == detail::SdpaImpl::Auto) impl = detail::choose_sdpa_impl(options, q.t.dtype(), d.Tq, d.Tk);
  ATTN_CHECK(impl != detail::SdpaImpl::Bf16 || (q.t.dtype() == DType::F32 && kernels::attention_bf16_available()), kOp,
             "the bf16 kernel takes float32 inputs on a CPU with AMX-BF16 tiles; got ", dtype_name(q.t.dtype()),
             kernels::attention_bf16_available() ? "" : " (no tiles here)");
  ATTN_CHECK(
      (impl != detail::SdpaImpl::Flash && impl != detail::SdpaImpl::Invariant && impl != detail::SdpaImpl::Bf16) ||
          (!options.need_weights && options.dropout_p == 0.0),
      kOp, "the flash and invariant kernels return no weights and have no dropout; got need_weights ",
      options.need_weights, ", dropout_p ", options.dropout_p);
  ATTN_CHECK((impl != detail::SdpaImpl::Short && impl != detail::SdpaImpl::Rows) || q.t.dtype() == DType::F32, kOp,
             "the short-sequence and vector-row kernels are float32 only; got ", dtype_name(q.t.dtype()));
  if (q.t.dtype() == DType::F32) return sdpa_impl<float>(q, k, v, inputs, packed, options, d, impl);
  return sdpa_impl<double>(q, k, v, inputs, packed, options, d, impl);
}

}  // namespace

namespace detail {

SdpaImpl choose_sdpa_impl(const SdpaOptions& options, DType dtype, int64_t Tq, int64_t Tk) {
  if (!options.need_weights && options.dropout_p == 0.0) {
    if (options.bf16_products && dtype == DType::F32 && kernels::attention_bf16_available()) return SdpaImpl::Bf16;
    return kernels::batch_invariant() ? SdpaImpl::Invariant : SdpaImpl::Flash;
  }
  if (dtype != DType::F32) return SdpaImpl::Naive;
  return kernels::use_short_attention(Tq, Tk) ? SdpaImpl::Short : SdpaImpl::Rows;
}

SdpaResult scaled_dot_product_attention_impl(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const SdpaOptions& options, SdpaImpl impl) {
  const SdpaDims d = check_inputs(q, k, v);
  std::array<Operand, 3> qkv;
  {
    NoGradGuard guard;  // the node differentiates w.r.t. the caller's tensors directly
    // Read where they lie: split heads of a projection, a KV cache's buffer with spare room.
    qkv = {read_operand(q), read_operand(k), read_operand(v)};
  }
  return run_sdpa(qkv[0], qkv[1], qkv[2], {q, k, v}, false, options, d, impl);
}

}  // namespace detail

SdpaResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const SdpaOptions& options) {
  return detail::scaled_dot_product_attention_impl(q, k, v, options, detail::SdpaImpl::Auto);
}

SdpaResult scaled_dot_product_attention_packed(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads,
                                               const SdpaOptions& options) {
  constexpr const char* op = "scaled_dot_product_attention_packed";
  ATTN_CHECK(qkv.defined(), op, "qkv must be defined");
  ATTN_CHECK(n_heads >= 1 && n_kv_heads >= 1 && n_heads % n_kv_heads == 0, op, "n_kv_heads ", n_kv_heads,
             " must divide n_heads ", n_heads, " (both >= 1)");
  const int64_t heads = n_heads + 2 * n_kv_heads;
  ATTN_CHECK(qkv.dim() == 3 && qkv.size(2) > 0 && qkv.size(2) % heads == 0, op,
             "qkv must be [B, T, (H + 2*Hkv) * Dh] with H + 2*Hkv = ", heads, " heads; got ", qkv.str());
  ATTN_CHECK(is_floating(qkv.dtype()), op, "qkv must be f32 or f64; got ", qkv.str());
  SdpaDims d;
  d.B = qkv.size(0);
  d.H = n_heads;
  d.Hkv = n_kv_heads;
  d.Tq = d.Tk = qkv.size(1);
  d.Dh = d.Dv = qkv.size(2) / heads;
  const auto [q, k, v] = split_packed(qkv, n_heads, n_kv_heads);
  return run_sdpa(q, k, v, {qkv}, true, options, d, detail::SdpaImpl::Auto);
}

// ---- ALiBi slopes -------------------------------------------------------------------------

namespace {

// The ALiBi paper's slopes for a power of two n: start = 2^(-8/n), m_h = start^(h + 1).
std::vector<double> power_of_two_slopes(int64_t n) {
  const double start = std::pow(2.0, -8.0 / static_cast<double>(n));
  std::vector<double> out(static_cast<size_t>(n));
  double m = start;
  for (auto& x : out) {
    x = m;
    m *= start;
  }
  return out;
}

}  // namespace

std::vector<double> alibi_slopes(int64_t n_heads) {
  ATTN_CHECK(n_heads >= 1, "alibi_slopes", "n_heads must be >= 1, got ", n_heads);
  int64_t p = 1;  // the largest power of two <= n_heads
  while (p * 2 <= n_heads) p *= 2;
  std::vector<double> slopes = power_of_two_slopes(p);
  if (p == n_heads) return slopes;
  // The interleaving rule: the remaining n - p slopes are 2p's slopes at positions 0, 2, 4, ...
  const std::vector<double> extra = power_of_two_slopes(2 * p);
  for (size_t i = 0; static_cast<int64_t>(slopes.size()) < n_heads; i += 2) slopes.push_back(extra[i]);
  return slopes;
}

}  // namespace attn
