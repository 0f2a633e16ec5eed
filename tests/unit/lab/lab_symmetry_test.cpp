// attn lab permutation and masks (cli/lab_symmetry.h): equivariance and pooled invariance hold
// without positions and break with sinusoids; a causal mask confines a change to later outputs and
// a padding mask hides PAD values exactly, each against its no-mask control; bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/lab/symmetry.h"
#include "unit/report/xml_check.h"

namespace attn::lab {
namespace {

TEST(LabPermutation, HoldsWithoutPositionsAndBreaksWithSinusoids) {
  const PermutationDemo d = permutation_demo({});
  ASSERT_EQ(d.permutation.size(), 10u);
  for (size_t i = 0; i < d.permutation.size(); ++i) EXPECT_NE(d.permutation[i], static_cast<int64_t>(i));
  std::vector<int64_t> sorted = d.permutation;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) EXPECT_EQ(sorted[i], static_cast<int64_t>(i));
  ASSERT_EQ(d.checks.size(), 4u);
  EXPECT_TRUE(d.checks[0].holds) << d.checks[0].max_diff;  // f(PX) = P f(X)
  EXPECT_TRUE(d.checks[1].holds) << d.checks[1].max_diff;  // pooled invariance
  EXPECT_LT(d.checks[0].max_diff, 1e-12);
  EXPECT_FALSE(d.checks[2].holds);
  EXPECT_FALSE(d.checks[3].holds);
  EXPECT_GT(d.checks[2].max_diff, 0.05);
  EXPECT_GT(d.checks[3].max_diff, 1e-3);
  const std::string text = format_permutation_demo(d);
  EXPECT_NE(text.find("f(PX) = P f(X)"), std::string::npos);
}

TEST(LabPermutation, RejectsBadSizes) {
  PermutationOptions o;
  o.heads = 5;  // 32 % 5 != 0
  EXPECT_THROW(permutation_demo(o), Error);
  o.heads = 4;
  o.length = 1;
  EXPECT_THROW(permutation_demo(o), Error);
}

TEST(LabMasks, CausalMaskConfinesAChangeAndPaddingMaskHidesPadExactly) {
  const MasksDemo d = masks_demo({});
  ASSERT_EQ(d.rows.size(), 4u);
  EXPECT_EQ(MasksDemo::changed(d.rows[0]), (std::vector<int64_t>{2, 3, 4, 5}));      // causal
  EXPECT_EQ(MasksDemo::changed(d.rows[1]), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));  // control: no mask
  EXPECT_EQ(d.real_token_change(d.rows[2]), 0.0);                                     // padding mask
  EXPECT_GT(d.real_token_change(d.rows[3]), 0.1);                                     // control: no mask
  const std::string text = format_masks_demo(d);
  EXPECT_NE(text.find("[2 3 4 5]"), std::string::npos) << text;
  EXPECT_EQ(test::check_xml(masks_figure(d)).error, "");
}

TEST(LabMasks, FollowsThePerturbedPosition) {
  MasksOptions o;
  o.length = 8;
  o.real = 5;
  o.position = 4;
  const MasksDemo d = masks_demo(o);
  EXPECT_EQ(MasksDemo::changed(d.rows[0]), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(d.real_token_change(d.rows[2]), 0.0);
}

TEST(LabMasks, RejectsBadSizes) {
  MasksOptions o;
  o.real = 6;  // no PAD left
  EXPECT_THROW(masks_demo(o), Error);
  o.real = 4;
  o.position = 6;
  EXPECT_THROW(masks_demo(o), Error);
  o.position = 2;
  o.d_model = 0;
  EXPECT_THROW(masks_demo(o), Error);
}

}  // namespace
}  // namespace attn::lab
