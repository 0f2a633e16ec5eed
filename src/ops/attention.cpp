// scaled_dot_product_attention (paper §3.2.1, Eq. 1): checks, mask resolution, dropout
// draw, the choice between the tiled (flash) and the naive kernel pair, and their tape
// nodes (SdpaBackward saves P; FlashSdpaBackward saves only out and the log-sum-exp).
// Masks follow nn.MultiheadAttention (Bool true = masked out; float is added; a -inf float
// entry counts as masked); causal is bottom-right aligned; fully masked rows give zeros.
// Grouped-query K/V heads and ALiBi slopes go to the kernels as they are. Also the ALiBi
// slope schedule and the rotary_embedding op (RoPE) with its tape node.
// Multi-head projections live in nn/attention; this op sees heads already split.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attn/ops/ops.h"
#include "kernels/attention_flash.h"
#include "kernels/attention_naive.h"
#include "kernels/attention_rope.h"
#include "kernels/dropout.h"
#include "ops/attention_impl.h"

namespace attn {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// Sizes of one call, read off q [B, H, Tq, Dh], k [B, Hkv, Tk, Dh], v [B, Hkv, Tk, Dv].
struct SdpaDims {
  int64_t B = 0, H = 0, Hkv = 0, Tq = 0, Tk = 0, Dh = 0, Dv = 0;
};

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

// The start of both backward nodes: checks the incoming gradient's shape, makes it contiguous
// in the inputs' dtype, and allocates the zeroed dq, dk, dv the kernels accumulate into.
struct SdpaGrads {
  Tensor g, dq, dk, dv;
};
SdpaGrads begin_sdpa_backward(const char* node, const Tensor& grad_output, const Tensor& q,
                              const Tensor& k, const Tensor& v, const SdpaDims& d) {
  const Shape out_shape{d.B, d.H, d.Tq, d.Dv};
  ATTN_CHECK(grad_output.shape() == out_shape, node, "gradient ", grad_output.str(), " for output ",
             shape_str(out_shape));
  return {grad_output.to(q.dtype()), Tensor::zeros(q.shape(), q.dtype()),
          Tensor::zeros(k.shape(), k.dtype()), Tensor::zeros(v.shape(), v.dtype())};
}

struct SdpaBackward : Node {
  Tensor q, k, v;          // contiguous, detached
  Tensor probs;            // [B, H, Tq, Tk], before dropout
  Tensor dropout_scale;    // [B, H, Tq, Tk] of 0 or 1/(1-p); undefined without dropout
  SdpaDims d;
  double scale = 1.0;

  const char* name() const override { return "SdpaBackward"; }

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    NoGradGuard guard;
    auto [g, dq, dk, dv] = begin_sdpa_backward(name(), grad_output, q, k, v, d);
    Tensor work = Tensor::empty(probs.shape(), probs.dtype());
    auto run = [&](auto tag) {
      using T = decltype(tag);
      kernels::attention_naive_backward<T>(
          dq.data<T>(), dk.data<T>(), dv.data<T>(), work.data<T>(), g.data<T>(), probs.data<T>(),
          dropout_scale.defined() ? dropout_scale.data<T>() : nullptr, q.data<T>(), k.data<T>(),
          v.data<T>(), d.B, d.H, d.Hkv, d.Tq, d.Tk, d.Dh, d.Dv, static_cast<T>(scale));
    };
    if (q.dtype() == DType::F32) run(float{}); else run(double{});
    return {dq, dk, dv};
  }

  void release() override { q = k = v = probs = dropout_scale = Tensor(); }
};

// The flash path's node: saves q, k, v, out and lse [B, H, Tq] (plus the caller's masks,
// which the backward re-applies tile by tile), never anything of size Tq x Tk.
struct FlashSdpaBackward : Node {
  Tensor q, k, v;       // contiguous, detached
  Tensor out, lse;      // [B, H, Tq, Dv], [B, H, Tq]
  Tensor bias, padding;  // resolved attn_mask [Bm, Hm, Tq, Tk] and key_padding_mask [B, Tk]; optional
  Tensor alibi;          // ALiBi slopes [H]; optional
  int64_t bias_stride_b = 0, bias_stride_h = 0;
  bool causal = false;
  int64_t window = 0;
  SdpaDims d;
  double scale = 1.0;

  const char* name() const override { return "FlashSdpaBackward"; }

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    NoGradGuard guard;
    auto [g, dq, dk, dv] = begin_sdpa_backward(name(), grad_output, q, k, v, d);
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
      kernels::attention_flash_backward<T>(dq.data<T>(), dk.data<T>(), dv.data<T>(), g.data<T>(),
                                           out.data<T>(), lse.data<T>(), q.data<T>(), k.data<T>(),
                                           v.data<T>(), mask, d.B, d.H, d.Hkv, d.Tq, d.Tk, d.Dh, d.Dv,
                                           static_cast<T>(scale));
    };
    if (q.dtype() == DType::F32) run(float{}); else run(double{});
    return {dq, dk, dv};
  }

  void release() override { q = k = v = out = lse = bias = padding = alibi = Tensor(); }
};

// The elements between consecutive (b, head) slices of x [B, Hs, T, D] when its rows are
// packed within each slice and the slices lie a constant stride apart, at least T * D (the
// first T rows of a longer buffer, as a KV cache with spare room holds them); 0 otherwise.
int64_t packed_slice_stride(const Tensor& x) {
  const Shape& st = x.strides();
  const int64_t T = x.size(2), D = x.size(3);
  if (T < 1 || st[3] != 1 || (T > 1 && st[2] != D)) return 0;
  const int64_t s = st[1];
  if (s < T * D || st[0] != x.size(1) * s) return 0;
  return s;
}

template <class T>
SdpaResult sdpa_impl(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                     const SdpaOptions& o, const SdpaDims& d, detail::SdpaImpl impl) {
  const bool record = needs_grad({&q_in, &k_in, &v_in});
  Tensor q, k, v;
  kernels::KVSliceStrides kv_strides;
  {
    NoGradGuard guard;  // the node below differentiates w.r.t. the caller's tensors directly
    q = q_in.contiguous().detach();
    // Without a tape the flash forward reads K and V where they lie when only the slices are
    // apart (a KV cache with spare room): no copy of the cache per decoding step.
    const bool in_place = impl == detail::SdpaImpl::Flash && !record;
    kv_strides.k = in_place ? packed_slice_stride(k_in) : 0;
    kv_strides.v = in_place ? packed_slice_stride(v_in) : 0;
    k = kv_strides.k > 0 ? k_in.detach() : k_in.contiguous().detach();
    v = kv_strides.v > 0 ? v_in.detach() : v_in.contiguous().detach();
  }
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

  if (impl == detail::SdpaImpl::Flash) {
    Tensor out = Tensor::empty({d.B, d.H, d.Tq, d.Dv}, dtype_of<T>);  // [B, H, Tq, Dv]
    Tensor lse = Tensor::empty({d.B, d.H, d.Tq}, dtype_of<T>);        // [B, H, Tq]
    kernels::attention_flash_forward<T>(out.data<T>(), lse.data<T>(), q.data<T>(), k.data<T>(),
                                        v.data<T>(), mask, d.B, d.H, d.Hkv, d.Tq, d.Tk, d.Dh, d.Dv,
                                        static_cast<T>(scale), kernels::FlashTiles{}, kv_strides);
    if (record) {
      auto node = std::make_shared<FlashSdpaBackward>();
      node->q = q;
      node->k = k;
      node->v = v;
      node->out = out.detach();
      node->lse = lse;
      node->bias = bias;
      node->padding = padding.defined() ? padding.clone() : padding;  // [B, Tk], cheap; immune to later edits
      node->alibi = alibi;
      node->bias_stride_b = mask.bias_stride_b;
      node->bias_stride_h = mask.bias_stride_h;
      node->causal = mask.causal;
      node->window = mask.window;
      node->d = d;
      node->scale = scale;
      attach_node(out, node, {q_in, k_in, v_in});
    }
    SdpaResult result;
    result.out = out;
    return result;
  }

  // Dropout keep-scale D drawn in row-major order over [B, H, Tq, Tk]: an entry is dropped
  // when rng.uniform() < p (the dropout op's convention), kept ones are scaled by 1/(1-p).
  // kernels::dropout_mask draws exactly that mask (the same stream, bit for bit) with integer
  // comparisons, in chunks so the byte mask stays small.
  Tensor dropout_scale, work;
  if (o.dropout_p > 0.0) {
    dropout_scale = Tensor::empty({d.B, d.H, d.Tq, d.Tk}, dtype_of<T>);  // [B, H, Tq, Tk]
    work = Tensor::empty({d.B, d.H, d.Tq, d.Tk}, dtype_of<T>);           // [B, H, Tq, Tk]
    const T keep_scale = o.dropout_p < 1.0 ? static_cast<T>(1.0 / (1.0 - o.dropout_p)) : T(0);
    T* ds = dropout_scale.data<T>();
    constexpr int64_t kChunk = 16384;
    std::vector<uint8_t> keep(static_cast<size_t>(std::min<int64_t>(kChunk, dropout_scale.numel())));
    for (int64_t e0 = 0; e0 < dropout_scale.numel(); e0 += kChunk) {
      const int64_t n = std::min<int64_t>(kChunk, dropout_scale.numel() - e0);
      kernels::dropout_mask(keep.data(), n, o.dropout_p, *o.rng);
      for (int64_t e = 0; e < n; ++e) ds[e0 + e] = keep[static_cast<size_t>(e)] ? keep_scale : T(0);
    }
  }

  Tensor out = Tensor::empty({d.B, d.H, d.Tq, d.Dv}, dtype_of<T>);    // [B, H, Tq, Dv]
  Tensor probs = Tensor::empty({d.B, d.H, d.Tq, d.Tk}, dtype_of<T>);  // [B, H, Tq, Tk]
  kernels::attention_naive_forward<T>(out.data<T>(), probs.data<T>(),
                                      work.defined() ? work.data<T>() : nullptr, q.data<T>(),
                                      k.data<T>(), v.data<T>(), mask,
                                      dropout_scale.defined() ? dropout_scale.data<T>() : nullptr,
                                      d.B, d.H, d.Hkv, d.Tq, d.Tk, d.Dh, d.Dv, static_cast<T>(scale));

  SdpaResult result;
  if (o.need_weights) result.weights = record ? probs.clone() : probs;  // never aliases saved state
  if (record) {
    auto node = std::make_shared<SdpaBackward>();
    node->q = q;
    node->k = k;
    node->v = v;
    node->probs = probs;
    node->dropout_scale = dropout_scale;
    node->d = d;
    node->scale = scale;
    attach_node(out, node, {q_in, k_in, v_in});
  }
  result.out = out;
  return result;
}

}  // namespace

namespace detail {

SdpaImpl choose_sdpa_impl(const SdpaOptions& options) {
  return options.need_weights || options.dropout_p > 0.0 ? SdpaImpl::Naive : SdpaImpl::Flash;
}

SdpaResult scaled_dot_product_attention_impl(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const SdpaOptions& options, SdpaImpl impl) {
  const SdpaDims d = check_inputs(q, k, v);
  check_options(options, d, q.dtype());
  if (impl == SdpaImpl::Auto) impl = choose_sdpa_impl(options);
  ATTN_CHECK(impl != SdpaImpl::Flash || (!options.need_weights && options.dropout_p == 0.0), kOp,
             "the flash kernel returns no weights and has no dropout; got need_weights ",
             options.need_weights, ", dropout_p ", options.dropout_p);
  if (q.dtype() == DType::F32) return sdpa_impl<float>(q, k, v, options, d, impl);
  return sdpa_impl<double>(q, k, v, options, d, impl);
}

}  // namespace detail

SdpaResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const SdpaOptions& options) {
  return detail::scaled_dot_product_attention_impl(q, k, v, options, detail::SdpaImpl::Auto);
}


// ---- ALiBi slopes and RoPE -------------------------------------------------------------------

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

// Rotates x by the positions' angles (sign +1) or back (the backward, into a zeroed dx).
struct RopeBackward : Node {
  Tensor positions;  // contiguous I64 [B, T] or [T]
  int64_t pos_stride_b = 0;
  Shape shape;  // x's [B, H, T, Dh]
  RopeOptions options;
  const char* name() const override { return "RopeBackward"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override {
    NoGradGuard guard;
    ATTN_CHECK(grad_output.shape() == shape, name(), "gradient ", grad_output.str(), " for output ", shape_str(shape));
    const Tensor g = grad_output.contiguous();
    Tensor dx = Tensor::zeros(shape, g.dtype());
    const bool half = options.pairing == RopePairing::Half;
    if (g.dtype() == DType::F32)
      kernels::rope_backward<float>(dx.data<float>(), g.data<float>(), positions.data<int64_t>(), pos_stride_b,
                                    shape[0], shape[1], shape[2], shape[3], options.theta, half);
    else
      kernels::rope_backward<double>(dx.data<double>(), g.data<double>(), positions.data<int64_t>(), pos_stride_b,
                                     shape[0], shape[1], shape[2], shape[3], options.theta, half);
    return {dx};
  }
  void release() override { positions = Tensor(); }
};

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
    kernels::rope_forward<float>(out.data<float>(), x.data<float>(), positions.data<int64_t>(), stride, B, H, T, Dh,
                                 options.theta, half);
  else
    kernels::rope_forward<double>(out.data<double>(), x.data<double>(), positions.data<int64_t>(), stride, B, H, T,
                                  Dh, options.theta, half);
  if (needs_grad({&x_in})) {
    auto node = std::make_shared<RopeBackward>();
    node->positions = positions;
    node->pos_stride_b = stride;
    node->shape = x.shape();
    node->options = options;
    attach_node(out, node, {x_in});
  }
  return out;
}

}  // namespace attn
