// Adam / AdamW against a hand-written double-precision Adam, state export and resume,
// convergence on a quadratic, the step in parts (begin_step, update_param, end_step) and the
// thread plan, and global gradient-norm clipping.
#include "attn/train/adam.h"

#include <gtest/gtest.h>

#include <cmath>

#include "attn/ops/ops.h"
#include "support/expect_close.h"

namespace attn::train {
namespace {

using Vec = std::vector<double>;

// The textbook update, written independently of adam.cpp: per parameter step count t,
//   (AdamW) p -= lr * wd * p;  (L2) g += wd * p
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
struct ReferenceAdam {
  AdamOptions o;
  std::vector<Vec> m, v;
  std::vector<int> t;

  ReferenceAdam(const std::vector<Vec>& params, AdamOptions opt) : o(opt) {
    for (const Vec& p : params) {
      m.emplace_back(p.size(), 0.0);
      v.emplace_back(p.size(), 0.0);
      t.push_back(0);
    }
  }
  // grads[i] empty: parameter i has no gradient this step.
  void step(std::vector<Vec>& params, const std::vector<Vec>& grads, double lr) {
    for (size_t i = 0; i < params.size(); ++i) {
      if (grads[i].empty()) continue;
      ++t[i];
      for (size_t j = 0; j < params[i].size(); ++j) {
        double& p = params[i][j];
        double g = grads[i][j];
        if (o.decoupled_weight_decay) p -= lr * o.weight_decay * p;
        else g += o.weight_decay * p;
        m[i][j] = o.beta1 * m[i][j] + (1 - o.beta1) * g;
        v[i][j] = o.beta2 * v[i][j] + (1 - o.beta2) * g * g;
        const double m_hat = m[i][j] / (1 - std::pow(o.beta1, t[i]));
        const double v_hat = v[i][j] / (1 - std::pow(o.beta2, t[i]));
        p -= lr * m_hat / (std::sqrt(v_hat) + o.eps);
      }
    }
  }
};

Vec random_vec(size_t n, Rng& rng, double scale = 1.0) {
  Vec out(n);
  for (double& x : out) x = rng.normal() * scale;
  return out;
}

Tensor leaf(const Vec& values, const Shape& shape, DType dtype) {
  Tensor t = Tensor::from_vector<double>(values, shape).to(dtype).clone();
  t.set_requires_grad(true);
  return t;
}

// Runs our Adam and the reference side by side for `steps` steps with random gradients
// (parameter 1 has no gradient on even steps) and returns the largest |difference|.
double max_diff_against_reference(AdamOptions opt, DType dtype, int steps) {
  Rng rng(7);
  const std::vector<Shape> shapes = {{3, 4}, {5}, {2, 2, 2}};
  std::vector<Vec> ref_params;
  std::vector<Tensor> params;
  for (const Shape& s : shapes) {
    ref_params.push_back(random_vec(static_cast<size_t>(shape_numel(s)), rng));
    params.push_back(leaf(ref_params.back(), s, dtype));
  }
  if (dtype == DType::F32)  // the reference starts from the same rounded values
    for (size_t i = 0; i < params.size(); ++i) ref_params[i] = params[i].to_vector<double>();
  Adam adam(params, opt);
  ReferenceAdam ref(ref_params, opt);
  for (int k = 1; k <= steps; ++k) {
    std::vector<Vec> grads;
    for (size_t i = 0; i < params.size(); ++i) {
      if (i == 1 && k % 2 == 0) {
        params[i].zero_grad();
        grads.emplace_back();
        continue;
      }
      Vec g = random_vec(ref_params[i].size(), rng, 0.1 * k);
      Tensor gt = Tensor::from_vector<double>(g, params[i].shape()).to(dtype).clone();
      params[i].set_grad(gt);
      grads.push_back(gt.to_vector<double>());
    }
    const double lr = 0.01 / k;
    adam.step(lr);
    ref.step(ref_params, grads, lr);
  }
  EXPECT_EQ(adam.steps(), steps);
  EXPECT_EQ(adam.param_steps(0), steps);
  EXPECT_EQ(adam.param_steps(1), (steps + 1) / 2);
  double worst = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const Vec got = params[i].to_vector<double>();
    for (size_t j = 0; j < got.size(); ++j) worst = std::max(worst, std::fabs(got[j] - ref_params[i][j]));
  }
  return worst;
}

TEST(Adam, MatchesHandWrittenAdamInFloat64) {
  EXPECT_LT(max_diff_against_reference({}, DType::F64, 12), 1e-13);
}

TEST(Adam, MatchesHandWrittenAdamWWithDecoupledWeightDecay) {
  AdamOptions opt;
  opt.weight_decay = 0.3;
  EXPECT_LT(max_diff_against_reference(opt, DType::F64, 12), 1e-13);
}

TEST(Adam, MatchesHandWrittenAdamWithL2WeightDecay) {
  AdamOptions opt;
  opt.weight_decay = 0.3;
  opt.decoupled_weight_decay = false;
  opt.beta1 = 0.8;
  opt.beta2 = 0.999;
  opt.eps = 1e-8;
  EXPECT_LT(max_diff_against_reference(opt, DType::F64, 12), 1e-13);
}

TEST(Adam, Float32ParametersTrackTheFloat64Reference) {
  AdamOptions opt;
  opt.weight_decay = 0.1;
  const double d = max_diff_against_reference(opt, DType::F32, 12);
  EXPECT_LT(d, 2e-6);
  EXPECT_GT(d, 0.0);  // it really ran in float32
}

TEST(Adam, FirstStepMovesEachElementByTheLearningRate) {
  // At step 1, m_hat = g and v_hat = g^2, so p moves by lr * g / (|g| + eps) ~= lr * sign(g).
  Tensor p = leaf({1.0, -2.0, 3.0}, {3}, DType::F64);
  p.set_grad(Tensor::from_vector<double>({0.5, -4.0, 1e-3}, {3}));
  Adam adam({p});
  adam.step(0.1);
  const Vec got = p.to_vector<double>();
  EXPECT_NEAR(got[0], 0.9, 1e-9);
  EXPECT_NEAR(got[1], -1.9, 1e-9);
  EXPECT_NEAR(got[2], 2.9, 1e-6);
}

TEST(Adam, ParametersWithoutGradientAreLeftAlone) {
  Tensor a = leaf({1.0, 2.0}, {2}, DType::F64);
  Tensor b = leaf({3.0, 4.0}, {2}, DType::F64);
  Adam adam({a, b});
  a.set_grad(Tensor::from_vector<double>({1.0, 1.0}, {2}));
  adam.step(0.5);
  adam.step(0.5);
  EXPECT_EQ(b.to_vector<double>(), (Vec{3.0, 4.0}));
  EXPECT_EQ(adam.exp_avg_sq(1).to_vector<double>(), (Vec{0.0, 0.0}));
  EXPECT_EQ(adam.param_steps(1), 0);
  // b's first gradient gets step-1 bias correction: it moves by about lr.
  b.set_grad(Tensor::from_vector<double>({-2.0, 2.0}, {2}));
  adam.step(0.5);
  EXPECT_NEAR(b.to_vector<double>()[0], 3.5, 1e-9);
  EXPECT_NEAR(b.to_vector<double>()[1], 3.5, 1e-9);
  EXPECT_EQ(adam.param_steps(1), 1);
  EXPECT_EQ(adam.steps(), 3);
}

TEST(Adam, ZeroGradDropsGradients) {
  Tensor a = leaf({1.0}, {1}, DType::F32);
  a.set_grad(Tensor::from_vector<float>({1.0f}, {1}));
  Adam adam({a});
  adam.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(Adam, UpdatesInPlaceWithoutRecordingAutograd) {
  Tensor a = leaf({1.0, 2.0}, {2}, DType::F32);
  const auto storage = a.storage();
  a.set_grad(Tensor::from_vector<float>({1.0f, 1.0f}, {2}));
  Adam adam({a});
  adam.step(0.1);
  EXPECT_EQ(a.storage(), storage);
  EXPECT_TRUE(a.is_leaf());
  EXPECT_TRUE(a.requires_grad());
  EXPECT_TRUE(grad_mode_enabled());
}

TEST(Adam, ConvergesOnAQuadratic) {
  // L = sum((x - c)^2 * w) with its gradient from autograd; the minimum is x = c.
  const Vec c = {3.0, -1.0, 0.5, 2.0};
  Tensor target = Tensor::from_vector<double>(c, {4});
  Tensor w = Tensor::from_vector<double>({1.0, 10.0, 0.1, 2.0}, {4});
  Tensor x = leaf({0.0, 0.0, 0.0, 0.0}, {4}, DType::F64);
  Adam adam({x});
  double first_loss = 0, loss_value = 0;
  for (int k = 1; k <= 2000; ++k) {
    adam.zero_grad();
    Tensor d = sub(x, target);
    Tensor loss = sum(mul(mul(d, d), w));
    loss.backward();
    loss_value = loss.item();
    if (k == 1) first_loss = loss_value;
    adam.step(k < 1000 ? 0.05 : 0.005);
  }
  EXPECT_LT(loss_value, 1e-6 * first_loss);
  const Vec got = x.to_vector<double>();
  for (size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(got[i], c[i], 1e-3) << i;
}

TEST(Adam, ExportedStateResumesBitForBit) {
  Rng rng(3);
  const Vec init = random_vec(6, rng);
  std::vector<Vec> grads;
  for (int k = 0; k < 6; ++k) grads.push_back(random_vec(6, rng));
  auto run = [&](Tensor& p, Adam& adam, int from, int to) {
    for (int k = from; k < to; ++k) {
      p.set_grad(Tensor::from_vector<double>(grads[static_cast<size_t>(k)], {2, 3}).to(DType::F32).clone());
      adam.step(1e-2);
    }
  };
  AdamOptions opt;
  opt.weight_decay = 0.01;
  Tensor p1 = leaf(init, {2, 3}, DType::F32);
  Adam a1({p1}, opt, {"w"});
  run(p1, a1, 0, 6);

  Tensor p2 = leaf(init, {2, 3}, DType::F32);
  Adam a2({p2}, opt, {"w"});
  run(p2, a2, 0, 3);
  const io::NamedTensors state = a2.state();
  ASSERT_EQ(state.size(), 4u);
  EXPECT_EQ(state[0].first, "adam.steps");
  EXPECT_EQ(state[1].first, "adam.step.w");
  EXPECT_EQ(state[2].first, "adam.exp_avg.w");
  EXPECT_EQ(state[3].first, "adam.exp_avg_sq.w");
  EXPECT_EQ(state[0].second.item(), 3.0);

  Tensor p3 = p2.clone();
  p3.set_requires_grad(true);
  Adam a3({p3}, opt, {"w"});
  io::NamedTensors with_model = state;
  with_model.emplace_back("w", p3);  // non-"adam." entries are ignored
  a3.load_state(with_model);
  EXPECT_EQ(a3.steps(), 3);
  run(p3, a3, 3, 6);
  EXPECT_EQ(p3.to_vector<float>(), p1.to_vector<float>());
  EXPECT_EQ(a3.steps(), 6);
}

TEST(Adam, LoadStateRejectsMismatchesAndKeepsItsState) {
  Tensor p = leaf({1.0, 2.0}, {2}, DType::F64);
  Adam adam({p}, {}, {"w"});
  p.set_grad(Tensor::from_vector<double>({1.0, 1.0}, {2}));
  adam.step(0.1);
  const io::NamedTensors good = adam.state();
  const Vec m_before = adam.exp_avg(0).to_vector<double>();

  io::NamedTensors missing(good.begin(), good.end() - 1);
  EXPECT_THROW(adam.load_state(missing), Error);
  io::NamedTensors wrong_shape = good;
  wrong_shape[2].second = Tensor::zeros({3}, DType::F64);
  EXPECT_THROW(adam.load_state(wrong_shape), Error);
  io::NamedTensors wrong_dtype = good;
  wrong_dtype[2].second = Tensor::zeros({2}, DType::F32);
  EXPECT_THROW(adam.load_state(wrong_dtype), Error);
  io::NamedTensors unknown = good;
  unknown.emplace_back("adam.exp_avg.other", Tensor::zeros({2}, DType::F64));
  try {
    adam.load_state(unknown);
    FAIL() << "an unknown entry should be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adam.exp_avg.other"), std::string::npos) << e.what();
  }
  EXPECT_EQ(adam.exp_avg(0).to_vector<double>(), m_before);
  EXPECT_EQ(adam.steps(), 1);
}

TEST(Adam, RejectsBadParametersAndOptions) {
  Tensor a = leaf({1.0}, {1}, DType::F32);
  EXPECT_THROW(Adam({a, a}), Error);
  EXPECT_THROW(Adam({Tensor::zeros({2}, DType::I64)}), Error);
  EXPECT_THROW(Adam({Tensor()}), Error);
  Tensor m = leaf({1, 2, 3, 4}, {2, 2}, DType::F32);
  EXPECT_THROW(Adam({m.transpose(0, 1)}), Error);  // not a leaf (and not contiguous)
  EXPECT_THROW(Adam({a}, {}, {"x", "y"}), Error);
  Tensor b = leaf({1.0}, {1}, DType::F32);
  EXPECT_THROW(Adam({a, b}, {}, {"x", "x"}), Error);
  AdamOptions bad;
  bad.beta2 = 1.0;
  EXPECT_THROW(Adam({a}, bad), Error);
  bad = {};
  bad.eps = 0;
  EXPECT_THROW(Adam({a}, bad), Error);
  bad = {};
  bad.weight_decay = -1;
  EXPECT_THROW(Adam({a}, bad), Error);
  Adam ok({a});
  EXPECT_THROW(ok.step(-1.0), Error);
  EXPECT_THROW(ok.step(NAN), Error);
  a.set_grad(Tensor::zeros({1}, DType::F64));  // a gradient of the wrong dtype
  EXPECT_THROW(ok.step(0.1), Error);
}

// Float32 parameters of these sizes (one above the kernel's threading threshold) with random
// values, and a fresh random gradient for each on every call of set_grads (none for parameter
// 2 on odd calls), drawn from a generator of its own so that twins get the same numbers.
struct AdamRig {
  std::vector<Tensor> params;
  Rng rng;
  int calls = 0;
  explicit AdamRig(uint64_t seed) : rng(seed) {
    Rng init(11);
    for (int64_t n : {int64_t{70000}, int64_t{33}, int64_t{128}, int64_t{5}, int64_t{999}})
      params.push_back(leaf(random_vec(static_cast<size_t>(n), init), {n}, DType::F32));
  }
  void set_grads() {
    ++calls;
    for (size_t i = 0; i < params.size(); ++i) {
      const Vec g = random_vec(static_cast<size_t>(params[i].numel()), rng, 0.1 * calls);
      if (i == 2 && calls % 2 == 1) params[i].zero_grad();
      else params[i].set_grad(Tensor::from_vector<double>(g, params[i].shape()).to(DType::F32).clone());
    }
  }
};

std::vector<std::vector<float>> values_of(const std::vector<Tensor>& ts) {
  std::vector<std::vector<float>> out;
  for (const Tensor& t : ts) out.push_back(t.to_vector<float>());
  return out;
}

TEST(Adam, StepInPartsInAnyOrderEqualsStepBitForBit) {
  AdamOptions opt;
  opt.weight_decay = 0.05;
  AdamRig whole(5), parts(5), threaded(5);
  Adam a(whole.params, opt), b(parts.params, opt), c(threaded.params, opt);
  for (int k = 1; k <= 4; ++k) {
    const double lr = 0.01 / k;
    whole.set_grads();
    parts.set_grads();
    threaded.set_grads();
    a.step(lr);
    b.begin_step(lr);
    for (size_t i : {size_t{3}, size_t{0}, size_t{4}, size_t{2}, size_t{1}}) b.update_param(i);
    b.end_step();
    c.step(lr, 3);
  }
  EXPECT_EQ(values_of(parts.params), values_of(whole.params));
  EXPECT_EQ(values_of(threaded.params), values_of(whole.params));
  for (size_t i = 0; i < whole.params.size(); ++i) {
    EXPECT_EQ(b.exp_avg(i).to_vector<float>(), a.exp_avg(i).to_vector<float>()) << i;
    EXPECT_EQ(b.exp_avg_sq(i).to_vector<float>(), a.exp_avg_sq(i).to_vector<float>()) << i;
    EXPECT_EQ(b.param_steps(i), a.param_steps(i)) << i;
    EXPECT_EQ(c.param_steps(i), a.param_steps(i)) << i;
  }
  EXPECT_EQ(a.param_steps(2), 2);  // skipped on the steps without a gradient
  EXPECT_EQ(b.steps(), 4);
  EXPECT_EQ(c.steps(), 4);
  // Control: a step at another rate gives other bits, so the comparisons above can fail.
  whole.set_grads();
  parts.set_grads();
  a.step(0.001);
  b.step(0.002);
  EXPECT_NE(values_of(parts.params), values_of(whole.params));
}

TEST(Adam, BeginStepTakesTheGradientStorageSoLaterAdditionsCount) {
  // What the batch-split trainer relies on: begin_step, then the gradient is summed in place,
  // then the update sees the sum.
  Tensor a = leaf({1.0, 2.0}, {2}, DType::F64);
  Tensor b = leaf({1.0, 2.0}, {2}, DType::F64);
  a.set_grad(Tensor::from_vector<double>({0.5, -1.0}, {2}));
  b.set_grad(Tensor::from_vector<double>({0.25, -0.5}, {2}));
  Adam whole({a}), parts({b});
  whole.step(0.1);
  parts.begin_step(0.1);
  double* g = b.grad().data<double>();
  g[0] += 0.25;
  g[1] += -0.5;
  parts.update_param(0);
  parts.end_step();
  EXPECT_EQ(b.to_vector<double>(), a.to_vector<double>());
  EXPECT_EQ(parts.exp_avg(0).to_vector<double>(), whole.exp_avg(0).to_vector<double>());
}

TEST(Adam, StepPartsOutOfOrderOrOutOfRangeAreErrors) {
  Tensor a = leaf({1.0, 2.0}, {2}, DType::F32);
  a.set_grad(Tensor::from_vector<float>({1.0f, 1.0f}, {2}));
  Adam adam({a});
  EXPECT_THROW(adam.update_param(0), Error);  // no step begun
  EXPECT_THROW(adam.end_step(), Error);
  EXPECT_THROW(adam.begin_step(NAN), Error);
  EXPECT_THROW(adam.update_param(0), Error);  // the failed begin_step began nothing
  adam.begin_step(0.1);
  EXPECT_THROW(adam.update_param(1), Error);  // one parameter only
  adam.end_step();
  EXPECT_THROW(adam.end_step(), Error);
  EXPECT_EQ(adam.steps(), 1);
  EXPECT_EQ(adam.param_steps(0), 0);  // never updated
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_THROW(adam.thread_plan(0), Error);
  EXPECT_THROW(adam.step(0.1, 0), Error);
}

TEST(Adam, BeginStepChecksEveryGradientBeforeAnyUpdate) {
  Tensor a = leaf({1.0, 2.0}, {2}, DType::F32);
  Tensor b = leaf({3.0}, {1}, DType::F32);
  a.set_grad(Tensor::from_vector<float>({1.0f, 1.0f}, {2}));
  b.set_grad(Tensor::zeros({1}, DType::F64));  // the wrong dtype, on the last parameter
  Adam adam({a, b});
  EXPECT_THROW(adam.begin_step(0.1), Error);
  EXPECT_THROW(adam.update_param(0), Error);  // nothing begun
  EXPECT_THROW(adam.step(0.1, 2), Error);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(adam.param_steps(0), 0);
  EXPECT_EQ(adam.steps(), 0);
}

TEST(Adam, ThreadPlanBalancesElementCountsLargestFirst) {
  std::vector<Tensor> params;
  for (int64_t n : {100, 10, 60, 50, 40, 5}) params.push_back(leaf(Vec(static_cast<size_t>(n), 0.0), {n}, DType::F32));
  Adam adam(params);
  // Largest first into the lighter thread: 100 -> 0, 60 -> 1, 50 -> 1 (110), 40 -> 0 (140),
  // 10 -> 1 (120), 5 -> 1 (125); each list ascending.
  using Plan = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(adam.thread_plan(2), (Plan{{0, 4}, {1, 2, 3, 5}}));
  EXPECT_EQ(adam.thread_plan(1), (Plan{{0, 1, 2, 3, 4, 5}}));
  // 100 | 60 | 50, then 40 -> 2 (90), 10 -> 1 (70), 5 -> 1 (75).
  EXPECT_EQ(adam.thread_plan(3), (Plan{{0}, {1, 2, 5}, {3, 4}}));
  const Plan& eight = adam.thread_plan(8);  // more threads than parameters: some idle
  ASSERT_EQ(eight.size(), 8u);
  std::vector<int> seen(params.size(), 0);
  for (const auto& part : eight) {
    EXPECT_LE(part.size(), 1u);
    for (int64_t i : part) ++seen[static_cast<size_t>(i)];
  }
  EXPECT_EQ(seen, std::vector<int>(params.size(), 1));
  // The same plan again, after another thread count was asked for in between.
  EXPECT_EQ(adam.thread_plan(2), (Plan{{0, 4}, {1, 2, 3, 5}}));
}

TEST(ClipGradNorm, ReturnsTheTotalNormAndScalesOnlyAboveTheLimit) {
  Tensor a = leaf({0, 0}, {2}, DType::F64);
  Tensor b = leaf({0, 0, 0}, {3}, DType::F32);
  Tensor c = leaf({0}, {1}, DType::F64);  // no gradient: skipped
  a.set_grad(Tensor::from_vector<double>({3.0, 0.0}, {2}));
  b.set_grad(Tensor::from_vector<float>({0.0f, 4.0f, 12.0f}, {3}));
  // sqrt(9 + 16 + 144) = 13
  EXPECT_DOUBLE_EQ(grad_norm({a, b, c}), 13.0);
  EXPECT_DOUBLE_EQ(clip_grad_norm({a, b, c}, 20.0), 13.0);
  EXPECT_EQ(a.grad().to_vector<double>(), (Vec{3.0, 0.0}));
  EXPECT_DOUBLE_EQ(clip_grad_norm({a, b, c}, 6.5), 13.0);
  const double coef = 6.5 / (13.0 + 1e-6);
  EXPECT_NEAR(a.grad().to_vector<double>()[0], 3.0 * coef, 1e-15);
  EXPECT_NEAR(b.grad().to_vector<double>()[2], 12.0 * coef, 1e-5);
  EXPECT_NEAR(grad_norm({a, b, c}), 6.5, 1e-5);
  EXPECT_FALSE(c.grad().defined());
}

TEST(ClipGradNorm, NonFiniteNormIsACatchableErrorNamingTheStep) {
  Tensor a = leaf({0, 0}, {2}, DType::F32);
  a.set_grad(Tensor::from_vector<float>({1.0f, NAN}, {2}));
  try {
    clip_grad_norm({a}, 1.0, 7);
    FAIL() << "a NaN gradient should throw";
  } catch (const NonFiniteGradient& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite gradient norm at step 7"), std::string::npos)
        << e.what();
    EXPECT_EQ(e.step(), 7);
  }
  EXPECT_EQ(a.grad().to_vector<float>()[0], 1.0f);  // untouched
  a.set_grad(Tensor::from_vector<float>({INFINITY, 0.0f}, {2}));
  EXPECT_THROW(clip_grad_norm({a}, 1.0), Error);  // also an attn::Error
  EXPECT_THROW(clip_grad_norm({a}, 0.0), Error);
}

}  // namespace
}  // namespace attn::train
