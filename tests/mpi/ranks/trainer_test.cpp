// The trainer over N ranks (issue #7): N ranks with the global batch N*b train like one
// process with that batch (the first 20 steps' losses within 1e-5 relative, and the same
// checkpoint), a run resumes with another number of ranks, and with dropout a resume with
// the same ranks repeats the run exactly. Every rank also trains one-process references
// (Communicator::self()) in folders of its own.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "attn/io/atomic_file.h"
#include "attn/io/safetensors.h"
#include "attn/train/checkpointing.h"
#include "attn/train/trainer.h"
#include "mpi_util.h"
#include "support/expect_close.h"

namespace attn::train {
namespace {

namespace fs = std::filesystem;
using dist::Communicator;
using dist::test::world;
using json = nlohmann::json;

// A folder every rank sees (rank 0 makes it), removed at the end.
class SharedDir {
 public:
  SharedDir() {
    std::string path;
    if (world().is_root()) {
      char name[] = "/tmp/attn_mpi_trainer_XXXXXX";
      path = mkdtemp(name) ? name : "";
    }
    path_ = world().broadcast_string(path);
  }
  ~SharedDir() {
    world().barrier();
    std::error_code ec;
    if (world().is_root()) fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (fs::path(path_) / name).string(); }
  // A folder of this rank alone.
  std::string mine(const std::string& name) const { return *this / (name + "-rank" + std::to_string(world().rank())); }

 private:
  std::string path_;
};

// Reverse 5 of 6 symbols: 120 pairs, global batches of 11 (shares of 6 and 5 on 2 ranks;
// 11 steps per epoch), D=16, 2 heads, 1+1 layers, one thread.
TrainConfig tiny_config(double dropout) {
  TrainConfig c;
  c.task = "reverse";
  c.length = 5;
  c.min_length = 2;
  c.symbols = 6;
  c.train_size = 120;
  c.valid_size = 0;
  c.model.d_model = 16;
  c.model.n_heads = 2;
  c.model.n_encoder_layers = 1;
  c.model.n_decoder_layers = 1;
  c.model.d_ff = 32;
  c.model.dropout = dropout;
  c.model.attention_dropout = dropout;
  c.epochs = 3;
  c.batch_size = 11;
  c.schedule = ScheduleKind::Constant;
  c.lr = 3e-3;
  c.warmup = 5;
  c.clip = 1.0;
  c.threads = 1;
  c.seed = 9;
  c.keep = 0;
  return c;
}

// Losses a and b agree within 1e-5 relative, step by step.
void expect_same_losses(const std::vector<double>& a, const std::vector<double>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t s = 0; s < a.size(); ++s)
    EXPECT_LE(std::fabs(a[s] - b[s]), 1e-5 * std::fabs(b[s])) << what << ", step " << s + 1 << ": " << a[s] << " vs " << b[s];
}

// The tensors of two checkpoints' model.safetensors agree (1e-5 + 1e-4 relative). The key
// biases carry only rounding noise (their gradient is zero in exact arithmetic; see
// equivalence_test.cpp), so for them a bound of lr per step is all that holds.
void expect_same_weights(const std::string& ckpt_a, const std::string& ckpt_b, double lr, int64_t steps) {
  const io::SafetensorsFile a = io::SafetensorsFile::open((fs::path(ckpt_a) / "model.safetensors").string());
  const io::SafetensorsFile b = io::SafetensorsFile::open((fs::path(ckpt_b) / "model.safetensors").string());
  ASSERT_EQ(a.names(), b.names());
  for (const std::string& name : a.names()) {
    const Tensor x = a.get(name), y = b.get(name);
    if (name.ends_with("in_proj_bias")) {
      const int64_t D = x.size(0) / 3;
      EXPECT_TRUE(attn::test::all_close(x.slice(0, 0, D), y.slice(0, 0, D), 1e-5, 1e-4, name));
      EXPECT_TRUE(attn::test::all_close(x.slice(0, 2 * D, 3 * D), y.slice(0, 2 * D, 3 * D), 1e-5, 1e-4, name));
      EXPECT_LE(attn::test::max_abs_diff(x.slice(0, D, 2 * D), y.slice(0, D, 2 * D)), 2 * lr * steps) << name;
    } else {
      EXPECT_TRUE(attn::test::all_close(x, y, 1e-5, 1e-4, name));
    }
  }
}

TEST(MpiTrainer, NRanksTrainLikeOneProcessWithTheWholeBatch) {
  ATTN_REQUIRE_RANKS(2);
  const SharedDir dir;
  const TrainConfig c = tiny_config(0.0);  // dropout masks would differ with the split
  Trainer ranks(c, dir / "ranks", world());
  ASSERT_NE(ranks.reducer(), nullptr);
  ranks.run(20);
  const std::string ckpt = ranks.save_checkpoint();
  Trainer alone(c, dir.mine("alone"), Communicator::self());
  EXPECT_EQ(alone.reducer(), nullptr);
  alone.run(20);
  const std::string ref_ckpt = alone.save_checkpoint();

  expect_same_losses(ranks.step_losses(), alone.step_losses(), "2 ranks vs 1 process");
  EXPECT_EQ(ranks.step(), 20);
  EXPECT_GT(ranks.reducer()->stats().buckets_started_in_backward, 0);
  // Every rank holds rank 0's weights bit for bit.
  for (const auto& [name, p] : ranks.model().named_parameters()) EXPECT_TRUE(dist::test::same_on_all_ranks(p)) << name;
  world().barrier();  // rank 0's checkpoint is complete
  const auto written = latest_checkpoint(dir / "ranks");
  ASSERT_TRUE(written.has_value());
  EXPECT_EQ(written->step, 20);
  if (world().is_root()) EXPECT_EQ(ckpt, written->path);
  else EXPECT_EQ(ckpt, "");
  expect_same_weights(written->path, ref_ckpt, c.lr, 20);
}

TEST(MpiTrainer, OnlyRankZeroWritesTheRunFolder) {
  ATTN_REQUIRE_RANKS(2);
  const SharedDir dir;
  TrainConfig c = tiny_config(0.1);
  c.epochs = 1;
  Trainer t(c, dir / "run", world());
  t.run();
  world().barrier();
  for (const char* f : {"train_config.json", "metrics.jsonl", "model.safetensors", "vocab.json"})
    EXPECT_TRUE(fs::exists(dir / (std::string("run/") + f))) << f;
  ASSERT_EQ(list_checkpoints(dir / "run").size(), 1u);
  // Each rank's dropout generators are in the checkpoint, and they differ between ranks.
  const json state = json::parse(io::read_file((fs::path(latest_checkpoint(dir / "run")->path) / "state.json").string()));
  ASSERT_TRUE(state.contains("rng_by_rank"));
  ASSERT_EQ(state["rng_by_rank"].size(), static_cast<size_t>(world().size()));
  EXPECT_EQ(state["rng_by_rank"][0], state["rng"]);
  EXPECT_NE(state["rng_by_rank"][0], state["rng_by_rank"][1]);
}

TEST(MpiTrainer, ResumesWithAnotherNumberOfRanks) {
  ATTN_REQUIRE_RANKS(2);
  const SharedDir dir;
  const TrainConfig c = tiny_config(0.0);
  Trainer alone(c, dir.mine("alone"), Communicator::self());
  alone.run(20);
  const std::vector<double> tail(alone.step_losses().begin() + 10, alone.step_losses().end());

  // 1 process for 10 steps, then every rank.
  if (world().is_root()) {
    Trainer first(c, dir / "one-then-n", Communicator::self());
    first.run(10);
    first.save_checkpoint();
  }
  world().barrier();
  std::unique_ptr<Trainer> more = Trainer::resume(dir / "one-then-n", json::object(), world());
  EXPECT_EQ(more->step(), 10);
  more->run(10);
  expect_same_losses(more->step_losses(), tail, "1 process, then 2 ranks");

  // Every rank for 10 steps, then 1 process.
  {
    Trainer first(c, dir / "n-then-one", world());
    first.run(10);
    first.save_checkpoint();
  }
  world().barrier();
  if (world().is_root()) {
    std::unique_ptr<Trainer> rest = Trainer::resume(dir / "n-then-one", json::object(), Communicator::self());
    rest->run(10);
    expect_same_losses(rest->step_losses(), tail, "2 ranks, then 1 process");
  }
}

TEST(MpiTrainer, WithDropoutAResumeOnAsManyRanksRepeatsTheRun) {
  ATTN_REQUIRE_RANKS(2);
  const SharedDir dir;
  const TrainConfig c = tiny_config(0.2);
  std::vector<double> tail;
  {
    Trainer t(c, dir / "run", world());
    t.run(8);
    t.save_checkpoint();
    world().barrier();
    if (world().is_root()) {
      fs::copy(dir / "run", dir / "copy", fs::copy_options::recursive);
      // The control: the same checkpoint without the other ranks' generators.
      fs::copy(dir / "run", dir / "no-ranks", fs::copy_options::recursive);
      const std::string state_path = (fs::path(latest_checkpoint(dir / "no-ranks")->path) / "state.json").string();
      json state = json::parse(io::read_file(state_path));
      state.erase("rng_by_rank");
      io::write_file_atomic(state_path, state.dump());
    }
    world().barrier();
    t.run(8);
    tail.assign(t.step_losses().begin() + 8, t.step_losses().end());
  }
  std::unique_ptr<Trainer> again = Trainer::resume(dir / "copy", json::object(), world());
  again->run(8);
  EXPECT_EQ(again->step_losses(), tail);  // bit for bit
  std::unique_ptr<Trainer> control = Trainer::resume(dir / "no-ranks", json::object(), world());
  control->run(8);
  EXPECT_NE(control->step_losses(), tail);  // rank 1's masks were drawn from another stream
}

TEST(MpiTrainer, RanksWithDifferentConfigsRefuseToTrain) {
  ATTN_REQUIRE_RANKS(2);
  const SharedDir dir;
  TrainConfig c = tiny_config(0.0);
  if (world().rank() == 1) c.lr = 1e-2;
  try {
    Trainer t(c, dir / "run", world());
    ADD_FAILURE() << world().describe() << ": no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the training configuration or data differs between ranks"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace attn::train
