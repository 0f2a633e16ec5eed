// attn/train/adam.h — the Adam optimizer (with AdamW's decoupled weight decay) over leaf
// tensors, and clipping of the global gradient norm.
// Paper §5.3: Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9 (our defaults). The update is
// torch.optim.Adam's, operation for operation; the decay is torch.optim.AdamW's by default.
// Not here: AMSGrad, `maximize`, parameter groups with different options, multi-tensor kernels,
// and the learning rate itself (attn/train/schedule.h hands step() its value).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/core/tensor.h"
#include "attn/io/safetensors.h"

namespace attn::train {

struct AdamOptions {
  double beta1 = 0.9;   // decay of the first moment, in [0, 1)
  double beta2 = 0.98;  // decay of the second moment, in [0, 1)
  double eps = 1e-9;    // added to sqrt(v_hat), > 0
  double weight_decay = 0.0;  // >= 0
  // true: AdamW, p *= 1 - lr * weight_decay before the Adam step (decoupled).
  // false: torch.optim.Adam's L2 term, g += weight_decay * p before the moments.
  bool decoupled_weight_decay = true;
};

// Adam over a fixed list of parameters. For each parameter p with gradient g (skipped, its
// moments and its step count untouched, when p has no gradient), at its k-th update:
//   p   *= 1 - lr * wd                  (AdamW decay, when wd > 0 and decoupled)
//   g   += wd * p                       (L2 decay, when wd > 0 and not decoupled)
//   m    = m + (1 - beta1) * (g - m)    (torch's exp_avg.lerp_)
//   v    = beta2 * v + (1 - beta2) * g * g
//   p   -= lr / (1 - beta1^k) * m / (sqrt(v) / sqrt(1 - beta2^k) + eps)
// i.e. p -= lr * m_hat / (sqrt(v_hat) + eps). Arithmetic runs in the parameter's dtype with
// scalars computed in double, as PyTorch does. The update writes in place into the
// parameter's storage under a NoGradGuard.
class Adam {
 public:
  // params: distinct leaf tensors, F32 or F64, contiguous. names: one per parameter, used
  // as keys of the exported state (default "0", "1", ...), unique and non-empty.
  explicit Adam(std::vector<Tensor> params, AdamOptions options = {},
                std::vector<std::string> names = {});

  // One update of every parameter that has a gradient, at learning rate lr (finite, >= 0).
  // With threads > 1 that many threads update parameters at once, each parameter by one
  // thread (thread_plan), so the result does not depend on the count.
  void step(double lr, int threads = 1);

  // step() in three parts, for a caller that runs the updates on threads of its own (the
  // batch-split trainer sums each parameter's gradient and updates it on the same thread):
  //   begin_step(lr)   checks lr and every gradient and takes the gradients as they are now:
  //                    a contiguous gradient is taken as is, so values a caller adds into its
  //                    storage before the parameter's update are used. May throw; then
  //                    nothing has changed. A step begun and not ended is dropped.
  //   update_param(i)  the update of parameter i (none when it had no gradient), at most once
  //                    per parameter and step; calls for distinct i may run concurrently.
  //   end_step()       counts the step and lets go of the gradients.
  // step(lr, threads) is exactly these, with the updates split by thread_plan(threads).
  void begin_step(double lr);
  void update_param(size_t i);
  void end_step();
  // Which parameters each of `threads` threads updates: balanced by element count (largest
  // first, each into the thread with the fewest elements so far, ties to the lower index),
  // each thread's indices ascending. The same list every call, so a caller that keeps thread
  // k on plan[k] touches a parameter (and its moments) from one thread step after step.
  // Cached for the last thread count.
  const std::vector<std::vector<int64_t>>& thread_plan(int threads);
  // Drops every parameter's gradient (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();
  // Number of step() calls so far (restored by load_state).
  int64_t steps() const { return steps_; }

  const AdamOptions& options() const { return options_; }
  const std::vector<Tensor>& params() const { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  // The moments of parameter i (its dtype and shape), and how many updates it received.
  const Tensor& exp_avg(size_t i) const { return m_.at(i); }
  const Tensor& exp_avg_sq(size_t i) const { return v_.at(i); }
  int64_t param_steps(size_t i) const { return param_steps_.at(i); }

  // The optimizer state as named tensors, ready for io::save_safetensors:
  //   "adam.steps"                I64 []  step() calls
  //   "adam.step.<name>"          I64 []  updates this parameter received (bias correction)
  //   "adam.exp_avg.<name>"       m, the parameter's dtype and shape
  //   "adam.exp_avg_sq.<name>"    v, the parameter's dtype and shape
  io::NamedTensors state() const;
  // Restores state() output (copied, so a memory-mapped file may be closed afterwards).
  // Entries whose names do not start with "adam." are ignored, so a whole checkpoint can
  // be passed; a missing entry, an unknown "adam." entry, or a wrong dtype or shape is an
  // error naming it, and leaves the optimizer unchanged.
  void load_state(const io::NamedTensors& state);

 private:
  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  AdamOptions options_;
  std::vector<Tensor> m_, v_;
  std::vector<int64_t> param_steps_;
  int64_t steps_ = 0;
  // The step in progress (begin_step .. end_step): its rate and each parameter's gradient.
  bool in_step_ = false;
  double step_lr_ = 0;
  std::vector<Tensor> step_grads_;
  int plan_threads_ = 0;  // thread_plan's cache
  std::vector<std::vector<int64_t>> plan_;

  void update_unchecked(size_t i);
};

// Thrown by clip_grad_norm when the gradient norm is NaN or infinite; a trainer may catch
// it to skip the step. what() reads "[clip_grad_norm] non-finite gradient norm at step N: nan".
class NonFiniteGradient : public Error {
 public:
  NonFiniteGradient(const std::string& message, int64_t step, double norm)
      : Error(message), step_(step), norm_(norm) {}
  int64_t step() const { return step_; }
  double norm() const { return norm_; }

 private:
  int64_t step_;
  double norm_;
};

// The L2 norm of all gradients together, sqrt(sum over parameters of sum g^2), accumulated
// in double; parameters without a gradient contribute nothing. May be NaN or inf.
double grad_norm(const std::vector<Tensor>& params);

// As torch.nn.utils.clip_grad_norm_(params, max_norm) with norm_type 2: returns the total
// norm before clipping, and multiplies every gradient in place by
// min(1, max_norm / (norm + 1e-6)) (so only when the norm exceeds max_norm > 0, give or
// take PyTorch's 1e-6). A non-finite norm throws NonFiniteGradient naming `step` (omitted
// when step < 0) and leaves the gradients untouched.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, int64_t step = -1);

}  // namespace attn::train
