// attn/dist/communicator.h — the processes of a data-parallel job and their collectives
// (all-reduce, broadcast, barrier), on MPI: `mpirun -np N attn train ...` (docs/distributed.md).
// Built on MPI when CMake finds it; otherwise a single-process stub with the same API, so no
// code outside src/dist needs an #ifdef. A process not started by an MPI launcher never
// touches MPI and sees a world of one. Not here: point-to-point messages, sub-communicators,
// fault tolerance beyond stopping the whole job with an error that names the rank.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attn/core/dtype.h"
#include "attn/core/tensor.h"

namespace attn::dist {

// True when this build has MPI; false for the single-process stub.
bool mpi_built();

// The job size announced by an MPI launcher in the environment (Open MPI's
// OMPI_COMM_WORLD_SIZE, Hydra's PMI_SIZE; under PMIx alone, Slurm's SLURM_NTASKS or 1), 0 when
// no launcher started this process.
int launcher_world_size();

// This process's rank as the launcher announces it (OMPI_COMM_WORLD_RANK, PMI_RANK,
// PMIX_RANK), -1 when no launcher started this process.
int launcher_rank();

// How many ranks of the job run on this machine, as the launcher announces it (Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE, Hydra's MPI_LOCALNRANKS, Slurm's SLURM_NTASKS_PER_NODE), 0 when
// unknown or when no launcher started this process.
int launcher_local_size();

// The reductions of all_reduce.
enum class ReduceOp { Sum, Min, Max };

// A non-blocking collective in flight (start_all_reduce). A default-constructed Request is
// already complete. Complete it on the thread that started it.
class Request {
 public:
  Request() = default;
  // Lets MPI progress the operation; true once it has completed (then test() stays true).
  bool test();
  // Blocks until the operation has completed.
  void wait();
  bool done() const;

  struct Impl;  // the backend's handles (src/dist/<backend>/communicator.cpp)

 private:
  friend class Communicator;
  explicit Request(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// The world of this job: every rank calls the collectives in the same order with the same
// counts and dtypes, or the job deadlocks (MPI's rule). Errors are attn::Error naming the
// operation, "rank r of N" and MPI's own error string (the communicator returns errors
// instead of aborting: MPI_ERRORS_RETURN). With one process every collective returns at once
// and MPI is never called.
class Communicator {
 public:
  // The world. The first call initialises MPI (MPI_Init_thread, MPI_THREAD_FUNNELED: only the
  // calling thread talks to MPI; OpenMP threads inside ops never do) when an MPI launcher
  // started this process; otherwise, or without MPI in the build, a world of one. A stub
  // build started by a launcher with N > 1 processes fails: each would train alone.
  static Communicator& world();
  // A world of this process alone, whatever the launcher: every collective returns at once
  // (e.g. a one-process reference computed inside an N-rank job).
  static Communicator self() { return Communicator(0, 1, nullptr); }

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }
  // "rank r of N", the prefix of every error and abort message.
  std::string describe() const;

  // In-place all-reduce of `count` elements on every rank (count >= 0, the same everywhere).
  void all_reduce(float* data, int64_t count, ReduceOp op = ReduceOp::Sum) const;
  void all_reduce(double* data, int64_t count, ReduceOp op = ReduceOp::Sum) const;
  void all_reduce(int64_t* data, int64_t count, ReduceOp op = ReduceOp::Sum) const;
  // In place on a contiguous F32, F64 or I64 tensor.
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) const;
  // One value, returned.
  int64_t all_reduce_value(int64_t value, ReduceOp op = ReduceOp::Sum) const;
  double all_reduce_value(double value, ReduceOp op = ReduceOp::Sum) const;
  // Every rank's `mine` (the same length on every rank), concatenated in rank order
  // (size() * mine.size() values; built on a sum, so for small payloads such as generator
  // states or counters).
  std::vector<int64_t> all_gather(const std::vector<int64_t>& mine) const;
  // Starts an in-place sum of `count` F32 or F64 elements at `data` (which must stay alive
  // and untouched until the request completes) and returns at once (MPI_Iallreduce).
  Request start_all_reduce_sum(void* data, int64_t count, DType dtype) const;

  // Copies root's `bytes` bytes at `data` into every rank's buffer (0 <= root < size()).
  void broadcast(void* data, int64_t bytes, int root = 0) const;
  // In place on a contiguous tensor of the same shape and dtype on every rank.
  void broadcast(const Tensor& t, int root = 0) const;
  // Root's string on every rank (the other ranks' argument is ignored).
  std::string broadcast_string(const std::string& s, int root = 0) const;

  // Returns when every rank has called it.
  void barrier() const;

  // A new communicator over the same ranks whose messages never mix with this one's (a
  // collective: every rank calls it). MPI matches collectives by their order within one
  // communicator; traffic on a duplicate may interleave freely with this one's.
  Communicator duplicate() const;

  struct Impl;  // the backend's communicator handle

 private:
  Communicator(int rank, int size, std::shared_ptr<Impl> impl)
      : rank_(rank), size_(size), impl_(std::move(impl)) {}
  void check_root(const char* op, int root) const;
  int rank_ = 0;
  int size_ = 1;
  std::shared_ptr<Impl> impl_;  // null in a world of one
};

// Ends MPI after a successful run (MPI_Finalize; does nothing when MPI was not initialised,
// and is idempotent). Every rank must call it, and only when no collective is pending: on an
// error path call abort_job instead, or the ranks still in a collective wait forever.
void finalize();

// Stops the whole job: writes "attn: rank r of N: <message>" to stderr and calls MPI_Abort
// (mpirun then ends every rank and exits non-zero); before MPI started, or without MPI, it
// exits with `code` (still naming the launcher's rank, if any: mpirun then ends the others).
[[noreturn]] void abort_job(const std::string& message, int code = 1);

}  // namespace attn::dist
