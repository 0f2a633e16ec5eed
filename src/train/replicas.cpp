// The replica engine of ThreadSplit::Batch (replicas.h): replicas that share the model's
// weights, their dropout generators forked per step, the shards' forward and backward passes on
// an OpenMP team, and the gradient sum in shard order fused with Adam's update. Deterministic:
// shard k always runs on replica k and every sum runs in shard order, whatever the team size.
// Not here: batching, clipping, ranks or checkpoints (trainer.cpp, run_state.cpp).
#include "replicas.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <utility>

#include "attn/core/error.h"
#include "attn/dist/sharding.h"
#include "attn/models/factory.h"
#include "attn/ops/ops.h"
#include "attn/ops/optim.h"
#include "attn/train/checkpointing.h"

namespace attn::train {

namespace {

constexpr const char* kOp = "train";

// The generators of a model's dropout and attention modules, in model_rngs' order.
std::vector<Rng*> rng_pointers(models::Model& model) {
  std::vector<Rng*> out;
  for (const auto& named : model_rngs(model)) out.push_back(named.second);
  return out;
}

// Replica k's generators (k >= 1) for the coming step, derived from the model's current states:
// each state is hashed with k into a fresh seed, so every shard draws its own masks, and the
// replicas need no state of their own in checkpoints (resuming reproduces them).
void fork_replica_rngs(const std::vector<Rng*>& from, const std::vector<Rng*>& to, int64_t k) {
  for (size_t i = 0; i < from.size(); ++i) {
    uint64_t seed = 0x7368617264000000ull + static_cast<uint64_t>(k);  // "shard"
    for (uint64_t w : from[i]->state().s) seed = stream_seed(seed, w);
    to[i]->seed_with(seed);
  }
}

}  // namespace

ReplicaEngine::ReplicaEngine(models::Model& model, Objective& objective, models::ModelConfig config,
                             ObjectiveOptions options)
    : model_(model), objective_(objective), config_(std::move(config)), options_(std::move(options)) {}

void ReplicaEngine::make(int64_t shards) {
  const nn::NamedTensors mine = model_.named_parameters();
  // The generators are found once (walking the modules by name each step cost about 1% of the
  // demo's step, on one thread while the others waited); the modules outlive the engine's use.
  if (model_rngs_.empty()) model_rngs_ = rng_pointers(model_);
  while (static_cast<int64_t>(replicas_.size()) + 1 < shards) {
    // Its own initial weights are dropped at once: its parameters become views of the model's.
    std::shared_ptr<models::Model> replica = models::make_model(config_);
    const nn::NamedTensors theirs = replica->named_parameters();
    ATTN_CHECK(theirs.size() == mine.size(), kOp, "a replica has ", theirs.size(), " parameters, the model ",
               mine.size());
    std::vector<Tensor> params;
    for (size_t i = 0; i < mine.size(); ++i) {
      const Tensor& p = mine[i].second;
      const Tensor& r = theirs[i].second;
      ATTN_CHECK(theirs[i].first == mine[i].first && r.shape() == p.shape() && r.dtype() == p.dtype(), kOp,
                 "replica parameter ", theirs[i].first, " does not match the model's ", mine[i].first);
      // The same memory under a leaf of its own: the replica's layers read the model's weights
      // (which Adam updates in place) while its gradients accumulate apart.
      TensorImpl& ri = r.impl();
      ri.storage = p.impl().storage;
      ri.offset = p.impl().offset;
      ri.strides = p.impl().strides;
      ri.grad.reset();
      params.push_back(r);
    }
    replica->train();
    std::vector<Rng*> rngs = rng_pointers(*replica);
    ATTN_CHECK(rngs.size() == model_rngs_.size(), kOp, "a replica has ", rngs.size(), " generators, the model ",
               model_rngs_.size());
    replica_rngs_.push_back(std::move(rngs));
    replica_objectives_.push_back(make_objective(*replica, options_));
    replica_params_.push_back(std::move(params));
    replicas_.push_back(std::move(replica));
  }
  shards_ = shards;
}

void ReplicaEngine::drop_replica_grads() {
  for (const std::vector<Tensor>& replica : replica_params_)
    for (const Tensor& p : replica) p.zero_grad();
}

double ReplicaEngine::backward(const std::vector<io::Example>& examples, int64_t epoch,
                               const std::vector<int64_t>& indices, Adam& adam, bool fuse_adam, int64_t* tokens,
                               int64_t step, double lr) {
  const int S = static_cast<int>(shards_);
  std::vector<std::vector<int64_t>> parts(static_cast<size_t>(S));
  for (int k = 0; k < S; ++k) parts[static_cast<size_t>(k)] = dist::shard(indices, k, S);
  for (int k = 1; k < S; ++k) fork_replica_rngs(model_rngs_, replica_rngs_[static_cast<size_t>(k - 1)], k);
  std::vector<BatchLoss> losses(static_cast<size_t>(S));
  std::vector<double> values(static_cast<size_t>(S), 0.0);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(S));
  int64_t total = 0;
  bool finite = true;
  // Thread t runs shards t, t + team, ...: shard k always on replica k, whatever the team size.
  // The ops inside run single-threaded (a nested region is inactive; BLAS, built for OpenMP,
  // runs in the calling thread inside a parallel region).
  // The caller's precision of the matrix products (ops/precision.h), entered on every thread.
  const Precision precision = matmul_precision();
#pragma omp parallel num_threads(S)
  {
    omp_set_num_threads(1);
    const PrecisionGuard precision_guard(precision);
    const int team = omp_get_num_threads(), t = omp_get_thread_num();
    for (int k = t; k < S; k += team) {
      const size_t i = static_cast<size_t>(k);
      try {
        Objective& objective = k == 0 ? objective_ : *replica_objectives_[i - 1];
        if (!parts[i].empty()) {
          losses[i] = objective.loss(examples, parts[i], epoch);
          values[i] = losses[i].tokens > 0 ? losses[i].loss.item() : 0.0;
        }
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
#pragma omp barrier
#pragma omp single
    {
      for (int k = 0; k < S; ++k) {
        total += losses[static_cast<size_t>(k)].tokens;
        if (!std::isfinite(values[static_cast<size_t>(k)])) finite = false;
      }
    }  // implicit barrier: every thread sees total and finite
    bool failed = false;
    for (const std::exception_ptr& e : errors) failed = failed || static_cast<bool>(e);
    if (!failed && finite && total > 0)
      for (int k = t; k < S; k += team) {
        const size_t i = static_cast<size_t>(k);
        if (losses[i].tokens == 0) continue;
        try {
          // Each shard's mean weighted by its share of the tokens: the gradients sum to the
          // whole batch's mean loss's (as over ranks, dist::TokenShare).
          const double w = static_cast<double>(losses[i].tokens) / static_cast<double>(total);
          scale(losses[i].loss, w).backward();
        } catch (...) {
          errors[i] = std::current_exception();
        }
      }
    // Each shard's graph (the activations its nodes still reference) is freed by the thread
    // that made it, so the storage cache hands those blocks back to the same thread next step.
    for (int k = t; k < S; k += team) losses[static_cast<size_t>(k)].loss = Tensor();
  }
  for (const std::exception_ptr& e : errors)
    if (e) {
      adam.zero_grad();
      drop_replica_grads();
      std::rethrow_exception(e);
    }
  double value = 0;
  for (int k = 0; k < S; ++k)
    if (total > 0)
      value += values[static_cast<size_t>(k)] * static_cast<double>(losses[static_cast<size_t>(k)].tokens) /
               static_cast<double>(total);
  *tokens = total;
  if (!finite || !std::isfinite(value)) {
    adam.zero_grad();
    drop_replica_grads();
    fail(kOp, "the loss is ", value, " at step ", step, " (lr ", lr, "); lower the learning rate or set --clip");
  }
  // The model's gradients += every replica's, in shard order (deterministic). Gradients are
  // contiguous, of the parameter's shape and dtype (the sweep's leaf gradients); anything else
  // is summed into a fresh tensor, serially, first.
  const std::vector<Tensor>& params = adam.params();
  const size_t used = std::min(replicas_.size(), static_cast<size_t>(S - 1));
  std::vector<uint8_t> plain(params.size(), 1);
  for (size_t j = 0; j < params.size(); ++j) {
    const Tensor mine = params[j].grad();
    bool ok = mine.defined() && mine.is_contiguous();
    for (size_t r = 0; r < used && ok; ++r) {
      const Tensor g = replica_params_[r][j].grad();
      ok = !g.defined() || (g.is_contiguous() && g.dtype() == mine.dtype() && g.shape() == mine.shape());
    }
    if (ok) continue;
    plain[j] = 0;
    for (size_t r = 0; r < used; ++r) {
      const Tensor g = replica_params_[r][j].grad();
      if (!g.defined()) continue;
      const Tensor now = params[j].grad();
      params[j].set_grad(now.defined() ? add(now, g) : g.clone());
    }
  }
  // Without clipping, each parameter's Adam update follows its sum on the same thread, in one
  // parallel region (train_step then skips its own Adam step); with clipping, which needs every
  // gradient summed first, train_step's Adam step splits the parameters the same way. Either
  // way Adam's thread plan (balanced by element count, the same every step) decides which
  // thread handles a parameter, so one core touches its gradient, weights and moments step
  // after step; fused, the sum and the update take one fork-join instead of two.
  if (fuse_adam) {
    try {
      adam.begin_step(lr);  // every check before any update (the plain gradients are taken as is)
    } catch (...) {
      adam.zero_grad();
      drop_replica_grads();
      throw;
    }
  }
  const std::vector<std::vector<int64_t>>& plan = adam.thread_plan(S);
#pragma omp parallel num_threads(S)
  {
    const int team = omp_get_num_threads();
    for (int part = omp_get_thread_num(); part < S; part += team) {
      try {
        for (int64_t j : plan[static_cast<size_t>(part)]) {
          const size_t i = static_cast<size_t>(j);
          if (plain[i]) {
            const Tensor mine = params[i].grad();
            for (size_t r = 0; r < used; ++r) {
              const Tensor g = replica_params_[r][i].grad();
              if (g.defined()) add_into(mine, g);
            }
          }
          if (fuse_adam) adam.update_param(i);
        }
      } catch (...) {
        errors[static_cast<size_t>(part)] = std::current_exception();
      }
    }
    // Once every sum is done, the thread that ran shard k frees replica k's gradients, so the
    // storage cache hands those blocks back to it for the next step's sweep.
#pragma omp barrier
    for (int k = omp_get_thread_num(); k < S; k += team)
      if (k >= 1 && static_cast<size_t>(k - 1) < used)
        for (const Tensor& p : replica_params_[static_cast<size_t>(k - 1)]) p.zero_grad();
  }
  drop_replica_grads();  // any left (none, unless a shard count changed)
  if (fuse_adam) adam.end_step();
  for (const std::exception_ptr& e : errors)
    if (e) {
      adam.zero_grad();
      std::rethrow_exception(e);
    }
  return value;
}

}  // namespace attn::train
