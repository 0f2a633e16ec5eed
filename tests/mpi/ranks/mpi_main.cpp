// main() of attn_mpi_tests, which runs under `mpirun -np 2` (ctest label mpi): every rank runs
// every test in the same order. Only rank 0 prints GoogleTest's report; a failure on any rank
// is printed with its rank and stops the whole job at once (abort_job), since the other
// ranks may be waiting in a collective that the failed rank will never join.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "attn/dist/communicator.h"

namespace {

class AbortOnFailure : public ::testing::EmptyTestEventListener {
 public:
  explicit AbortOnFailure(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "rank %d: %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      attn::dist::abort_job(std::string("test ") + info.test_suite_name() + "." + info.name() + " failed");
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // A rank that cannot start: rank 1 exits before joining MPI (tests/mpi/launch/).
  const char* fault = std::getenv("ATTN_MPI_FAULT");
  const char* rank_env = std::getenv("OMPI_COMM_WORLD_RANK");
  if (fault && std::strcmp(fault, "exit_before_init") == 0 && rank_env && std::strcmp(rank_env, "1") == 0) {
    std::fprintf(stderr, "rank 1: exiting before MPI starts (fault scenario)\n");
    return 2;
  }
  const attn::dist::Communicator& world = attn::dist::Communicator::world();
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (world.rank() != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new AbortOnFailure(world.rank()));
  const int rc = RUN_ALL_TESTS();
  attn::dist::finalize();
  return rc;
}
