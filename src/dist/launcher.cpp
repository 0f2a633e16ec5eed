// What an MPI launcher tells a process through its environment, read by both backends of
// attn/dist/communicator.h, and the exit of a rank that fails before MPI runs.
// Not here: talking to the launcher (that is MPI_Init's job).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attn/dist/communicator.h"
#include "launcher.h"

namespace attn::dist {

int launcher_world_size() {
  // Open MPI's mpirun, then MPICH/Intel's Hydra (PMI), then Slurm's srun with PMIx.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* v = std::getenv(name);
    if (v && *v) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  if (std::getenv("PMIX_RANK")) {
    const char* v = std::getenv("SLURM_NTASKS");
    const int n = v ? std::atoi(v) : 0;
    return n > 0 ? n : 1;
  }
  return 0;
}

int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    const char* v = std::getenv(name);
    if (v && *v) return std::atoi(v);
  }
  return -1;
}

void print_and_exit(const std::string& message, int code) {
  const int rank = launcher_rank();
  if (rank >= 0)
    std::fprintf(stderr, "attn: rank %d of %d: %s\n", rank, launcher_world_size(), message.c_str());
  else
    std::fprintf(stderr, "attn: %s\n", message.c_str());
  std::fflush(nullptr);
  std::_Exit(code);
}

int launcher_local_size() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    const char* v = std::getenv(name);
    if (v && *v) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  return 0;
}

}  // namespace attn::dist
