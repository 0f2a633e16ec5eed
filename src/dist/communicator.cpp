// The backend-independent half of attn/dist/communicator.h: tensor and single-value
// wrappers over the raw collectives that src/dist/mpi/ or src/dist/stub/ provide.
// Not here: anything that calls MPI.
#include "attn/dist/communicator.h"

#include <algorithm>

#include "attn/core/error.h"

namespace attn::dist {

std::string Communicator::describe() const { return str_cat("rank ", rank_, " of ", size_); }

void Communicator::check_root(const char* op, int root) const {
  ATTN_CHECK(root >= 0 && root < size_, op, describe(), ": root ", root, " is not a rank (0..", size_ - 1,
             ")");
}

void Communicator::all_reduce(const Tensor& t, ReduceOp op) const {
  ATTN_CHECK(t.defined() && t.is_contiguous(), "all_reduce", describe(),
             ": the tensor must be defined and contiguous, got ", t.defined() ? t.str() : "undefined");
  switch (t.dtype()) {
    case DType::F32: all_reduce(t.data<float>(), t.numel(), op); break;
    case DType::F64: all_reduce(t.data<double>(), t.numel(), op); break;
    case DType::I64: all_reduce(t.data<int64_t>(), t.numel(), op); break;
    default: fail("all_reduce", describe(), ": dtype ", dtype_name(t.dtype()), " is not f32, f64 or i64");
  }
}

int64_t Communicator::all_reduce_value(int64_t value, ReduceOp op) const {
  all_reduce(&value, 1, op);
  return value;
}

double Communicator::all_reduce_value(double value, ReduceOp op) const {
  all_reduce(&value, 1, op);
  return value;
}

std::vector<int64_t> Communicator::all_gather(const std::vector<int64_t>& mine) const {
  const int64_t n = static_cast<int64_t>(mine.size());
  const int64_t lengths = all_reduce_value(n, ReduceOp::Max);
  ATTN_CHECK(lengths == all_reduce_value(n, ReduceOp::Min), "all_gather", describe(), ": ", n,
             " values here, but not the same count on every rank");
  // Each rank fills its own block of zeros; the sum is the concatenation.
  std::vector<int64_t> all(static_cast<size_t>(n * size_), 0);
  std::copy(mine.begin(), mine.end(), all.begin() + n * rank_);
  all_reduce(all.data(), static_cast<int64_t>(all.size()));
  return all;
}

void Communicator::broadcast(const Tensor& t, int root) const {
  ATTN_CHECK(t.defined() && t.is_contiguous(), "broadcast", describe(),
             ": the tensor must be defined and contiguous, got ", t.defined() ? t.str() : "undefined");
  broadcast(t.raw_data(), t.numel() * static_cast<int64_t>(dtype_size(t.dtype())), root);
}

std::string Communicator::broadcast_string(const std::string& s, int root) const {
  check_root("broadcast_string", root);
  int64_t n = static_cast<int64_t>(s.size());
  broadcast(&n, sizeof n, root);
  std::string out = rank_ == root ? s : std::string(static_cast<size_t>(n), '\0');
  if (n > 0) broadcast(out.data(), n, root);
  return out;
}

}  // namespace attn::dist
