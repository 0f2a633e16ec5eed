// dropout_add and relu_dropout (src/ops/dropout.cpp): the fused ops give their compositions'
// bits, add(residual, dropout(x)) and dropout(relu(x)), forward and gradients, with the same
// generator moves, for f32 and f64, odd sizes, the threaded path, training and evaluation;
// signed zeros and NaN as the composition has them; float64 gradient checks with the mask fixed
// by reseeding; gradients written over uninitialised memory; bad input. Then the layers that
// use them: nn::Dropout::add_to / forward_relu, the ReLU FeedForward and an EncoderLayer (post-
// and pre-norm) against the same layers written out with the unfused ops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "attn/core/storage.h"
#include "attn/nn/dropout.h"
#include "attn/nn/encoder.h"
#include "attn/nn/feed_forward.h"
#include "attn/ops/ops.h"
#include "support/gradcheck.h"
#include "support/poisoned_storage.h"

namespace attn {
namespace {

// Same dtype, shape and bytes (so -0 differs from +0, and NaNs must carry the same bits).
::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b, const std::string& label) {
  if (!a.defined() || !b.defined())
    return ::testing::AssertionFailure() << label << ": " << (a.defined() ? "" : "first ")
                                         << (b.defined() ? "" : "second ") << "tensor undefined";
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return ::testing::AssertionFailure() << label << ": " << a.str() << " vs " << b.str();
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  const size_t width = a.dtype() == DType::F32 ? 4 : 8;
  const auto* pa = static_cast<const unsigned char*>(ac.raw_data());
  const auto* pb = static_cast<const unsigned char*>(bc.raw_data());
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(pa + i * width, pb + i * width, width) != 0)
      return ::testing::AssertionFailure() << label << ": element " << i << " differs (" << ac.at({i}) << " vs "
                                           << bc.at({i}) << " as doubles)";
  return ::testing::AssertionSuccess();
}

bool same_state(const Rng& a, const Rng& b) {
  const Rng::State x = a.state(), y = b.state();
  for (int i = 0; i < 4; ++i)
    if (x.s[i] != y.s[i]) return false;
  return true;
}

// A leaf with the values of t (any dtype), flattened views left to the caller.
Tensor leaf(const Tensor& t) { return t.clone().set_requires_grad(true); }

struct Case {
  Shape shape;
  double p;
  bool training;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  // Odd sizes around vector widths and rounds of the mask, and 3 * 13337 = 40011 elements:
  // past kParallelMin, so the threaded masking runs.
  for (const Shape& s : {Shape{1}, Shape{7}, Shape{3, 5, 7}, Shape{2, 3, 37}, Shape{3, 13337}})
    for (double p : {0.1, 0.5})
      for (bool training : {false, true}) out.push_back({s, p, training});
  return out;
}

std::string label(const Case& c, DType dt) {
  return std::string(dtype_name(dt)) + " " + shape_str(c.shape) + " p " + std::to_string(c.p) +
         (c.training ? " training" : " eval");
}

class FusedDropoutByDtype : public ::testing::TestWithParam<DType> {};

TEST_P(FusedDropoutByDtype, DropoutAddGivesTheCompositionsBitsForwardAndBackward) {
  const DType dt = GetParam();
  for (const Case& c : cases()) {
    const std::string what = label(c, dt);
    Rng data(11);
    const Tensor r0 = Tensor::randn(c.shape, data, dt), x0 = Tensor::randn(c.shape, data, dt);
    const Tensor w = Tensor::randn(c.shape, data, dt);  // the upstream gradient
    Tensor r1 = leaf(r0), x1 = leaf(x0), r2 = leaf(r0), x2 = leaf(x0);
    Rng fused_rng(5), plain_rng(5);
    Tensor fused = dropout_add(r1, x1, c.p, c.training, fused_rng);
    Tensor plain = add(r2, dropout(x2, c.p, c.training, plain_rng));
    ASSERT_TRUE(same_bits(fused, plain, what + " forward"));
    EXPECT_TRUE(same_state(fused_rng, plain_rng)) << what << ": the generators must move alike";
    fused.backward(w);
    plain.backward(w);
    EXPECT_TRUE(same_bits(r1.grad(), r2.grad(), what + " d residual"));
    EXPECT_TRUE(same_bits(x1.grad(), x2.grad(), what + " dx"));
  }
}

TEST_P(FusedDropoutByDtype, ReluDropoutGivesTheCompositionsBitsForwardAndBackward) {
  const DType dt = GetParam();
  for (const Case& c : cases()) {
    const std::string what = label(c, dt);
    Rng data(12);
    const Tensor x0 = Tensor::randn(c.shape, data, dt), w = Tensor::randn(c.shape, data, dt);
    Tensor x1 = leaf(x0), x2 = leaf(x0);
    Rng fused_rng(6), plain_rng(6);
    Tensor fused = relu_dropout(x1, c.p, c.training, fused_rng);
    Tensor plain = dropout(relu(x2), c.p, c.training, plain_rng);
    ASSERT_TRUE(same_bits(fused, plain, what + " forward"));
    EXPECT_TRUE(same_state(fused_rng, plain_rng)) << what << ": the generators must move alike";
    fused.backward(w);
    plain.backward(w);
    EXPECT_TRUE(same_bits(x1.grad(), x2.grad(), what + " dx"));
  }
}

TEST_P(FusedDropoutByDtype, SignedZerosNanAndReluAtZeroFollowTheComposition) {
  // A dropped element of dropout_add is residual + 0, so a residual of -0 gives +0 there (and
  // -0 where kept, -0 + -0); relu_dropout keeps relu's -0 and NaN on kept elements, and its
  // gradient at x = 0 (either sign) is 0, written as +0 even for a -0 upstream gradient.
  const DType dt = GetParam();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> xs;
  for (int i = 0; i < 64; ++i) xs.push_back(std::vector<double>{-0.0, 0.0, -1.5, 2.0, nan, -0.0, 0.0, 3.0}[i % 8]);
  const Tensor xv = Tensor::from_vector(xs, {64}).to(dt);
  const Tensor neg_zero = Tensor::full({64}, -0.0, dt);
  {
    Tensor r1 = leaf(neg_zero), x1 = leaf(neg_zero), r2 = leaf(neg_zero), x2 = leaf(neg_zero);
    Rng a(3), b(3);
    Tensor fused = dropout_add(r1, x1, 0.5, true, a);
    Tensor plain = add(r2, dropout(x2, 0.5, true, b));
    EXPECT_TRUE(same_bits(fused, plain, "dropout_add of -0"));
    int positive_zeros = 0;
    for (double v : fused.to_vector<double>()) positive_zeros += !std::signbit(v);
    EXPECT_GT(positive_zeros, 0) << "dropped elements must be residual + 0 = +0";
    EXPECT_LT(positive_zeros, 64) << "kept elements must stay -0 + -0 = -0";
  }
  {
    Tensor x1 = leaf(xv), x2 = leaf(xv);
    Rng a(4), b(4);
    Tensor fused = relu_dropout(x1, 0.25, true, a);
    Tensor plain = dropout(relu(x2), 0.25, true, b);
    EXPECT_TRUE(same_bits(fused, plain, "relu_dropout of -0, NaN, negatives"));
    const Tensor g = Tensor::full({64}, -0.0, dt);  // a -0 upstream gradient everywhere
    fused.backward(g);
    plain.backward(g);
    EXPECT_TRUE(same_bits(x1.grad(), x2.grad(), "relu_dropout gradient of a -0 upstream gradient"));
    x1.zero_grad();
    x2.zero_grad();
    Rng c(4), d(4);
    const Tensor ones = Tensor::ones({64}, dt);
    relu_dropout(x1, 0.25, true, c).backward(ones);
    dropout(relu(x2), 0.25, true, d).backward(ones);
    EXPECT_TRUE(same_bits(x1.grad(), x2.grad(), "relu_dropout gradient"));
    const auto gx = x1.grad().to_vector<double>();
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!(xs[i] > 0)) {
        EXPECT_EQ(gx[i], 0.0) << "x = " << xs[i] << " must get no gradient (element " << i << ")";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FusedDropout, FusedDropoutByDtype, ::testing::Values(DType::F32, DType::F64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(FusedDropout, EvaluationAndZeroPAreAddAndReluWithoutDrawing) {
  Rng data(2);
  const Tensor r = Tensor::randn({4, 9}, data), x = Tensor::randn({4, 9}, data);
  Rng rng(8);
  const Rng before = rng;
  EXPECT_TRUE(same_bits(dropout_add(r, x, 0.3, false, rng), add(r, x), "dropout_add eval"));
  EXPECT_TRUE(same_bits(dropout_add(r, x, 0.0, true, rng), add(r, x), "dropout_add p = 0"));
  EXPECT_TRUE(same_bits(relu_dropout(x, 0.3, false, rng), relu(x), "relu_dropout eval"));
  EXPECT_TRUE(same_bits(relu_dropout(x, 0.0, true, rng), relu(x), "relu_dropout p = 0"));
  EXPECT_TRUE(same_state(rng, before)) << "no mask may be drawn";
  Rng other(8);
  (void)relu_dropout(x, 0.3, true, other);
  EXPECT_FALSE(same_state(other, before)) << "control: training draws a mask";
}

TEST(FusedDropout, GradientsMatchFiniteDifferences) {
  Rng data(3);
  Tensor r = Tensor::randn({5, 7}, data, DType::F64).set_requires_grad(true);
  Tensor x = Tensor::randn({5, 7}, data, DType::F64).set_requires_grad(true);
  // Reseeding inside f draws the same mask at every evaluation, so each op is a fixed map.
  EXPECT_TRUE(test::gradcheck(
      [](const std::vector<Tensor>& in) {
        Rng rng(77);
        return dropout_add(in[0], in[1], 0.4, true, rng);
      },
      {r, x}));
  // relu_dropout is piecewise linear: x values away from 0 keep the central differences
  // inside one piece (|x| >= 0.2 > eps).
  std::vector<double> vals;
  for (int i = 0; i < 35; ++i) vals.push_back((i % 2 ? -1.0 : 1.0) * (0.2 + 0.05 * i));
  Tensor z = Tensor::from_vector(vals, {5, 7}).to(DType::F64).set_requires_grad(true);
  EXPECT_TRUE(test::gradcheck(
      [](const std::vector<Tensor>& in) {
        Rng rng(78);
        return relu_dropout(in[0], 0.3, true, rng);
      },
      {z}));
}

TEST(FusedDropout, OnlyTheInputsThatNeedAGradientGetOne) {
  Rng data(4);
  for (int which = 0; which < 2; ++which) {
    Tensor r = Tensor::randn({3, 11}, data, DType::F64), x = Tensor::randn({3, 11}, data, DType::F64);
    (which == 0 ? r : x).set_requires_grad(true);
    Rng a(9), b(9);
    Tensor r2 = r.clone().set_requires_grad(which == 0), x2 = x.clone().set_requires_grad(which == 1);
    sum(dropout_add(r, x, 0.5, true, a)).backward();
    sum(add(r2, dropout(x2, 0.5, true, b))).backward();
    const Tensor& got = which == 0 ? r : x;
    const Tensor& want = which == 0 ? r2 : x2;
    EXPECT_TRUE(same_bits(got.grad(), want.grad(), which == 0 ? "residual only" : "x only"));
    EXPECT_FALSE((which == 0 ? x : r).grad().defined());
  }
}

TEST(FusedDropout, GradientsAreWrittenOverUninitialisedMemory) {
  // The backward kernels write every element of an uninitialised buffer: the poison mode fills
  // every block handed out with NaN bytes, so an element left unwritten, or added to, is NaN.
  const test::PoisonedStorage poison;  // support/poisoned_storage.h
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor r = Tensor::ones({257}, dt).set_requires_grad(true);
    Tensor x = Tensor::ones({257}, dt).set_requires_grad(true);
    Rng rng(3);
    Tensor y = dropout_add(r, x, 0.5, true, rng);
    Tensor z = relu_dropout(x, 0.5, true, rng);
    sum(add(y, z)).backward();
    for (double g : r.grad().to_vector<double>()) ASSERT_EQ(g, 1.0) << dtype_name(dt);
    int64_t zeros = 0;
    for (double g : x.grad().to_vector<double>()) {
      ASSERT_TRUE(g == 0.0 || g == 2.0 || g == 4.0) << dtype_name(dt) << " gradient " << g;
      zeros += g == 0.0;
    }
    EXPECT_GT(zeros, 0) << "some element dropped by both masks";
  }
}

TEST(FusedDropout, BadInputIsAnErrorNamingTheProblem) {
  Rng rng(1);
  const Tensor a = Tensor::ones({2, 3}), b = Tensor::ones({3, 2}), d = Tensor::ones({2, 3}, DType::F64);
  try {
    (void)dropout_add(a, b, 0.1, true, rng);
    ADD_FAILURE() << "a shape mismatch must throw";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("dropout_add"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 2]"), std::string::npos) << m;
  }
  // Broadcastable shapes are still a mismatch (add would broadcast them), in eval too.
  EXPECT_THROW((void)dropout_add(a, Tensor::ones({3}), 0.1, false, rng), Error);
  EXPECT_THROW((void)dropout_add(a, d, 0.1, true, rng), Error);
  EXPECT_THROW((void)dropout_add(a, Tensor::zeros({2, 3}, DType::I64), 0.1, true, rng), Error);
  EXPECT_THROW((void)dropout_add(Tensor(), a, 0.1, true, rng), Error);
  for (double p : {1.0, -0.1, 1.5, std::nan("")}) {
    EXPECT_THROW((void)dropout_add(a, a, p, true, rng), Error) << p;
    EXPECT_THROW((void)dropout_add(a, a, p, false, rng), Error) << p;
    EXPECT_THROW((void)relu_dropout(a, p, true, rng), Error) << p;
    EXPECT_THROW((void)relu_dropout(a, p, false, rng), Error) << p;
  }
  EXPECT_THROW((void)relu_dropout(Tensor::zeros({4}, DType::I64), 0.1, true, rng), Error);
  EXPECT_THROW((void)relu_dropout(Tensor(), 0.1, true, rng), Error);
}

// ---- the layers that use the fused ops ---------------------------------------------------------

TEST(FusedDropout, DropoutModuleAddToAndForwardReluMatchTheUnfusedModule) {
  Rng data(5);
  const Tensor r = Tensor::randn({2, 5, 9}, data), x = Tensor::randn({2, 5, 9}, data);
  nn::Dropout fused(0.2, 13), plain(0.2, 13);
  for (int step = 0; step < 2; ++step) {  // consecutive calls draw fresh, matching masks
    EXPECT_TRUE(same_bits(fused.add_to(r, x), add(r, plain.forward(x)), "add_to"));
    EXPECT_TRUE(same_bits(fused.forward_relu(x), plain.forward(relu(x)), "forward_relu"));
  }
  fused.eval();
  plain.eval();
  EXPECT_TRUE(same_bits(fused.add_to(r, x), add(r, x), "add_to in eval"));
  EXPECT_TRUE(same_bits(fused.forward_relu(x), relu(x), "forward_relu in eval"));
}

// The parameters' gradients of two modules built alike, compared bit for bit.
void expect_same_grads(const nn::Module& a, const nn::Module& b, const std::string& what) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(same_bits(pa[i].second.grad(), pb[i].second.grad(), what + " " + pa[i].first));
}

TEST(FusedDropout, ReluFeedForwardGivesTheUnfusedBitsAndGradients) {
  Rng init_a(7), init_b(7), data(8);
  nn::FeedForward ff(6, 17, nn::Activation::ReLU, 0.3, DType::F32, init_a);
  nn::FeedForward ref(6, 17, nn::Activation::ReLU, 0.3, DType::F32, init_b);
  const Tensor x = Tensor::randn({2, 3, 6}, data);
  // The reference written out with the unfused ops and its own (identically seeded) dropout.
  Tensor h = linear(x, ref.linear1()->weight(), ref.linear1()->bias());  // [2, 3, 17]
  h = ref.dropout()->forward(relu(h));                                   // [2, 3, 17]
  Tensor want = linear(h, ref.linear2()->weight(), ref.linear2()->bias());  // [2, 3, 6]
  Tensor got = ff.forward(x);
  ASSERT_TRUE(same_bits(got, want, "FFN forward"));
  sum(got).backward();
  sum(want).backward();
  expect_same_grads(ff, ref, "FFN");
}

// EncoderLayer written out with the unfused ops through the layer's own modules (the ReLU FFN,
// the sub-layer dropouts found by name).
Tensor unfused_encoder_layer(nn::EncoderLayer& layer, const Tensor& x) {
  nn::Dropout* drop[2] = {};
  for (const auto& [name, child] : layer.children()) {
    if (name == "dropout1") drop[0] = dynamic_cast<nn::Dropout*>(child.get());
    if (name == "dropout2") drop[1] = dynamic_cast<nn::Dropout*>(child.get());
  }
  if (!drop[0] || !drop[1]) throw std::runtime_error("EncoderLayer: dropout1/dropout2 not found");
  nn::FeedForward& ff = layer.feed_forward();
  auto ffn = [&](const Tensor& in) {
    Tensor h = linear(in, ff.linear1()->weight(), ff.linear1()->bias());  // [B, T, F]
    h = ff.dropout()->forward(relu(h));                                   // [B, T, F]
    return linear(h, ff.linear2()->weight(), ff.linear2()->bias());       // [B, T, D]
  };
  if (layer.options().norm_first) {
    Tensor h = layer.norm1().forward(x);                                            // [B, T, D]
    Tensor out = add(x, drop[0]->forward(layer.self_attn().forward(h, h, h, {})));  // [B, T, D]
    return add(out, drop[1]->forward(ffn(layer.norm2().forward(out))));             // [B, T, D]
  }
  Tensor out = layer.norm1().forward(add(x, drop[0]->forward(layer.self_attn().forward(x, x, x, {}))));  // [B, T, D]
  return layer.norm2().forward(add(out, drop[1]->forward(ffn(out))));  // [B, T, D]
}

TEST(FusedDropout, EncoderLayerGivesTheUnfusedBitsAndGradientsPostAndPreNorm) {
  for (bool norm_first : {false, true}) {
    nn::LayerOptions o;
    o.d_model = 8;
    o.n_heads = 2;
    o.d_ff = 19;
    o.dropout = 0.25;
    o.attention_dropout = 0.1;
    o.norm_first = norm_first;
    Rng init_a(21), init_b(21), data(22);
    nn::EncoderLayer layer(o, init_a), ref(o, init_b);
    const Tensor x0 = Tensor::randn({2, 5, 8}, data);
    Tensor x1 = leaf(x0), x2 = leaf(x0);
    const std::string what = norm_first ? "pre-norm" : "post-norm";
    for (int step = 0; step < 2; ++step) {  // the second step draws the next masks
      Tensor got = layer.forward(x1);
      Tensor want = unfused_encoder_layer(ref, x2);
      ASSERT_TRUE(same_bits(got, want, what + " forward, step " + std::to_string(step)));
      sum(got).backward();
      sum(want).backward();
      expect_same_grads(layer, ref, what + " step " + std::to_string(step));
      EXPECT_TRUE(same_bits(x1.grad(), x2.grad(), what + " dx"));
      layer.zero_grad();
      ref.zero_grad();
      x1.zero_grad();
      x2.zero_grad();
    }
  }
}

}  // namespace
}  // namespace attn
