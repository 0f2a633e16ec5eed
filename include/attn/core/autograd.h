// attn/core/autograd.h — eager reverse-mode autograd over coarse ops, part of core.
// Every differentiable op that runs in grad mode with an input that requires grad records
// one Node: it keeps what its backward needs and the input tensors (the graph's edges).
// Tensor::backward() orders the reachable nodes topologically and runs each once,
// accumulating gradients of leaves into their .grad. No deferred graph: errors surface at
// the call that caused them. Higher-order gradients are deliberately not supported. The tape
// lives in core because Tensor's own backward() and views record on it (docs/architecture.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "attn/core/tensor.h"

namespace attn {

class Node {
 public:
  virtual ~Node() = default;
  // The op's name, e.g. "LayerNormBackward".
  virtual const char* name() const = 0;
  // Given dL/d(output), returns dL/d(input_i) for each entry of inputs (an undefined
  // Tensor where an input needs no gradient). Shapes must equal the inputs' shapes.
  virtual std::vector<Tensor> backward(const Tensor& grad_output) = 0;
  // Frees saved tensors once the node has run.
  virtual void release() {}
  // Whether backward() accepts a strided (non-contiguous) grad_output, so that a view's
  // backward may hand its gradient on without a copy (the attention op reads it through
  // strides). Default false: backward sees contiguous gradients from views.
  virtual bool reads_strided_grad() const { return false; }

  std::vector<Tensor> inputs;  // edges of the graph, in the order backward() returns

 private:
  friend void run_backward(const Tensor& root, const Tensor& grad_root);
  // Bookkeeping of the reverse sweep: the id of the last sweep that reached this node and
  // the node's position in that sweep's topological order. A graph is swept by one thread.
  uint64_t sweep_ = 0;
  size_t order_ = 0;
};

// Whether ops record nodes (thread-local; on by default).
bool grad_mode_enabled();

// Turns recording off in a scope (decoding, evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// True when grad mode is on and any defined input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);

// Attaches `node` (with its inputs) as out's grad_fn and marks out as requiring grad.
void attach_node(Tensor& out, std::shared_ptr<Node> node, std::vector<Tensor> inputs);

// Runs the reverse sweep from `root` seeded with `grad_root`.
void run_backward(const Tensor& root, const Tensor& grad_root);

// Called by run_backward once for every leaf that requires grad and is an input of the swept
// graph (or is the root), as soon as no node still to run can add to its .grad(): its gradient
// for this sweep is final (undefined when no gradient reached it). Data-parallel training
// starts a bucket's all-reduce from here while the sweep continues (attn/dist/). An exception
// thrown by the hook ends the sweep and propagates.
using LeafGradHook = std::function<void(const Tensor& leaf)>;

// Installs `hook` for the sweeps run on this thread within the scope (the previous hook, if
// any, is restored afterwards; an empty hook disables it).
class LeafGradHookGuard {
 public:
  explicit LeafGradHookGuard(LeafGradHook hook);
  ~LeafGradHookGuard();
  LeafGradHookGuard(const LeafGradHookGuard&) = delete;
  LeafGradHookGuard& operator=(const LeafGradHookGuard&) = delete;

 private:
  LeafGradHook previous_;
};

}  // namespace attn
