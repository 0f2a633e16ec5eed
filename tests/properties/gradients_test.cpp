// Property: every parameter of every model family gets a gradient. One cross-entropy loss on a
// small padded batch (PAD targets ignored, dropout 0), one backward: each parameter's gradient
// exists, is finite and is not all zeros. Families x post/pre-norm x shared/separate embeddings
// x tied/untied output, plus learned positions, RMSNorm and GELU; a tied tensor must collect
// both uses' gradients. Finite-difference checks of each layer are in tests/unit, not here.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <sstream>

#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "attn/models/encoder_only.h"
#include "attn/models/factory.h"
#include "property_util.h"
#include "support/expect_close.h"

namespace attn {
namespace {

using models::Arch;

struct Case {
  Arch arch;
  bool norm_first;
  bool share_embeddings;
  bool tie_output;
  nn::PositionalKind positional;
  nn::NormKind norm;
  nn::Activation activation;
};

std::string describe(const Case& c) {
  std::ostringstream os;
  os << models::arch_name(c.arch) << (c.norm_first ? " pre-norm" : " post-norm")
     << (c.share_embeddings ? " shared" : " separate") << (c.tie_output ? " tied" : " untied") << " "
     << nn::positional_kind_name(c.positional) << " " << nn::norm_kind_name(c.norm) << " "
     << nn::activation_name(c.activation);
  return os.str();
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (Arch arch : {Arch::EncoderDecoder, Arch::DecoderOnly, Arch::EncoderOnly})
    for (bool norm_first : {false, true})
      for (bool tie : {true, false}) {
        cases.push_back({arch, norm_first, true, tie, nn::PositionalKind::Sinusoidal, nn::NormKind::Layer,
                         nn::Activation::ReLU});
        if (arch == Arch::EncoderDecoder)
          cases.push_back({arch, norm_first, false, tie, nn::PositionalKind::Sinusoidal, nn::NormKind::Layer,
                           nn::Activation::ReLU});
      }
  for (Arch arch : {Arch::EncoderDecoder, Arch::DecoderOnly, Arch::EncoderOnly}) {
    cases.push_back({arch, true, false, false, nn::PositionalKind::Learned, nn::NormKind::RMS, nn::Activation::GELU});
    cases.push_back({arch, false, true, true, nn::PositionalKind::Learned, nn::NormKind::Layer, nn::Activation::GELUTanh});
  }
  return cases;
}

models::ModelConfig config_for(const Case& k) {
  models::ModelConfig c = props::small_config(k.arch, DType::F64, k.norm_first);
  c.share_embeddings = k.share_embeddings;
  c.tie_output = k.tie_output;
  c.positional = k.positional;
  c.norm = k.norm;
  c.activation = k.activation;
  c.max_len = 8;
  return c;
}

// Inputs of the small batch: B = 2, T = 5, the second row padded at the end.
Tensor padded_tokens(uint64_t seed, int64_t first) {
  std::vector<int64_t> v = props::random_tokens(10, seed);
  v[0] = v[5] = first;
  v[8] = v[9] = props::kPad;
  return props::ids(v, 2, 5);
}

// Forward, cross-entropy over the non-PAD targets, backward. Returns the loss.
double one_backward(models::Model& model) {
  model.train();  // dropout is 0: training mode only to take the path training takes
  model.zero_grad();
  Tensor logits, targets;
  const int64_t V = props::kVocab;
  if (auto* ed = dynamic_cast<models::EncoderDecoderModel*>(&model)) {
    logits = ed->forward(padded_tokens(1, 3), padded_tokens(2, props::kBos));  // [2, 5, V]
    targets = padded_tokens(3, 4);
  } else if (auto* gpt = dynamic_cast<models::DecoderOnlyModel*>(&model)) {
    logits = gpt->forward(padded_tokens(4, props::kBos));
    targets = padded_tokens(5, 6);
  } else {
    auto& bert = dynamic_cast<models::EncoderOnlyModel&>(model);
    logits = bert.forward(padded_tokens(6, 3));
    targets = padded_tokens(7, 8);
  }
  Tensor loss = cross_entropy(reshape(logits, {10, V}), reshape(targets, {10}), props::kPad);
  loss.backward();
  return loss.item();
}

TEST(Gradients, EveryParameterOfEveryModelFamilyGetsANonZeroGradient) {
  for (const Case& k : all_cases()) {
    SCOPED_TRACE(describe(k));
    auto model = models::make_model(config_for(k));
    const double loss = one_backward(*model);
    EXPECT_TRUE(std::isfinite(loss));
    int64_t checked = 0;
    for (const auto& [name, p] : model->named_parameters()) {
      Tensor g = p.grad();
      ASSERT_TRUE(g.defined()) << name << " received no gradient";
      ASSERT_EQ(g.shape(), p.shape()) << name;
      double largest = 0;
      bool finite = true;
      for (double v : g.to_vector<double>()) {
        finite = finite && std::isfinite(v);
        largest = std::max(largest, std::fabs(v));
      }
      EXPECT_TRUE(finite) << name << " has a non-finite gradient";
      EXPECT_GT(largest, 0.0) << name << " has an all-zero gradient";
      ++checked;
    }
    EXPECT_EQ(checked, static_cast<int64_t>(model->parameters().size()));
    // The sweep covered tying for real: tied configurations list their alias names.
    const bool expect_tied = k.tie_output || (k.arch == Arch::EncoderDecoder && k.share_embeddings);
    EXPECT_EQ(!model->tied_parameters().empty(), expect_tied);
  }
}

TEST(Gradients, ATiedEmbeddingCollectsTheGradientOfBothItsUses) {
  // Decoder-only: with tying, d(embedding.weight) = d(embedding use) + d(output use); untied
  // the same weights give those two parts separately.
  models::ModelConfig c = config_for({Arch::DecoderOnly, true, true, true, nn::PositionalKind::Sinusoidal,
                                      nn::NormKind::Layer, nn::Activation::ReLU});
  models::DecoderOnlyModel tied(c);
  c.tie_output = false;
  models::DecoderOnlyModel untied(c);
  {
    NoGradGuard no_grad;
    untied.load_state_dict(tied.state_dict(), /*strict=*/false);
    untied.lm_head().weight().copy_from(tied.embedding().weight());
  }
  one_backward(tied);
  one_backward(untied);
  Tensor sum_of_uses = add(untied.embedding().weight().grad(), untied.lm_head().weight().grad());
  EXPECT_TRUE(test::all_close(tied.embedding().weight().grad(), sum_of_uses, 1e-12, 1e-10, "tied gradient"));
  // And each use alone is non-zero, so the sum really has two parts.
  EXPECT_GT(test::max_abs_diff(untied.embedding().weight().grad(), Tensor::zeros({props::kVocab, 16}, DType::F64)), 0.0);
  EXPECT_GT(test::max_abs_diff(untied.lm_head().weight().grad(), Tensor::zeros({props::kVocab, 16}, DType::F64)), 0.0);
}

}  // namespace
}  // namespace attn
