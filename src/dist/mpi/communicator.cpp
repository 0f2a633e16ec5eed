// The MPI backend of attn/dist/communicator.h (built when CMake finds MPI): MPI_Init_thread on
// first use under a launcher, a duplicate of MPI_COMM_WORLD that returns errors (turned into
// attn::Error with the rank and MPI's error string), blocking and non-blocking collectives
// split into chunks of at most 2^30 elements (MPI counts are int). Not here: anything run by
// a process that no launcher started (a world of one, no MPI call at all).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "attn/core/error.h"
#include "attn/dist/communicator.h"
#include "../launcher.h"

namespace attn::dist {

// True between MPI_Init and MPI_Finalize.
static bool mpi_running();

struct Communicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (comm != MPI_COMM_NULL && mpi_running()) MPI_Comm_free(&comm);
  }
};

struct Request::Impl {
  std::vector<MPI_Request> requests;
  bool done = false;
  int rank = 0, size = 1;
};

namespace {

constexpr int64_t kMaxChunk = int64_t{1} << 30;  // elements per MPI call (counts are int)
bool g_initialised_here = false;

// Throws "[op] rank r of N: MPI error: <MPI's string>" unless rc is MPI_SUCCESS.
void check(int rc, const char* op, int rank, int size) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = std::snprintf(text, sizeof text, "code %d", rc);
  fail(op, "rank ", rank, " of ", size, ": MPI error: ", std::string(text, static_cast<size_t>(len)));
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Max: return MPI_MAX;
  }
  return MPI_SUM;
}

}  // namespace

static bool mpi_running() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

bool mpi_built() { return true; }

Communicator& Communicator::world() {
  static Communicator* const world = [] {
    const int launched = launcher_world_size();
    if (launched == 0 && !mpi_running()) return new Communicator(0, 1, nullptr);
    if (!mpi_running()) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "Communicator::world", 0,
            launched);
      g_initialised_here = true;
    }
    auto impl = std::make_shared<Impl>();
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check(MPI_Comm_dup(MPI_COMM_WORLD, &impl->comm), "Communicator::world", rank, size);
    check(MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN), "Communicator::world", rank, size);
    return new Communicator(rank, size, std::move(impl));
  }();
  return *world;
}

template <class T>
static void all_reduce_impl(const Communicator& c, const Communicator::Impl* impl, T* data, int64_t count,
                            ReduceOp op, MPI_Datatype type) {
  ATTN_CHECK(count >= 0, "all_reduce", c.describe(), ": count ", count, " < 0");
  ATTN_CHECK(data || count == 0, "all_reduce", c.describe(), ": null buffer for ", count, " elements");
  if (c.size() == 1) return;
  // One call per chunk; a zero count is still one call, as every rank must join every collective.
  for (int64_t at = 0; at < std::max<int64_t>(count, 1); at += kMaxChunk) {
    const int n = static_cast<int>(std::min(kMaxChunk, count - at));
    check(MPI_Allreduce(MPI_IN_PLACE, data + at, n, type, mpi_op(op), impl->comm),
          "all_reduce", c.rank(), c.size());
  }
}

void Communicator::all_reduce(float* data, int64_t count, ReduceOp op) const {
  all_reduce_impl(*this, impl_.get(), data, count, op, MPI_FLOAT);
}
void Communicator::all_reduce(double* data, int64_t count, ReduceOp op) const {
  all_reduce_impl(*this, impl_.get(), data, count, op, MPI_DOUBLE);
}
void Communicator::all_reduce(int64_t* data, int64_t count, ReduceOp op) const {
  all_reduce_impl(*this, impl_.get(), data, count, op, MPI_INT64_T);
}

Request Communicator::start_all_reduce_sum(void* data, int64_t count, DType dtype) const {
  ATTN_CHECK(count >= 0, "start_all_reduce_sum", describe(), ": count ", count, " < 0");
  ATTN_CHECK(is_floating(dtype), "start_all_reduce_sum", describe(), ": dtype ", dtype_name(dtype),
             " is not f32 or f64");
  ATTN_CHECK(data || count == 0, "start_all_reduce_sum", describe(), ": null buffer for ", count, " elements");
  if (size_ == 1) return Request();
  auto r = std::make_shared<Request::Impl>();
  r->rank = rank_;
  r->size = size_;
  const MPI_Datatype type = dtype == DType::F32 ? MPI_FLOAT : MPI_DOUBLE;
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t at = 0; at < std::max<int64_t>(count, 1); at += kMaxChunk) {
    const int n = static_cast<int>(std::min(kMaxChunk, count - at));
    MPI_Request req = MPI_REQUEST_NULL;
    char* p = static_cast<char*>(data) + at * elem;
    check(MPI_Iallreduce(MPI_IN_PLACE, p, n, type, MPI_SUM, impl_->comm, &req), "start_all_reduce_sum", rank_,
          size_);
    r->requests.push_back(req);
  }
  return Request(std::move(r));
}

bool Request::done() const { return !impl_ || impl_->done; }

bool Request::test() {
  if (done()) return true;
  int flag = 0;
  check(MPI_Testall(static_cast<int>(impl_->requests.size()), impl_->requests.data(), &flag,
                    MPI_STATUSES_IGNORE),
        "Request::test", impl_->rank, impl_->size);
  impl_->done = flag != 0;
  return impl_->done;
}

void Request::wait() {
  if (done()) return;
  check(MPI_Waitall(static_cast<int>(impl_->requests.size()), impl_->requests.data(), MPI_STATUSES_IGNORE),
        "Request::wait", impl_->rank, impl_->size);
  impl_->done = true;
}

void Communicator::broadcast(void* data, int64_t bytes, int root) const {
  ATTN_CHECK(bytes >= 0, "broadcast", describe(), ": byte count ", bytes, " < 0");
  ATTN_CHECK(data || bytes == 0, "broadcast", describe(), ": null buffer for ", bytes, " bytes");
  check_root("broadcast", root);
  if (size_ == 1) return;
  for (int64_t at = 0; at < std::max<int64_t>(bytes, 1); at += kMaxChunk) {
    const int n = static_cast<int>(std::min(kMaxChunk, bytes - at));
    check(MPI_Bcast(static_cast<char*>(data) + at, n, MPI_BYTE, root, impl_->comm), "broadcast",
          rank_, size_);
  }
}

Communicator Communicator::duplicate() const {
  if (!impl_) return *this;
  auto impl = std::make_shared<Impl>();
  check(MPI_Comm_dup(impl_->comm, &impl->comm), "duplicate", rank_, size_);
  check(MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN), "duplicate", rank_, size_);
  return Communicator(rank_, size_, std::move(impl));
}

void Communicator::barrier() const {
  if (size_ == 1) return;
  check(MPI_Barrier(impl_->comm), "barrier", rank_, size_);
}

void finalize() {
  if (!g_initialised_here || !mpi_running()) return;
  MPI_Finalize();
}

void abort_job(const std::string& message, int code) {
  if (mpi_running()) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::fprintf(stderr, "attn: rank %d of %d: %s\n", rank, size, message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  print_and_exit(message, code);
}

}  // namespace attn::dist
