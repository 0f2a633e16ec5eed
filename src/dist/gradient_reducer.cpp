// Bucketed gradient all-reduce overlapping the backward sweep, and the parameter broadcast
// of attn/dist/gradient_reducer.h. A bucket is one flat buffer: its parameters' gradients,
// then one "had a gradient" flag per parameter, so that a parameter no rank touched keeps
// no gradient after the sum. Not here: the collectives themselves (communicator.h).
#include "attn/dist/gradient_reducer.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "attn/core/autograd.h"
#include "attn/core/error.h"

namespace attn::dist {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// FNV-1a over the parameter list's count, dtypes and shapes.
uint64_t layout_fingerprint(const std::vector<Tensor>& params) {
  uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(params.size());
  for (const Tensor& p : params) {
    mix(static_cast<uint64_t>(p.dtype()));
    mix(static_cast<uint64_t>(p.dim()));
    for (int64_t d : p.shape()) mix(static_cast<uint64_t>(d));
  }
  return h;
}

void check_params(const std::vector<Tensor>& params, const char* op) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    ATTN_CHECK(p.defined(), op, "parameter ", i, " is undefined");
    ATTN_CHECK(is_floating(p.dtype()), op, "parameter ", i, " ", p.str(), " is not f32 or f64");
    ATTN_CHECK(p.is_contiguous(), op, "parameter ", i, " ", p.str(), " is not contiguous");
  }
}

}  // namespace

std::vector<BucketPlan> plan_buckets(const std::vector<Tensor>& params, int64_t bucket_bytes) {
  ATTN_CHECK(bucket_bytes > 0, "plan_buckets", "bucket size ", bucket_bytes, " bytes is not positive");
  check_params(params, "plan_buckets");
  std::vector<BucketPlan> plan;
  int64_t bytes = 0;
  // Backwards: the last registered parameters (the output side) get their gradients first.
  for (size_t k = params.size(); k-- > 0;) {
    const Tensor& p = params[k];
    const int64_t pb = p.numel() * static_cast<int64_t>(dtype_size(p.dtype()));
    if (plan.empty() || plan.back().dtype != p.dtype() || (bytes + pb > bucket_bytes && bytes > 0)) {
      plan.push_back(BucketPlan{{}, p.dtype(), 0});
      bytes = 0;
    }
    plan.back().params.push_back(k);
    plan.back().numel += p.numel();
    bytes += pb;
  }
  return plan;
}

struct GradientReducer::Bucket {
  Tensor buffer;          // [numel + params]: gradients, then one 0/1 flag per parameter
  int64_t numel = 0;
  int64_t pending = 0;    // parameters not yet copied in this step
  bool started = false;
  Request request;
};

GradientReducer::GradientReducer(std::vector<Tensor> params, const Communicator& comm, ReducerOptions options)
    : params_(std::move(params)), comm_(comm.duplicate()), options_(options) {
  const char* op = "GradientReducer";
  ATTN_CHECK(options_.bucket_mb > 0, op, "bucket size ", options_.bucket_mb, " MiB is not positive");
  check_params(params_, op);
  for (size_t i = 0; i < params_.size(); ++i) {
    ATTN_CHECK(params_[i].is_leaf(), op, "parameter ", i, " ", params_[i].str(), " is not a leaf");
    const bool fresh = index_.emplace(&params_[i].impl(), i).second;
    ATTN_CHECK(fresh, op, "parameter ", i, " ", params_[i].str(), " appears twice in the list");
  }
  check_same_on_all_ranks(layout_fingerprint(params_), "the parameter list (count, shapes, dtypes)", comm);
  plan_ = plan_buckets(params_, static_cast<int64_t>(options_.bucket_mb * 1024.0 * 1024.0));
  bucket_of_.assign(params_.size(), 0);
  offset_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  ready_.assign(params_.size(), 0);
  for (size_t b = 0; b < plan_.size(); ++b) {
    auto bucket = std::make_shared<Bucket>();
    const int64_t k = static_cast<int64_t>(plan_[b].params.size());
    bucket->numel = plan_[b].numel;
    bucket->buffer = Tensor::zeros({plan_[b].numel + k}, plan_[b].dtype);  // [numel + k]
    bucket->pending = k;
    int64_t offset = 0, slot = 0;
    for (size_t i : plan_[b].params) {
      bucket_of_[i] = b;
      slot_of_[i] = slot++;
      offset_of_[i] = offset;
      offset += params_[i].numel();
    }
    buckets_.push_back(std::move(bucket));
  }
}

void GradientReducer::backward(const Tensor& loss) {
  for (size_t i = 0; i < params_.size(); ++i)
    ATTN_CHECK(!ready_[i], "GradientReducer::backward", comm_.describe(),
               ": a second reducer backward in one step (call wait_all() after each; accumulate "
               "earlier micro-batches with plain backward())");
  LeafGradHookGuard guard([this](const Tensor& leaf) { on_leaf_final(leaf); });
  loss.backward();
}

void GradientReducer::on_leaf_final(const Tensor& leaf) {
  const auto it = index_.find(&leaf.impl());
  if (it == index_.end()) return;  // a leaf that is not one of our parameters
  mark_ready(it->second);
  launch_ready_buckets(true);
  poll();
}

// Copies parameter i's gradient (zeros and flag 0 when it has none) into its bucket.
void GradientReducer::mark_ready(size_t i) {
  const Tensor& p = params_[i];
  Bucket& bucket = *buckets_[bucket_of_[i]];
  const int64_t n = p.numel(), esize = static_cast<int64_t>(dtype_size(p.dtype()));
  char* dst = static_cast<char*>(bucket.buffer.raw_data()) + offset_of_[i] * esize;
  const Tensor g = p.grad();
  const bool has = g.defined();
  if (has) {
    ATTN_CHECK(g.shape() == p.shape() && g.dtype() == p.dtype(), "GradientReducer", comm_.describe(),
               ": gradient ", g.str(), " of parameter ", i, " ", p.str(), " has another shape or dtype");
    const Tensor gc = g.is_contiguous() ? g : g.clone();
    std::memcpy(dst, gc.raw_data(), static_cast<size_t>(n * esize));
  } else {
    std::memset(dst, 0, static_cast<size_t>(n * esize));
  }
  // The flags follow the gradients, one per parameter in the bucket's order.
  const int64_t flag_at = bucket.numel + slot_of_[i];
  if (p.dtype() == DType::F32)
    bucket.buffer.data<float>()[flag_at] = has ? 1.0f : 0.0f;
  else
    bucket.buffer.data<double>()[flag_at] = has ? 1.0 : 0.0;
  ready_[i] = 1;
  --bucket.pending;
}

// Starts, in bucket order, every bucket whose parameters are all in.
void GradientReducer::launch_ready_buckets(bool in_backward) {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->pending == 0) {
    Bucket& b = *buckets_[next_launch_];
    const Clock::time_point t0 = Clock::now();
    b.request = comm_.start_all_reduce_sum(b.buffer.raw_data(), b.buffer.numel(), b.buffer.dtype());
    stats_.comm_seconds += seconds_since(t0);
    b.started = true;
    stats_.bytes_reduced += b.buffer.numel() * static_cast<int64_t>(dtype_size(b.buffer.dtype()));
    ++(in_backward ? stats_.buckets_started_in_backward : stats_.buckets_started_in_wait);
    ++next_launch_;
  }
}

// MPI progresses non-blocking collectives only inside MPI calls: testing the oldest request
// in flight lets the started buckets advance while the sweep computes.
void GradientReducer::poll() {
  for (size_t b = 0; b < next_launch_; ++b) {
    if (buckets_[b]->request.done()) continue;
    const Clock::time_point t0 = Clock::now();
    buckets_[b]->request.test();
    stats_.comm_seconds += seconds_since(t0);
    return;
  }
}

void GradientReducer::wait_all() {
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) mark_ready(i);
  launch_ready_buckets(false);
  const Clock::time_point t0 = Clock::now();
  for (auto& b : buckets_) b->request.wait();
  const double waited = seconds_since(t0);
  stats_.wait_seconds += waited;
  stats_.comm_seconds += waited;

  const double inv_size = 1.0 / static_cast<double>(comm_.size());
  const bool mean = options_.reduction == Reduction::Mean;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Bucket& bucket = *buckets_[bucket_of_[i]];
    const int64_t flag_at = bucket.numel + slot_of_[i], n = p.numel();
    Tensor g = Tensor::empty(p.shape(), p.dtype());  // the parameter's shape
    bool any = false;
    if (p.dtype() == DType::F32) {
      const float* src = bucket.buffer.data<float>();
      any = src[flag_at] > 0.5f;
      float* dst = g.data<float>();
      const float s = static_cast<float>(inv_size);
      for (int64_t j = 0; j < n; ++j) dst[j] = mean ? src[offset_of_[i] + j] * s : src[offset_of_[i] + j];
    } else {
      const double* src = bucket.buffer.data<double>();
      any = src[flag_at] > 0.5;
      double* dst = g.data<double>();
      for (int64_t j = 0; j < n; ++j) dst[j] = mean ? src[offset_of_[i] + j] * inv_size : src[offset_of_[i] + j];
    }
    if (any)
      p.set_grad(g);
    else
      p.zero_grad();
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b]->pending = static_cast<int64_t>(plan_[b].params.size());
    buckets_[b]->started = false;
    buckets_[b]->request = Request();
  }
  std::fill(ready_.begin(), ready_.end(), 0);
  next_launch_ = 0;
  ++stats_.steps;
}

void check_same_on_all_ranks(uint64_t fingerprint, const char* what, const Communicator& comm) {
  // {x, -x} under Max gives the largest and (negated) the smallest value in one collective.
  const int64_t x = static_cast<int64_t>(fingerprint >> 1);
  int64_t v[2] = {x, -x};
  comm.all_reduce(v, 2, ReduceOp::Max);
  ATTN_CHECK(v[0] == -v[1], "check_same_on_all_ranks", comm.describe(), ": ", what,
             " differs between ranks (this rank's fingerprint ", x, ", largest ", v[0], ", smallest ", -v[1],
             ")");
}

void broadcast_parameters(const std::vector<Tensor>& params, const Communicator& comm, int root) {
  check_params(params, "broadcast_parameters");
  check_same_on_all_ranks(layout_fingerprint(params), "the parameter list (count, shapes, dtypes)", comm);
  for (const DType dtype : {DType::F32, DType::F64}) {
    int64_t total = 0;
    for (const Tensor& p : params)
      if (p.dtype() == dtype) total += p.numel();
    if (total == 0) continue;  // the same on every rank: the layouts agree
    const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
    Tensor flat = Tensor::empty({total}, dtype);  // [total]: the parameters of this dtype, in order
    char* base = static_cast<char*>(flat.raw_data());
    int64_t at = 0;
    for (const Tensor& p : params)
      if (p.dtype() == dtype) {
        std::memcpy(base + at * esize, p.raw_data(), static_cast<size_t>(p.numel() * esize));
        at += p.numel();
      }
    comm.broadcast(flat, root);
    at = 0;
    for (const Tensor& p : params)
      if (p.dtype() == dtype) {
        std::memcpy(p.raw_data(), base + at * esize, static_cast<size_t>(p.numel() * esize));
        at += p.numel();
      }
  }
}

}  // namespace attn::dist
