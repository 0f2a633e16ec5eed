// attn lab kv-cache (cli/lab_kv_cache.h): every cached decoding step equals the full causal
// pass at that position (float32 and float64), the cache grows by 2 * layers * D values per step,
// and bad input.
#include <gtest/gtest.h>

#include <string>

#include "attn/core/error.h"
#include "attn/lab/kv_cache.h"
#include "support/tolerances.h"

namespace attn::lab {
namespace {

TEST(LabKvCache, StepByStepEqualsTheFullCausalPass) {
  KvCacheOptions o;
  o.steps = 6;
  o.source_length = 5;
  const KvCacheDemo d = kv_cache_demo(o);
  ASSERT_EQ(d.steps.size(), 6u);
  EXPECT_LT(d.max_abs_diff, test::kAbsF32);
  const int64_t per_step = 2 * 2 * 64 * 4;  // K and V, 2 decoder layers, D = 64, float32
  EXPECT_EQ(d.cross_bytes, per_step * 5);
  for (size_t t = 0; t < d.steps.size(); ++t) {
    const KvCacheStep& s = d.steps[t];
    EXPECT_EQ(s.position, static_cast<int64_t>(t));
    EXPECT_EQ(s.cached_keys, static_cast<int64_t>(t + 1));
    EXPECT_EQ(s.cache_bytes, d.cross_bytes + per_step * static_cast<int64_t>(t + 1));
    EXPECT_TRUE(s.same_argmax) << "step " << t;
  }
  EXPECT_EQ(d.steps[0].token, 1);  // BOS
  EXPECT_NE(format_kv_cache_demo(d).find("= the full causal pass"), std::string::npos);
}

TEST(LabKvCache, Float64AgreesToRounding) {
  KvCacheOptions o;
  o.steps = 4;
  o.dtype = DType::F64;
  EXPECT_LT(kv_cache_demo(o).max_abs_diff, 1e-12);
}

TEST(LabKvCache, RejectsBadInput) {
  KvCacheOptions o;
  o.steps = 0;
  EXPECT_THROW(kv_cache_demo(o), Error);
  o.steps = 2;
  o.dtype = DType::I64;
  EXPECT_THROW(kv_cache_demo(o), Error);
}

}  // namespace
}  // namespace attn::lab
