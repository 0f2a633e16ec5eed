// Attention operands in place (paper §3.2.1-3.2.2): the kernels read q, k, v and dout through
// HeadLayout strides and write out, dq, dk, dv in the caller's layout; the op hands the split
// heads of a projection to them without copies, returns out as a view of [B, Tq, H, Dv] memory,
// and gives gradients back in the inputs' layouts; the packed self-attention op reads q, k, v
// inside one qkv projection. Checked against the packed path bit for bit (the arithmetic is
// the same), with controls showing that a wrong stride and an unwritten gradient are caught.
// Not here: the values of attention itself (attention_test.cpp, attention_flash_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attn/nn/attention.h"
#include "attn/ops/ops.h"
#include "kernels/attention_flash.h"
#include "kernels/attention_naive.h"
#include "ops/attention_impl.h"
#include "support/expect_close.h"
#include "support/gradcheck.h"

namespace attn {
namespace {

using detail::SdpaImpl;
using kernels::AttentionLayout;
using kernels::AttentionMask;
using kernels::FlashTiles;
using kernels::HeadLayout;

Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::F64) {
  Rng rng(seed);
  return Tensor::randn(shape, rng, dtype);
}

// ---- the kernels with explicit layouts ------------------------------------------------------

// Sizes of one operand [B, Hs, T, D].
struct Dims4 {
  int64_t B, Hs, T, D;
};

// The element count a buffer laid out as l needs for s.
int64_t extent(const Dims4& s, const HeadLayout& l) {
  return (s.B - 1) * l.batch + (s.Hs - 1) * l.head + (s.T - 1) * l.row + s.D;
}

// Packed [B, Hs, T, D] values copied into a buffer laid out as l; the gaps hold `fill`.
template <class T>
std::vector<T> scatter(const std::vector<T>& packed, const Dims4& s, const HeadLayout& l,
                       T fill = std::numeric_limits<T>::quiet_NaN()) {
  std::vector<T> buf(static_cast<size_t>(extent(s, l)), fill);
  size_t e = 0;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hs; ++h)
      for (int64_t t = 0; t < s.T; ++t)
        for (int64_t c = 0; c < s.D; ++c) buf[static_cast<size_t>(b * l.batch + h * l.head + t * l.row + c)] = packed[e++];
  return buf;
}

// The [B, Hs, T, D] values of a buffer laid out as l, packed.
template <class T>
std::vector<T> gather(const std::vector<T>& buf, const Dims4& s, const HeadLayout& l) {
  std::vector<T> packed;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hs; ++h)
      for (int64_t t = 0; t < s.T; ++t)
        for (int64_t c = 0; c < s.D; ++c) packed.push_back(buf[static_cast<size_t>(b * l.batch + h * l.head + t * l.row + c)]);
  return packed;
}

template <class T>
std::vector<T> random_values(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<T> x(static_cast<size_t>(n));
  for (T& e : x) e = static_cast<T>(rng.normal());
  return x;
}

// One attention call: sizes, inputs (packed) and the upstream gradient (packed).
struct Problem {
  int64_t B = 2, H = 4, Hkv = 2, Tq = 7, Tk = 9, Dh = 5, Dv = 3;
  Dims4 q() const { return {B, H, Tq, Dh}; }
  Dims4 k() const { return {B, Hkv, Tk, Dh}; }
  Dims4 v() const { return {B, Hkv, Tk, Dv}; }
  Dims4 out() const { return {B, H, Tq, Dv}; }
};

// Layouts for a problem: split heads ([B, T, Hs, D] memory), and a padded one where rows,
// heads and batch entries all have gaps between them.
HeadLayout padded(const Dims4& s) { return {s.Hs * (s.T + 2) * (s.D + 3) + 5, (s.T + 2) * (s.D + 3), s.D + 3}; }
AttentionLayout split_layout(const Problem& p) {
  return {HeadLayout::split(p.H, p.Tq, p.Dh), HeadLayout::split(p.Hkv, p.Tk, p.Dh), HeadLayout::split(p.Hkv, p.Tk, p.Dv),
          HeadLayout::split(p.H, p.Tq, p.Dv)};
}
AttentionLayout padded_layout(const Problem& p) { return {padded(p.q()), padded(p.k()), padded(p.v()), padded(p.out())}; }
kernels::AttentionDims kernel_dims(const Problem& p) { return {p.B, p.H, p.Hkv, p.Tq, p.Tk, p.Dh, p.Dv}; }
AttentionLayout packed_layout(const Problem& p) { return AttentionLayout::packed(kernel_dims(p)); }

// Forward and backward results of one kernel pair, packed.
template <class T>
struct KernelRun {
  std::vector<T> out, dq, dk, dv;
};

enum class Kernel { Naive, Flash };

// Runs the kernel pair on the problem's values stored as `in` says (q, k, v, and the forward's
// out for the flash backward), with the gradients dq, dk, dv and dout stored as `grad` says. The
// gradient buffers start as NaN everywhere: the kernels must write every element. `read_in`
// and `read_grad` are the layouts the kernels are told (the control passes wrong ones).
template <class T>
KernelRun<T> run_kernels(Kernel kernel, const Problem& p, const AttentionMask<T>& mask, const AttentionLayout& in,
                         const AttentionLayout& grad, const AttentionLayout& read_in, const AttentionLayout& read_grad,
                         FlashTiles tiles = {4, 3}) {
  const std::vector<T> q = random_values<T>(p.B * p.H * p.Tq * p.Dh, 1);
  const std::vector<T> k = random_values<T>(p.B * p.Hkv * p.Tk * p.Dh, 2);
  const std::vector<T> v = random_values<T>(p.B * p.Hkv * p.Tk * p.Dv, 3);
  const std::vector<T> dout = random_values<T>(p.B * p.H * p.Tq * p.Dv, 4);
  const std::vector<T> qs = scatter(q, p.q(), in.q), ks = scatter(k, p.k(), in.k), vs = scatter(v, p.v(), in.v);
  const std::vector<T> dos = scatter(dout, p.out(), grad.out);
  std::vector<T> out = scatter(std::vector<T>(static_cast<size_t>(p.B * p.H * p.Tq * p.Dv), T(0)), p.out(), in.out);
  std::vector<T> dq(static_cast<size_t>(extent(p.q(), grad.q)), std::numeric_limits<T>::quiet_NaN());
  std::vector<T> dk(static_cast<size_t>(extent(p.k(), grad.k)), std::numeric_limits<T>::quiet_NaN());
  std::vector<T> dv(static_cast<size_t>(extent(p.v(), grad.v)), std::numeric_limits<T>::quiet_NaN());
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(p.Dh)));
  if (kernel == Kernel::Naive) {
    std::vector<T> probs(static_cast<size_t>(p.B * p.H * p.Tq * p.Tk)), work(probs.size());
    kernels::attention_naive_forward<T>(out.data(), probs.data(), nullptr, qs.data(), ks.data(), vs.data(), mask,
                                        nullptr, kernel_dims(p), scale, read_in);
    kernels::attention_naive_backward<T>(dq.data(), dk.data(), dv.data(), work.data(), dos.data(), probs.data(), nullptr,
                                         qs.data(), ks.data(), vs.data(), kernel_dims(p), scale, read_in, read_grad);
  } else {
    std::vector<T> lse(static_cast<size_t>(p.B * p.H * p.Tq));
    kernels::attention_flash_forward<T>(out.data(), lse.data(), qs.data(), ks.data(), vs.data(), mask,
                                        kernel_dims(p), scale, tiles, read_in);
    kernels::attention_flash_backward<T>(dq.data(), dk.data(), dv.data(), dos.data(), out.data(), lse.data(), qs.data(),
                                         ks.data(), vs.data(), mask, kernel_dims(p), scale, tiles, read_in, read_grad);
  }
  return {gather(out, p.out(), in.out), gather(dq, p.q(), grad.q), gather(dk, p.k(), grad.k),
          gather(dv, p.v(), grad.v)};
}

template <class T>
KernelRun<T> run_kernels(Kernel kernel, const Problem& p, const AttentionMask<T>& mask, const AttentionLayout& in,
                         const AttentionLayout& grad, FlashTiles tiles = {4, 3}) {
  return run_kernels<T>(kernel, p, mask, in, grad, in, grad, tiles);
}

template <class T>
bool same_bits(const KernelRun<T>& a, const KernelRun<T>& b) {
  return a.out == b.out && a.dq == b.dq && a.dk == b.dk && a.dv == b.dv;
}

template <class T>
bool has_nan(const KernelRun<T>& r) {
  for (const auto* x : {&r.out, &r.dq, &r.dk, &r.dv})
    for (T e : *x)
      if (std::isnan(e)) return true;
  return false;
}

// A causal mask with key padding (batch 1 pads its last 4 keys): some rows see few keys.
template <class T>
AttentionMask<T> causal_padded_mask(const Problem& p, std::vector<uint8_t>& pad) {
  pad.assign(static_cast<size_t>(p.B * p.Tk), 0);
  for (int64_t j = p.Tk - 4; j < p.Tk; ++j) pad[static_cast<size_t>(p.Tk + j)] = 1;
  AttentionMask<T> m;
  m.key_padding = pad.data();
  m.causal = true;
  return m;
}

template <class T>
class AttentionLayoutKernels : public ::testing::Test {};
using Dtypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(AttentionLayoutKernels, Dtypes);

TYPED_TEST(AttentionLayoutKernels, SplitAndPaddedLayoutsGiveThePackedBitsInBothKernels) {
  using T = TypeParam;
  const Problem p;
  std::vector<uint8_t> pad;
  const AttentionMask<T> mask = causal_padded_mask<T>(p, pad);
  for (Kernel kernel : {Kernel::Naive, Kernel::Flash}) {
    const KernelRun<T> packed = run_kernels<T>(kernel, p, mask, packed_layout(p), packed_layout(p));
    ASSERT_FALSE(has_nan(packed));
    EXPECT_TRUE(same_bits(run_kernels<T>(kernel, p, mask, split_layout(p), split_layout(p)), packed));
    EXPECT_TRUE(same_bits(run_kernels<T>(kernel, p, mask, padded_layout(p), split_layout(p)), packed));
    EXPECT_TRUE(same_bits(run_kernels<T>(kernel, p, mask, split_layout(p), padded_layout(p)), packed));
  }
}

// The flash kernel's two ways of sharing the backward (by K/V head; by key tile with private
// dq shares, when there are fewer K/V heads than threads), its transposed-K path (Tq >= 32),
// and a sliding window that leaves some keys unseen (their dk, dv rows must still be written).
TYPED_TEST(AttentionLayoutKernels, FlashWritesEveryGradientElementInEveryWorkSplit) {
  using T = TypeParam;
  Problem p;
  p.B = 1, p.H = 2, p.Hkv = 1, p.Tq = 40, p.Tk = 70, p.Dh = 16, p.Dv = 16;
  AttentionMask<T> mask;
  mask.causal = true;
  mask.window = 5;
  const KernelRun<T> packed = run_kernels<T>(Kernel::Flash, p, mask, packed_layout(p), packed_layout(p), {8, 16});
  ASSERT_FALSE(has_nan(packed));
  EXPECT_TRUE(same_bits(run_kernels<T>(Kernel::Flash, p, mask, padded_layout(p), split_layout(p), {8, 16}), packed));
  const KernelRun<T> naive = run_kernels<T>(Kernel::Naive, p, mask, packed_layout(p), packed_layout(p));
  ASSERT_FALSE(has_nan(naive));
  for (size_t i = 0; i < naive.dk.size(); ++i) ASSERT_NEAR(packed.dk[i], naive.dk[i], 1e-4) << i;
}

TYPED_TEST(AttentionLayoutKernels, NoKeysOrNoQueriesStillWriteZeroGradients) {
  using T = TypeParam;
  for (int64_t Tk : {0, 5})
    for (Kernel kernel : {Kernel::Naive, Kernel::Flash}) {
      Problem p;
      p.Tk = Tk;
      p.Tq = Tk == 0 ? 3 : 0;
      const KernelRun<T> r = run_kernels<T>(kernel, p, AttentionMask<T>{}, split_layout(p), padded_layout(p));
      for (const auto* x : {&r.out, &r.dq, &r.dk, &r.dv})
        for (T e : *x) EXPECT_EQ(e, T(0)) << "Tk " << Tk;
    }
}

// The control: the comparison above would catch a kernel that ignored a stride. Buffers in
// the split layout read as if packed, and gradients written packed into a split buffer,
// give other numbers (or leave NaN behind).
TYPED_TEST(AttentionLayoutKernels, AWrongStrideIsCaught) {
  using T = TypeParam;
  const Problem p;
  std::vector<uint8_t> pad;
  const AttentionMask<T> mask = causal_padded_mask<T>(p, pad);
  for (Kernel kernel : {Kernel::Naive, Kernel::Flash}) {
    const KernelRun<T> packed = run_kernels<T>(kernel, p, mask, packed_layout(p), packed_layout(p));
    AttentionLayout wrong_q = split_layout(p);
    wrong_q.q = HeadLayout::packed(p.H, p.Tq, p.Dh);
    EXPECT_FALSE(same_bits(run_kernels<T>(kernel, p, mask, split_layout(p), split_layout(p), wrong_q, split_layout(p)),
                           packed));
    AttentionLayout wrong_dk = padded_layout(p);
    wrong_dk.k.row = p.Dh;  // rows written packed inside the padded buffer
    const KernelRun<T> r = run_kernels<T>(kernel, p, mask, split_layout(p), padded_layout(p), split_layout(p), wrong_dk);
    EXPECT_TRUE(has_nan(r) || !same_bits(r, packed));
  }
}

// ---- the op: strided views in, gradients back in the inputs' layouts ----------------------

struct OpRun {
  Tensor out, dq, dk, dv;
};

// Runs the op on q, k, v (leaves or views of leaves) and back-propagates L = sum(out * w),
// returning the gradients of the tensors the views were taken from (`bases`).
OpRun run_op(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<Tensor>& bases, const SdpaOptions& o,
             SdpaImpl impl, uint64_t seed = 9) {
  const Tensor out = detail::scaled_dot_product_attention_impl(q, k, v, o, impl).out;
  sum(mul(out, randn(out.shape(), seed, out.dtype()))).backward();
  return {out.detach(), bases[0].grad(), bases[1].grad(), bases[2].grad()};
}

bool same_values(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_vector<double>() == b.to_vector<double>();
}

class AttentionLayoutOp : public ::testing::TestWithParam<DType> {};

// q, k, v as multi-head attention splits them: [B, T, H, Dh] tensors seen as [B, H, T, Dh]
// (transposed views), and as slices of larger buffers (rows, heads and batch entries apart);
// both kernels; values and gradients equal to those of packed copies, to the bit.
TEST_P(AttentionLayoutOp, StridedViewsGiveThePackedValuesAndGradients) {
  const DType dt = GetParam();
  const int64_t B = 2, H = 4, Hkv = 2, Tq = 5, Tk = 6, Dh = 4, Dv = 3;
  SdpaOptions o = SdpaOptions::causal_mask();
  o.key_padding_mask = Tensor::from_bools({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, {B, Tk});
  for (SdpaImpl impl : {SdpaImpl::Naive, SdpaImpl::Flash})
    for (int layout = 0; layout < 2; ++layout) {
      Tensor bq, bk, bv, q, k, v;
      if (layout == 0) {  // split heads
        bq = randn({B, Tq, H, Dh}, 1, dt).set_requires_grad(true);
        bk = randn({B, Tk, Hkv, Dh}, 2, dt).set_requires_grad(true);
        bv = randn({B, Tk, Hkv, Dv}, 3, dt).set_requires_grad(true);
        q = bq.transpose(1, 2), k = bk.transpose(1, 2), v = bv.transpose(1, 2);
      } else {  // windows of larger buffers
        bq = randn({B + 1, H, Tq + 2, Dh + 3}, 1, dt).set_requires_grad(true);
        bk = randn({B, Hkv + 1, Tk + 1, Dh + 1}, 2, dt).set_requires_grad(true);
        bv = randn({B, Hkv, Tk + 3, Dv + 2}, 3, dt).set_requires_grad(true);
        q = bq.slice(0, 1, B + 1).slice(2, 2, Tq + 2).slice(3, 1, Dh + 1);
        k = bk.slice(1, 1, Hkv + 1).slice(2, 0, Tk).slice(3, 0, Dh);
        v = bv.slice(2, 3, Tk + 3).slice(3, 2, Dv + 2);
      }
      ASSERT_FALSE(q.is_contiguous() || k.is_contiguous() || v.is_contiguous());
      Tensor pq = q.clone().set_requires_grad(true), pk = k.clone().set_requires_grad(true),
             pv = v.clone().set_requires_grad(true);
      const OpRun packed = run_op(pq, pk, pv, {pq, pk, pv}, o, impl);
      const OpRun strided = run_op(q, k, v, {bq, bk, bv}, o, impl);
      const char* name = impl == SdpaImpl::Flash ? "flash" : "naive";
      EXPECT_TRUE(same_values(strided.out, packed.out)) << name << " layout " << layout;
      // The gradients of the bases hold the views' gradients (and zeros around them).
      const Tensor gq = layout == 0 ? strided.dq.transpose(1, 2)
                                    : strided.dq.slice(0, 1, B + 1).slice(2, 2, Tq + 2).slice(3, 1, Dh + 1);
      const Tensor gk = layout == 0 ? strided.dk.transpose(1, 2)
                                    : strided.dk.slice(1, 1, Hkv + 1).slice(2, 0, Tk).slice(3, 0, Dh);
      const Tensor gv = layout == 0 ? strided.dv.transpose(1, 2) : strided.dv.slice(2, 3, Tk + 3).slice(3, 2, Dv + 2);
      EXPECT_TRUE(same_values(gq, packed.dq)) << name << " layout " << layout;
      EXPECT_TRUE(same_values(gk, packed.dk)) << name << " layout " << layout;
      EXPECT_TRUE(same_values(gv, packed.dv)) << name << " layout " << layout;
    }
}

// Inputs the kernels cannot read in place (features not packed) are copied, as before.
TEST_P(AttentionLayoutOp, InputsWithStridedFeaturesAreCopiedAndGiveTheSameResult) {
  const DType dt = GetParam();
  Tensor bq = randn({2, 3, 4, 5}, 1, dt).set_requires_grad(true);  // [B, H, Dh, T] seen as [B, H, T, Dh]
  const Tensor q = bq.transpose(2, 3);
  const Tensor k = randn({2, 3, 6, 4}, 2, dt), v = randn({2, 3, 6, 2}, 3, dt);
  Tensor pq = q.clone().set_requires_grad(true);
  for (SdpaImpl impl : {SdpaImpl::Naive, SdpaImpl::Flash}) {
    bq.zero_grad();
    pq.zero_grad();
    const Tensor a = detail::scaled_dot_product_attention_impl(q, k, v, {}, impl).out;
    const Tensor b = detail::scaled_dot_product_attention_impl(pq, k, v, {}, impl).out;
    EXPECT_TRUE(same_values(a, b));
    sum(a).backward();
    sum(b).backward();
    EXPECT_TRUE(same_values(bq.grad().transpose(2, 3), pq.grad()));
  }
}

// The output lies as [B, Tq, H, Dv] memory, so joining the heads (transpose, reshape) is a
// view; the node's gradients for split-heads inputs are split-heads views themselves, so the
// transposes that made the inputs hand them on without a copy.
TEST_P(AttentionLayoutOp, OutputAndGradientsKeepTheSplitHeadsLayout) {
  const DType dt = GetParam();
  const int64_t B = 2, T = 3, H = 2, Dh = 4;
  Tensor x = randn({B, T, 3 * H * Dh}, 1, dt).set_requires_grad(true);
  const Tensor q = x.slice(2, 0, H * Dh).contiguous().reshape({B, T, H, Dh}).transpose(1, 2);
  const Tensor k = randn({B, T, H, Dh}, 2, dt).transpose(1, 2), v = randn({B, T, H, Dh}, 3, dt).transpose(1, 2);
  for (SdpaImpl impl : {SdpaImpl::Naive, SdpaImpl::Flash}) {
    const Tensor out = detail::scaled_dot_product_attention_impl(q, k, v, {}, impl).out;  // [B, H, T, Dh]
    const Tensor joined = out.transpose(1, 2).reshape({B, T, H * Dh});                  // [B, T, D]
    EXPECT_EQ(joined.storage(), out.storage());
    EXPECT_EQ(joined.offset(), out.offset());
    const std::vector<Tensor> grads = out.grad_fn()->backward(randn(out.shape(), 4, dt));
    ASSERT_EQ(grads.size(), 3u);
    EXPECT_TRUE(grads[0].transpose(1, 2).is_contiguous());
    EXPECT_FALSE(grads[0].is_contiguous());
    // A strided incoming gradient (the transpose of a packed one) is read where it lies and
    // gives the same gradients as its packed copy.
    const Tensor g = randn({B, T, H, Dh}, 5, dt).transpose(1, 2);
    const std::vector<Tensor> a = out.grad_fn()->backward(g), b = out.grad_fn()->backward(g.clone());
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(same_values(a[i], b[i])) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AttentionLayout, AttentionLayoutOp, ::testing::Values(DType::F32, DType::F64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---- scaled_dot_product_attention_packed -----------------------------------------------------

// qkv [B, T, (H + 2*Hkv) * Dh] split into heads the plain way, through the view ops.
struct Split {
  Tensor q, k, v;
};
Split split_qkv(const Tensor& qkv, int64_t H, int64_t Hkv) {
  const int64_t B = qkv.size(0), T = qkv.size(1), Dh = qkv.size(2) / (H + 2 * Hkv);
  auto heads = [&](int64_t begin, int64_t n) {
    return qkv.slice(2, begin * Dh, (begin + n) * Dh).reshape({B, T, n, Dh}).transpose(1, 2);  // [B, n, T, Dh]
  };
  return {heads(0, H), heads(H, Hkv), heads(H + Hkv, Hkv)};
}

TEST(AttentionPacked, MatchesTheSplitHeadsBitForBitWithBothKernelsAndGroupedHeads) {
  for (DType dt : {DType::F32, DType::F64})
    for (int64_t Hkv : {4, 2, 1})
      for (bool naive : {false, true}) {
        const int64_t B = 2, T = 7, H = 4, Dh = 3;
        SdpaOptions o = SdpaOptions::causal_mask();
        o.key_padding_mask = Tensor::from_bools({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, {B, T});
        o.need_weights = naive;  // the naive kernel; the flash one otherwise
        Tensor a = randn({B, T, (H + 2 * Hkv) * Dh}, 1, dt).set_requires_grad(true);
        Tensor b = a.detach().clone().set_requires_grad(true);
        const SdpaResult packed = scaled_dot_product_attention_packed(a, H, Hkv, o);
        const Split s = split_qkv(b, H, Hkv);
        const SdpaResult split = scaled_dot_product_attention(s.q, s.k, s.v, o);
        EXPECT_TRUE(same_values(packed.out, split.out)) << dtype_name(dt) << " Hkv " << Hkv << " naive " << naive;
        if (naive) {
          EXPECT_TRUE(same_values(packed.weights, split.weights));
        }
        const Tensor w = randn(packed.out.shape(), 2, dt);
        sum(mul(packed.out, w)).backward();
        sum(mul(split.out, w)).backward();
        EXPECT_TRUE(same_values(a.grad(), b.grad())) << dtype_name(dt) << " Hkv " << Hkv << " naive " << naive;
      }
}

TEST(AttentionPacked, GradcheckInFloat64) {
  const int64_t H = 2, Hkv = 1, Dh = 3;
  Tensor qkv = randn({2, 4, (H + 2 * Hkv) * Dh}, 1).set_requires_grad(true);
  for (bool naive : {false, true}) {
    SdpaOptions o = SdpaOptions::causal_mask();
    o.need_weights = naive;
    EXPECT_TRUE(test::gradcheck(
        [&](const std::vector<Tensor>& x) { return scaled_dot_product_attention_packed(x[0], H, Hkv, o).out; },
        {qkv}));
  }
}

// Dropout draws the same mask as the unpacked op, in the same order.
TEST(AttentionPacked, DropoutMatchesTheUnpackedOp) {
  const Tensor qkv = randn({2, 5, 3 * 2 * 4}, 1, DType::F32);
  const Split s = split_qkv(qkv, 2, 2);
  Rng r1(7), r2(7);
  SdpaOptions o1, o2;
  o1.dropout_p = o2.dropout_p = 0.3;
  o1.rng = &r1;
  o2.rng = &r2;
  EXPECT_TRUE(same_values(scaled_dot_product_attention_packed(qkv, 2, 2, o1).out,
                          scaled_dot_product_attention(s.q, s.k, s.v, o2).out));
}

TEST(AttentionPacked, BadInputIsAnError) {
  const Tensor qkv = randn({2, 3, 12}, 1);
  EXPECT_THROW(scaled_dot_product_attention_packed(qkv, 2, 3, {}), Error);          // Hkv does not divide H
  EXPECT_THROW(scaled_dot_product_attention_packed(qkv, 0, 1, {}), Error);          // no heads
  EXPECT_THROW(scaled_dot_product_attention_packed(randn({2, 3, 10}, 1), 2, 2, {}), Error);  // 10 % 6 != 0
  EXPECT_THROW(scaled_dot_product_attention_packed(randn({6, 12}, 1), 2, 2, {}), Error);     // rank 2
  EXPECT_THROW(scaled_dot_product_attention_packed(Tensor::zeros({2, 3, 12}, DType::I64), 2, 2, {}), Error);
  EXPECT_THROW(scaled_dot_product_attention_packed(Tensor(), 2, 2, {}), Error);
  SdpaOptions o;
  o.key_padding_mask = Tensor::from_bools({0, 0, 0, 0}, {2, 2});  // [B, 2], not [B, T]
  EXPECT_THROW(scaled_dot_product_attention_packed(qkv, 2, 2, o), Error);
}

// Multi-head self-attention takes the packed op; the same layer fed three distinct tensors
// with the same values takes the separate projections. Both give the same output and
// parameter gradients, up to the rounding of summing the input gradient in another order.
TEST(AttentionPacked, SelfAttentionThroughOneProjectionMatchesThreeProjections) {
  Rng rng(3);
  nn::AttentionOptions grouped;
  grouped.n_kv_heads = 1;
  nn::MultiHeadAttention mha(8, 2, 0.0, DType::F64, rng, grouped);
  const Tensor x0 = randn({2, 5, 8}, 4);
  nn::AttentionMasks m;
  m.causal = true;
  auto run = [&](bool same) {
    for (const Tensor& p : mha.parameters()) p.zero_grad();
    Tensor x = x0.clone().set_requires_grad(true);
    // A reshape to the same shape is another tensor (a view) with the same values.
    const Tensor key = same ? x : x.reshape(x.shape()), value = same ? x : x.reshape(x.shape());
    const Tensor out = mha.forward(x, key, value, m);
    sum(mul(out, randn(out.shape(), 5))).backward();
    std::vector<Tensor> r{out.detach(), x.grad()};
    for (const Tensor& p : mha.parameters()) r.push_back(p.grad());
    return r;
  };
  const std::vector<Tensor> fused = run(true), separate = run(false);
  ASSERT_EQ(fused.size(), separate.size());
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(test::all_close(fused[i], separate[i], 1e-12)) << i;
}

}  // namespace
}  // namespace attn
