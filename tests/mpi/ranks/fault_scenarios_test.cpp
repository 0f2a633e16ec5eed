// Scenarios that tests/mpi/launch/fault_test.cpp starts under mpirun to see how a job ends
// when one rank dies or fails; each is skipped unless ATTN_MPI_FAULT names a fault:
//   none   every rank finishes (the control), kill   rank 1 is killed (SIGKILL) mid-job,
//   error  rank 1 fails with an attn::Error and stops the job through abort_job.
// Ranks exchange an all-reduce every millisecond, as a training loop would every step.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>

#include "mpi_util.h"

namespace attn::dist {
namespace {

using test::world;

std::string fault() {
  const char* f = std::getenv("ATTN_MPI_FAULT");
  return f ? f : "";
}

TEST(FaultScenario, RanksExchangeUntilOneFails) {
  const std::string f = fault();
  if (f != "none" && f != "kill" && f != "error") GTEST_SKIP() << "set ATTN_MPI_FAULT to run";
  ATTN_REQUIRE_RANKS(2);
  // Without a fault the loop ends after 50 exchanges; with one, rank 1 fails at the 20th and
  // the other ranks are blocked in their 21st all-reduce until mpirun ends them.
  for (int i = 0; i < 50; ++i) {
    if (i == 20 && world().rank() == 1) {
      if (f == "kill") std::raise(SIGKILL);
      if (f == "error") {
        try {
          fail("fault_scenario", "step ", i, ": injected failure");
        } catch (const Error& e) {
          abort_job(e.what(), 3);
        }
      }
    }
    double x = 1.0;
    world().all_reduce(&x, 1);
    ASSERT_EQ(x, world().size());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(f, "none") << world().describe() << " finished although rank 1 failed";
}

}  // namespace
}  // namespace attn::dist
