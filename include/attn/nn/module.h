// attn/nn/module.h — the base class of every layer and model (PyTorch's nn.Module, reduced).
// A Module owns named parameters and named child modules in registration order, so that
// named_parameters() yields PyTorch's dotted state_dict names ("layers.0.self_attn.in_proj_weight").
// It carries the train/eval flag (recursive) and loads values in place, so handles held by
// layers stay valid. No buffers, no hooks, no device moves: parameters are the whole state.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attn/core/tensor.h"
#include "attn/ops/quantize.h"

namespace attn::nn {

class QuantizeContext;  // nn/quantize.h

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- parameters ------------------------------------------------------------------------
  // Every parameter once, depth first in registration order, under its dotted name.
  // Tied parameters (one tensor registered under two names, e.g. an output projection that
  // shares the embedding matrix) appear once, under the name met first: for the models that
  // is always the embedding's name. The other names are listed by tied_parameters().
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  // Total number of scalars over parameters() (tied tensors counted once).
  int64_t num_parameters() const;
  // (alias, canonical) name pairs of tied parameters.
  std::vector<std::pair<std::string, std::string>> tied_parameters() const;
  // The parameter with this dotted name (canonical or alias); throws when there is none.
  Tensor parameter(const std::string& dotted_name) const;
  // Drops the accumulated gradient of every parameter.
  void zero_grad() const;

  // ---- state_dict ------------------------------------------------------------------------
  // The same list as named_parameters() (parameters are the whole state).
  NamedTensors state_dict() const { return named_parameters(); }
  // Copies values into the existing parameters (in place). Every problem is collected and
  // reported in one attn::Error before anything is copied: a missing name, an unexpected
  // name, a shape or a dtype mismatch. With strict = false, missing and unexpected names are
  // tolerated; shape and dtype mismatches are still errors. Alias names of tied parameters are
  // accepted and ignored when the canonical name is present.
  void load_state_dict(const NamedTensors& state, bool strict = true);
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  // ---- structure and mode ----------------------------------------------------------------
  // This module ("") and every descendant, depth first, with dotted names.
  std::vector<std::pair<std::string, Module*>> named_modules();
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const {
    return children_;
  }
  // Training mode (dropout active) or evaluation mode, for this module and all descendants.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // ---- reduced precision for inference (nn/quantize.h) -----------------------------------
  // Replaces this module's own quantizable weights (not its children's) by their quantized
  // copies from `ctx`; the default has none. Called by nn::quantize_module, once per module.
  virtual void quantize_own(QuantizeContext& /*ctx*/) {}

 protected:
  // Registers a parameter (a leaf; marked requires_grad) and returns the same handle.
  Tensor register_parameter(const std::string& name, Tensor value);
  // Registers a child; its parameters appear under "name.".
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
    add_child(name, child);
    return child;
  }
  // Points an already registered parameter name at another tensor of the same shape and dtype
  // (weight tying). The previous tensor is dropped from this module.
  void replace_parameter(const std::string& name, const Tensor& value);
  // Swaps the parameter `name` for a tensor of any dtype and shape (a weight's quantized copy,
  // nn/quantize.h). No gradient is recorded for a non-floating tensor.
  void swap_parameter(const std::string& name, const Tensor& value);
  // Registers a parameter that is not trained (a quantized weight's scales): requires_grad is
  // left off.
  Tensor register_constant(const std::string& name, Tensor value);

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> child);
  void check_new_name(const std::string& name) const;
  // All (name, tensor) pairs including duplicates of tied tensors.
  void collect_all(const std::string& prefix, NamedTensors& out) const;
  void collect_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>& out);

  NamedTensors params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// An ordered list of child modules named "0", "1", ... (nn.ModuleList), for "layers.N." names.
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<Module> m);
  size_t size() const { return children().size(); }
};

}  // namespace attn::nn
