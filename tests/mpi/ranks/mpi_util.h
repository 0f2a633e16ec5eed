// What the tests of attn_mpi_tests share: the world, a skip for runs with too few ranks, a
// check that a tensor is bit-identical on every rank, and a small network of leaf tensors.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "attn/dist/communicator.h"
#include "attn/ops/ops.h"

namespace attn::dist::test {

inline const Communicator& world() { return Communicator::world(); }

// Skips the test unless the job has at least n ranks (the ctest entry runs 2).
#define ATTN_REQUIRE_RANKS(n)                                                             \
  do {                                                                                    \
    if (::attn::dist::Communicator::world().size() < (n))                                 \
      GTEST_SKIP() << "needs " << (n) << " ranks: run under mpirun -np " << (n);          \
  } while (0)

// True when every rank holds exactly the same values (compared in double, bit for bit for
// float32 and float64 alike).
inline bool same_on_all_ranks(const Tensor& t) {
  std::vector<double> lo = t.to_vector<double>(), hi = lo;
  world().all_reduce(lo.data(), static_cast<int64_t>(lo.size()), ReduceOp::Min);
  world().all_reduce(hi.data(), static_cast<int64_t>(hi.size()), ReduceOp::Max);
  return lo == hi;
}

inline Tensor random_leaf(const Shape& shape, uint64_t seed, DType dtype = DType::F32) {
  Rng rng(seed);
  Tensor t = Tensor::randn(shape, rng, dtype);
  t.set_requires_grad(true);
  return t;
}

// Two layers, w1 [4, 8], b1 [8], w2 [8, 2] in registration order, and `extra` [5], which
// enters the loss only when asked.
struct SmallNet {
  explicit SmallNet(uint64_t seed = 1)
      : w1(random_leaf({4, 8}, seed)), b1(random_leaf({8}, seed + 1)), w2(random_leaf({8, 2}, seed + 2)),
        extra(random_leaf({5}, seed + 3)) {}
  Tensor w1, b1, w2, extra;
  std::vector<Tensor> params() const { return {w1, b1, w2, extra}; }
  Tensor loss(uint64_t data_seed, bool use_extra = false) const {
    Rng rng(data_seed);
    const Tensor x = Tensor::randn({3, 4}, rng);
    Tensor l = sum(matmul(relu(add(matmul(x, w1), b1)), w2));
    return use_extra ? add(l, sum(extra)) : l;
  }
  void zero_grad() const {
    for (const Tensor& p : params()) p.zero_grad();
  }
};

}  // namespace attn::dist::test
