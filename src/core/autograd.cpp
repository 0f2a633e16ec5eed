// The reverse sweep: topological order over the nodes reachable from the root, each run
// once with the sum of the gradients that reached its output; leaves accumulate .grad.
#include "attn/core/autograd.h"

#include <atomic>
#include <unordered_map>

namespace attn {

namespace {

thread_local bool g_grad_mode = true;
thread_local LeafGradHook g_leaf_grad_hook;

// out[i] = a[i] + b[i] over contiguous spans (out may be a). Single IEEE additions, so the
// vectorised loop gives the same bits as a scalar one. The ISA-dispatched vector kernels live
// in attn_ops, above this layer; the compiler vectorises this loop for the baseline ISA.
template <class T>
void add_span(T* out, const T* a, const T* b, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// a + b for two floating tensors of one shape (any strides; b is converted to a's dtype) as a
// fresh contiguous tensor: the path when the running sum is shared (we never write into a
// tensor the user holds) or an operand is not contiguous.
Tensor add_grads(const Tensor& a, const Tensor& b) {
  ATTN_CHECK(a.shape() == b.shape(), "backward", "gradient shapes ", shape_str(a.shape()), " and ",
             shape_str(b.shape()), " disagree");
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  const int64_t n = a.numel();
  const Tensor ac = a.is_contiguous() ? a : a.clone();
  const Tensor bc = b.is_contiguous() && b.dtype() == a.dtype() ? b : b.to(a.dtype());
  if (a.dtype() == DType::F32)
    add_span(out.data<float>(), ac.data<float>(), bc.data<float>(), n);
  else
    add_span(out.data<double>(), ac.data<double>(), bc.data<double>(), n);
  return out;
}

// True when nothing but `t` (this one handle) sees its TensorImpl and its storage, so adding
// into it in place cannot change a tensor anyone else holds.
bool sole_owner(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.storage() && t.storage().use_count() == 1 &&
         t.is_contiguous();
}

// acc += g in place (same values as add_grads(acc, g)) when acc is owned by the sweep alone
// and both are contiguous of one floating dtype; otherwise a fresh sum. Saves an allocation
// and a pass over memory per extra gradient contribution.
Tensor accumulate(Tensor acc, const Tensor& g) {
  if (sole_owner(acc) && g.is_contiguous() && g.dtype() == acc.dtype() && g.shape() == acc.shape() &&
      (acc.dtype() == DType::F32 || acc.dtype() == DType::F64)) {
    const int64_t n = acc.numel();
    if (acc.dtype() == DType::F32)
      add_span(acc.data<float>(), acc.data<float>(), g.data<float>(), n);
    else
      add_span(acc.data<double>(), acc.data<double>(), g.data<double>(), n);
    return acc;
  }
  return add_grads(acc, g);
}

// Numbers the sweeps, so that a node knows whether the current one has visited it.
std::atomic<uint64_t> g_sweep_counter{0};

}  // namespace

bool grad_mode_enabled() { return g_grad_mode; }

NoGradGuard::NoGradGuard() : previous_(g_grad_mode) { g_grad_mode = false; }
NoGradGuard::~NoGradGuard() { g_grad_mode = previous_; }

LeafGradHookGuard::LeafGradHookGuard(LeafGradHook hook) : previous_(std::move(g_leaf_grad_hook)) {
  g_leaf_grad_hook = std::move(hook);
}
LeafGradHookGuard::~LeafGradHookGuard() { g_leaf_grad_hook = std::move(previous_); }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!g_grad_mode) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

void attach_node(Tensor& out, std::shared_ptr<Node> node, std::vector<Tensor> inputs) {
  node->inputs = std::move(inputs);
  out.impl().grad_fn = std::move(node);
  out.impl().requires_grad = true;
}

void run_backward(const Tensor& root, const Tensor& grad_root) {
  ATTN_CHECK(root.requires_grad(), "backward", "tensor ", root.str(),
             " does not require grad (no input of it requires grad, or it was computed under NoGradGuard)");
  if (!root.grad_fn()) {  // the root is itself a leaf
    Tensor g = root.grad();
    root.set_grad(g.defined() ? add_grads(g, grad_root) : grad_root.clone());
    if (g_leaf_grad_hook) g_leaf_grad_hook(root);
    return;
  }
  // Topological order by iterative depth-first search (post-order). A node visited by this
  // sweep carries its id and its position in `order`, which indexes the gradients below (no
  // hash maps: a sweep allocates a few vectors, not a few entries per node).
  const uint64_t sweep = g_sweep_counter.fetch_add(1, std::memory_order_relaxed) + 1;
  std::vector<Node*> order;
  std::vector<std::pair<Node*, size_t>> stack;
  order.reserve(256);
  stack.reserve(64);
  const auto visit = [&](Node* node) {
    node->sweep_ = sweep;
    stack.emplace_back(node, 0);
  };
  visit(root.grad_fn().get());
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->inputs.size()) {
      const Tensor& in = node->inputs[next++];
      if (in.defined() && in.grad_fn() && in.grad_fn()->sweep_ != sweep) visit(in.grad_fn().get());
    } else {
      node->order_ = order.size();
      order.push_back(node);
      stack.pop_back();
    }
  }
  // Every node stays alive during the sweep: the root holds its grad_fn, and each node
  // holds its inputs (release() frees only saved tensors, never the edges).
  // With a leaf hook: how many edges of nodes still to run point at each leaf that wants a
  // gradient; when the count reaches zero, that leaf's .grad() is final for this sweep.
  const LeafGradHook hook = g_leaf_grad_hook;  // a copy: the hook may install another
  std::unordered_map<TensorImpl*, int64_t> pending;
  if (hook)
    for (Node* node : order)
      for (const Tensor& in : node->inputs)
        if (in.defined() && !in.grad_fn() && in.requires_grad()) ++pending[&in.impl()];
  const auto leaf_edges_done = [&](Node* node) {
    if (!hook) return;
    for (const Tensor& in : node->inputs)
      if (in.defined() && !in.grad_fn() && in.requires_grad() && --pending[&in.impl()] == 0) hook(in);
  };
  // grads[k]: the sum of the gradients that reached the output of order[k] so far (undefined
  // while none has).
  std::vector<Tensor> grads(order.size());
  grads[root.grad_fn()->order_] = grad_root;
  for (size_t i = order.size(); i-- > 0;) {
    Node* node = order[i];
    if (!grads[i].defined()) {
      leaf_edges_done(node);
      continue;
    }
    Tensor g = std::move(grads[i]);
    std::vector<Tensor> in_grads = node->backward(g);
    ATTN_CHECK(in_grads.size() == node->inputs.size(), node->name(), "returned ", in_grads.size(),
               " gradients for ", node->inputs.size(), " inputs");
    for (size_t j = 0; j < in_grads.size(); ++j) {
      const Tensor& in = node->inputs[j];
      Tensor& gi = in_grads[j];
      if (!in.defined() || !gi.defined() || !in.requires_grad()) continue;
      ATTN_CHECK(gi.shape() == in.shape(), node->name(), "gradient ", gi.str(), " for input ",
                 in.str());
      if (in.grad_fn()) {
        Tensor& slot = grads[in.grad_fn()->order_];
        slot = slot.defined() ? accumulate(std::move(slot), gi) : std::move(gi);
      } else {
        // A leaf's .grad is always its own buffer (optimizers may scale it in place): the
        // first contribution is copied unless nothing else holds it, later ones are added
        // in place unless someone else holds the old .grad.
        std::shared_ptr<TensorImpl>& slot = in.impl().grad;
        if (slot) {
          Tensor old(std::move(slot));
          slot = accumulate(std::move(old), gi).impl_ptr();
        } else {
          slot = (sole_owner(gi) && gi.dtype() == in.dtype() ? gi : gi.clone()).impl_ptr();
        }
      }
    }
    node->release();
    leaf_edges_done(node);
  }
}

}  // namespace attn
