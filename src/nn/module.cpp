// Module: registration, dotted names, train/eval and in-place state_dict loading.
// Names are built on the fly by walking children in registration order (no cached tables
// to fall out of sync); tied tensors are recognised by identity of their TensorImpl.
#include "attn/nn/module.h"

#include <set>
#include <unordered_set>

#include "attn/core/autograd.h"

namespace attn::nn {

void Module::check_new_name(const std::string& name) const {
  ATTN_CHECK(!name.empty() && name.find('.') == std::string::npos, "Module",
             "invalid name '", name, "': names are non-empty and contain no '.'");
  for (const auto& [n, t] : params_)
    ATTN_CHECK(n != name, "Module", "name '", name, "' is already a parameter");
  for (const auto& [n, c] : children_)
    ATTN_CHECK(n != name, "Module", "name '", name, "' is already a child module");
}

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  check_new_name(name);
  ATTN_CHECK(value.defined(), "Module", "parameter '", name, "' is undefined");
  ATTN_CHECK(is_floating(value.dtype()), "Module", "parameter '", name, "' must be floating, got ",
             value.str());
  if (!value.requires_grad()) value.set_requires_grad(true);
  params_.emplace_back(name, value);
  return value;
}

void Module::replace_parameter(const std::string& name, const Tensor& value) {
  for (auto& [n, t] : params_) {
    if (n != name) continue;
    ATTN_CHECK(value.defined() && value.shape() == t.shape() && value.dtype() == t.dtype(), "Module",
               "cannot tie '", name, "' (", t.str(), ") to ", value.defined() ? value.str() : "undefined");
    t = value;
    return;
  }
  fail("Module", "no parameter named '", name, "' to tie");
}

void Module::swap_parameter(const std::string& name, const Tensor& value) {
  ATTN_CHECK(value.defined(), "Module", "cannot swap '", name, "' for an undefined tensor");
  for (auto& [n, t] : params_) {
    if (n != name) continue;
    t = value;
    return;
  }
  fail("Module", "no parameter named '", name, "' to swap");
}

Tensor Module::register_constant(const std::string& name, Tensor value) {
  check_new_name(name);
  ATTN_CHECK(value.defined(), "Module", "parameter '", name, "' is undefined");
  params_.emplace_back(name, value);
  return value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> child) {
  check_new_name(name);
  ATTN_CHECK(child != nullptr, "Module", "child module '", name, "' is null");
  children_.emplace_back(name, std::move(child));
}

void Module::collect_all(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  for (const auto& [n, c] : children_) c->collect_all(prefix + n + ".", out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors all, unique;
  collect_all("", all);
  std::unordered_set<const TensorImpl*> seen;
  for (auto& [n, t] : all)
    if (seen.insert(t.impl_ptr().get()).second) unique.emplace_back(n, t);
  return unique;
}

std::vector<std::pair<std::string, std::string>> Module::tied_parameters() const {
  NamedTensors all;
  collect_all("", all);
  std::vector<std::pair<std::string, std::string>> aliases;
  std::map<const TensorImpl*, std::string> first;
  for (auto& [n, t] : all) {
    auto [it, inserted] = first.emplace(t.impl_ptr().get(), n);
    if (!inserted) aliases.emplace_back(n, it->second);
  }
  return aliases;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t total = 0;
  for (auto& [n, t] : named_parameters()) total += t.numel();
  return total;
}

Tensor Module::parameter(const std::string& dotted_name) const {
  NamedTensors all;
  collect_all("", all);
  for (auto& [n, t] : all)
    if (n == dotted_name) return t;
  fail("Module", "no parameter named '", dotted_name, "'");
}

void Module::zero_grad() const {
  for (auto& t : parameters()) t.zero_grad();
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  // Index the input, rejecting duplicates.
  std::map<std::string, Tensor> by_name;
  for (const auto& [n, t] : state) {
    ATTN_CHECK(by_name.emplace(n, t).second, "load_state_dict", "duplicate name '", n, "'");
  }
  const NamedTensors own = named_parameters();
  std::map<std::string, std::string> alias_of;  // alias -> canonical
  for (auto& [alias, canonical] : tied_parameters()) alias_of[alias] = canonical;

  std::vector<std::string> missing, unexpected, mismatched;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination, source)
  std::set<std::string> used;
  for (const auto& [name, dst] : own) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      // A tied parameter may arrive under one of its alias names only.
      for (auto& [alias, canonical] : alias_of)
        if (canonical == name && by_name.count(alias)) { it = by_name.find(alias); break; }
    }
    if (it == by_name.end()) {
      missing.push_back(name);
      continue;
    }
    used.insert(it->first);
    const Tensor& src = it->second;
    if (!src.defined()) {
      mismatched.push_back(str_cat(name, " (checkpoint tensor is undefined)"));
    } else if (src.shape() != dst.shape()) {
      mismatched.push_back(str_cat(name, " (shape ", shape_str(src.shape()), " in checkpoint, ",
                                   shape_str(dst.shape()), " in model)"));
    } else if (src.dtype() != dst.dtype()) {
      mismatched.push_back(str_cat(name, " (dtype ", dtype_name(src.dtype()), " in checkpoint, ",
                                   dtype_name(dst.dtype()), " in model)"));
    } else {
      copies.emplace_back(dst, src);
    }
  }
  for (const auto& [n, t] : by_name)
    if (!used.count(n) && !alias_of.count(n)) unexpected.push_back(n);

  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
    return s;
  };
  std::string problems;
  if (strict && !missing.empty()) problems += "missing: " + join(missing) + "; ";
  if (strict && !unexpected.empty()) problems += "unexpected: " + join(unexpected) + "; ";
  if (!mismatched.empty()) problems += "mismatched: " + join(mismatched) + "; ";
  if (!problems.empty()) fail("load_state_dict", problems.substr(0, problems.size() - 2));

  NoGradGuard no_grad;
  for (auto& [dst, src] : copies) dst.copy_from(src);
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  load_state_dict(NamedTensors(state.begin(), state.end()), strict);
}

void Module::collect_modules(const std::string& prefix,
                             std::vector<std::pair<std::string, Module*>>& out) {
  out.emplace_back(prefix, this);
  for (auto& [n, c] : children_) c->collect_modules(prefix.empty() ? n : prefix + "." + n, out);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  collect_modules("", out);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void ModuleList::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(size()), std::move(m));
}

}  // namespace attn::nn
