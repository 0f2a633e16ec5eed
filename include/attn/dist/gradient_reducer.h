// attn/dist/gradient_reducer.h — data-parallel gradients: the parameters' gradients summed (or
// averaged) over ranks in buckets whose non-blocking all-reduce starts while the backward
// sweep is still running (PyTorch DDP's scheme), and the initial parameters broadcast from
// rank 0. With Reduction::Sum and the loss weighted by TokenShare::weight() (sharding.h),
// every rank ends the step with the gradient one process would get from the whole batch.
// Not here: the optimizer, clipping (both run after wait_all() on identical gradients), or
// unused-parameter detection before the sweep ends (their buckets start in wait_all()).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "attn/core/tensor.h"
#include "attn/dist/communicator.h"

namespace attn::dist {

enum class Reduction {
  Sum,   // the sum over ranks (for a loss weighted by each rank's share of the tokens)
  Mean,  // the sum divided by the world size (for a mean over equally sized shards)
};

struct ReducerOptions {
  double bucket_mb = 4.0;  // bucket capacity in MiB (> 0); a larger parameter is a bucket alone
  Reduction reduction = Reduction::Sum;
};

// A bucket: indices into the parameter list, in the order their gradients are expected to
// become final (reverse registration order), all of one dtype.
struct BucketPlan {
  std::vector<size_t> params;
  DType dtype = DType::F32;
  int64_t numel = 0;  // elements of all its parameters together
};

// Splits params (F32 or F64 leaves) into buckets: walking the list backwards, a parameter
// joins the current bucket unless that would pass bucket_bytes (> 0) or change the dtype.
std::vector<BucketPlan> plan_buckets(const std::vector<Tensor>& params, int64_t bucket_bytes);

// What a reducer did since construction or reset_stats(), on this rank.
struct ReducerStats {
  int64_t steps = 0;                      // wait_all() calls
  int64_t buckets_started_in_backward = 0;  // launched from the leaf hook, overlapping the sweep
  int64_t buckets_started_in_wait = 0;      // launched by wait_all() (nothing overlapped)
  int64_t bytes_reduced = 0;              // payload of the all-reduces on this rank
  double comm_seconds = 0;                // inside MPI calls: starts, progress polls and waits
  double wait_seconds = 0;                // of which blocked in wait_all()
};

class GradientReducer {
 public:
  // params: distinct F32/F64 leaves in registration order (e.g. Adam's list), the same
  // shapes and dtypes on every rank (checked collectively: a mismatch is an error on every
  // rank). The reducer talks on its own duplicate of comm, so other collectives on comm (a
  // token count, a loss) may run between backward() and wait_all() in any order per rank.
  GradientReducer(std::vector<Tensor> params, const Communicator& comm, ReducerOptions options = {});

  // loss.backward() (loss holds one element) with the leaf hook of core/autograd.h
  // installed: once a parameter's gradient is final it is copied into its bucket, and a
  // bucket's all-reduce starts when all its parameters and all earlier buckets are in
  // (buckets start in the same order on every rank, as MPI requires). Gradients accumulated
  // by earlier plain backward() calls of the step are included (gradient accumulation).
  // Only one reducer backward per step: a second one before wait_all() is an error.
  void backward(const Tensor& loss);

  // Completes the step's reduction on every rank (call it on every rank once per step, also
  // on a rank that ran no backward, e.g. with an empty share of the batch): starts every
  // bucket not yet started (a parameter whose gradient never became final contributes zeros),
  // waits for all, and sets each parameter's .grad() to the reduced sum (or mean). A
  // parameter that had no gradient on any rank keeps none, so Adam skips it as one process
  // would. Then clip and step the optimizer: every rank applies the same update.
  void wait_all();

  const std::vector<BucketPlan>& buckets() const { return plan_; }
  const std::vector<Tensor>& params() const { return params_; }
  const ReducerStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  struct Bucket;
  void on_leaf_final(const Tensor& leaf);
  void mark_ready(size_t param);
  void launch_ready_buckets(bool in_backward);
  void poll();

  std::vector<Tensor> params_;
  Communicator comm_;  // a duplicate of the caller's
  ReducerOptions options_;
  std::vector<BucketPlan> plan_;
  std::vector<std::shared_ptr<Bucket>> buckets_;
  std::unordered_map<const TensorImpl*, size_t> index_;  // parameter → position in params_
  std::vector<size_t> bucket_of_;                        // parameter → bucket
  std::vector<int64_t> offset_of_;                       // parameter → offset in its bucket
  std::vector<int64_t> slot_of_;                         // parameter → position among its bucket's
  std::vector<char> ready_;                              // parameter copied in this step
  size_t next_launch_ = 0;                               // first bucket not started
  ReducerStats stats_;
};

// Copies rank `root`'s parameter values into every rank's parameters, in place (one broadcast
// per dtype). The parameter lists must agree in count, shapes and dtypes on every rank
// (checked collectively first, so a mismatch is an error on every rank, not a hang).
void broadcast_parameters(const std::vector<Tensor>& params, const Communicator& comm, int root = 0);

// Fails on every rank unless `fingerprint` is the same on every rank; `what` names it in the
// error ("[check_same_on_all_ranks] rank r of N: <what> differs between ranks").
void check_same_on_all_ranks(uint64_t fingerprint, const char* what, const Communicator& comm);

}  // namespace attn::dist
