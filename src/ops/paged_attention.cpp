// paged_attention (ops/attention.h): attention over the keys and values of a block pool, read
// in place by the tiled kernel's paged variant (kernels/attention_flash.h), or in the
// batch-invariant mode by the row-wise kernel's (kernels/attention_invariant.h); the gather
// that lays them out contiguously (tests); and the write of a step's keys and values into their
// slots (copied, or rounded to bf16 for a bf16 pool).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "attn/core/error.h"
#include "attn/ops/attention.h"
#include "kernels/attention_flash.h"
#include "kernels/attention_invariant.h"
#include "kernels/batch_invariant.h"
#include "kernels/quantized_gemm.h"  // f32_to_bf16, bf16_to_f32

namespace attn {

namespace {

constexpr const char* kOp = "paged_attention";

// dtype: q's (or, for the gather, the pools' own). bf16 pools go with f32 queries only.
void check_paged(const PagedKVRef& kv, int64_t batch, DType dtype) {
  ATTN_CHECK(kv.k_pool.defined() && kv.v_pool.defined() && kv.k_pool.dim() == 4 && kv.v_pool.dim() == 4 &&
                 kv.k_pool.is_contiguous() && kv.v_pool.is_contiguous(),
             kOp, "the pools must be contiguous [blocks, Hkv, Bs, D]");
  const DType pd = kv.k_pool.dtype();
  ATTN_CHECK(kv.v_pool.dtype() == pd && (pd == dtype || (pd == DType::BF16 && dtype == DType::F32)), kOp,
             "the pools must be ", dtype_name(dtype), " like q (or bf16 with an f32 q); got ", kv.k_pool.str(),
             " and ", kv.v_pool.str());
  ATTN_CHECK(kv.block >= 1 && kv.k_pool.size(2) == kv.block && kv.v_pool.size(2) == kv.block &&
                 kv.k_pool.size(0) == kv.v_pool.size(0) && kv.k_pool.size(1) == kv.v_pool.size(1),
             kOp, "pools ", kv.k_pool.str(), " and ", kv.v_pool.str(), " do not match block size ", kv.block);
  ATTN_CHECK(batch >= 0 && kv.keys >= 0 && kv.first >= 0 && kv.table_stride >= 0 &&
                 (batch == 0 || (kv.origin != nullptr && (kv.table_stride == 0 || kv.tables != nullptr))),
             kOp, "bad block tables: batch ", batch, ", keys ", kv.keys, ", first ", kv.first, ", stride ",
             kv.table_stride);
  const int64_t blocks = kv.k_pool.size(0);
  for (int64_t i = 0; i < batch * kv.table_stride; ++i)
    ATTN_CHECK(kv.tables[i] < blocks, kOp, "block table entry ", kv.tables[i], " out of range [0, ", blocks, ")");
}

}  // namespace

std::pair<Tensor, Tensor> paged_kv_gather(const PagedKVRef& kv, int64_t batch) {
  check_paged(kv, batch, kv.k_pool.dtype());
  const int64_t Hkv = kv.k_pool.size(1), Bs = kv.block, Dh = kv.k_pool.size(3), Dv = kv.v_pool.size(3);
  // bf16 pools: what the kernels read, the bf16 values widened to f32.
  const bool bf16 = kv.k_pool.dtype() == DType::BF16;
  const DType out = bf16 ? DType::F32 : kv.k_pool.dtype();
  Tensor k = Tensor::zeros({batch, Hkv, kv.keys, Dh}, out);  // [B, Hkv, Tk, Dh]
  Tensor v = Tensor::zeros({batch, Hkv, kv.keys, Dv}, out);  // [B, Hkv, Tk, Dv]
  const size_t es = dtype_size(kv.k_pool.dtype());
  const auto* kp = static_cast<const char*>(kv.k_pool.raw_data());
  const auto* vp = static_cast<const char*>(kv.v_pool.raw_data());
  auto* ko = static_cast<char*>(k.raw_data());
  auto* vo = static_cast<char*>(v.raw_data());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < kv.keys; ++j) {
      const int64_t p = kv.first + j - kv.origin[b];
      if (p < 0 || p / Bs >= kv.table_stride) continue;
      const int64_t blk = kv.tables[b * kv.table_stride + p / Bs];
      if (blk < 0) continue;
      for (int64_t h = 0; h < Hkv; ++h) {
        const int64_t src = (blk * Hkv + h) * Bs + p % Bs, dst = (b * Hkv + h) * kv.keys + j;
        if (bf16) {
          kernels::bf16_to_f32(reinterpret_cast<float*>(ko) + dst * Dh,
                               reinterpret_cast<const uint16_t*>(kp) + src * Dh, Dh);
          kernels::bf16_to_f32(reinterpret_cast<float*>(vo) + dst * Dv,
                               reinterpret_cast<const uint16_t*>(vp) + src * Dv, Dv);
          continue;
        }
        std::copy(kp + src * Dh * es, kp + (src + 1) * Dh * es, ko + dst * Dh * es);
        std::copy(vp + src * Dv * es, vp + (src + 1) * Dv * es, vo + dst * Dv * es);
      }
    }
  return {k, v};
}

void paged_kv_write(const Tensor& pool, const Tensor& x, const int32_t* tables, int64_t table_stride,
                    const int64_t* origin, int64_t at) {
  const char* op = "paged_kv_write";
  ATTN_CHECK(pool.defined() && pool.dim() == 4 && pool.is_contiguous() && x.defined() && x.dim() == 4 &&
                 x.size(1) == pool.size(1) && x.size(3) == pool.size(3) &&
                 (x.dtype() == pool.dtype() || (pool.dtype() == DType::BF16 && x.dtype() == DType::F32)) &&
                 is_floating(x.dtype()),
             op, "cannot write ", x.defined() ? x.str() : "undefined", " into a pool ",
             pool.defined() ? pool.str() : "undefined", " (same heads and head size; the pool's dtype, or bf16 "
             "for f32)");
  const int64_t N = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3), Bs = pool.size(2);
  const int64_t blocks = pool.size(0);
  ATTN_CHECK(N == 0 || (origin != nullptr && tables != nullptr), op, "no block tables for ", N, " rows");
  // Each position's head is one run of D values: read where x lies (a view of the projected
  // rows), copying first only when its last dimension is strided.
  const Tensor xc = x.strides()[3] == 1 ? x : x.contiguous();  // [N, Hkv, T, D]
  const Shape& st = xc.strides();
  const bool round = pool.dtype() == DType::BF16;
  const size_t es = dtype_size(x.dtype());
  const char* src = static_cast<const char*>(xc.raw_data());
  char* dst = static_cast<char*>(pool.raw_data());
  for (int64_t r = 0; r < N; ++r)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t p = at + t - origin[r];
      const int64_t blk = p >= 0 && p / Bs < table_stride ? tables[r * table_stride + p / Bs] : -1;
      ATTN_CHECK(blk >= 0 && blk < blocks, op, "position ", p, " of row ", r, " has no block");
      for (int64_t h = 0; h < H; ++h) {
        const int64_t to = ((blk * H + h) * Bs + p % Bs) * D, from = r * st[0] + h * st[1] + t * st[2];
        if (round)  // round to nearest even, as every bf16 conversion of attn (core/dtype.h)
          kernels::f32_to_bf16(reinterpret_cast<uint16_t*>(dst) + to, reinterpret_cast<const float*>(src) + from, D);
        else
          std::memcpy(dst + static_cast<size_t>(to) * es, src + static_cast<size_t>(from) * es,
                      static_cast<size_t>(D) * es);
      }
    }
}

namespace {

template <class T>
Tensor paged_impl(const Tensor& q, const PagedKVRef& kv, int64_t batch, const SdpaOptions& o) {
  const int64_t B = batch, H = q.size(1), Tq = q.size(2), Dh = q.size(3);
  kernels::AttentionDims d;
  d.B = B;
  d.H = H;
  d.Hkv = kv.k_pool.size(1);
  d.Tq = Tq;
  d.Tk = kv.keys;
  d.Dh = Dh;
  d.Dv = kv.v_pool.size(3);
  ATTN_CHECK(kv.k_pool.size(3) == Dh && d.Hkv >= 1 && H % d.Hkv == 0, kOp, "q ", q.str(), " and pool ",
             kv.k_pool.str(), " disagree in head size or heads");
  kernels::AttentionMask<T> mask;
  Tensor padding, alibi;
  if (o.key_padding_mask.defined()) {
    ATTN_CHECK(o.key_padding_mask.dtype() == DType::Bool && o.key_padding_mask.shape() == (Shape{B, d.Tk}), kOp,
               "key_padding_mask must be bool [", B, ", ", d.Tk, "], got ", o.key_padding_mask.str());
    padding = o.key_padding_mask.contiguous();
    mask.key_padding = static_cast<const uint8_t*>(padding.raw_data());
  }
  mask.causal = o.causal || o.window > 0;
  mask.window = o.window;
  if (o.alibi_slopes.defined()) {
    ATTN_CHECK(o.alibi_slopes.dtype() == q.dtype() && o.alibi_slopes.shape() == (Shape{H}), kOp,
               "alibi_slopes must be [", H, "] like q, got ", o.alibi_slopes.str());
    alibi = o.alibi_slopes.contiguous();
    mask.alibi = alibi.data<T>();
  }
  const double scale = o.scale != 0.0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(Dh));
  // q read where it lies when its features are packed (the split heads of a projection).
  const Tensor qc = q.strides()[3] == 1 || Dh == 1 ? q : q.contiguous();  // [B, H, Tq, Dh]
  const Shape& st = qc.strides();
  const kernels::HeadLayout q_layout{st[0], st[1], Tq > 1 ? st[2] : Dh};
  const Tensor mem = Tensor::empty({B, Tq, H, d.Dv}, q.dtype());  // [B, Tq, H, Dv]
  std::vector<T> lse(static_cast<size_t>(B * H * Tq));
  kernels::PagedKV<T> pk;
  if (kv.k_pool.dtype() == DType::BF16) {  // widened to f32 as the kernels stage them
    pk.k16 = kv.k_pool.data<uint16_t>();
    pk.v16 = kv.v_pool.data<uint16_t>();
  } else {
    pk.k = kv.k_pool.data<T>();
    pk.v = kv.v_pool.data<T>();
  }
  pk.tables = kv.tables;
  pk.table_stride = kv.table_stride;
  pk.origin = kv.origin;
  pk.first = kv.first;
  pk.block = kv.block;
  if (kernels::batch_invariant())  // the row-wise kernel, reading the blocks in place too
    kernels::attention_invariant_forward_paged<T>(mem.data<T>(), lse.data(), qc.data<T>(), pk, mask, d,
                                                  static_cast<T>(scale), q_layout,
                                                  kernels::HeadLayout::split(H, Tq, d.Dv));
  else
    kernels::attention_flash_forward_paged<T>(mem.data<T>(), lse.data(), qc.data<T>(), pk, mask, d,
                                              static_cast<T>(scale), kernels::FlashTiles{},
                                              q_layout,
                                              kernels::HeadLayout::split(H, Tq, d.Dv));
  return mem.transpose(1, 2);  // [B, H, Tq, Dv]
}

}  // namespace

Tensor paged_attention(const Tensor& q, const PagedKVRef& kv, int64_t batch, const SdpaOptions& options) {
  ATTN_CHECK(q.defined() && q.dim() == 4 && is_floating(q.dtype()) && q.size(0) == batch, kOp,
             "q must be f32 or f64 [", batch, ", H, Tq, Dh], got ", q.defined() ? q.str() : "undefined");
  ATTN_CHECK(!options.attn_mask.defined() && options.dropout_p == 0.0 && !options.need_weights, kOp,
             "paged attention takes key_padding_mask, causal, window, alibi and scale only");
  ATTN_CHECK(options.window >= 0, kOp, "window must be >= 0, got ", options.window);
  check_paged(kv, batch, q.dtype());
  if (q.dtype() == DType::F32) return paged_impl<float>(q, kv, batch, options);
  return paged_impl<double>(q, kv, batch, options);
}

}  // namespace attn
