// `attn lab ...` run as a process: every demonstration prints its table (memory reproduces seed
// 000's 0.07 / 4.29 / 274.88 GB rows), --svg writes a well-formed figure, and bad input ends with
// an error message and a non-zero exit, never a signal.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "attn/io/atomic_file.h"
#include "unit/models/broken_checkpoints.h"
#include "unit/report/xml_check.h"

namespace attn::cli {
namespace {

using models::test_util::TempDir;

struct LabRun {
  int exit_code = -1;
  std::string out, err;
};

LabRun run_attn(const TempDir& tmp, const std::string& args) {
  const std::string out = tmp.file("stdout.txt"), err = tmp.file("stderr.txt");
  const std::string cmd = std::string("'") + ATTN_BINARY + "' " + args + " >'" + out + "' 2>'" + err + "'";
  const int status = std::system(cmd.c_str());
  LabRun r;
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = io::read_file(out);
  r.err = io::read_file(err);
  return r;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class LabCli : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(std::filesystem::exists(ATTN_BINARY)) << "build the attn executable first"; }
  TempDir tmp{"attn_lab"};
};

TEST_F(LabCli, MemoryReproducesTheSeedsRows) {
  const LabRun r = run_attn(tmp, "lab memory --seq 8192 --heads 16 --dtype f32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* part : {"1024", "8192", "65536", "0.07", "4.29", "274.88", "FFN", "fused attention", "KV cache"})
    EXPECT_TRUE(has(r.out, part)) << part << "\n" << r.out;
  const LabRun big = run_attn(tmp, "lab memory --seq 2048 --heads 8 --layers 12 --batch 4 --d-model 768 --dtype f64");
  ASSERT_EQ(big.exit_code, 0) << big.err;
  EXPECT_TRUE(has(big.out, "12 layers, batch 4")) << big.out;
}

TEST_F(LabCli, EveryDemonstrationPrintsItsTable) {
  struct Case {
    const char* args;
    const char* expect;
  };
  for (const Case& c : {Case{"lab steps", "step 5"}, Case{"lab scale --trials 4", "1/sqrt(D)"},
                        Case{"lab permutation", "f(PX) = P f(X)"}, Case{"lab masks", "[2 3 4 5]"},
                        Case{"lab rope", "52"}, Case{"lab rope --pairing half --pairs 5:1,9:5", "half-split"},
                        Case{"lab kv-cache --steps 4", "= the full causal pass"}}) {
    const LabRun r = run_attn(tmp, c.args);
    EXPECT_EQ(r.exit_code, 0) << c.args << "\n" << r.err;
    EXPECT_TRUE(has(r.out, c.expect)) << c.args << "\n" << r.out;
  }
}

TEST_F(LabCli, SvgOptionWritesWellFormedFigures) {
  for (const char* demo : {"steps", "scale --trials 2", "masks", "rope"}) {
    const std::string path = tmp.file("figure.svg");
    std::filesystem::remove(path);
    const LabRun r = run_attn(tmp, std::string("lab ") + demo + " --svg '" + path + "'");
    ASSERT_EQ(r.exit_code, 0) << demo << "\n" << r.err;
    ASSERT_TRUE(std::filesystem::exists(path)) << demo;
    EXPECT_EQ(test::check_xml(io::read_file(path)).error, "") << demo;
  }
}

TEST_F(LabCli, BadInputIsAnErrorMessageNotACrash) {
  for (const char* args : {"lab", "lab memory --seq 0", "lab memory --dtype f16", "lab memory --d-model 100",
                           "lab rope --dim 7", "lab rope --pairs 3-1", "lab rope --pairing spiral",
                           "lab masks --real 9", "lab kv-cache --steps 0", "lab steps --dk 0", "lab unknown"}) {
    const LabRun r = run_attn(tmp, args);
    EXPECT_GE(r.exit_code, 1) << args;
    EXPECT_LE(r.exit_code, 125) << args << ": killed by a signal or not run";
    EXPECT_FALSE(r.err.empty()) << args;
  }
}

}  // namespace
}  // namespace attn::cli
