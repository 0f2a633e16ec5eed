// Module: dotted names in registration order, tied parameters stored once, train/eval
// recursion, and load_state_dict (in place; missing, unexpected, shape and dtype errors).
#include <gtest/gtest.h>

#include "attn/nn/linear.h"
#include "attn/nn/module.h"
#include "attn/ops/ops.h"
#include "support/expect_close.h"

namespace attn::nn {
namespace {

// A toy tree: root { scale, inner { weight }, layers [ Linear, Linear ], head (Linear) }.
class Inner : public Module {
 public:
  Inner() { weight = register_parameter("weight", Tensor::ones({2, 3})); }
  Tensor weight;
};

class Toy : public Module {
 public:
  explicit Toy(bool tie = false) {
    Rng rng(7);
    scale = register_parameter("scale", Tensor::ones({1}));
    inner = register_module("inner", std::make_shared<Inner>());
    auto list = register_module("layers", std::make_shared<ModuleList>());
    list->push_back(std::make_shared<Linear>(3, 2, true, DType::F32, rng));
    list->push_back(std::make_shared<Linear>(2, 3, false, DType::F32, rng));
    head = register_module("head", std::make_shared<Linear>(3, 2, true, DType::F32, rng));
    if (tie) head->tie_weight(inner->weight);
  }
  Tensor scale;
  std::shared_ptr<Inner> inner;
  std::shared_ptr<Linear> head;
};

std::vector<std::string> names_of(const NamedTensors& named) {
  std::vector<std::string> out;
  for (auto& [n, t] : named) out.push_back(n);
  return out;
}

TEST(Module, NamedParametersUseDottedNamesInRegistrationOrder) {
  Toy toy;
  EXPECT_EQ(names_of(toy.named_parameters()),
            (std::vector<std::string>{"scale", "inner.weight", "layers.0.weight", "layers.0.bias",
                                      "layers.1.weight", "head.weight", "head.bias"}));
  EXPECT_EQ(toy.num_parameters(), 1 + 6 + 6 + 2 + 6 + 6 + 2);
  for (auto& p : toy.parameters()) EXPECT_TRUE(p.requires_grad() && p.is_leaf());
  EXPECT_EQ(names_of(toy.state_dict()), names_of(toy.named_parameters()));
}

TEST(Module, TiedParameterIsStoredOnceUnderTheFirstName) {
  Toy toy(/*tie=*/true);
  EXPECT_EQ(names_of(toy.named_parameters()),
            (std::vector<std::string>{"scale", "inner.weight", "layers.0.weight", "layers.0.bias",
                                      "layers.1.weight", "head.bias"}));
  EXPECT_EQ(toy.tied_parameters(), (std::vector<std::pair<std::string, std::string>>{{"head.weight", "inner.weight"}}));
  EXPECT_TRUE(toy.parameter("head.weight").same(toy.inner->weight));
  EXPECT_TRUE(toy.head->weight().same(toy.inner->weight));
  EXPECT_EQ(toy.num_parameters(), 1 + 6 + 6 + 2 + 6 + 2);
}

TEST(Module, LoadStateDictCopiesValuesInPlaceSoHandlesStayValid) {
  Toy a, b;
  Rng rng(3);
  for (auto& p : a.parameters()) p.copy_from(Tensor::randn(p.shape(), rng));
  const Tensor held = b.head->weight();  // a handle a layer keeps
  b.load_state_dict(a.state_dict());
  EXPECT_TRUE(held.same(b.head->weight()));
  for (auto& [name, t] : a.state_dict()) EXPECT_TRUE(test::all_close(b.parameter(name), t, 0.0, 0.0, name));
  // The map form works too.
  std::map<std::string, Tensor> as_map;
  for (auto& [n, t] : a.state_dict()) as_map[n] = Tensor::zeros(t.shape());
  b.load_state_dict(as_map);
  EXPECT_EQ(held.to_vector<float>(), std::vector<float>(6, 0.0f));
}

std::string load_error(Module& m, const NamedTensors& state, bool strict = true) {
  try {
    m.load_state_dict(state, strict);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Module, LoadStateDictNamesEachMissingUnexpectedAndMismatchedEntry) {
  Toy toy;
  NamedTensors state = toy.state_dict();
  const Tensor before = toy.scale.clone();

  NamedTensors missing(state.begin() + 1, state.end());  // no "scale"
  std::string err = load_error(toy, missing);
  EXPECT_NE(err.find("missing: scale"), std::string::npos) << err;

  NamedTensors extra = state;
  extra.emplace_back("layers.2.weight", Tensor::zeros({1}));
  err = load_error(toy, extra);
  EXPECT_NE(err.find("unexpected: layers.2.weight"), std::string::npos) << err;

  NamedTensors wrong_shape = state;
  wrong_shape[1].second = Tensor::zeros({3, 2});
  wrong_shape[0].second = Tensor::full({1}, 5.0);
  err = load_error(toy, wrong_shape);
  EXPECT_NE(err.find("inner.weight (shape [3, 2] in checkpoint, [2, 3] in model)"), std::string::npos) << err;
  EXPECT_EQ(toy.scale.item(), before.item()) << "nothing may be copied when any entry is bad";

  NamedTensors wrong_dtype = state;
  wrong_dtype[0].second = Tensor::zeros({1}, DType::F64);
  err = load_error(toy, wrong_dtype);
  EXPECT_NE(err.find("scale (dtype f64 in checkpoint, f32 in model)"), std::string::npos) << err;

  NamedTensors duplicate = state;
  duplicate.push_back(state[0]);
  EXPECT_NE(load_error(toy, duplicate).find("duplicate name 'scale'"), std::string::npos);
}

TEST(Module, NonStrictLoadToleratesMissingAndUnexpectedButNotShapeMismatch) {
  Toy toy;
  NamedTensors state{{"scale", Tensor::full({1}, 4.0)}, {"not_a_parameter", Tensor::zeros({2})}};
  EXPECT_EQ(load_error(toy, state, /*strict=*/false), "");
  EXPECT_EQ(toy.scale.item(), 4.0);
  state.emplace_back("inner.weight", Tensor::zeros({2}));
  EXPECT_NE(load_error(toy, state, false).find("inner.weight"), std::string::npos);
}

TEST(Module, TiedParameterLoadsFromEitherName) {
  Toy toy(true);
  NamedTensors state = toy.state_dict();
  // PyTorch's state_dict of a tied model carries both names; ours carries the first only.
  state.emplace_back("head.weight", toy.inner->weight.clone());
  EXPECT_EQ(load_error(toy, state), "");
  // Only the alias present: it fills the shared tensor.
  NamedTensors alias_only;
  for (auto& [n, t] : toy.state_dict())
    alias_only.emplace_back(n == "inner.weight" ? "head.weight" : n, n == "inner.weight" ? Tensor::full({2, 3}, 2.0) : t);
  EXPECT_EQ(load_error(toy, alias_only), "");
  EXPECT_EQ(toy.inner->weight.at({1, 2}), 2.0);
}

TEST(Module, TrainAndEvalReachEveryDescendant) {
  Toy toy;
  EXPECT_TRUE(toy.is_training());
  toy.eval();
  for (auto& [name, m] : toy.named_modules()) EXPECT_FALSE(m->is_training()) << name;
  toy.train();
  for (auto& [name, m] : toy.named_modules()) EXPECT_TRUE(m->is_training()) << name;
  std::vector<std::string> names;
  for (auto& [name, m] : toy.named_modules()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"", "inner", "layers", "layers.0", "layers.1", "head"}));
}

class BadNames : public Module {
 public:
  explicit BadNames(int which) {
    register_parameter("w", Tensor::zeros({1}));
    if (which == 0) register_parameter("w", Tensor::zeros({1}));
    if (which == 1) register_module("w", std::make_shared<Inner>());
    if (which == 2) register_parameter("a.b", Tensor::zeros({1}));
    if (which == 3) register_parameter("ids", Tensor::zeros({1}, DType::I64));
  }
};

TEST(Module, RegistrationRejectsDuplicateDottedAndNonFloatingEntries) {
  for (int which = 0; which < 4; ++which) EXPECT_THROW(BadNames b(which), Error) << which;
  Toy toy;
  EXPECT_THROW(toy.parameter("nope"), Error);
  EXPECT_THROW(toy.head->tie_weight(Tensor::zeros({4, 4})), Error);
}

TEST(Module, ZeroGradDropsEveryGradient) {
  Toy toy;
  Tensor x = Tensor::ones({1, 3});
  sum(toy.head->forward(x)).backward();
  EXPECT_TRUE(toy.head->weight().grad().defined());
  toy.zero_grad();
  for (auto& p : toy.parameters()) EXPECT_FALSE(p.grad().defined());
}

}  // namespace
}  // namespace attn::nn
