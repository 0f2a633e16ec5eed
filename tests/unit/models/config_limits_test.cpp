// ModelConfig's size bounds (issue 22): every size key above its bound is refused by name with
// the bound, at the bound it is accepted (control), and the whole config is bounded by its
// parameter count. min_parameters() -- what loaders compare with a weights file before
// building -- is a lower bound of the built model's num_parameters() for every variant, and a
// close one: the same config with four times the layers already implies more than the
// original model holds (the control that the check can refuse a mismatch).
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attn/models/config.h"
#include "attn/models/factory.h"
#include "support/error_of.h"

namespace attn::models {
namespace {

using test::error_of;

TEST(ModelConfigLimits, EverySizeKeyAboveItsBoundIsRefusedByName) {
  struct Case {
    std::function<void(ModelConfig&, int64_t)> set;
    int64_t bound;
    std::string key;
  };
  const std::vector<Case> cases = {
      {[](ModelConfig& c, int64_t v) { c.d_model = v; c.n_heads = 1; c.d_ff = 1; c.n_encoder_layers = c.n_decoder_layers = 1; c.src_vocab_size = c.tgt_vocab_size = 3; }, kMaxDModel, "d_model"},
      {[](ModelConfig& c, int64_t v) { c.n_encoder_layers = v; }, kMaxLayers, "n_encoder_layers"},
      {[](ModelConfig& c, int64_t v) { c.n_decoder_layers = v; }, kMaxLayers, "n_decoder_layers"},
      {[](ModelConfig& c, int64_t v) { c.d_ff = v; c.n_encoder_layers = c.n_decoder_layers = 1; }, kMaxDFF, "d_ff"},
      {[](ModelConfig& c, int64_t v) { c.src_vocab_size = c.tgt_vocab_size = v; }, kMaxVocab, "src_vocab_size"},
      {[](ModelConfig& c, int64_t v) { c.positional = nn::PositionalKind::Learned; c.max_len = v; }, kMaxPositions, "max_len"},
      {[](ModelConfig& c, int64_t v) { c.arch = Arch::DecoderOnly; c.sliding_window = v; }, kMaxPositions, "sliding_window"},
      {[](ModelConfig& c, int64_t v) { c.n_experts = v; c.n_encoder_layers = c.n_decoder_layers = 1; }, kMaxExperts, "n_experts"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.key);
    ModelConfig at = ModelConfig::seed_small();
    k.set(at, k.bound);
    EXPECT_NO_THROW(at.validate());  // control: the bound itself is valid
    for (const int64_t over : {k.bound + 1, int64_t{1000000000000}, int64_t{1} << 62}) {
      ModelConfig c = ModelConfig::seed_small();
      k.set(c, over);
      const std::string e = error_of([&] { c.validate(); });
      EXPECT_NE(e.find(k.key + " " + std::to_string(over) + " is above the limit " + std::to_string(k.bound)),
                std::string::npos)
          << e;
    }
  }
}

TEST(ModelConfigLimits, TheParameterCountIsBoundedNamingItsLargestPart) {
  ModelConfig c;
  c.d_model = kMaxDModel;
  c.n_heads = 1;
  c.d_ff = kMaxDFF;  // within every key's bound, but 6 + 6 layers of 2^37 parameters each
  const std::string e = error_of([&] { c.validate(); });
  EXPECT_NE(e.find("above the limit 68719476736"), std::string::npos) << e;
  EXPECT_NE(e.find("the largest part: n_decoder_layers 6"), std::string::npos) << e;
}

std::vector<ModelConfig> variants() {
  std::vector<ModelConfig> out;
  ModelConfig base = ModelConfig::seed_small();
  base.d_model = 32;
  base.n_heads = 4;
  base.d_ff = 48;
  base.src_vocab_size = base.tgt_vocab_size = 40;
  auto add = [&](const std::function<void(ModelConfig&)>& edit) {
    ModelConfig c = base;
    edit(c);
    c.validate();
    out.push_back(c);
  };
  add([](ModelConfig&) {});
  add([](ModelConfig& c) { c.share_embeddings = false; c.tgt_vocab_size = 55; c.tie_output = false; });
  add([](ModelConfig& c) { c.positional = nn::PositionalKind::Learned; c.max_len = 300; });
  add([](ModelConfig& c) { c.norm = nn::NormKind::RMS; c.activation = nn::Activation::SwiGLU; });
  add([](ModelConfig& c) { c.n_experts = 4; c.expert_top_k = 2; });
  add([](ModelConfig& c) { c.n_kv_heads = 1; });
  add([](ModelConfig& c) { c.attention = nn::AttentionKind::Linear; });
  add([](ModelConfig& c) { c.arch = Arch::DecoderOnly; c.tgt_vocab_size = 0; c.tie_output = false; });
  add([](ModelConfig& c) { c.arch = Arch::DecoderOnly; c.tgt_vocab_size = 0; c.sliding_window = 4; c.positional = nn::PositionalKind::Rope; });
  add([](ModelConfig& c) { c.arch = Arch::EncoderOnly; c.tgt_vocab_size = 0; c.positional = nn::PositionalKind::Learned; });
  add([](ModelConfig& c) { c.src_vocab_size = c.tgt_vocab_size = 5000; });  // embeddings dominate
  return out;
}

TEST(ModelConfigLimits, MinParametersIsACloseLowerBoundOfTheBuiltModel) {
  for (const ModelConfig& c : variants()) {
    SCOPED_TRACE(c.to_json().dump());
    const int64_t built = make_model(c, ModelInit::None)->num_parameters();
    EXPECT_LE(c.min_parameters(), built);
    EXPECT_GE(3 * c.min_parameters(), built);  // within a factor of 3
    // Control: four times the layers implies more than this model holds, so a loader
    // comparing with this model's file refuses it.
    ModelConfig more = c;
    more.n_encoder_layers *= 4;
    more.n_decoder_layers *= 4;
    EXPECT_GT(more.min_parameters(), built);
  }
}

}  // namespace
}  // namespace attn::models
