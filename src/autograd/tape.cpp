// The reverse sweep: topological order over the nodes reachable from the root, each run
// once with the sum of the gradients that reached its output; leaves accumulate .grad.
#include "attn/autograd/tape.h"

#include <unordered_map>
#include <unordered_set>

namespace attn {

namespace {

thread_local bool g_grad_mode = true;
thread_local LeafGradHook g_leaf_grad_hook;

// dst += src for two contiguous-or-not floating tensors of one shape; returns the sum as a
// fresh contiguous tensor when dst is shared (we never write into a tensor the user holds).
Tensor add_grads(const Tensor& a, const Tensor& b) {
  ATTN_CHECK(a.shape() == b.shape(), "backward", "gradient shapes ", shape_str(a.shape()), " and ",
             shape_str(b.shape()), " disagree");
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  const int64_t n = a.numel();
  if (a.dtype() == DType::F32) {
    const Tensor ac = a.is_contiguous() ? a : a.clone();
    const Tensor bc = b.is_contiguous() && b.dtype() == DType::F32 ? b : b.to(DType::F32).clone();
    const float* pa = ac.data<float>();
    const float* pb = bc.data<float>();
    float* po = out.data<float>();
    for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
  } else {
    const std::vector<double> va = a.to_vector<double>();
    const std::vector<double> vb = b.to_vector<double>();
    double* po = out.data<double>();
    for (int64_t i = 0; i < n; ++i) po[i] = va[static_cast<size_t>(i)] + vb[static_cast<size_t>(i)];
  }
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
    if (acc.dtype() == DType::F32) {
      float* pa = acc.data<float>();
      const float* pg = g.data<float>();
      for (int64_t i = 0; i < n; ++i) pa[i] = pa[i] + pg[i];
    } else {
      double* pa = acc.data<double>();
      const double* pg = g.data<double>();
      for (int64_t i = 0; i < n; ++i) pa[i] = pa[i] + pg[i];
    }
    return acc;
  }
  return add_grads(acc, g);
}

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
  // Topological order by iterative depth-first search (post-order).
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<Node*, size_t>> stack;
  stack.emplace_back(root.grad_fn().get(), 0);
  seen.insert(root.grad_fn().get());
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->inputs.size()) {
      const Tensor& in = node->inputs[next++];
      if (in.defined() && in.grad_fn() && !seen.count(in.grad_fn().get())) {
        seen.insert(in.grad_fn().get());
        stack.emplace_back(in.grad_fn().get(), 0);
      }
    } else {
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
  std::unordered_map<Node*, Tensor> grads;
  grads[root.grad_fn().get()] = grad_root;
  for (size_t i = order.size(); i-- > 0;) {
    Node* node = order[i];
    auto it = grads.find(node);
    if (it == grads.end()) {
      leaf_edges_done(node);
      continue;
    }
    Tensor g = std::move(it->second);
    grads.erase(it);
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
        auto [slot, fresh] = grads.try_emplace(in.grad_fn().get(), gi);
        if (!fresh) slot->second = accumulate(std::move(slot->second), gi);
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
