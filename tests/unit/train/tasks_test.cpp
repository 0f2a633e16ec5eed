// Synthetic tasks: reverse / copy / sort targets, the symbol range, variable lengths,
// determinism from the seed, and the independence of the validation stream.
#include "attn/train/tasks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "attn/core/error.h"

namespace attn::train {
namespace {

using Ids = std::vector<int64_t>;

TEST(Tasks, TargetsReverseCopyAndSortTheSource) {
  const Ids src = {7, 4, 9, 4, 5};
  EXPECT_EQ(task_target(TaskKind::Reverse, src), (Ids{5, 4, 9, 4, 7}));
  EXPECT_EQ(task_target(TaskKind::Copy, src), src);
  EXPECT_EQ(task_target(TaskKind::Sort, src), (Ids{4, 4, 5, 7, 9}));
}

TEST(Tasks, GeneratedExamplesAreCorrectForEveryKind) {
  for (TaskKind kind : {TaskKind::Reverse, TaskKind::Copy, TaskKind::Sort}) {
    TaskConfig c;
    c.kind = kind;
    Rng rng(11);
    for (const io::Example& ex : make_task_examples(c, 200, rng)) {
      ASSERT_EQ(ex.src.size(), 8u);
      Ids expect = ex.src;
      if (kind == TaskKind::Reverse) std::reverse(expect.begin(), expect.end());
      if (kind == TaskKind::Sort) std::sort(expect.begin(), expect.end());
      EXPECT_EQ(ex.tgt, expect) << task_kind_name(kind);
      for (int64_t id : ex.src) {
        EXPECT_GE(id, io::Vocab::kNumSpecial);
        EXPECT_LT(id, io::Vocab::kNumSpecial + 10);
      }
    }
  }
}

TEST(Tasks, SeedDatasetHasTheSeedSizesAndUsesEveryDigit) {
  const Dataset d = make_task_dataset();
  EXPECT_EQ(d.train.size(), 10000u);
  EXPECT_EQ(d.valid.size(), 1000u);
  EXPECT_EQ(d.vocab.size(), 14);
  EXPECT_EQ(d.vocab.token(4), "0");
  EXPECT_EQ(d.vocab.token(13), "9");
  std::set<int64_t> used;
  for (const io::Example& ex : d.train) {
    ASSERT_EQ(ex.src.size(), 8u);
    used.insert(ex.src.begin(), ex.src.end());
  }
  EXPECT_EQ(used.size(), 10u);
  // Decoded as text, the target is the source string reversed.
  const io::Example& ex = d.train[0];
  std::string s = d.vocab.decode(ex.src), t = d.vocab.decode(ex.tgt);
  std::reverse(s.begin(), s.end());
  EXPECT_EQ(s, t);
}

TEST(Tasks, SameSeedSameDataAndDifferentSeedDifferentData) {
  const Dataset a = make_task_dataset({}, 50, 20, 5);
  const Dataset b = make_task_dataset({}, 50, 20, 5);
  const Dataset c = make_task_dataset({}, 50, 20, 6);
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.valid, b.valid);
  EXPECT_NE(a.train, c.train);
  EXPECT_NE(a.valid, c.valid);
}

TEST(Tasks, ValidationComesFromItsOwnStream) {
  const Dataset small = make_task_dataset({}, 10, 100, 9);
  const Dataset large = make_task_dataset({}, 500, 100, 9);
  EXPECT_EQ(small.valid, large.valid);  // growing the training set leaves validation unchanged
  const std::vector<io::Example> head(large.train.begin(), large.train.begin() + 10);
  EXPECT_EQ(small.train, head);
  // The two streams are not the same sequence shifted: no validation example starts the training data.
  EXPECT_NE(small.valid[0], large.train[0]);
  EXPECT_NE(stream_seed(9, 0), stream_seed(9, 1));
  EXPECT_NE(stream_seed(9, 0), stream_seed(10, 0));
}

TEST(Tasks, VariableLengthsStayInRangeAndCoverIt) {
  TaskConfig c;
  c.kind = TaskKind::Sort;
  c.length = 6;
  c.min_length = 2;
  c.n_symbols = 3;
  Rng rng(1);
  std::set<size_t> lengths;
  for (const io::Example& ex : make_task_examples(c, 300, rng)) {
    lengths.insert(ex.src.size());
    EXPECT_TRUE(std::is_sorted(ex.tgt.begin(), ex.tgt.end()));
    for (int64_t id : ex.src) EXPECT_LT(id, 4 + 3);
  }
  EXPECT_EQ(lengths, (std::set<size_t>{2, 3, 4, 5, 6}));
  EXPECT_EQ(task_vocab(c).size(), 7);
}

TEST(Tasks, LargeAlphabetsUseLettersAfterDigits) {
  TaskConfig c;
  c.n_symbols = 62;
  const io::Vocab v = task_vocab(c);
  EXPECT_EQ(v.token(4 + 10), "a");
  EXPECT_EQ(v.token(4 + 61), "Z");
}

TEST(Tasks, InvalidConfigsAreErrors) {
  TaskConfig c;
  c.length = 0;
  EXPECT_THROW(task_vocab(c), Error);
  c = {};
  c.min_length = 9;
  EXPECT_THROW(make_task_dataset(c, 1, 1), Error);
  c = {};
  c.n_symbols = 63;
  EXPECT_THROW(task_vocab(c), Error);
  c.n_symbols = 0;
  EXPECT_THROW(task_vocab(c), Error);
  Rng rng(0);
  EXPECT_THROW(make_task_examples({}, -1, rng), Error);
  EXPECT_EQ(parse_task_kind("sort"), TaskKind::Sort);
  EXPECT_THROW(parse_task_kind("shuffle"), Error);
}

}  // namespace
}  // namespace attn::train
