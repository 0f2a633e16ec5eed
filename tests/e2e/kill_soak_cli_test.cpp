// kill -9 soak (issue 22): `attn train --checkpoint-every` is killed with SIGKILL at random
// moments (2% to 33% of an uninterrupted run's time on this machine) and resumed each time
// (started afresh with --force while no checkpoint is complete)
// until it finishes; the final model is byte-identical to an uninterrupted run's. `attn
// quantize` and `attn average` killed at random moments leave their output folder complete
// (it loads) or absent, never a folder that half exists. The moments come from a fixed seed,
// so a failure repeats; the whole test runs in well under a minute on two cores.
// Control: the uninterrupted run itself is repeated and compared, so that a comparison which
// could never fail (say, of two empty reads) would show.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "attn/io/atomic_file.h"
#include "unit/models/broken_checkpoints.h"

namespace attn::cli {
namespace {

namespace fs = std::filesystem;
using models::test_util::TempDir;

// Runs `ATTN_BINARY args` in `dir`; with `kill_after_ms` >= 0 sends SIGKILL after that long.
// Returns the exit status, or -1 when the command was killed.
int run_maybe_killed(const std::string& dir, const std::string& args, int kill_after_ms) {
  const std::string cmd = "cd '" + dir + "' && exec '" + ATTN_BINARY + "' " + args + " >log.txt 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  if (pid < 0) return -2;
  int status = 0;
  if (kill_after_ms >= 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kill_after_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    kill(pid, SIGKILL);
  }
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

const std::string kRun =
    "--task reverse --length 5 --symbols 6 --train-size 256 --valid-size 16 --batch-size 16 --epochs 3 "
    "--d-model 16 --heads 2 --d-ff 32 --layers 1 --threads 1 --checkpoint-every 3 --keep 2 --quiet --no-report "
    "--samples 0";

TEST(KillSoak, TrainingKilledAtRandomAndResumedEndsByteIdentical) {
  TempDir tmp("attn_kill_soak");
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(run_maybe_killed(tmp.path, "train --out whole " + kRun, -1), 0) << io::read_file(tmp.file("log.txt"));
  // The kill moments scale with this machine's time for the whole run (a fast machine would
  // otherwise finish before fixed moments came), from 2% to 33% of it: a resumed run is shorter
  // than the whole one, and the soak ends at the first run that is not killed.
  const int whole_ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count());
  ASSERT_EQ(run_maybe_killed(tmp.path, "train --out again " + kRun, -1), 0);
  const std::string reference = io::read_file(tmp.file("whole/model.safetensors"));
  ASSERT_GT(reference.size(), 1000u);
  EXPECT_EQ(io::read_file(tmp.file("again/model.safetensors")), reference);  // control: runs repeat

  std::mt19937 rng(22);
  std::uniform_int_distribution<int> moment(std::max(2, whole_ms / 50), std::max(4, whole_ms / 3));
  // Where start-up takes most of a run (a sanitized build), early kills all land before the
  // first checkpoint: then up to 12 more kills at later moments, until two runs have resumed.
  std::uniform_int_distribution<int> late(std::max(4, whole_ms / 3), std::max(8, 2 * whole_ms / 3));
  int kills = 0, resumes = 0, rc = -1;
  for (int attempt = 0; attempt < 60 && rc != 0; ++attempt) {
    // 12 kills, more while fewer than two runs resumed, then let it finish.
    const int after = kills < 12 ? moment(rng) : resumes < 2 && kills < 24 ? late(rng) : -1;
    const bool fresh = !fs::exists(tmp.file("part/checkpoints"));
    resumes += fresh ? 0 : 1;
    rc = run_maybe_killed(tmp.path, fresh ? "train --force --out part " + kRun : "train --out part --resume", after);
    if (rc == -1) ++kills;
    // A kill before the first checkpoint leaves nothing to resume: start afresh.
    if (rc == 1 && io::read_file(tmp.file("log.txt")).find("no complete checkpoint") != std::string::npos)
      fs::remove_all(tmp.file("part/checkpoints"));
  }
  ASSERT_EQ(rc, 0) << io::read_file(tmp.file("log.txt"));
  EXPECT_GE(kills, 3) << "too few kills landed (whole run " << whole_ms << " ms)";
  EXPECT_GE(resumes, 2) << "too few runs resumed from a checkpoint (" << kills << " kills, whole run " << whole_ms
                        << " ms)";
  EXPECT_EQ(io::read_file(tmp.file("part/model.safetensors")), reference) << "after " << kills << " kills";
}

// What the soak found: a kill after the last epoch's checkpoint, while the run folder's model
// was being written (config.json removed first, then the weights), left a resume with nothing
// to train and a folder without a model. The resume now writes it again from the checkpoint.
TEST(KillSoak, AResumeAfterTheLastCheckpointCompletesTheRunFolder) {
  TempDir tmp("attn_kill_soak");
  ASSERT_EQ(run_maybe_killed(tmp.path, "train --out run " + kRun, -1), 0) << io::read_file(tmp.file("log.txt"));
  const std::string reference = io::read_file(tmp.file("run/model.safetensors"));
  fs::remove(tmp.file("run/config.json"));
  io::write_file_atomic(tmp.file("run/model.safetensors"), reference.substr(0, reference.size() / 2));
  ASSERT_EQ(run_maybe_killed(tmp.path, "train --out run --resume", -1), 0) << io::read_file(tmp.file("log.txt"));
  EXPECT_TRUE(fs::exists(tmp.file("run/config.json")));
  EXPECT_EQ(io::read_file(tmp.file("run/model.safetensors")), reference);
}

TEST(KillSoak, QuantizeAndAverageOutputIsCompleteOrAbsent) {
  TempDir tmp("attn_kill_soak");
  ASSERT_EQ(run_maybe_killed(tmp.path, "train --out run " + kRun, -1), 0) << io::read_file(tmp.file("log.txt"));
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> moment(0, 60);
  for (int i = 0; i < 16; ++i) {
    SCOPED_TRACE(i);
    const bool quantize = i % 2 == 0;
    const std::string out = tmp.file("out" + std::to_string(i));
    const int rc = run_maybe_killed(
        tmp.path, quantize ? "quantize --model run --to int8 --out " + out : "average --model run --last 2 --out " + out,
        moment(rng));
    EXPECT_TRUE(rc == 0 || rc == -1) << rc << "\n" << io::read_file(tmp.file("log.txt"));
    if (!fs::exists(out)) {
      EXPECT_NE(rc, 0);  // only a killed command may leave no folder
      continue;
    }
    EXPECT_EQ(run_maybe_killed(tmp.path, "info --model " + out, -1), 0)
        << "a half-written folder survived a kill: " << io::read_file(tmp.file("log.txt"));
  }
}

}  // namespace
}  // namespace attn::cli
