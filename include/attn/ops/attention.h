// attn/ops/attention.h — scaled dot-product attention as one fused op (paper §3.2.1, Eq. 1):
//   out = softmax(q k^T * scale + mask) v,  scale = 1/sqrt(Dh) by default.
// Mask convention (PyTorch's nn.MultiheadAttention): a Bool mask is true where a key is
// masked OUT; a float mask is ADDED to the scores. Masked entries get exactly zero weight.
// A query row whose keys are all masked outputs zeros (and zero gradient), never NaN.
// Causal alignment is bottom-right: with Tq queries and Tk keys, query i sees keys
// j <= i + (Tk - Tq) (top-left and bottom-right agree when Tq == Tk; bottom-right is what a
// KV cache needs).
// Kernels: the tiled FlashAttention-style pair (src/kernels/attention_flash.cpp, memory
// O(B*H*Tq) beyond the inputs) runs whenever need_weights is false and dropout_p == 0; the
// naive pair, which stores the [B, H, Tq, Tk] weights, runs otherwise. Both give the same
// result within floating-point rounding.
// Descendants of Eq. 1, inside the same kernels: grouped-query attention (k and v with fewer
// heads than q), ALiBi biases computed on the fly (never a [Tq, Tk] tensor per head), sliding
// windows; and rotary position embedding (RoPE) as its own op on q and k before attention.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attn/core/tensor.h"

namespace attn {

struct SdpaOptions {
  // Bool [Tq, Tk] or [B, H, Tq, Tk] (or any shape broadcastable to [B, H, Tq, Tk]),
  // true = masked out; or float of the same shapes, added to the scores. Optional.
  Tensor attn_mask;
  // Bool [B, Tk], true = this key is padding and no query may see it. Optional.
  Tensor key_padding_mask;
  // Query i may not see key j > i + (Tk - Tq).
  bool causal = false;
  // Sliding-window (local) attention when > 0: query i sees only the keys
  // i' - window < j <= i', i' = i + (Tk - Tq) (bottom-right aligned), so it implies causal.
  // window = 1 lets each query see its own position only. 0 = no window.
  int64_t window = 0;
  // 0 means 1/sqrt(Dh).
  double scale = 0.0;
  // Dropout on the attention weights (training only).
  double dropout_p = 0.0;
  Rng* rng = nullptr;  // required when dropout_p > 0
  // Return the attention weights [B, H, Tq, Tk] (after masking, before dropout).
  bool need_weights = false;
  // ALiBi (Press et al. 2022, "Train Short, Test Long"): per-head slopes m_h, [H] in q's dtype
  // (alibi_slopes() below). Adds -m_h * |i' - j| to score (i, j), i' = i + (Tk - Tq), which
  // under a causal mask is the paper's -m_h * (i' - j). Optional; a constant (no gradient).
  Tensor alibi_slopes;
  // Round q, k, v and the probabilities to bf16 for the two products, summed in float32, as a
  // bf16 model's linear layers do (kernels/attention_bf16.h: AMX tiles; the row-wise softmax stays
  // float32). float32 inputs only; taken where the CPU runs the bf16 products on AMX tiles and the
  // call records no gradient, asks for no weights and has no dropout; elsewhere the float32
  // kernels run. nn::MultiHeadAttention sets it for the bidirectional self-attention of a model
  // whose projections hold bf16 weights.
  bool bf16_products = false;

  static SdpaOptions causal_mask() { SdpaOptions o; o.causal = true; return o; }
  static SdpaOptions padding(Tensor key_padding) { SdpaOptions o; o.key_padding_mask = std::move(key_padding); return o; }
  static SdpaOptions sliding_window(int64_t w) { SdpaOptions o; o.causal = true; o.window = w; return o; }
};

struct SdpaResult {
  Tensor out;      // [B, H, Tq, Dv], a view of [B, Tq, H, Dv] memory (joining the heads is free)
  Tensor weights;  // [B, H, Tq, Tk] when need_weights, else undefined (not differentiable)
};

// q [B, H, Tq, Dh], k [B, Hkv, Tk, Dh], v [B, Hkv, Tk, Dv] -> out [B, H, Tq, Dv].
// Hkv = H is multi-head attention; Hkv < H (dividing H) is grouped-query attention (Ainslie et
// al. 2023; Hkv = 1 is multi-query attention, Shazeer 2019): query head h reads key/value head
// h / (H / Hkv), exactly as if each K/V head were repeated H / Hkv times.
// Differentiable with respect to q, k, v (and a float attn_mask is treated as a constant).
SdpaResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const SdpaOptions& options = {});

// Self-attention on one packed projection, as multi-head attention makes q, k and v with one
// product x W_in^T: qkv [B, T, (H + 2*Hkv) * Dh] holds at each position the H query heads, then
// the Hkv key heads, then the Hkv value heads, Dh features each (H = n_heads, Hkv = n_kv_heads,
// dividing H). The same result as scaled_dot_product_attention on the heads split from qkv
// ([B, T, heads, Dh] seen as [B, heads, T, Dh]), but q, k and v are read inside qkv and the
// gradient reaches qkv as one tensor, each element written once. Differentiable w.r.t. qkv.
SdpaResult scaled_dot_product_attention_packed(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads,
                                               const SdpaOptions& options = {});

// ALiBi slopes for n_heads heads, as the ALiBi paper and its reference code define them: for n
// a power of two, the geometric sequence m_h = 2^(-8 (h + 1) / n), h = 0 .. n-1; otherwise the
// slopes of the largest power of two p < n, followed by every other slope of 2p (the odd
// positions 0, 2, 4, ... of that list) until there are n. n_heads must be >= 1.
std::vector<double> alibi_slopes(int64_t n_heads);

// ---- rotary position embedding (RoPE; Su et al. 2021, "RoFormer") ---------------------------
// Each pair of features (a, b) of a head is rotated by the angle p * theta^(-2i / Dh), with p
// the position and i = 0 .. Dh/2 - 1 the pair's index:
//   a' = a cos - b sin,   b' = a sin + b cos.
// Interleaved pairs features (2i, 2i+1) (RoFormer, the seed, GPT-J, Meta's original LLaMA
// code); Half pairs (i, i + Dh/2) (GPT-NeoX, Hugging Face LLaMA/Mistral checkpoints).
enum class RopePairing { Interleaved, Half };
// "interleaved" / "half", and back (an unknown name is an error naming the valid ones).
const char* rope_pairing_name(RopePairing pairing);
RopePairing parse_rope_pairing(const std::string& name);

struct RopeOptions {
  double theta = 10000.0;  // the base; > 0
  RopePairing pairing = RopePairing::Interleaved;
};

// rotary_embedding: x [B, H, T, Dh] (Dh even, f32 or f64), positions I64 [B, T] (each batch row
// its own) or [T] (shared), every entry >= 0 -> x rotated per position, [B, H, T, Dh].
// Applied to q and k (not v) before attention, the score of query position m and key position
// n depends only on m - n. Differentiable with respect to x (the inverse rotation).
Tensor rotary_embedding(const Tensor& x, const Tensor& positions, const RopeOptions& options = {});

}  // namespace attn

namespace attn {

// Keys and values of a paged KV cache (nn/kv_cache.h: BlockPool): one layer's pool
// k_pool [blocks, Hkv, Bs, Dh] and v_pool [blocks, Hkv, Bs, Dv] (contiguous), Bs = block.
// Row b's key j is cache position first + j, its own position p = first + j - origin[b], in
// slot p % Bs of block tables[b * table_stride + p / Bs]; p < 0 or an entry < 0 reads as zero
// (such keys must be masked). `keys` = Tk. The pools are q's dtype, or bf16 with an f32 q (a
// KV cache of bf16 blocks): the kernels widen each staged row to f32 (exact), so the result is
// bit-identical to the f32 call on the keys and values the bf16 ones stand for.
struct PagedKVRef {
  Tensor k_pool, v_pool;
  const int32_t* tables = nullptr;  // [B, table_stride]
  int64_t table_stride = 0;
  const int64_t* origin = nullptr;  // [B]
  int64_t first = 0;
  int64_t keys = 0;
  int64_t block = 16;
};

// scaled_dot_product_attention(q, k, v, options).out with k and v read from the blocks where
// they lie (kernels/attention_flash.h: attention_flash_forward_paged): bit-identical to the
// contiguous call on the same keys and values. Inference only (no autograd, no weights, no
// dropout; attn_mask unsupported: key_padding_mask, causal, window, alibi_slopes and scale
// are). q [B, H, Tq, Dh] -> [B, H, Tq, Dv]. In batch-invariant mode the row-wise kernel reads
// the blocks in place (kernels/attention_invariant.h), bit-identical to that mode's contiguous op.
Tensor paged_attention(const Tensor& q, const PagedKVRef& kv, int64_t batch, const SdpaOptions& options);

// The keys and values kv holds for `batch` rows, as contiguous k [B, Hkv, Tk, Dh] and
// v [B, Hkv, Tk, Dv] (zeros where paged_attention reads zeros; f32 for bf16 pools: the values
// the kernels read). For tests.
std::pair<Tensor, Tensor> paged_kv_gather(const PagedKVRef& kv, int64_t batch);

// Writes x [N, Hkv, T, D] into their slots of pool [blocks, Hkv, Bs, D]: row r's cache index
// at + t is its own position p = at + t - origin[r], slot p % Bs of block
// tables[r * table_stride + p / Bs] (which must exist). A pool of x's dtype takes the values as
// they are; a bf16 pool takes an f32 x rounded to nearest even (bf16_from_float's bits,
// core/dtype.h).
void paged_kv_write(const Tensor& pool, const Tensor& x, const int32_t* tables, int64_t table_stride,
                    const int64_t* origin, int64_t at);

}  // namespace attn
