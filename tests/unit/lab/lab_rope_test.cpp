// attn lab rope (cli/lab_rope.h): the seed's table ((3,1), (10,8), (52,50) equal, (52,49) not)
// for both pairings, the scores against the seed's rotation written out here in double, a
// Toeplitz grid, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/lab/rope.h"
#include "unit/report/xml_check.h"

namespace attn::lab {
namespace {

// The seed's rope(x, pos): pair (a, b) of feature i rotated by pos * base^(-2i/D); interleaved
// pairs (2i, 2i+1), half pairs (i, i + D/2).
std::vector<double> reference_rotate(const std::vector<double>& x, int64_t pos, double base, RopePairing p) {
  const size_t D = x.size(), half = D / 2;
  std::vector<double> out(D);
  for (size_t i = 0; i < half; ++i) {
    const size_t a = p == RopePairing::Interleaved ? 2 * i : i;
    const size_t b = p == RopePairing::Interleaved ? 2 * i + 1 : i + half;
    const double angle = static_cast<double>(pos) * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(D));
    out[a] = x[a] * std::cos(angle) - x[b] * std::sin(angle);
    out[b] = x[a] * std::sin(angle) + x[b] * std::cos(angle);
  }
  return out;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

TEST(LabRope, SameOffsetGivesTheSameScoreForBothPairings) {
  for (RopePairing p : {RopePairing::Interleaved, RopePairing::Half}) {
    RopeTableOptions o;
    o.pairing = p;
    const RopeTable t = rope_table(o);
    ASSERT_EQ(t.rows.size(), 4u);
    EXPECT_EQ(t.rows[3].query_pos, 52);
    EXPECT_EQ(t.rows[3].key_pos, 49);
    EXPECT_NEAR(t.rows[1].score, t.rows[0].score, 1e-9) << rope_pairing_name(p);
    EXPECT_NEAR(t.rows[2].score, t.rows[0].score, 1e-9) << rope_pairing_name(p);
    EXPECT_GT(std::fabs(t.rows[3].score - t.rows[0].score), 1e-3) << rope_pairing_name(p);
    EXPECT_GT(std::fabs(t.rows[0].score - t.unrotated), 1e-3);
    EXPECT_NE(format_rope_table(t, o).find("52"), std::string::npos);
  }
}

TEST(LabRope, ScoresEqualTheSeedsRotationWrittenOut) {
  for (RopePairing p : {RopePairing::Interleaved, RopePairing::Half}) {
    RopeTableOptions o;
    o.dim = 12;
    o.base = 100.0;
    o.pairing = p;
    o.pairs = {{0, 0}, {7, 2}, {2, 7}, {100, 37}};
    o.seed = 5;
    const RopeTable t = rope_table(o);
    for (const RopeRow& r : t.rows) {
      const double want = dot(reference_rotate(t.q, r.query_pos, o.base, p), reference_rotate(t.k, r.key_pos, o.base, p));
      EXPECT_NEAR(r.score, want, 1e-12) << rope_pairing_name(p) << " (" << r.query_pos << ", " << r.key_pos << ")";
      // R_m^T R_n = R_{n-m}: only the offset matters.
      EXPECT_NEAR(r.score, dot(t.q, reference_rotate(t.k, r.key_pos - r.query_pos, o.base, p)), 1e-9);
    }
    EXPECT_NEAR(t.rows[0].score, t.unrotated, 1e-12);  // position 0 is no rotation
  }
}

TEST(LabRope, GridIsConstantAlongDiagonals) {
  RopeTableOptions o;
  o.grid = 6;
  const RopeTable t = rope_table(o);
  ASSERT_EQ(t.grid.rows, 6);
  for (int64_t m = 0; m + 1 < 6; ++m)
    for (int64_t n = 0; n + 1 < 6; ++n) EXPECT_NEAR(t.grid.at(m + 1, n + 1), t.grid.at(m, n), 1e-9);
  EXPECT_GT(std::fabs(t.grid.at(0, 1) - t.grid.at(0, 2)), 1e-6);
  EXPECT_EQ(test::check_xml(rope_figure(t, o)).error, "");
}

TEST(LabRope, RejectsBadInput) {
  RopeTableOptions o;
  o.dim = 7;
  EXPECT_THROW(rope_table(o), Error);
  o.dim = 8;
  o.pairs = {{-1, 2}};
  EXPECT_THROW(rope_table(o), Error);
  o.pairs = {};
  o.base = 0;
  EXPECT_THROW(rope_table(o), Error);
  o.base = 10000;
  o.grid = -1;
  EXPECT_THROW(rope_table(o), Error);
  o.grid = 0;
  EXPECT_THROW(rope_figure(rope_table(o), o), Error);
}

}  // namespace
}  // namespace attn::lab
