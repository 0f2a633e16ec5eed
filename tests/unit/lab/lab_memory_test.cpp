// attn lab memory (cli/lab_memory.h): seed 000's score-matrix rows (0.07 / 4.29 / 274.88 GB for
// 16 heads in float32 at T = 1024, 8192, 65536), FLOP formulas against step-by-step sums, the KV
// cache against nn::kv_cache_size, defaults, number formatting and bad input.
#include <gtest/gtest.h>

#include <string>

#include "attn/core/error.h"
#include "attn/nn/kv_cache.h"
#include "attn/lab/memory.h"

namespace attn::lab {
namespace {

TEST(LabMemory, ReproducesTheSeedsScoreMatrixRows) {
  MemoryOptions o;
  o.seq = 8192;
  o.heads = 16;
  o.dtype = DType::F32;
  const MemoryReport r = memory_report(o);
  ASSERT_EQ(r.rows.size(), 3u);
  EXPECT_EQ(r.rows[0].length, 1024);
  EXPECT_EQ(r.rows[1].length, 8192);
  EXPECT_EQ(r.rows[2].length, 65536);
  EXPECT_EQ(r.rows[1].score_bytes, 16.0 * 8192 * 8192 * 4);
  EXPECT_EQ(format_gb(r.rows[0].score_bytes), "0.07");
  EXPECT_EQ(format_gb(r.rows[1].score_bytes), "4.29");
  EXPECT_EQ(format_gb(r.rows[2].score_bytes), "274.88");
  const std::string text = format_memory_report(r);
  for (const char* gb : {"0.07", "4.29", "274.88"}) EXPECT_NE(text.find(gb), std::string::npos) << gb << "\n" << text;
  EXPECT_NE(text.find("fused attention"), std::string::npos);
  EXPECT_NE(text.find("KV cache"), std::string::npos);
}

TEST(LabMemory, ScoreMemoryGrowsWithTheSquareAndFusedMemoryLinearly) {
  MemoryOptions o;
  o.seq = 4096;
  o.layers = 3;
  o.batch = 2;
  o.dtype = DType::F64;
  const MemoryReport r = memory_report(o);
  ASSERT_EQ(r.rows.size(), 3u);
  EXPECT_EQ(r.rows[1].score_bytes / r.rows[0].score_bytes, 64.0);  // 8x longer, 64x the memory
  EXPECT_EQ(r.rows[1].fused_bytes / r.rows[0].fused_bytes, 8.0);
  for (const MemoryRow& row : r.rows) {
    EXPECT_EQ(row.stored_score_bytes, 6 * row.score_bytes);
    EXPECT_EQ(row.fused_bytes, 6.0 * 16 * static_cast<double>(row.length) * 8);
  }
}

TEST(LabMemory, FlopsAgreeWithSumsOverTheirParts) {
  MemoryOptions o;
  o.heads = 2;
  o.d_model = 8;
  o.d_ff = 12;
  o.layers = 2;
  o.batch = 3;
  o.lengths = {1, 2, 3, 4, 5};
  const MemoryReport r = memory_report(o);
  const double D = 8, F = 12, copies = 6;
  double cached = 0, recompute = 0;
  for (const MemoryRow& row : r.rows) {
    const double T = static_cast<double>(row.length);
    // Q, K, V, O: four [T, D] x [D, D] products; scores and weights x V: H products of T x T x Dh
    // each, i.e. T * T * D multiply-adds twice; FFN: [T, D] x [D, F] and [T, F] x [F, D].
    EXPECT_EQ(row.attention_flops, 2 * (4 * T * D * D) + 2 * (2 * T * T * D));
    EXPECT_EQ(row.ffn_flops, 2 * (2 * T * D * F));
    EXPECT_EQ(row.model_flops, copies * (row.attention_flops + row.ffn_flops));
    // Decoding step t = row.length: with a cache, one token's projections and FFN plus t keys;
    // without, a forward pass over all t tokens.
    cached += copies * (2 * 4 * D * D + 2 * 2 * T * D + 2 * 2 * D * F);
    recompute += row.model_flops;
    EXPECT_DOUBLE_EQ(row.decode_flops_cached, cached) << "T = " << T;
    EXPECT_DOUBLE_EQ(row.decode_flops_recompute, recompute) << "T = " << T;
  }
}

TEST(LabMemory, KvCacheBytesAgreeWithTheCachesOwnFormula) {
  MemoryOptions o;
  o.seq = 512;
  o.heads = 8;
  o.d_model = 256;
  o.layers = 6;
  o.batch = 4;
  for (const MemoryRow& row : memory_report(o).rows)
    EXPECT_EQ(row.kv_cache_bytes,
              static_cast<double>(nn::kv_cache_size(6, 4, 8, 32, row.length, 0, DType::F32).self_bytes));
}

TEST(LabMemory, ResolvesDefaults) {
  MemoryOptions o;
  o.seq = 5;  // too short for a T/8 row
  o.heads = 4;
  const MemoryReport r = memory_report(o);
  EXPECT_EQ(r.options.d_model, 256);
  EXPECT_EQ(r.options.d_ff, 1024);
  EXPECT_EQ(r.options.lengths, (std::vector<int64_t>{5, 40}));
}

TEST(LabMemory, FormatsNumbers) {
  EXPECT_EQ(format_si(1.5e12), "1.50 T");
  EXPECT_EQ(format_si(999), "999 ");
  EXPECT_EQ(format_si(1000), "1.00 k");
  EXPECT_EQ(format_si(12345678), "12.3 M");
  EXPECT_EQ(format_gb(274.877906944e9), "274.88");
}

TEST(LabMemory, RejectsBadSizes) {
  auto with = [](auto change) {
    MemoryOptions o;
    change(o);
    return o;
  };
  EXPECT_THROW(memory_report(with([](MemoryOptions& o) { o.seq = 0; })), Error);
  EXPECT_THROW(memory_report(with([](MemoryOptions& o) { o.heads = -1; })), Error);
  EXPECT_THROW(memory_report(with([](MemoryOptions& o) { o.layers = 0; })), Error);
  EXPECT_THROW(memory_report(with([](MemoryOptions& o) { o.d_model = 100; })), Error);  // 100 % 16 != 0
  EXPECT_THROW(memory_report(with([](MemoryOptions& o) { o.dtype = DType::I64; })), Error);
  EXPECT_THROW(memory_report(with([](MemoryOptions& o) { o.lengths = {8, 0}; })), Error);
}

}  // namespace
}  // namespace attn::lab
