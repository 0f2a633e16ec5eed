// Adam / AdamW and global-norm gradient clipping (paper §5.3).
// The per-element update follows torch.optim.Adam's single-tensor path (_single_tensor_adam)
// operation for operation, so float32 results agree with PyTorch to rounding and float64
// results to a few ulps. The element update is attn::adam_update (attn/ops/optim.h, the kernels'
// code; float32 runs in the vector kernels), one call per tensor. step() runs in parts (begin_step, update_param, end_step) so that a caller may
// interleave other per-parameter work with the updates. Not here: a multi-tensor fused update.
#include "attn/train/adam.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_set>

#include "attn/core/autograd.h"
#include "attn/ops/optim.h"

namespace attn::train {

namespace {

// The settings of one Adam update at rate lr and the parameter's k-th update; adam_update forms
// the scalars in double and rounds them to the dtype once, as PyTorch passes Python floats to
// its kernels.
AdamUpdate update_settings(double lr, int64_t k, const AdamOptions& o) {
  AdamUpdate u;
  u.lr = lr;
  u.step = k;
  u.beta1 = o.beta1;
  u.beta2 = o.beta2;
  u.eps = o.eps;
  u.weight_decay = o.weight_decay;
  u.decoupled_weight_decay = o.decoupled_weight_decay;
  return u;
}

// The gradient of p as a contiguous tensor of p's dtype (undefined when p has none).
Tensor contiguous_grad(const Tensor& p, const char* op) {
  Tensor g = p.grad();
  if (!g.defined()) return g;
  ATTN_CHECK(g.dtype() == p.dtype(), op, "gradient ", g.str(), " of parameter ", p.str(),
             " has another dtype");
  return g.is_contiguous() ? g : g.clone();
}

Tensor i64_scalar(int64_t value) { return Tensor::from_vector<int64_t>({value}, Shape{}); }

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options, std::vector<std::string> names)
    : params_(std::move(params)), names_(std::move(names)), options_(options) {
  const auto& o = options_;
  ATTN_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0, "Adam", "beta1 must be in [0, 1), got ", o.beta1);
  ATTN_CHECK(o.beta2 >= 0.0 && o.beta2 < 1.0, "Adam", "beta2 must be in [0, 1), got ", o.beta2);
  ATTN_CHECK(o.eps > 0.0 && std::isfinite(o.eps), "Adam", "eps must be positive, got ", o.eps);
  ATTN_CHECK(o.weight_decay >= 0.0 && std::isfinite(o.weight_decay), "Adam",
             "weight_decay must be >= 0, got ", o.weight_decay);
  if (names_.empty())
    for (size_t i = 0; i < params_.size(); ++i) names_.push_back(std::to_string(i));
  ATTN_CHECK(names_.size() == params_.size(), "Adam", names_.size(), " names for ", params_.size(),
             " parameters");
  std::unordered_set<const TensorImpl*> seen_params;
  std::unordered_set<std::string> seen_names;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const std::string& name = names_[i];
    ATTN_CHECK(p.defined(), "Adam", "parameter ", i, " ('", name, "') is undefined");
    ATTN_CHECK(is_floating(p.dtype()), "Adam", "parameter '", name, "' is ", p.str(),
               "; only f32 and f64 parameters can be optimized");
    ATTN_CHECK(p.is_leaf(), "Adam", "parameter '", name, "' ", p.str(), " is not a leaf tensor");
    ATTN_CHECK(p.is_contiguous(), "Adam", "parameter '", name, "' ", p.str(), " is not contiguous");
    ATTN_CHECK(!name.empty(), "Adam", "parameter ", i, " has an empty name");
    ATTN_CHECK(seen_params.insert(&p.impl()).second, "Adam", "parameter '", name,
               "' appears more than once");
    ATTN_CHECK(seen_names.insert(name).second, "Adam", "parameter name '", name,
               "' appears more than once");
    m_.push_back(Tensor::zeros(p.shape(), p.dtype()));
    v_.push_back(Tensor::zeros(p.shape(), p.dtype()));
  }
  param_steps_.assign(params_.size(), 0);
}

void Adam::step(double lr, int threads) {
  ATTN_CHECK(threads >= 1, "Adam::step", "threads must be >= 1, got ", threads);
  begin_step(lr);  // every check first (it may throw); the updates cannot
  const int64_t n = static_cast<int64_t>(params_.size());
  if (threads == 1) {
    for (int64_t i = 0; i < n; ++i) update_unchecked(static_cast<size_t>(i));
  } else {
    const std::vector<std::vector<int64_t>>& plan = thread_plan(threads);
#pragma omp parallel num_threads(threads)
    {
      // A smaller team than asked for takes the plan's lists round-robin.
      const int team = omp_get_num_threads();
      for (int part = omp_get_thread_num(); part < threads; part += team)
        for (int64_t i : plan[static_cast<size_t>(part)]) update_unchecked(static_cast<size_t>(i));
    }
  }
  end_step();
}

void Adam::begin_step(double lr) {
  const char* op = "Adam::step";
  in_step_ = false;  // a step begun before and not ended is dropped
  step_grads_.assign(params_.size(), Tensor());
  ATTN_CHECK(std::isfinite(lr) && lr >= 0.0, op, "learning rate must be finite and >= 0, got ", lr);
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    try {
      step_grads_[i] = contiguous_grad(params_[i], op);
    } catch (...) {
      for (Tensor& g : step_grads_) g = Tensor();
      throw;
    }
  }
  step_lr_ = lr;
  in_step_ = true;
}

void Adam::update_param(size_t i) {
  ATTN_CHECK(in_step_, "Adam::update_param", "no step begun (call begin_step first)");
  ATTN_CHECK(i < params_.size(), "Adam::update_param", "parameter index ", i, " out of range for ",
             params_.size(), " parameters");
  update_unchecked(i);
}

void Adam::update_unchecked(size_t i) {
  const Tensor& p = params_[i];
  const Tensor& g = step_grads_[i];
  if (!g.defined()) return;
  const AdamUpdate u = update_settings(step_lr_, ++param_steps_[i], options_);
  if (p.dtype() == DType::F32)
    attn::adam_update(p.data<float>(), m_[i].data<float>(), v_[i].data<float>(), g.data<float>(),
                      p.numel(), u);
  else
    attn::adam_update(p.data<double>(), m_[i].data<double>(), v_[i].data<double>(),
                      g.data<double>(), p.numel(), u);
}

void Adam::end_step() {
  ATTN_CHECK(in_step_, "Adam::end_step", "no step begun (call begin_step first)");
  for (Tensor& g : step_grads_) g = Tensor();
  in_step_ = false;
  ++steps_;
}

const std::vector<std::vector<int64_t>>& Adam::thread_plan(int threads) {
  ATTN_CHECK(threads >= 1, "Adam::thread_plan", "threads must be >= 1, got ", threads);
  if (threads == plan_threads_) return plan_;
  const size_t n = params_.size();
  std::vector<int64_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int64_t>(i);
  // Largest first; equal sizes keep their order, so the plan is a function of the shapes.
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return params_[static_cast<size_t>(a)].numel() > params_[static_cast<size_t>(b)].numel();
  });
  std::vector<std::vector<int64_t>> plan(static_cast<size_t>(threads));
  std::vector<int64_t> load(static_cast<size_t>(threads), 0);
  for (int64_t i : order) {
    const size_t least = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    plan[least].push_back(i);
    load[least] += params_[static_cast<size_t>(i)].numel();
  }
  for (std::vector<int64_t>& part : plan) std::sort(part.begin(), part.end());
  plan_ = std::move(plan);
  plan_threads_ = threads;
  return plan_;
}

void Adam::zero_grad() {
  for (const Tensor& p : params_) p.zero_grad();
}

io::NamedTensors Adam::state() const {
  io::NamedTensors out;
  out.emplace_back("adam.steps", i64_scalar(steps_));
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back("adam.step." + names_[i], i64_scalar(param_steps_[i]));
    out.emplace_back("adam.exp_avg." + names_[i], m_[i]);
    out.emplace_back("adam.exp_avg_sq." + names_[i], v_[i]);
  }
  return out;
}

void Adam::load_state(const io::NamedTensors& state) {
  const char* op = "Adam::load_state";
  std::map<std::string, Tensor> entries;
  for (const auto& [name, t] : state) {
    if (name.rfind("adam.", 0) != 0) continue;
    ATTN_CHECK(t.defined(), op, "entry '", name, "' is undefined");
    ATTN_CHECK(entries.emplace(name, t).second, op, "entry '", name, "' appears twice");
  }
  auto take = [&](const std::string& name) {
    auto it = entries.find(name);
    ATTN_CHECK(it != entries.end(), op, "missing entry '", name, "'");
    Tensor t = it->second;
    entries.erase(it);
    return t;
  };
  auto count = [&](const std::string& name) {
    const Tensor t = take(name);
    ATTN_CHECK(t.dtype() == DType::I64 && t.numel() == 1, op, "entry '", name, "' is ", t.str(),
               ", expected a one-element i64 tensor");
    const int64_t value = t.to_vector<int64_t>()[0];
    ATTN_CHECK(value >= 0, op, "entry '", name, "' is negative (", value, ")");
    return value;
  };
  // Validate everything first, then commit, so a bad state leaves the optimizer as it was.
  const int64_t steps = count("adam.steps");
  std::vector<int64_t> param_steps(params_.size());
  std::vector<Tensor> m(params_.size()), v(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    param_steps[i] = count("adam.step." + names_[i]);
    for (auto [prefix, slot] : {std::pair{"adam.exp_avg.", &m[i]}, std::pair{"adam.exp_avg_sq.", &v[i]}}) {
      const std::string name = prefix + names_[i];
      *slot = take(name);
      ATTN_CHECK(slot->dtype() == p.dtype() && slot->shape() == p.shape(), op, "entry '", name,
                 "' is ", slot->str(), " but parameter '", names_[i], "' is ", p.str());
    }
  }
  if (!entries.empty())
    fail(op, "unknown entry '", entries.begin()->first, "' (", entries.size(),
         " entries match no parameter of this optimizer)");
  steps_ = steps;
  param_steps_ = param_steps;
  for (size_t i = 0; i < params_.size(); ++i) {
    m_[i].copy_from(m[i]);
    v_[i].copy_from(v[i]);
  }
}

double grad_norm(const std::vector<Tensor>& params) {
  double sum_sq = 0.0;
  for (const Tensor& p : params) {
    if (!p.defined()) continue;
    const Tensor g = contiguous_grad(p, "grad_norm");
    if (!g.defined()) continue;
    const int64_t n = g.numel();
    if (g.dtype() == DType::F32) {
      const float* pg = g.data<float>();
      for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(pg[i]) * pg[i];
    } else {
      const double* pg = g.data<double>();
      for (int64_t i = 0; i < n; ++i) sum_sq += pg[i] * pg[i];
    }
  }
  return std::sqrt(sum_sq);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, int64_t step) {
  ATTN_CHECK(max_norm > 0.0 && !std::isnan(max_norm), "clip_grad_norm", "max_norm must be > 0, got ",
             max_norm);
  const double norm = grad_norm(params);
  if (!std::isfinite(norm)) {
    const std::string where = step >= 0 ? str_cat(" at step ", step) : std::string();
    throw NonFiniteGradient(str_cat("[clip_grad_norm] non-finite gradient norm", where, ": ", norm),
                            step, norm);
  }
  // PyTorch multiplies by min(1, max_norm / (norm + 1e-6)); a norm within 1e-6 below
  // max_norm is therefore scaled by a hair as well.
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return norm;
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    // A leaf's .grad is its own buffer (core/autograd.cpp), so it is scaled in place.
    if (!g.is_contiguous()) {
      g = g.clone();
      p.set_grad(g);
    }
    const int64_t n = g.numel();
    if (g.dtype() == DType::F32) {
      float* pg = g.data<float>();
      const float c = static_cast<float>(coef);
      for (int64_t i = 0; i < n; ++i) pg[i] *= c;
    } else {
      double* pg = g.data<double>();
      for (int64_t i = 0; i < n; ++i) pg[i] *= coef;
    }
  }
  return norm;
}

}  // namespace attn::train
