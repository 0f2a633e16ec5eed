// Batches and the batch iterator: shapes, padding and shifted targets; every example once
// per epoch; both caps; length grouping; reproducible shuffles; exact resume.
#include "attn/train/batching.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "attn/core/error.h"

namespace attn::train {
namespace {

using Ids = std::vector<int64_t>;

std::vector<io::Example> variable_length_data(int64_t n, uint64_t seed) {
  TaskConfig c;
  c.length = 12;
  c.min_length = 1;
  Rng rng(seed);
  return make_task_examples(c, n, rng);
}

// All batches of the current epoch (ends the epoch).
std::vector<Batch> drain_epoch(BatchIterator& it) {
  std::vector<Batch> out;
  while (auto b = it.next()) out.push_back(std::move(*b));
  return out;
}

void expect_same_batch(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_EQ(a.src.to_vector<int64_t>(), b.src.to_vector<int64_t>());
  EXPECT_EQ(a.tgt_in.to_vector<int64_t>(), b.tgt_in.to_vector<int64_t>());
  EXPECT_EQ(a.tgt_out.to_vector<int64_t>(), b.tgt_out.to_vector<int64_t>());
}

TEST(MakeBatch, PadsAndShiftsTheTarget) {
  const std::vector<io::Example> ex = {{{5, 6, 7}, {7, 6, 5}}, {{8}, {9, 9}}};
  const Batch b = make_batch(ex);
  EXPECT_EQ(b.src.shape(), (Shape{2, 3}));
  EXPECT_EQ(b.tgt_in.shape(), (Shape{2, 4}));  // longest target 3, + 1
  EXPECT_EQ(b.tgt_out.shape(), (Shape{2, 4}));
  EXPECT_EQ(b.src.dtype(), DType::I64);
  EXPECT_EQ(b.src.to_vector<int64_t>(), (Ids{5, 6, 7, 8, 0, 0}));
  EXPECT_EQ(b.tgt_in.to_vector<int64_t>(), (Ids{1, 7, 6, 5, 1, 9, 9, 0}));   // <bos> + target
  EXPECT_EQ(b.tgt_out.to_vector<int64_t>(), (Ids{7, 6, 5, 2, 9, 9, 2, 0}));  // target + <eos>
  EXPECT_EQ(b.n_src_tokens, 4);
  EXPECT_EQ(b.size(), 2);
  EXPECT_EQ(b.indices, (Ids{0, 1}));
}

TEST(MakeBatch, TargetLengthCountsTheEos) {
  const std::vector<io::Example> ex = {{{5, 6}, {6, 5}}, {{8, 8, 8}, {9}}};
  const Batch b = make_batch(ex);
  EXPECT_EQ(b.src.shape(), (Shape{2, 3}));
  EXPECT_EQ(b.tgt_in.shape(), (Shape{2, 3}));  // longest target 2, + 1
  EXPECT_EQ(b.tgt_in.to_vector<int64_t>(), (Ids{1, 6, 5, 1, 9, 0}));
  EXPECT_EQ(b.tgt_out.to_vector<int64_t>(), (Ids{6, 5, 2, 9, 2, 0}));
  EXPECT_EQ(b.n_src_tokens, 5);
  EXPECT_EQ(b.n_tgt_tokens, 5);  // 2 + 1 and 1 + 1
  EXPECT_EQ(b.src_lengths, (Ids{2, 3}));
  EXPECT_EQ(b.tgt_lengths, (Ids{2, 1}));
  // tgt_in[:, 1:] == tgt_out[:, :-1] wherever tgt_out is not the final <eos>/<pad>.
  const Ids tin = b.tgt_in.to_vector<int64_t>(), tout = b.tgt_out.to_vector<int64_t>();
  for (int r = 0; r < 2; ++r)
    for (int t = 0; t + 1 < 3; ++t)
      if (tout[static_cast<size_t>(r * 3 + t)] != 2) {
        EXPECT_EQ(tin[static_cast<size_t>(r * 3 + t + 1)], tout[static_cast<size_t>(r * 3 + t)]);
      }
}

TEST(MakeBatch, UsesTheGivenSpecialIdsAndIndices) {
  const std::vector<io::Example> ex = {{{5}, {5}}, {{6, 6}, {6}}, {{7}, {7, 7}}};
  const Batch b = make_batch(ex, Ids{2, 0}, SpecialIds{-1, 10, 11});
  EXPECT_EQ(b.indices, (Ids{2, 0}));
  EXPECT_EQ(b.src.to_vector<int64_t>(), (Ids{7, 5}));
  EXPECT_EQ(b.tgt_in.to_vector<int64_t>(), (Ids{10, 7, 7, 10, 5, -1}));
  EXPECT_EQ(b.tgt_out.to_vector<int64_t>(), (Ids{7, 7, 11, 5, 11, -1}));
}

TEST(MakeBatch, RejectsBadInput) {
  const std::vector<io::Example> ex = {{{5}, {5}}, {{}, {6}}};
  EXPECT_THROW(make_batch(std::vector<io::Example>{}), Error);
  EXPECT_THROW(make_batch(ex), Error);  // empty source
  EXPECT_THROW(make_batch(ex, Ids{2}), Error);
  EXPECT_THROW(make_batch(ex, Ids{-1}), Error);
  EXPECT_THROW(make_batch(std::vector<io::Example>{{{5, -2}, {5}}}), Error);
  EXPECT_NO_THROW(make_batch(ex, Ids{0}));
}

TEST(BatchIterator, EveryExampleOncePerEpochAndAFreshOrderEachEpoch) {
  const auto data = variable_length_data(103, 1);
  BatchingOptions opt;
  opt.batch_size = 10;
  opt.seed = 4;
  BatchIterator it(data, opt);
  std::vector<Ids> orders;
  for (int epoch = 0; epoch < 3; ++epoch) {
    EXPECT_EQ(it.epoch(), epoch);
    Ids seen;
    const auto batches = drain_epoch(it);
    EXPECT_EQ(batches.size(), 11u);
    for (const Batch& b : batches) {
      EXPECT_LE(b.size(), 10);
      seen.insert(seen.end(), b.indices.begin(), b.indices.end());
    }
    orders.push_back(seen);
    std::sort(seen.begin(), seen.end());
    for (int64_t k = 0; k < 103; ++k) EXPECT_EQ(seen[static_cast<size_t>(k)], k);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
}

TEST(BatchIterator, SameSeedSameOrderOtherSeedOtherOrder) {
  const auto data = variable_length_data(64, 2);
  BatchingOptions opt;
  opt.batch_size = 8;
  opt.seed = 99;
  BatchIterator a(data, opt), b(data, opt);
  opt.seed = 100;
  BatchIterator c(data, opt);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto ba = drain_epoch(a), bb = drain_epoch(b), bc = drain_epoch(c);
    ASSERT_EQ(ba.size(), bb.size());
    for (size_t i = 0; i < ba.size(); ++i) expect_same_batch(ba[i], bb[i]);
    EXPECT_NE(ba[0].indices, bc[0].indices);
  }
}

TEST(BatchIterator, WithoutShuffleKeepsDatasetOrder) {
  const auto data = variable_length_data(7, 3);
  BatchingOptions opt;
  opt.batch_size = 3;
  opt.shuffle = false;
  BatchIterator it(data, opt);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto batches = drain_epoch(it);
    ASSERT_EQ(batches.size(), 3u);
    EXPECT_EQ(batches[0].indices, (Ids{0, 1, 2}));
    EXPECT_EQ(batches[2].indices, (Ids{6}));
  }
}

TEST(BatchIterator, TokenCapIsRespected) {
  const auto data = variable_length_data(300, 5);
  for (bool group : {false, true}) {
    BatchingOptions opt;
    opt.batch_size = 0;
    opt.max_tokens = 40;
    opt.group_by_length = group;
    opt.seed = 8;
    BatchIterator it(data, opt);
    int64_t total = 0;
    for (const Batch& b : drain_epoch(it)) {
      const int64_t padded = b.size() * std::max(b.src.size(1), b.tgt_out.size(1));
      EXPECT_LE(padded, 40) << "group_by_length " << group;
      total += b.size();
    }
    EXPECT_EQ(total, 300);
  }
  // Both caps at once: the smaller one binds.
  BatchingOptions both;
  both.batch_size = 2;
  both.max_tokens = 1000;
  BatchIterator it(data, both);
  for (const Batch& b : drain_epoch(it)) EXPECT_LE(b.size(), 2);
}

TEST(BatchIterator, GroupingByLengthMakesBatchesOfSimilarLength) {
  const auto data = variable_length_data(400, 6);
  auto padding_fraction = [&](bool group) {
    BatchingOptions opt;
    opt.batch_size = 16;
    opt.group_by_length = group;
    opt.bucket_size = 100;
    opt.seed = 1;
    BatchIterator it(data, opt);
    int64_t real = 0, padded = 0;
    for (const Batch& b : drain_epoch(it)) {
      real += b.n_src_tokens;
      padded += b.src.numel();
    }
    return 1.0 - static_cast<double>(real) / static_cast<double>(padded);
  };
  EXPECT_LT(padding_fraction(true), 0.5 * padding_fraction(false));

  // Without shuffling, each bucket's batches come out sorted by source length.
  BatchingOptions opt;
  opt.batch_size = 10;
  opt.group_by_length = true;
  opt.bucket_size = 50;
  opt.shuffle = false;
  BatchIterator it(data, opt);
  const auto& plan = it.plan();
  ASSERT_EQ(plan.size(), 40u);
  for (size_t bucket = 0; bucket < 8; ++bucket) {
    Ids lengths;
    for (size_t i = bucket * 5; i < bucket * 5 + 5; ++i)
      for (int64_t k : plan[i]) {
        lengths.push_back(static_cast<int64_t>(data[static_cast<size_t>(k)].src.size()));
        EXPECT_GE(k, static_cast<int64_t>(bucket * 50));  // never leaves its bucket
        EXPECT_LT(k, static_cast<int64_t>(bucket * 50 + 50));
      }
    EXPECT_TRUE(std::is_sorted(lengths.begin(), lengths.end())) << "bucket " << bucket;
  }
}

TEST(BatchIterator, ResumesFromAnExportedPositionWithTheSameBatches) {
  const auto data = variable_length_data(90, 7);
  BatchingOptions opt;
  opt.batch_size = 8;
  opt.max_tokens = 60;
  opt.group_by_length = true;
  opt.bucket_size = 30;
  opt.seed = 12;
  for (int stop : {0, 1, 5, 12}) {  // batches handed out before the export
    BatchIterator a(data, opt);
    // Advance into the second epoch, then `stop` batches.
    drain_epoch(a);
    for (int i = 0; i < stop; ++i) ASSERT_TRUE(a.next().has_value()) << stop;
    const BatchPosition pos = a.position();
    EXPECT_EQ(pos.epoch, 1);
    EXPECT_EQ(pos.index, stop);
    // Round trip through JSON text, as a checkpoint would carry it.
    const BatchPosition back = BatchPosition::from_json(nlohmann::json::parse(pos.to_json().dump()));
    EXPECT_TRUE(back == pos);

    BatchIterator b(data, opt);
    b.set_position(back);
    EXPECT_EQ(b.epoch(), 1);
    EXPECT_EQ(b.index(), stop);
    // The rest of epoch 1 and all of epoch 2 agree.
    for (int epoch = 0; epoch < 2; ++epoch) {
      const auto ra = drain_epoch(a), rb = drain_epoch(b);
      ASSERT_EQ(ra.size(), rb.size()) << stop;
      for (size_t i = 0; i < ra.size(); ++i) expect_same_batch(ra[i], rb[i]);
    }
  }
}

TEST(BatchIterator, ResumeControlAFreshIteratorDiffers) {
  // The resume test could pass vacuously if every epoch had the same order; it does not.
  const auto data = variable_length_data(90, 7);
  BatchingOptions opt;
  opt.batch_size = 8;
  opt.seed = 12;
  BatchIterator a(data, opt), fresh(data, opt);
  drain_epoch(a);
  EXPECT_NE(a.next()->indices, fresh.next()->indices);
}

TEST(BatchIterator, RejectsBadOptionsAndPositions) {
  const auto data = variable_length_data(20, 9);
  BatchingOptions opt;
  opt.batch_size = 0;
  EXPECT_THROW(BatchIterator(data, opt), Error);  // no cap at all
  opt.batch_size = -1;
  EXPECT_THROW(BatchIterator(data, opt), Error);
  EXPECT_THROW(BatchIterator(std::vector<io::Example>{}, BatchingOptions{}), Error);
  opt = {};
  opt.max_tokens = 5;  // some examples cost up to 13
  try {
    BatchIterator it(data, opt);
    FAIL() << "an example over max_tokens should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_tokens"), std::string::npos) << e.what();
  }
  BatchIterator it(data, BatchingOptions{});
  BatchPosition pos = it.position();
  pos.dataset_size = 21;
  EXPECT_THROW(it.set_position(pos), Error);
  pos = it.position();
  pos.index = it.num_batches() + 1;
  EXPECT_THROW(it.set_position(pos), Error);
  EXPECT_EQ(it.index(), 0);
  EXPECT_THROW(BatchPosition::from_json(nlohmann::json{{"epoch", 1}}), Error);
}

}  // namespace
}  // namespace attn::train
