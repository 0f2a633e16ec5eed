// `mpirun -np 2 attn train` end to end (issue #7): the same metrics as one process with the
// same global batch, output from rank 0 only, and a rank killed mid-run: the job stops within
// seconds, says which rank, and the last complete checkpoint resumes.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "attn/dist/communicator.h"
#include "attn/io/atomic_file.h"
#include "attn/train/checkpointing.h"
#include "attn/train/trainer.h"

namespace attn {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kEnv = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 ";
const std::string kMpirun = std::string(ATTN_MPIEXEC) + " " + ATTN_MPIEXEC_FLAGS + " -np 2 ";
// A small run: 160 reverse pairs, batches of 16 (10 steps per epoch), no dropout.
const std::string kTrain = std::string(ATTN_BINARY) +
                           " train --task reverse --length 5 --train-size 160 --valid-size 16 --batch-size 16 "
                           "--d-model 16 --heads 2 --layers 1 --d-ff 32 --dropout 0 --attention-dropout 0 "
                           "--threads 1 --seed 4 --no-report --samples 0 ";

struct TempDir {
  TempDir() {
    char name[] = "/tmp/attn_mpi_launch_XXXXXX";
    path = mkdtemp(name) ? name : "";
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (fs::path(path) / name).string(); }
  std::string path;
};

// Runs `cmd` with stdout and stderr captured; returns the exit code.
int run(const std::string& cmd, std::string* output) {
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) output->append(buf, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<double> epoch_losses(const std::string& run_dir) {
  std::vector<double> out;
  std::ifstream f(fs::path(run_dir) / "metrics.jsonl");
  std::string line;
  while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return out;
}

int count(const std::string& s, const std::string& part) {
  int n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

TEST(MpiTrainCli, TwoRanksGiveTheMetricsOfOneProcessAndRankZeroAloneTalks) {
  const TempDir tmp;
  std::string one, two;
  ASSERT_EQ(run(kEnv + kTrain + "--epochs 2 --out " + (tmp / "one"), &one), 0) << one;
  ASSERT_EQ(run(kEnv + kMpirun + kTrain + "--epochs 2 --out " + (tmp / "two"), &two), 0) << two;
  EXPECT_EQ(count(two, "attn train: task reverse"), 1) << two;  // the header, once
  EXPECT_EQ(count(two, "attn train: 2 epochs"), 1) << two;       // the summary, once
  EXPECT_NE(two.find("data parallel: 2 ranks"), std::string::npos) << two;
  const std::vector<double> a = epoch_losses(tmp / "one"), b = epoch_losses(tmp / "two");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t e = 0; e < 2; ++e) EXPECT_NEAR(b[e], a[e], 1e-5 * a[e]) << "epoch " << e + 1;
}

TEST(MpiTrainCli, AnErrorOnTheRanksStopsTheJobNamingTheRank) {
  const TempDir tmp;
  std::string out;
  const int rc = run(kEnv + kMpirun + kTrain + "--epochs 1 --warmup -3 --out " + (tmp / "bad"), &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("attn: rank "), std::string::npos) << out;
  EXPECT_NE(out.find(" of 2: error: "), std::string::npos) << out;
}

// The pid of the process that mpirun (pid `launcher`) started as rank `rank`.
pid_t rank_pid(pid_t launcher, int rank) {
  DIR* proc = opendir("/proc");
  if (!proc) return -1;
  pid_t found = -1;
  while (dirent* e = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != launcher) continue;
    std::ifstream env(std::string("/proc/") + e->d_name + "/environ");
    std::string vars((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    if (vars.find(std::string("OMPI_COMM_WORLD_RANK=") + std::to_string(rank) + '\0') != std::string::npos) found = pid;
  }
  closedir(proc);
  return found;
}

TEST(MpiTrainCli, AKilledRankStopsTheJobAndTheLastCheckpointResumes) {
  const TempDir tmp;
  const std::string out = tmp / "run", log = tmp / "log";
  // Long enough to be killed mid-run: 1000 epochs, a checkpoint every 3 steps.
  const std::string cmd = kEnv + "exec " + kMpirun + kTrain + "--epochs 1000 --checkpoint-every 3 --keep 2 --quiet --out " +
                          out + " > " + log + " 2>&1";
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait for two checkpoints, then kill rank 1.
  const Clock::time_point t0 = Clock::now();
  while (train::list_checkpoints(out).size() < 2 && Clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const pid_t victim = rank_pid(launcher, 1);
  ASSERT_GT(victim, 0) << "rank 1 not found";
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const Clock::time_point killed = Clock::now();
  int status = 0;
  while (waitpid(launcher, &status, WNOHANG) == 0 && Clock::now() - killed < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  if (waitpid(launcher, &status, WNOHANG) == 0) {  // still running: stop it, then fail
    kill(launcher, SIGKILL);
    waitpid(launcher, &status, 0);
    FAIL() << "the job was still running " << seconds << " s after rank 1 died";
  }
  const std::string text = io::read_file(log);
  EXPECT_LT(seconds, 20.0) << text;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << text;
  EXPECT_NE(text.find("rank 1"), std::string::npos) << text;

  // The last complete checkpoint is intact: a one-process resume continues from it.
  const auto last = train::latest_checkpoint(out);
  ASSERT_TRUE(last.has_value());
  std::unique_ptr<train::Trainer> resumed = train::Trainer::resume(out);
  EXPECT_EQ(resumed->step(), last->step);
  resumed->run(2);
  EXPECT_EQ(resumed->step(), last->step + 2);
}

}  // namespace
}  // namespace attn
