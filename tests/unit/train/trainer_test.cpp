// Trainer, TrainConfig and checkpointing (paper §5, §6.1): a tiny model learns a tiny task in
// about a second; the same seed gives bit-identical losses (another seed does not); a run
// stopped and resumed from its folder repeats the uninterrupted run's losses and weights bit
// for bit (with a control showing that a wrong dropout generator would be caught); the newest
// k checkpoints are kept; averaging is the mean of the weights; bad configs and corpora fail
// before anything is written.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/io/safetensors.h"
#include "attn/models/checkpoint.h"
#include "attn/train/checkpointing.h"
#include "attn/train/trainer.h"
#include "unit/models/broken_checkpoints.h"
#include "unit/train/tiny_runs.h"

namespace attn::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using models::test_util::TempDir;

using test_util::tiny_config;
using test_util::weights_of;

std::string run_dir(const TempDir& tmp, const char* name) { return tmp.file(name); }

// ---- TrainConfig ----------------------------------------------------------------------------

TEST(TrainConfig, DefaultsAreTheSeedRecipe) {
  const TrainConfig c;
  EXPECT_EQ(c.task, "reverse");
  EXPECT_EQ(c.length, 8);
  EXPECT_EQ(c.train_size, 10000);
  EXPECT_EQ(c.valid_size, 1000);
  EXPECT_EQ(c.epochs, 25);
  EXPECT_EQ(c.batch_size, 64);
  EXPECT_EQ(c.beta1, 0.9);
  EXPECT_EQ(c.beta2, 0.98);
  EXPECT_EQ(c.eps, 1e-9);
  EXPECT_EQ(c.schedule, ScheduleKind::Noam);
  EXPECT_EQ(c.warmup, 400);
  EXPECT_EQ(c.lr_scale, 1.0);
  EXPECT_EQ(c.label_smoothing, 0.1);
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.model.n_heads, 4);
  EXPECT_EQ(c.model.n_encoder_layers, 2);
  EXPECT_EQ(c.model.n_decoder_layers, 2);
  EXPECT_EQ(c.model.d_ff, 256);
  EXPECT_EQ(c.model.dropout, 0.1);
  EXPECT_FALSE(c.model.norm_first);
  EXPECT_EQ(c.model.positional, nn::PositionalKind::Sinusoidal);
  EXPECT_NO_THROW(c.validate());
}

TEST(TrainConfig, JsonRoundTripKeepsEveryField) {
  TrainConfig c = tiny_config();
  c.max_tokens = 100;
  c.group_by_length = false;
  c.weight_decay = 0.01;
  c.clip = 1.5;
  c.keep = 3;
  c.checkpoint_every = 7;
  c.precision = Precision::BF16;
  c.tokens = io::Tokenization::Whitespace;
  c.model.norm_first = true;
  const TrainConfig back = TrainConfig::from_json(json::parse(c.to_json().dump()));
  EXPECT_TRUE(back == c);
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_EQ(back.model.d_model, 16);
  EXPECT_TRUE(back.model.norm_first);
  EXPECT_EQ(back.precision, Precision::BF16);
  EXPECT_EQ(c.to_json().at("precision"), "bf16");
  json bad = c.to_json();
  bad["precision"] = "fp8";
  EXPECT_THROW(TrainConfig::from_json(bad), Error);
}

TEST(TrainConfig, PartialJsonKeepsDefaultsAndMergesModelKeys) {
  const TrainConfig c = TrainConfig::from_json(json{{"epochs", 3}, {"model", {{"d_model", 32}}}});
  EXPECT_EQ(c.epochs, 3);
  EXPECT_EQ(c.model.d_model, 32);
  EXPECT_EQ(c.model.n_heads, 4);  // the seed model's, not the paper's 8
  EXPECT_EQ(c.batch_size, 64);
}

TEST(TrainConfig, UnknownKeysAndWrongTypesAreErrorsNamingTheKey) {
  auto message = [](const json& j) {
    try {
      (void)TrainConfig::from_json(j);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(json{{"epoch", 3}}).find("unknown key 'epoch'"), std::string::npos);
  EXPECT_NE(message(json{{"epochs", "ten"}}).find("'epochs' must be an integer"), std::string::npos);
  EXPECT_NE(message(json{{"lr", true}}).find("'lr' must be a number"), std::string::npos);
  EXPECT_NE(message(json{{"schedule", "linear"}}).find("schedule"), std::string::npos);
  EXPECT_NE(message(json{{"task", "shuffle"}}).find("task"), std::string::npos);
  EXPECT_NE(message(json{{"model", {{"d_modle", 8}}}}).find("d_modle"), std::string::npos);
  EXPECT_NE(message(json{{"model", {{"n_heads", 2.5}}}}).find("n_heads"), std::string::npos);
  EXPECT_NE(message(json{{"seed", -1}}).find("seed"), std::string::npos);
  EXPECT_THROW((void)TrainConfig::from_json(json::array()), Error);
}

TEST(TrainConfig, ImpossibleValuesAreRejectedByValidate) {
  auto fails_with = [](auto edit, const std::string& needle) {
    TrainConfig c = tiny_config();
    edit(c);
    try {
      c.validate();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "no error for " << needle;
  };
  fails_with([](TrainConfig& c) { c.model.n_heads = 3; }, "not divisible");
  fails_with([](TrainConfig& c) { c.model.n_encoder_layers = 0; }, "encoder layer");
  fails_with([](TrainConfig& c) { c.model.n_decoder_layers = 0; }, "decoder layer");
  fails_with([](TrainConfig& c) { c.model.arch = models::Arch::DecoderOnly; }, "encoder_decoder");
  fails_with([](TrainConfig& c) { c.epochs = 0; }, "epochs");
  fails_with([](TrainConfig& c) { c.batch_size = 0; }, "batch_size and max_tokens are both 0");
  fails_with([](TrainConfig& c) { c.beta2 = 1.0; }, "beta2");
  fails_with([](TrainConfig& c) { c.label_smoothing = 1.0; }, "label_smoothing");
  fails_with([](TrainConfig& c) { c.clip = -1; }, "clip");
  fails_with([](TrainConfig& c) { c.lr = 0; }, "lr must be positive");
  fails_with([](TrainConfig& c) { c.schedule = ScheduleKind::Noam; c.warmup = 0; }, "warmup");
  fails_with([](TrainConfig& c) { c.symbols = 63; }, "n_symbols");
  fails_with([](TrainConfig& c) { c.train_path = "x.tsv"; }, "not both");
  fails_with([](TrainConfig& c) { c.task = ""; }, "no data");
}

TEST(TrainConfig, LoadNamesTheFile) {
  TempDir tmp("attn_trainer");
  const std::string path = tmp.file("bad.json");
  io::write_file_atomic(path, "{\"epochs\": ");
  try {
    (void)TrainConfig::load(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// ---- training ---------------------------------------------------------------------------------

TEST(Trainer, TinyModelLearnsTheCopyTask) {
  TempDir tmp("attn_trainer");
  TrainConfig c = tiny_config();
  c.epochs = 6;
  Trainer t(c, run_dir(tmp, "run"));
  const auto& m = t.run();
  ASSERT_EQ(m.size(), 6u);
  EXPECT_LT(m.back().loss, 0.75 * m.front().loss);
  EXPECT_LT(m.back().val_loss, m.front().val_loss);
  EXPECT_GT(m.back().val_token_acc, m.front().val_token_acc);
  EXPECT_GT(m.back().val_token_acc, 0.5);  // chance is about 1/4 per symbol
  EXPECT_EQ(t.step(), 6 * 16);
  for (const auto& e : m) {
    EXPECT_GE(e.val_exact_acc, 0.0);
    EXPECT_LE(e.val_exact_acc, e.val_token_acc + 1e-12);
    EXPECT_GT(e.tokens_per_s, 0.0);
    // Training time alone, beside the wall time that includes validation and the checkpoint.
    EXPECT_GT(e.train_seconds, 0.0);
    EXPECT_LT(e.train_seconds, e.seconds);
  }
}

TEST(Trainer, SameSeedGivesBitIdenticalLossesAndAnotherSeedDoesNot) {
  TempDir tmp("attn_trainer");
  Trainer a(tiny_config(), run_dir(tmp, "a"));
  Trainer b(tiny_config(), run_dir(tmp, "b"));
  TrainConfig other = tiny_config();
  other.seed = 4;
  Trainer c(other, run_dir(tmp, "c"));
  a.run();
  b.run();
  c.run();
  ASSERT_EQ(a.step_losses().size(), 32u);
  EXPECT_EQ(a.step_losses(), b.step_losses());  // exact double equality
  EXPECT_EQ(weights_of(a.model()), weights_of(b.model()));
  EXPECT_NE(a.step_losses(), c.step_losses());
}

TEST(Trainer, WritesTheRunFolder) {
  TempDir tmp("attn_trainer");
  const std::string dir = run_dir(tmp, "run");
  TrainConfig c = tiny_config();
  Trainer t(c, dir);
  EXPECT_FALSE(fs::exists(dir));  // construction writes nothing
  t.run();
  for (const char* f : {"config.json", "model.safetensors", "vocab.json", "train_config.json", "metrics.jsonl"})
    EXPECT_TRUE(fs::is_regular_file(fs::path(dir) / f)) << f;
  // metrics.jsonl: one record per epoch with the documented keys.
  std::ifstream in(fs::path(dir) / "metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    const json r = json::parse(line);
    for (const char* k : {"epoch", "loss", "val_loss", "val_token_acc", "val_exact_acc", "lr", "tokens_per_s", "seconds",
                          "train_seconds"})
      EXPECT_TRUE(r.contains(k)) << k;
    EXPECT_EQ(r["epoch"], ++lines);
    // From it back: the record keeps train_seconds.
    EXPECT_EQ(EpochMetrics::from_json(r).train_seconds, r["train_seconds"].get<double>());
  }
  EXPECT_EQ(lines, 2);
  // The folder is a model folder: it loads, and equals the trained model.
  auto loaded = models::load_model(dir);
  EXPECT_EQ(weights_of(*loaded), weights_of(t.model()));
  EXPECT_TRUE(io::Vocab::load((fs::path(dir) / "vocab.json").string()) == t.data().vocab);
  EXPECT_TRUE(TrainConfig::load((fs::path(dir) / "train_config.json").string()) == t.config());
  const auto ckpts = list_checkpoints(dir);
  ASSERT_EQ(ckpts.size(), 2u);
  EXPECT_EQ(ckpts[0].step, 16);
  EXPECT_EQ(ckpts[1].step, 32);
  EXPECT_EQ(fs::path(ckpts[1].path).filename().string(), "step_00000032");
  for (const char* f : {"config.json", "model.safetensors", "vocab.json", "optimizer.safetensors", "state.json"})
    EXPECT_TRUE(fs::is_regular_file(fs::path(ckpts[1].path) / f)) << f;
}

// Trains 3 epochs in one go, and the same run stopped after `stop_after` steps (a crash: the
// last checkpoint is at a multiple of checkpoint_every, or an epoch end) and resumed from the
// folder: the losses after the checkpoint, the metrics and the final weights are identical.
void expect_exact_resume(int64_t checkpoint_every, int64_t stop_after, int64_t resumed_from,
                         Precision precision = Precision::F32) {
  TempDir tmp("attn_trainer");
  TrainConfig c = tiny_config();
  c.precision = precision;
  c.epochs = 3;
  c.checkpoint_every = checkpoint_every;
  Trainer whole(c, run_dir(tmp, "whole"));
  whole.run();
  const std::vector<double> all = whole.step_losses();
  ASSERT_EQ(all.size(), 48u);

  const std::string dir = run_dir(tmp, "stopped");
  {
    Trainer first(c, dir);
    first.run(stop_after);
    ASSERT_EQ(first.step(), stop_after);
  }
  ASSERT_EQ(latest_checkpoint(dir)->step, resumed_from);
  auto resumed = Trainer::resume(dir);
  EXPECT_EQ(resumed->step(), resumed_from);
  resumed->run();
  const std::vector<double> tail(all.begin() + resumed_from, all.end());
  EXPECT_EQ(resumed->step_losses(), tail);
  EXPECT_EQ(weights_of(resumed->model()), weights_of(whole.model()));
  ASSERT_EQ(resumed->metrics().size(), whole.metrics().size());
  for (size_t i = 0; i < whole.metrics().size(); ++i) {
    EXPECT_EQ(resumed->metrics()[i].loss, whole.metrics()[i].loss) << "epoch " << i + 1;
    EXPECT_EQ(resumed->metrics()[i].val_loss, whole.metrics()[i].val_loss) << "epoch " << i + 1;
    EXPECT_EQ(resumed->metrics()[i].val_token_acc, whole.metrics()[i].val_token_acc) << "epoch " << i + 1;
  }
  // The Adam moments match too.
  for (size_t i = 0; i < whole.optimizer().params().size(); ++i)
    EXPECT_EQ(resumed->optimizer().exp_avg_sq(i).to_vector<float>(), whole.optimizer().exp_avg_sq(i).to_vector<float>());
}

TEST(Trainer, ResumeInsideAnEpochRepeatsTheUninterruptedRunBitForBit) { expect_exact_resume(5, 23, 20); }

TEST(Trainer, ResumeAtAnEpochEndRepeatsTheUninterruptedRunBitForBit) { expect_exact_resume(0, 20, 16); }

TEST(Trainer, ResumeInBf16RepeatsTheUninterruptedRunBitForBit) {
  expect_exact_resume(5, 23, 20, Precision::BF16);
  expect_exact_resume(0, 20, 16, Precision::BF16);
}

TEST(Trainer, Bf16PrecisionTrainsOtherBitsThanFloat32) {
  // Control for the test above: the precision reaches the step's products.
  TempDir tmp("attn_trainer");
  TrainConfig c = tiny_config();
  Trainer f32(c, run_dir(tmp, "f32"));
  f32.run(6);
  c.precision = Precision::BF16;
  Trainer bf16(c, run_dir(tmp, "bf16"));
  bf16.run(6);
  EXPECT_NE(f32.step_losses(), bf16.step_losses());
  EXPECT_NE(weights_of(f32.model()), weights_of(bf16.model()));
  // Outside the steps the thread is back to float32.
  EXPECT_EQ(matmul_precision(), Precision::F32);
}

TEST(Trainer, ResumeWithAnotherDropoutGeneratorDiverges) {
  // Control for the tests above: the dropout generators are part of what must be restored.
  TempDir tmp("attn_trainer");
  TrainConfig c = tiny_config();
  c.checkpoint_every = 5;
  Trainer whole(c, run_dir(tmp, "whole"));
  whole.run();
  const std::string dir = run_dir(tmp, "stopped");
  {
    Trainer first(c, dir);
    first.run(12);
  }
  auto resumed = Trainer::resume(dir);
  json states = model_rng_states(resumed->model());
  ASSERT_TRUE(states.contains("encoder.layers.0.dropout1")) << states.dump();
  ASSERT_TRUE(states.contains("decoder.layers.0.multihead_attn")) << states.dump();
  states["encoder.layers.0.dropout1"][0] = "12345";
  set_model_rng_states(resumed->model(), states);
  resumed->run();
  const std::vector<double> tail(whole.step_losses().begin() + 10, whole.step_losses().end());
  ASSERT_EQ(resumed->step_losses().size(), tail.size());
  EXPECT_NE(resumed->step_losses(), tail);
}

TEST(Trainer, ResumeMayExtendEpochsButNotChangeTheRecipe) {
  TempDir tmp("attn_trainer");
  const std::string dir = run_dir(tmp, "run");
  TrainConfig c = tiny_config();
  c.epochs = 1;
  Trainer(c, dir).run();
  EXPECT_THROW((void)Trainer::resume(dir, json{{"lr", 0.5}}), Error);
  EXPECT_THROW((void)Trainer::resume(dir, json{{"model", {{"dropout", 0.2}}}}), Error);
  EXPECT_THROW((void)Trainer::resume(dir, json{{"epochs", "two"}}), Error);
  auto more = Trainer::resume(dir, json{{"epochs", 2}});
  more->run();
  EXPECT_EQ(more->metrics().size(), 2u);
  EXPECT_EQ(more->step(), 32);
  EXPECT_EQ(TrainConfig::load((fs::path(dir) / "train_config.json").string()).epochs, 2);

  // The same two epochs in one go give the same numbers.
  c.epochs = 2;
  Trainer whole(c, run_dir(tmp, "whole"));
  whole.run();
  EXPECT_EQ(more->metrics()[1].loss, whole.metrics()[1].loss);
  EXPECT_EQ(weights_of(more->model()), weights_of(whole.model()));
}

TEST(Trainer, ResumeWithoutACheckpointIsAnError) {
  TempDir tmp("attn_trainer");
  EXPECT_THROW((void)Trainer::resume(tmp.file("nothing")), Error);
  const std::string dir = run_dir(tmp, "run");
  Trainer(tiny_config(), dir).run();
  fs::remove_all(fs::path(dir) / io::kCheckpointsDirName);
  EXPECT_THROW((void)Trainer::resume(dir), Error);
}

TEST(Trainer, RequestStopWritesACheckpointToResumeFrom) {
  TempDir tmp("attn_trainer");
  const std::string dir = run_dir(tmp, "run");
  TrainConfig c = tiny_config();
  Trainer whole(c, run_dir(tmp, "whole"));
  whole.run();
  {
    Trainer t(c, dir);
    t.on_progress([&t](const TrainProgress& p) {
      if (p.step == 7) t.request_stop();
    });
    t.run();
    EXPECT_TRUE(t.stopped());
    EXPECT_EQ(t.step(), 7);
  }
  EXPECT_EQ(latest_checkpoint(dir)->step, 7);
  auto resumed = Trainer::resume(dir);
  resumed->run();
  EXPECT_EQ(weights_of(resumed->model()), weights_of(whole.model()));
}

// ---- checkpoints ---------------------------------------------------------------------------------

TEST(Checkpointing, KeepsOnlyTheNewestK) {
  TempDir tmp("attn_trainer");
  const std::string dir = run_dir(tmp, "run");
  TrainConfig c = tiny_config();
  c.keep = 2;
  c.checkpoint_every = 4;
  Trainer(c, dir).run();
  const auto ckpts = list_checkpoints(dir);
  ASSERT_EQ(ckpts.size(), 2u);
  EXPECT_EQ(ckpts[0].step, 28);
  EXPECT_EQ(ckpts[1].step, 32);
  // Only the two folders remain (no temporaries).
  int entries = 0;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / io::kCheckpointsDirName)) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 2);
}

TEST(Checkpointing, IncompleteAndTemporaryFoldersAreIgnoredAndCleaned) {
  TempDir tmp("attn_trainer");
  const std::string dir = run_dir(tmp, "run");
  Trainer(tiny_config(), dir).run();
  const fs::path root = fs::path(dir) / io::kCheckpointsDirName;
  fs::create_directories(root / "step_00000099");  // no state.json: not a checkpoint
  fs::create_directories(root / ".tmp-step_00000100-1-0");
  EXPECT_EQ(latest_checkpoint(dir)->step, 32);
  prune_checkpoints(dir, 5);
  EXPECT_FALSE(fs::exists(root / ".tmp-step_00000100-1-0"));
}

TEST(Checkpointing, AveragingIsTheMeanOfTheCheckpointsWeights) {
  TempDir tmp("attn_trainer");
  const std::string dir = run_dir(tmp, "run");
  TrainConfig c = tiny_config();
  c.checkpoint_every = 4;
  c.keep = 0;
  Trainer(c, dir).run();
  const auto ckpts = list_checkpoints(dir);
  ASSERT_GE(ckpts.size(), 3u);
  const std::string out = tmp.file("avg");
  const auto used = average_last_checkpoints(dir, 3, out);
  ASSERT_EQ(used.size(), 3u);
  EXPECT_EQ(used.back(), ckpts.back().path);
  auto avg = models::load_model(out);
  EXPECT_TRUE(fs::is_regular_file(fs::path(out) / "vocab.json"));
  std::vector<io::SafetensorsFile> files;
  for (const auto& u : used) files.push_back(io::SafetensorsFile::open((fs::path(u) / "model.safetensors").string()));
  for (const auto& [name, p] : avg->named_parameters()) {
    const std::vector<float> got = p.to_vector<float>();
    std::vector<double> mean(got.size(), 0.0);
    for (const auto& f : files) {
      const std::vector<float> v = f.get(name).to_vector<float>();
      for (size_t i = 0; i < v.size(); ++i) mean[i] += v[i] / 3.0;
    }
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], mean[i], 1e-6) << name << "[" << i << "]";
  }
  // Control: the mean differs from the newest checkpoint alone.
  auto newest = models::load_model(ckpts.back().path);
  EXPECT_NE(weights_of(*avg), weights_of(*newest));
  EXPECT_THROW((void)average_last_checkpoints(tmp.file("none"), 2, tmp.file("avg2")), Error);
}

// ---- bad input -------------------------------------------------------------------------------------

TEST(Trainer, BadConfigFailsBeforeWritingAnything) {
  TempDir tmp("attn_trainer");
  const std::string dir = run_dir(tmp, "run");
  TrainConfig c = tiny_config();
  c.model.n_heads = 3;
  EXPECT_THROW(Trainer(c, dir), Error);
  c = tiny_config();
  c.model.n_decoder_layers = 0;
  EXPECT_THROW(Trainer(c, dir), Error);
  EXPECT_FALSE(fs::exists(dir));
}

TEST(Trainer, MalformedOrEmptyCorpusLinesFailNamingTheLineAndWriteNothing) {
  TempDir tmp("attn_trainer");
  const std::string dir = run_dir(tmp, "run");
  auto message = [&](const std::string& corpus) {
    const std::string path = tmp.file("train.tsv");
    io::write_file_atomic(path, corpus);
    TrainConfig c = tiny_config();
    c.task = "";
    c.train_path = path;
    try {
      Trainer t(c, dir);
      t.run();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("ab\tba\nabc\n").find("line 2"), std::string::npos);
  EXPECT_NE(message("ab\tba\n\nbc\tcb\n").find("line 2 is empty"), std::string::npos);
  EXPECT_NE(message("ab\tba\nbc\tcb\n\n").find("line 3 is empty"), std::string::npos);
  EXPECT_NE(message("ab\t\n").find("empty target"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir));
  // A well-formed corpus trains.
  EXPECT_EQ(message("ab\tba\nbc\tcb\nca\tac\n"), "no error");
  EXPECT_TRUE(fs::exists(fs::path(dir) / "vocab.json"));
}

TEST(Trainer, RefusesANonEmptyFolderThatIsNotAFreshRun) {
  TempDir tmp("attn_trainer");
  const std::string dir = run_dir(tmp, "run");
  fs::create_directories(dir);
  io::write_file_atomic(dir + "/notes.txt", "mine");
  Trainer t(tiny_config(), dir);
  EXPECT_THROW(t.run(), Error);
  EXPECT_EQ(io::read_file(dir + "/notes.txt"), "mine");
  EXPECT_THROW(check_fresh_run_dir(dir, false), Error);
  EXPECT_THROW(check_fresh_run_dir(dir, true), Error);  // not a run folder: --force refuses too
  EXPECT_NO_THROW(check_fresh_run_dir(tmp.file("absent"), false));
  // An existing run may be replaced with force.
  const std::string run = run_dir(tmp, "old");
  Trainer(tiny_config(), run).run();
  EXPECT_THROW(check_fresh_run_dir(run, false), Error);
  EXPECT_NO_THROW(check_fresh_run_dir(run, true));
  clear_run_dir(run);
  EXPECT_TRUE(fs::is_empty(run));
}

// What the kill soak found: `train --force` killed while clearing the old run removed
// train_config.json and checkpoints/ before the rest, and the next --force refused the folder
// as not a run's. A clearing stopped after any number of entries leaves a folder --force takes.
TEST(Trainer, AClearingInterruptedAnywhereLeavesAFolderForceStillClears) {
  TempDir tmp("attn_trainer");
  const std::string run = run_dir(tmp, "old");
  TrainConfig c = tiny_config();
  c.checkpoint_every = 1;
  Trainer(c, run).run();
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(run)) ++entries;
  ASSERT_GE(entries, 4u);  // train_config.json, checkpoints/, the model, the vocabulary, ...
  ASSERT_TRUE(fs::is_directory(fs::path(run) / "checkpoints"));
  for (size_t stop = 0; stop <= entries; ++stop) {
    SCOPED_TRACE(stop);
    const std::string copy = tmp.file("copy");
    fs::remove_all(copy);
    fs::copy(run, copy, fs::copy_options::recursive);
    clear_run_dir(copy, stop);
    EXPECT_NO_THROW(check_fresh_run_dir(copy, true));
    EXPECT_EQ(fs::is_empty(copy), stop == entries);
  }
}

TEST(Checkpointing, GeneratorStatesRejectMissingOrUnknownModules) {
  TempDir tmp("attn_trainer");
  Trainer t(tiny_config(), run_dir(tmp, "run"));
  json states = model_rng_states(t.model());
  json missing = states;
  missing.erase("encoder.layers.0.dropout1");
  EXPECT_THROW(set_model_rng_states(t.model(), missing), Error);
  json unknown = states;
  unknown["encoder.layers.9.dropout1"] = states["encoder.layers.0.dropout1"];
  EXPECT_THROW(set_model_rng_states(t.model(), unknown), Error);
  json bad = states;
  bad["encoder.layers.0.dropout1"][2] = "-4";
  EXPECT_THROW(set_model_rng_states(t.model(), bad), Error);
  EXPECT_NO_THROW(set_model_rng_states(t.model(), states));
}

}  // namespace
}  // namespace attn::train
