// The single-process backend of attn/dist/communicator.h, built when CMake finds no MPI: a
// world of one where every collective returns at once, so training code runs unchanged.
// Not here: any communication. A stub build started by a launcher with several processes
// refuses to run (each would train alone on the whole data and write the same folder).
#include "attn/core/error.h"
#include "attn/dist/communicator.h"
#include "../launcher.h"

namespace attn::dist {

struct Communicator::Impl {};
struct Request::Impl {};

bool mpi_built() { return false; }

Communicator& Communicator::world() {
  static Communicator* const world = [] {
    const int launched = launcher_world_size();
    ATTN_CHECK(launched <= 1, "Communicator::world",
               "this attn was built without MPI but an MPI launcher started it as one of ", launched,
               " processes; install libopenmpi-dev and rebuild (docs/distributed.md)");
    return new Communicator(0, 1, nullptr);
  }();
  return *world;
}

void Communicator::all_reduce(float* data, int64_t count, ReduceOp) const {
  ATTN_CHECK(count >= 0, "all_reduce", describe(), ": count ", count, " < 0");
  ATTN_CHECK(data || count == 0, "all_reduce", describe(), ": null buffer for ", count, " elements");
}
void Communicator::all_reduce(double* data, int64_t count, ReduceOp) const {
  ATTN_CHECK(count >= 0, "all_reduce", describe(), ": count ", count, " < 0");
  ATTN_CHECK(data || count == 0, "all_reduce", describe(), ": null buffer for ", count, " elements");
}
void Communicator::all_reduce(int64_t* data, int64_t count, ReduceOp) const {
  ATTN_CHECK(count >= 0, "all_reduce", describe(), ": count ", count, " < 0");
  ATTN_CHECK(data || count == 0, "all_reduce", describe(), ": null buffer for ", count, " elements");
}

Request Communicator::start_all_reduce_sum(void* data, int64_t count, DType dtype) const {
  ATTN_CHECK(count >= 0, "start_all_reduce_sum", describe(), ": count ", count, " < 0");
  ATTN_CHECK(is_floating(dtype), "start_all_reduce_sum", describe(), ": dtype ", dtype_name(dtype),
             " is not f32 or f64");
  ATTN_CHECK(data || count == 0, "start_all_reduce_sum", describe(), ": null buffer for ", count, " elements");
  return Request();
}

bool Request::done() const { return true; }
bool Request::test() { return true; }
void Request::wait() {}

void Communicator::broadcast(void* data, int64_t bytes, int root) const {
  ATTN_CHECK(bytes >= 0, "broadcast", describe(), ": byte count ", bytes, " < 0");
  ATTN_CHECK(data || bytes == 0, "broadcast", describe(), ": null buffer for ", bytes, " bytes");
  check_root("broadcast", root);
}

void Communicator::barrier() const {}

Communicator Communicator::duplicate() const { return *this; }

void finalize() {}

void abort_job(const std::string& message, int code) { print_and_exit(message, code); }

}  // namespace attn::dist
