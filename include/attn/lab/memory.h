// attn/lab/memory.h — `attn lab memory`: what attention costs as the sequence grows (seed
// 000's efficiency section, seed 003's inference section; paper §4, Table 1). The H x T x T score
// matrix, the forward FLOPs of attention, the FFN and a stack of layers, and what fused
// (FlashAttention-style) attention and a KV cache change. Pure arithmetic on the sizes: nothing
// is allocated or timed (bench/ measures). FLOPs count 2 per multiply-add; GB = 1e9 bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/core/dtype.h"

namespace attn::lab {

struct MemoryOptions {
  int64_t seq = 8192;  // T
  int64_t heads = 16;  // H
  DType dtype = DType::F32;
  int64_t layers = 1;
  int64_t batch = 1;
  int64_t d_model = 0;  // D; 0 = 64 * heads
  int64_t d_ff = 0;     // F; 0 = 4 * D
  // The lengths tabulated; empty = seq / 8, seq, 8 * seq (the seed's 1024 / 8192 / 65536 for
  // seq 8192: each 8x longer sequence needs 64x the score memory).
  std::vector<int64_t> lengths{};
};

// One sequence length. "Per layer" figures are for one layer and one sequence; the "model" and
// "stored" ones multiply by layers * batch.
struct MemoryRow {
  int64_t length = 0;              // T
  double score_bytes = 0;          // H * T^2 * bytes: one layer's softmax(Q K^T) for one sequence
  double stored_score_bytes = 0;   // layers * batch * score_bytes: what unfused training keeps for backward
  double fused_bytes = 0;          // layers * batch * H * T * bytes: the row statistics fused attention keeps instead
  double attention_flops = 0;      // per layer: 8 T D^2 (Q, K, V, O projections) + score_flops
  double score_flops = 0;          // per layer: 4 T^2 D (Q K^T and weights x V over all heads)
  double ffn_flops = 0;            // per layer: 4 T D F
  double model_flops = 0;          // layers * batch * (attention_flops + ffn_flops), one forward pass
  double kv_cache_bytes = 0;       // layers * batch * 2 * T * D * bytes: keys and values of T positions
  double decode_flops_cached = 0;  // generating T tokens one by one with a KV cache (all layers, batch)
  double decode_flops_recompute = 0;  // the same, recomputing the whole prefix at every step
};

struct MemoryReport {
  MemoryOptions options{};  // with d_model, d_ff and lengths resolved
  std::vector<MemoryRow> rows{};
};

// Resolves defaults, checks every size is positive (attn::Error otherwise; dtype f32 or f64),
// and fills one row per length.
MemoryReport memory_report(const MemoryOptions& options);

// The report as three text tables (score memory, forward FLOPs, decoding) and notes on what fused
// attention and a KV cache change.
std::string format_memory_report(const MemoryReport& report);

// "274.88" for 274.88e9 bytes: bytes / 1e9 with two decimals, as the seed prints.
std::string format_gb(double bytes);
// 1.5e12 -> "1.50 T": three significant digits and an SI prefix (k, M, G, T, P, E).
std::string format_si(double value);

}  // namespace attn::lab
