// One live-PyTorch reference case, as tests/torch/make_fixtures.py writes it: a safetensors
// file ATTN_FIXTURE_DIR/<case>.safetensors with param.*, in.*, out.*, grad.*, grad_in.* tensors
// and string metadata (JSON-encoded numbers and bools, raw strings). This header opens a case,
// hands out owned copies of its tensors, reads metadata, loads param.* into a Module strictly
// and compares gradients tensor by tensor with labels. It does not generate fixtures: ctest's
// `torch_fixtures` test does, before any `torch` test runs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attn/core/tensor.h"
#include "attn/io/safetensors.h"
#include "attn/nn/module.h"
#include "attn/ops/ops.h"
#include "support/expect_close.h"
#include "support/tolerances.h"

namespace attn::test {

// Relative gradient tolerance for float64 against PyTorch float64: both sides differ only by
// rounding, so this is far tighter than kRelGrad (which is sized for float32).
inline constexpr double kRelGradF64 = 1e-9;

// Gradient criterion used by every torch test:
//   |actual - expected| <= rel * max(max_i |expected_i|, kTinyGrad)   for every element.
// The scale is the largest entry of the reference tensor, not each entry itself, so entries
// that are tiny (or exactly zero, e.g. embedding rows of tokens that are absent) are judged
// against the tensor's magnitude rather than demanding relative accuracy on rounding noise.
inline constexpr double kTinyGrad = 1e-30;

// With ATTN_TORCH_MARGINS=1 in the environment, every comparison prints its largest
// difference and what was allowed, to show how much room the tolerances leave.
inline void report_margin(const std::string& label, double worst, double allowed) {
  static const bool on = std::getenv("ATTN_TORCH_MARGINS") != nullptr;
  if (on) std::cerr << "[margin] " << label << ": max |diff| " << worst << ", allowed " << allowed << "\n";
}

inline ::testing::AssertionResult grad_close(const Tensor& actual, const Tensor& expected, double rel,
                                             const std::string& label) {
  if (!actual.defined()) return ::testing::AssertionFailure() << label << ": no gradient";
  if (actual.dtype() != expected.dtype())
    return ::testing::AssertionFailure() << label << ": dtype " << actual.str() << " vs " << expected.str();
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << label << ": shape " << actual.str() << " vs " << expected.str();
  const auto va = actual.to_vector<double>();
  const auto vb = expected.to_vector<double>();
  double scale = 0;
  for (double b : vb) scale = std::max(scale, std::fabs(b));
  const double allowed = rel * std::max(scale, kTinyGrad);
  double worst = 0;
  size_t worst_i = 0;
  bool ok = true;
  for (size_t i = 0; i < va.size(); ++i) {
    const double d = std::fabs(va[i] - vb[i]);
    if (!(d <= allowed)) ok = false;
    if (!(d <= worst)) {
      worst = d;
      worst_i = i;
    }
  }
  report_margin(label, worst, allowed);
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << label << ": max |diff| " << worst << " at flat index " << worst_i
                                       << " (" << va[worst_i] << " vs " << vb[worst_i] << "), allowed "
                                       << allowed << " = " << rel << " * max|expected| " << scale;
}

// Collects labelled AssertionResults and reports all failures at once.
class Checks {
 public:
  void add(const ::testing::AssertionResult& r) {
    if (!r) {
      ok_ = false;
      msg_ << "\n  " << r.message();
    }
  }
  ::testing::AssertionResult result() const {
    if (ok_) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << msg_.str();
  }

 private:
  bool ok_ = true;
  std::ostringstream msg_;
};

class TorchCase {
 public:
  // Opens ATTN_FIXTURE_DIR/<name>.safetensors; a missing file throws an error naming it and
  // saying how to produce it.
  explicit TorchCase(std::string name) : name_(std::move(name)), file_(open(path_of(name_))) {}

  static std::string fixture_dir() { return ATTN_FIXTURE_DIR; }
  static std::string path_of(const std::string& name) { return fixture_dir() + "/" + name + ".safetensors"; }

  const std::string& name() const { return name_; }
  const io::SafetensorsFile& file() const { return file_; }
  bool has(const std::string& tensor) const { return file_.has(tensor); }

  // An owned, writable, contiguous copy of tensor `tensor` (e.g. "out.out").
  Tensor get(const std::string& tensor) const {
    if (!file_.has(tensor)) {
      std::ostringstream names;
      for (const auto& n : file_.names()) names << " " << n;
      throw std::runtime_error("torch fixture " + file_.path() + " has no tensor '" + tensor +
                               "'; it holds:" + names.str());
    }
    return file_.get(tensor).clone();
  }
  // "in.<name>" as a fresh leaf, optionally requiring grad.
  Tensor input(const std::string& name, bool requires_grad = false) const {
    Tensor t = get("in." + name);
    if (requires_grad) t.set_requires_grad(true);
    return t;
  }

  // ---- metadata (values are JSON text, except strings, which are stored raw) -------------
  std::string text(const std::string& key) const {
    const auto& m = file_.metadata();
    auto it = m.find(key);
    if (it == m.end()) throw std::runtime_error("torch fixture " + file_.path() + " has no metadata '" + key + "'");
    return it->second;
  }
  nlohmann::json json(const std::string& key) const {
    const std::string s = text(key);
    try {
      return nlohmann::json::parse(s);
    } catch (const std::exception& e) {
      throw std::runtime_error("torch fixture " + file_.path() + ": metadata '" + key + "' = '" + s +
                               "' is not JSON: " + e.what());
    }
  }
  double number(const std::string& key) const { return json(key).get<double>(); }
  int64_t integer(const std::string& key) const { return json(key).get<int64_t>(); }
  bool flag(const std::string& key) const { return json(key).get<bool>(); }
  std::vector<double> numbers(const std::string& key) const { return json(key).get<std::vector<double>>(); }

  // ---- dtype and tolerances, from the case name's _f32 / _f64 suffix ------------------------
  DType dtype() const {
    if (name_.size() >= 4 && name_.compare(name_.size() - 4, 4, "_f64") == 0) return DType::F64;
    if (name_.size() >= 4 && name_.compare(name_.size() - 4, 4, "_f32") == 0) return DType::F32;
    throw std::runtime_error("torch fixture name '" + name_ + "' ends in neither _f32 nor _f64");
  }
  double atol() const { return dtype() == DType::F64 ? kAbsF64 : kAbsF32; }
  double grad_rel() const { return dtype() == DType::F64 ? kRelGradF64 : kRelGrad; }

  // ---- parameters and gradients ---------------------------------------------------------
  // Every "param.<name>" as (<name>, tensor).
  nn::NamedTensors params() const { return with_prefix("param."); }
  nn::NamedTensors grads() const { return with_prefix("grad."); }
  // Loads all param.* into `m` with load_state_dict(strict = true): a name missing on either
  // side, or a shape or dtype mismatch, throws.
  void load_params(nn::Module& m) const { m.load_state_dict(params(), /*strict=*/true); }

  // Values: every |actual - expected| <= atol() for "out.<name>".
  ::testing::AssertionResult output_close(const Tensor& actual, const std::string& out_name) const {
    const Tensor expected = get("out." + out_name);
    if (actual.defined() && actual.shape() == expected.shape())
      report_margin(name_ + " out." + out_name, max_abs_diff(actual, expected), atol());
    return all_close(actual, expected, atol(), 0.0, name_ + " out." + out_name);
  }
  // An input's gradient against "grad_in.<name>" (grad_close with grad_rel()).
  ::testing::AssertionResult input_grad_close(const Tensor& input, const std::string& name) const {
    return grad_close(input.grad(), get("grad_in." + name), grad_rel(), name_ + " grad_in." + name);
  }
  // Every grad.<name> against m.parameter(<name>).grad(), and every parameter of `m` must
  // have a reference gradient (PyTorch gives one to every parameter in these cases).
  ::testing::AssertionResult param_grads_close(const nn::Module& m) const {
    Checks checks;
    const nn::NamedTensors expected = grads();
    std::map<std::string, bool> seen;
    for (const auto& [pname, g] : expected) {
      seen[pname] = true;
      Tensor p;
      try {
        p = m.parameter(pname);
      } catch (const std::exception& e) {
        checks.add(::testing::AssertionFailure() << name_ << " grad." << pname << ": no such parameter (" << e.what() << ")");
        continue;
      }
      checks.add(grad_close(p.grad(), g, grad_rel(), name_ + " grad." + pname));
    }
    for (const auto& [pname, p] : m.named_parameters())
      if (!seen.count(pname))
        checks.add(::testing::AssertionFailure() << name_ << ": parameter " << pname << " has no grad." << pname
                                                 << " in the fixture");
    if (expected.empty()) checks.add(::testing::AssertionFailure() << name_ << ": the fixture holds no grad.*");
    return checks.result();
  }

 private:
  static io::SafetensorsFile open(const std::string& path) {
    if (!std::filesystem::exists(path))
      throw std::runtime_error("torch fixture " + path + " is missing: run `/usr/bin/python3 " ATTN_SOURCE_DIR
                               "/tests/torch/make_fixtures.py " ATTN_FIXTURE_DIR
                               "` (ctest runs it as the torch_fixtures test before the `torch` label)");
    return io::SafetensorsFile::open(path);
  }
  nn::NamedTensors with_prefix(const std::string& prefix) const {
    nn::NamedTensors out;
    for (const auto& n : file_.names())
      if (n.rfind(prefix, 0) == 0) out.emplace_back(n.substr(prefix.size()), file_.get(n).clone());
    return out;
  }

  std::string name_;
  io::SafetensorsFile file_;
};

// The scalar PyTorch differentiated: sum(out * in.grad_weight).
inline Tensor weighted_sum(const Tensor& out, const Tensor& w) { return sum(mul(out, w)); }

}  // namespace attn::test
