// Batch-split training (trainer.h, ThreadSplit::Batch): each thread runs forward and backward of one
// shard of the batch on a replica sharing the model's weights. Without dropout two shards take the
// whole batch's step (to float32 summation order; one shard alone does not); with dropout, runs of
// one thread count are bit-identical and resume exactly; the gradient sum fused with Adam equals
// sum, clip (never scaling), Adam bit for bit; more threads than examples leave shards empty
// without harm; "auto" picks the split by model size and ranks.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/train/checkpointing.h"
#include "attn/train/trainer.h"
#include "unit/models/broken_checkpoints.h"
#include "unit/train/tiny_runs.h"

namespace attn::train {
namespace {

using models::test_util::TempDir;
using test_util::tiny_config;
using test_util::weights_of;

// The tiny run with `threads` threads splitting batches (or one thread sharing ops).
TrainConfig split_config(int64_t threads, const char* parallel = "batch") {
  TrainConfig c = tiny_config();
  c.threads = threads;
  c.parallel = parallel;
  return c;
}

// Largest |a - b| over all weights.
double max_difference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) m = std::max(m, std::fabs(static_cast<double>(a[i][j]) - b[i][j]));
  return m;
}

TEST(BatchSplit, TwoShardsTakeTheWholeBatchsStepAndOneShardAloneDoesNot) {
  // No dropout (so shards draw nothing), batches cut from one shuffled order (so a batch of 8 is
  // the first shard of the batch of 16), and an Adam epsilon far above the gradients: the first
  // step is then lr * g / eps, linear in the gradient, so a lost or double-counted shard moves
  // the weights by about half the step.
  auto config = [](int64_t threads, const char* parallel, int64_t batch) {
    TrainConfig c = split_config(threads, parallel);
    c.model.dropout = 0.0;
    c.model.attention_dropout = 0.0;
    c.group_by_length = false;
    c.batch_size = batch;
    c.eps = 100.0;
    c.lr = 1.0;
    return c;
  };
  TempDir tmp("attn_split");
  Trainer whole(config(1, "ops", 16), tmp.file("whole"));
  Trainer split(config(2, "batch", 16), tmp.file("split"));
  Trainer first_shard(config(1, "ops", 8), tmp.file("first"));
  const auto before = weights_of(whole.model());
  ASSERT_EQ(before, weights_of(split.model()));
  whole.run(1);
  split.run(1);
  first_shard.run(1);
  const double step = max_difference(weights_of(whole.model()), before);
  ASSERT_GT(step, 1e-5);
  EXPECT_LT(max_difference(weights_of(split.model()), weights_of(whole.model())), 1e-4 * step);
  EXPECT_NEAR(split.step_losses().at(0), whole.step_losses().at(0), 1e-6 * whole.step_losses().at(0));
  // Control: half the batch gives a visibly different step, so the comparison above can fail.
  EXPECT_GT(max_difference(weights_of(first_shard.model()), weights_of(whole.model())), 0.05 * step);
}

TEST(BatchSplit, InBf16TwoShardsTakeTheWholeBatchsBf16Step) {
  // As above, in bf16 (ops/precision.h): each replica's thread must enter the step's precision.
  // A shard computed in float32 would move its half of the gradient by bf16's rounding (about
  // 1e-3 of it), far above the bound, as the control with a float32 whole-batch step shows.
  auto config = [](int64_t threads, const char* parallel, Precision precision) {
    TrainConfig c = split_config(threads, parallel);
    c.model.dropout = 0.0;
    c.model.attention_dropout = 0.0;
    c.group_by_length = false;
    c.batch_size = 16;
    c.eps = 100.0;
    c.lr = 1.0;
    c.precision = precision;
    return c;
  };
  TempDir tmp("attn_split");
  Trainer whole(config(1, "ops", Precision::BF16), tmp.file("whole"));
  Trainer split(config(2, "batch", Precision::BF16), tmp.file("split"));
  Trainer whole_f32(config(1, "ops", Precision::F32), tmp.file("whole_f32"));
  const auto before = weights_of(whole.model());
  whole.run(1);
  split.run(1);
  whole_f32.run(1);
  const double step = max_difference(weights_of(whole.model()), before);
  ASSERT_GT(step, 1e-5);
  EXPECT_LT(max_difference(weights_of(split.model()), weights_of(whole.model())), 1e-4 * step);
  // Control: the float32 step differs from the bf16 one by more than the bound.
  EXPECT_GT(max_difference(weights_of(whole_f32.model()), weights_of(whole.model())), 1e-4 * step);
}

TEST(BatchSplit, SameThreadCountGivesBitIdenticalRunsWithDropout) {
  TempDir tmp("attn_split");
  Trainer a(split_config(2), tmp.file("a"));
  Trainer b(split_config(2), tmp.file("b"));
  Trainer one(split_config(1), tmp.file("one"));
  a.run(10);
  b.run(10);
  one.run(10);
  ASSERT_EQ(a.step_losses().size(), 10u);
  EXPECT_EQ(a.step_losses(), b.step_losses());
  EXPECT_EQ(weights_of(a.model()), weights_of(b.model()));
  // The second shard draws masks of its own: the run is not the one-thread run.
  EXPECT_NE(a.step_losses(), one.step_losses());
}

// The optimizer's whole state: every moment and update count, and the step count.
struct OptimizerState {
  std::vector<std::vector<double>> m, v;
  std::vector<int64_t> param_steps;
  int64_t steps = 0;
  bool operator==(const OptimizerState&) const = default;
};

OptimizerState optimizer_state(const Trainer& t) {
  OptimizerState s;
  const Adam& adam = t.optimizer();
  for (size_t i = 0; i < adam.params().size(); ++i) {
    s.m.push_back(adam.exp_avg(i).to_vector<double>());
    s.v.push_back(adam.exp_avg_sq(i).to_vector<double>());
    s.param_steps.push_back(adam.param_steps(i));
  }
  s.steps = adam.steps();
  return s;
}

TEST(BatchSplit, FusedSumAndAdamEqualTheSeparatePassesBitForBit) {
  // Without clipping the gradient sum and the Adam update of each parameter run fused, on one
  // thread; with clipping they run as separate passes (sum, clip, Adam). A clip far above any
  // gradient norm never scales, so both runs must take the same steps to the last bit.
  struct Case {
    int64_t threads;
    DType dtype;
    double weight_decay;
    bool decoupled;
  };
  for (const Case& k : {Case{2, DType::F32, 0.0, true}, Case{3, DType::F32, 0.01, true},
                        Case{2, DType::F64, 0.01, false}}) {
    SCOPED_TRACE(testing::Message() << k.threads << " threads, " << dtype_name(k.dtype) << ", wd "
                                    << k.weight_decay);
    auto config = [&](double clip) {
      TrainConfig c = split_config(k.threads);
      c.model.dtype = k.dtype;
      c.weight_decay = k.weight_decay;
      c.decoupled_weight_decay = k.decoupled;
      c.clip = clip;
      return c;
    };
    TempDir tmp("attn_split");
    Trainer fused(config(0.0), tmp.file("fused"));
    Trainer separate(config(1e30), tmp.file("separate"));
    Trainer clipped(config(1e-3), tmp.file("clipped"));
    fused.run(6);
    separate.run(6);
    clipped.run(6);
    ASSERT_EQ(fused.step(), 6);
    EXPECT_EQ(fused.step_losses(), separate.step_losses());
    EXPECT_EQ(weights_of(fused.model()), weights_of(separate.model()));
    EXPECT_EQ(optimizer_state(fused), optimizer_state(separate));
    EXPECT_EQ(optimizer_state(fused).param_steps,
              std::vector<int64_t>(fused.optimizer().params().size(), 6));
    // Control: a clip that does scale gives other weights, so the comparison can fail.
    EXPECT_NE(weights_of(clipped.model()), weights_of(fused.model()));
  }
}

TEST(BatchSplit, ResumeRepeatsTheUninterruptedRunBitForBit) {
  TempDir tmp("attn_split");
  TrainConfig c = split_config(2);
  c.checkpoint_every = 5;
  Trainer whole(c, tmp.file("whole"));
  whole.run();
  const std::vector<double> all = whole.step_losses();
  ASSERT_EQ(all.size(), 32u);
  const std::string dir = tmp.file("stopped");
  {
    Trainer first(c, dir);
    first.run(12);
  }
  auto resumed = Trainer::resume(dir);
  ASSERT_EQ(resumed->step(), 10);
  resumed->run();
  EXPECT_EQ(resumed->step_losses(), std::vector<double>(all.begin() + 10, all.end()));
  EXPECT_EQ(weights_of(resumed->model()), weights_of(whole.model()));
}

TEST(BatchSplit, MoreThreadsThanExamplesLeaveShardsEmpty) {
  TempDir tmp("attn_split");
  TrainConfig c = split_config(3);
  c.batch_size = 2;  // shard 2 of every batch is empty
  c.train_size = 8;
  c.epochs = 1;
  Trainer t(c, tmp.file("run"));
  t.run();
  ASSERT_EQ(t.step_losses().size(), 4u);
  for (double loss : t.step_losses()) EXPECT_TRUE(std::isfinite(loss));
  EXPECT_EQ(t.metrics().size(), 1u);
}

TEST(BatchSplit, AutoSplitsBatchesOfSmallModelsInOneProcessOnly) {
  TrainConfig c = tiny_config();  // d_model 16
  c.threads = 0;
  EXPECT_EQ(training_thread_split(c, 1), ThreadSplit::Batch);
  EXPECT_EQ(training_threads(c, 1), omp_get_num_procs());
  EXPECT_EQ(training_thread_split(c, 2), ThreadSplit::Ops);
  EXPECT_EQ(training_threads(c, 2), 1);
  c.model.d_model = 256;
  c.model.d_ff = 512;
  EXPECT_EQ(training_thread_split(c, 1), ThreadSplit::Ops);
  c.parallel = "batch";
  EXPECT_EQ(training_thread_split(c, 1), ThreadSplit::Batch);
  c.parallel = "ops";
  c.model.d_model = 16;
  EXPECT_EQ(training_thread_split(c, 1), ThreadSplit::Ops);
  EXPECT_EQ(training_threads(c, 1), 1);
  c.parallel = "rows";
  EXPECT_THROW(c.validate(), Error);
}

}  // namespace
}  // namespace attn::train
