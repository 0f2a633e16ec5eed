// train/replicas.h — private to attn_train: the replica engine of ThreadSplit::Batch
// (trainer.h). Each batch is cut into one shard per thread; shard k runs its forward and
// backward pass on replica k of the model (0 is the model itself), which shares the weights but
// keeps its own gradients and dropout generators; the gradients are then summed in shard order
// into the model's, each parameter on the thread that Adam's plan gives it, fused with its Adam
// update when there is no clipping. Not here: the batches, clipping, ranks (trainer.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "attn/core/rng.h"
#include "attn/core/tensor.h"
#include "attn/models/config.h"
#include "attn/models/model.h"
#include "attn/train/adam.h"
#include "attn/train/objective.h"
#include "attn/train/tasks.h"

namespace attn::train {

class ReplicaEngine {
 public:
  // The engine of `model` (built from `config`) and its objective; replicas' objectives are made
  // with `options`. No replica exists until make(). The model and objective must outlive it.
  ReplicaEngine(models::Model& model, Objective& objective, models::ModelConfig config, ObjectiveOptions options);

  // Makes `shards` - 1 replicas of the model (those that exist are kept), and steps split
  // the batch into `shards` from now on.
  void make(int64_t shards);

  // The forward and backward passes of one step: shard k of `indices` (dataset indices into
  // `examples`, whose objective epoch is `epoch`) on replica k, on its own thread. Leaves the
  // summed gradients in the model's parameters (adam.params()) and, when `fuse_adam`, has also
  // applied Adam at rate `lr` to each parameter right after its sum, on the same thread, and
  // ended the optimizer step. Returns the batch's mean loss and counts its tokens; a non-finite
  // loss (naming `step` and `lr`) or a failed shard throws with every gradient dropped.
  double backward(const std::vector<io::Example>& examples, int64_t epoch, const std::vector<int64_t>& indices,
                  Adam& adam, bool fuse_adam, int64_t* tokens, int64_t step, double lr);

 private:
  models::Model& model_;
  Objective& objective_;
  models::ModelConfig config_;
  ObjectiveOptions options_;
  int64_t shards_ = 1;
  // Replicas of shards 1.., their objectives and parameters (in model.named_parameters() order).
  std::vector<std::shared_ptr<models::Model>> replicas_;
  std::vector<std::unique_ptr<Objective>> replica_objectives_;
  std::vector<std::vector<Tensor>> replica_params_;
  // The model's dropout and attention generators, and each replica's, in model_rngs() order.
  std::vector<Rng*> model_rngs_;
  std::vector<std::vector<Rng*>> replica_rngs_;

  // Drops every replica's gradients (through the parameter lists: Module::zero_grad names every
  // parameter first, which costs more).
  void drop_replica_grads();
};

}  // namespace attn::train
