// BERT's masked-LM corruption (train/masking.h): how many tokens are chosen and which, the
// 80/10/10 split of what happens to them over many sequences, reproducible masks from (seed,
// epoch, example) independent of the batch, and a loss that ignores unchosen positions (value
// against a brute-force double loop, zero gradient there, and a control that would catch a loss
// over every position).
#include "attn/train/masking.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/ops/ops.h"
#include "attn/io/vocab.h"

namespace attn::train {
namespace {

using Ids = std::vector<int64_t>;

// A vocabulary of 5 specials (with [MASK]) and 20 symbols, ids 5..24.
MaskingOptions options() {
  MaskingOptions o;
  o.mask_id = io::Vocab::kMask;
  o.first_symbol = 5;
  o.vocab_size = 25;
  return o;
}

Ids random_line(Rng& rng, int64_t length) {
  Ids ids;
  for (int64_t i = 0; i < length; ++i) ids.push_back(5 + static_cast<int64_t>(rng.below(20)));
  return ids;
}

TEST(Masking, ChoosesRoundedShareOfNonSpecialTokensAndRecordsThem) {
  Rng data(1);
  for (int64_t length : {1, 2, 6, 7, 10, 20, 33}) {
    for (int rep = 0; rep < 20; ++rep) {
      Ids ids = random_line(data, length);
      ids.insert(ids.begin(), io::Vocab::kBos);  // specials are never candidates
      ids.push_back(io::Vocab::kUnk);
      Rng rng(static_cast<uint64_t>(length * 100 + rep));
      const MaskedSequence m = mask_sequence(ids, options(), rng);
      const int64_t expected = std::max<int64_t>(1, std::llround(0.15 * static_cast<double>(length)));
      ASSERT_EQ(static_cast<int64_t>(m.positions.size()), expected) << "length " << length;
      ASSERT_EQ(m.targets.size(), m.positions.size());
      EXPECT_TRUE(std::is_sorted(m.positions.begin(), m.positions.end()));
      EXPECT_EQ(std::set<int64_t>(m.positions.begin(), m.positions.end()).size(), m.positions.size());
      for (size_t k = 0; k < m.positions.size(); ++k) {
        const int64_t p = m.positions[k];
        EXPECT_GE(ids[static_cast<size_t>(p)], 5) << "a special token was chosen";
        EXPECT_EQ(m.targets[k], ids[static_cast<size_t>(p)]);
      }
      // Unchosen positions are untouched.
      for (size_t i = 0; i < ids.size(); ++i) {
        if (!std::binary_search(m.positions.begin(), m.positions.end(), static_cast<int64_t>(i))) {
          EXPECT_EQ(m.input[i], ids[i]);
        }
      }
    }
  }
  // A sequence of specials only has nothing to choose.
  Rng rng(0);
  const MaskedSequence none = mask_sequence({1, 3, 2}, options(), rng);
  EXPECT_TRUE(none.positions.empty());
  EXPECT_EQ(none.input, (Ids{1, 3, 2}));
}

TEST(Masking, ChosenTokensBecomeMaskEightyRandomTenAndStayTenPercent) {
  // 4000 lines of 20 symbols: 3 chosen each, 12000 chosen tokens. A random replacement equal
  // to the original (probability 1/20) looks kept, so the observable shares are
  // mask 0.8, changed 0.1 * 19/20, unchanged 0.1 + 0.1/20. The binomial standard error is at
  // most 0.004; the tolerance is 0.015.
  Rng data(7);
  int64_t chosen = 0, masked = 0, changed = 0, unchanged = 0, positions = 0;
  for (int64_t line = 0; line < 4000; ++line) {
    const Ids ids = random_line(data, 20);
    Rng rng(masking_seed(11, 0, line));
    const MaskedSequence m = mask_sequence(ids, options(), rng);
    positions += static_cast<int64_t>(ids.size());
    for (int64_t p : m.positions) {
      const int64_t in = m.input[static_cast<size_t>(p)], orig = ids[static_cast<size_t>(p)];
      ++chosen;
      if (in == io::Vocab::kMask) ++masked;
      else if (in != orig) ++changed;
      else ++unchanged;
      EXPECT_TRUE(in == io::Vocab::kMask || (in >= 5 && in < 25)) << "replacement " << in << " is a special token";
    }
  }
  const double n = static_cast<double>(chosen);
  EXPECT_NEAR(static_cast<double>(chosen) / static_cast<double>(positions), 0.15, 1e-12);
  EXPECT_NEAR(static_cast<double>(masked) / n, 0.8, 0.015);
  EXPECT_NEAR(static_cast<double>(changed) / n, 0.1 * 19.0 / 20.0, 0.015);
  EXPECT_NEAR(static_cast<double>(unchanged) / n, 0.1 + 0.1 / 20.0, 0.015);
  EXPECT_GT(changed, 0);
  EXPECT_GT(unchanged, 0);
}

TEST(Masking, EveryPositionIsChosenAboutEquallyOften) {
  // Uniform choice: over 3000 lines of 10 symbols (2 chosen each, rounded from 1.5), each
  // position is chosen 600 times on average; none may stray by more than 20%.
  std::vector<int64_t> count(10, 0);
  Rng data(3);
  for (int64_t line = 0; line < 3000; ++line) {
    Rng rng(masking_seed(5, 2, line));
    for (int64_t p : mask_sequence(random_line(data, 10), options(), rng).positions) ++count[static_cast<size_t>(p)];
  }
  for (int64_t c : count) EXPECT_NEAR(static_cast<double>(c), 600.0, 120.0);
}

TEST(Masking, SeedsDependOnRunEpochAndExampleOnly) {
  EXPECT_EQ(masking_seed(1, 0, 5), masking_seed(1, 0, 5));
  EXPECT_NE(masking_seed(1, 0, 5), masking_seed(1, 1, 5));
  EXPECT_NE(masking_seed(1, 0, 5), masking_seed(1, 0, 6));
  EXPECT_NE(masking_seed(1, 0, 5), masking_seed(2, 0, 5));
  EXPECT_NE(masking_seed(1, -1, 5), masking_seed(1, 0, 5));  // validation has its own masks
}

std::vector<io::Example> lines(int64_t n, int64_t length, uint64_t seed) {
  Rng rng(seed);
  std::vector<io::Example> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(io::Example{random_line(rng, length - (i % 3)), {}});
  return out;
}

TEST(MaskedBatch, LabelsHoldTheOriginalTokensAtChosenPositionsAndPadElsewhere) {
  const auto data = lines(6, 12, 2);
  const MaskedBatch b = make_masked_batch(data, {4, 0, 2}, options(), 9, 3, io::Vocab::kPad);
  ASSERT_EQ(b.input.shape(), (Shape{3, 12}));
  ASSERT_EQ(b.labels.shape(), (Shape{3, 12}));
  const Ids input = b.input.to_vector<int64_t>(), labels = b.labels.to_vector<int64_t>();
  int64_t chosen = 0;
  for (int64_t r = 0; r < 3; ++r) {
    const Ids& ids = data[static_cast<size_t>(b.indices[static_cast<size_t>(r)])].src;
    for (size_t t = 0; t < 12; ++t) {
      const int64_t in = input[static_cast<size_t>(r) * 12 + t], label = labels[static_cast<size_t>(r) * 12 + t];
      if (t >= ids.size()) {
        EXPECT_EQ(in, io::Vocab::kPad);
        EXPECT_EQ(label, io::Vocab::kPad);
      } else if (label != io::Vocab::kPad) {
        EXPECT_EQ(label, ids[t]);
        ++chosen;
      } else {
        EXPECT_EQ(in, ids[t]);  // unchosen: untouched
      }
    }
  }
  EXPECT_EQ(chosen, b.n_chosen);
  EXPECT_EQ(b.n_chosen, 2 + 2 + 2);  // round(0.15 * {10, 12, 11}) = 2 each
}

TEST(MaskedBatch, AnExampleIsMaskedTheSameWhateverBatchItIsIn) {
  const auto data = lines(5, 10, 4);
  const MaskedBatch alone = make_masked_batch(data, {3}, options(), 1, 0, io::Vocab::kPad);
  const MaskedBatch with_others = make_masked_batch(data, {0, 3, 4}, options(), 1, 0, io::Vocab::kPad);
  const Ids a = alone.input.to_vector<int64_t>(), b = with_others.input.to_vector<int64_t>();
  EXPECT_EQ(Ids(a.begin(), a.begin() + 10), Ids(b.begin() + 10, b.begin() + 20));
  // Control: another epoch masks differently somewhere in the set.
  const MaskedBatch e0 = make_masked_batch(data, {0, 1, 2, 3, 4}, options(), 1, 0, io::Vocab::kPad);
  const MaskedBatch e1 = make_masked_batch(data, {0, 1, 2, 3, 4}, options(), 1, 1, io::Vocab::kPad);
  EXPECT_NE(e0.labels.to_vector<int64_t>(), e1.labels.to_vector<int64_t>());
}

TEST(MaskedLmLoss, IsTheMeanOverChosenPositionsOnlyWithZeroGradientElsewhere) {
  const int64_t B = 2, S = 4, V = 6;
  Rng rng(5);
  Tensor logits = Tensor::randn({B, S, V}, rng, DType::F64);
  logits.set_requires_grad(true);
  // Chosen: (0, 1) -> 3 and (1, 2) -> 5; PAD (0) elsewhere.
  const Tensor labels = Tensor::from_vector<int64_t>({0, 3, 0, 0, 0, 0, 5, 0}, {B, S});
  const Tensor loss = masked_lm_loss(logits, labels, 0);
  const std::vector<double> v = logits.to_vector<double>();
  auto nll = [&](int64_t b, int64_t s, int64_t target) {
    const double* row = v.data() + (b * S + s) * V;
    double z = 0;
    for (int64_t k = 0; k < V; ++k) z += std::exp(row[k]);
    return std::log(z) - row[target];
  };
  EXPECT_NEAR(loss.item(), (nll(0, 1, 3) + nll(1, 2, 5)) / 2.0, 1e-12);
  loss.backward();
  const std::vector<double> g = logits.grad().to_vector<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const bool chosen = (b == 0 && s == 1) || (b == 1 && s == 2);
      double row_abs = 0;
      for (int64_t k = 0; k < V; ++k) row_abs += std::abs(g[static_cast<size_t>((b * S + s) * V + k)]);
      if (chosen) {
        EXPECT_GT(row_abs, 0.0) << b << "," << s;
      } else {
        EXPECT_EQ(row_abs, 0.0) << "unchosen position " << b << "," << s << " got a gradient";
      }
    }
  // Control: the same logits scored at every position (labels nowhere PAD) give another loss.
  const Tensor all = Tensor::from_vector<int64_t>({1, 3, 1, 1, 1, 1, 5, 1}, {B, S});
  NoGradGuard no_grad;
  EXPECT_GT(std::abs(masked_lm_loss(logits, all, 0).item() - loss.item()), 1e-3);
}

TEST(Masking, BadInputIsAnError) {
  MaskingOptions o = options();
  o.prob = 0;
  EXPECT_THROW(validate(o), Error);
  o = options();
  o.prob = 1;
  EXPECT_THROW(validate(o), Error);
  o = options();
  o.mask_id = -1;
  EXPECT_THROW(validate(o), Error);
  o = options();
  o.vocab_size = 5;  // no symbol to draw
  EXPECT_THROW(validate(o), Error);
  o = options();
  o.mask_share = 0.95;  // 0.95 + 0.1 > 1
  EXPECT_THROW(validate(o), Error);
  const auto data = lines(3, 6, 1);
  EXPECT_THROW(make_masked_batch(data, {}, options(), 0, 0, 0), Error);
  EXPECT_THROW(make_masked_batch(data, {3}, options(), 0, 0, 0), Error);
  EXPECT_THROW(make_masked_batch(std::vector<io::Example>{{{}, {5}}}, {0}, options(), 0, 0, 0), Error);
  EXPECT_THROW(masked_lm_loss(Tensor::zeros({2, 3}), Tensor::zeros({2, 3}, DType::I64), 0), Error);
  EXPECT_THROW(masked_lm_loss(Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 2}, DType::I64), 0), Error);
}

}  // namespace
}  // namespace attn::train
