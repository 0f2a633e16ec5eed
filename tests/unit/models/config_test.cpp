// ModelConfig: the presets, a JSON round trip of every field, strict reading (unknown keys
// and wrong types name the key), and each validation error.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "attn/models/config.h"

namespace attn::models {
namespace {

using nlohmann::json;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, PresetsAreThePaperModelsAndTheSeedModel) {
  const ModelConfig base = ModelConfig::preset("base");
  EXPECT_EQ(base.d_model, 512);
  EXPECT_EQ(base.n_heads, 8);
  EXPECT_EQ(base.n_encoder_layers, 6);
  EXPECT_EQ(base.d_ff, 2048);
  EXPECT_DOUBLE_EQ(base.dropout, 0.1);
  const ModelConfig big = ModelConfig::preset("big");
  EXPECT_EQ(big.d_model, 1024);
  EXPECT_EQ(big.n_heads, 16);
  EXPECT_EQ(big.d_ff, 4096);
  EXPECT_DOUBLE_EQ(big.dropout, 0.3);
  const ModelConfig small = ModelConfig::preset("small");
  EXPECT_EQ(small.d_model, 64);
  EXPECT_EQ(small.n_heads, 4);
  EXPECT_EQ(small.n_encoder_layers, 2);
  EXPECT_EQ(small.n_decoder_layers, 2);
  EXPECT_EQ(small.d_ff, 256);
  for (const auto& c : {base, big, small}) EXPECT_NO_THROW(c.validate());
  EXPECT_THROW(ModelConfig::preset("huge"), Error);
}

TEST(ModelConfig, JsonRoundTripKeepsEveryField) {
  ModelConfig c;
  c.arch = Arch::DecoderOnly;
  c.d_model = 48;
  c.n_heads = 6;
  c.n_encoder_layers = 0;
  c.n_decoder_layers = 3;
  c.d_ff = 100;
  c.dropout = 0.25;
  c.attention_dropout = 0.05;
  c.activation = nn::Activation::GELUTanh;
  c.norm_first = true;
  c.norm = nn::NormKind::RMS;
  c.norm_eps = 1e-6;
  c.final_norm = false;
  c.positional = nn::PositionalKind::Learned;
  c.max_len = 77;
  c.src_vocab_size = 300;
  c.tgt_vocab_size = 300;
  c.share_embeddings = false;
  c.tie_output = false;
  c.scale_embeddings = false;
  c.pad_id = -1;
  c.bos_id = 5;
  c.eos_id = 6;
  c.dtype = DType::F64;
  c.seed = 123456789012345ull;
  const json j = c.to_json();
  EXPECT_EQ(j.size(), 25u);
  EXPECT_EQ(j["arch"], "decoder_only");
  EXPECT_EQ(j["activation"], "gelu_tanh");
  EXPECT_EQ(j["norm"], "rms");
  EXPECT_EQ(j["positional"], "learned");
  EXPECT_EQ(j["dtype"], "f64");
  const ModelConfig back = ModelConfig::from_json(json::parse(j.dump()));
  EXPECT_EQ(back.to_json(), j);
  EXPECT_EQ(back.seed, c.seed);
  EXPECT_EQ(back.norm, nn::NormKind::RMS);
  EXPECT_NO_THROW(back.validate());
}

TEST(ModelConfig, AbsentKeysKeepTheirDefaults) {
  const ModelConfig c = ModelConfig::from_json(json{{"d_model", 64}, {"n_heads", 4}});
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.d_ff, ModelConfig{}.d_ff);
  EXPECT_EQ(ModelConfig::from_json(json::object()).to_json(), ModelConfig{}.to_json());
}

TEST(ModelConfig, UnknownKeysAndWrongTypesAreErrorsNamingTheKey) {
  auto read = [](const json& j) { return error_of([&] { ModelConfig::from_json(j); }); };
  EXPECT_NE(read(json{{"d_modle", 64}}).find("unknown key 'd_modle'"), std::string::npos);
  EXPECT_NE(read(json{{"d_model", "64"}}).find("key 'd_model' must be an integer"), std::string::npos);
  EXPECT_NE(read(json{{"d_model", 64.5}}).find("key 'd_model' must be an integer"), std::string::npos);
  EXPECT_NE(read(json{{"dropout", "0.1"}}).find("key 'dropout' must be a number"), std::string::npos);
  EXPECT_NE(read(json{{"norm_first", 1}}).find("key 'norm_first' must be true or false"), std::string::npos);
  EXPECT_NE(read(json{{"activation", 3}}).find("key 'activation' must be a string"), std::string::npos);
  EXPECT_NE(read(json{{"activation", "swish"}}).find("key 'activation'"), std::string::npos);
  EXPECT_NE(read(json{{"norm", "batch"}}).find("key 'norm'"), std::string::npos);
  EXPECT_NE(read(json{{"positional", "rotary"}}).find("key 'positional'"), std::string::npos);
  EXPECT_NE(read(json{{"arch", "seq2seq"}}).find("key 'arch'"), std::string::npos);
  EXPECT_NE(read(json{{"dtype", "f16"}}).find("key 'dtype'"), std::string::npos);
  EXPECT_NE(read(json{{"seed", -1}}).find("key 'seed'"), std::string::npos);
  EXPECT_NE(read(json::array()).find("JSON object"), std::string::npos);
}

TEST(ModelConfig, ValidationNamesEachProblem) {
  struct Case {
    std::function<void(ModelConfig&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](ModelConfig& c) { c.n_heads = 3; }, "d_model 512 is not divisible by n_heads 3"},
      {[](ModelConfig& c) { c.d_model = 0; }, "d_model must be positive"},
      {[](ModelConfig& c) { c.n_heads = 0; }, "n_heads must be positive"},
      {[](ModelConfig& c) { c.d_ff = -4; }, "d_ff must be positive"},
      {[](ModelConfig& c) { c.n_encoder_layers = 0; }, "n_encoder_layers must be at least 1 for encoder_decoder"},
      {[](ModelConfig& c) { c.n_decoder_layers = 0; }, "n_decoder_layers must be at least 1 for encoder_decoder"},
      {[](ModelConfig& c) { c.arch = Arch::DecoderOnly; c.n_decoder_layers = 0; }, "n_decoder_layers must be at least 1 for decoder_only"},
      {[](ModelConfig& c) { c.arch = Arch::EncoderOnly; c.n_encoder_layers = 0; }, "n_encoder_layers must be at least 1 for encoder_only"},
      {[](ModelConfig& c) { c.n_encoder_layers = -1; }, "n_encoder_layers must not be negative"},
      {[](ModelConfig& c) { c.dropout = 1.0; }, "dropout must be in [0, 1)"},
      {[](ModelConfig& c) { c.dropout = -0.1; }, "dropout must be in [0, 1)"},
      {[](ModelConfig& c) { c.attention_dropout = 1.5; }, "attention_dropout must be in [0, 1)"},
      {[](ModelConfig& c) { c.norm_eps = 0; }, "norm_eps must be positive"},
      {[](ModelConfig& c) { c.max_len = 0; }, "max_len must be positive"},
      {[](ModelConfig& c) { c.src_vocab_size = 0; }, "src_vocab_size must be positive"},
      {[](ModelConfig& c) { c.tgt_vocab_size = 0; c.share_embeddings = false; }, "tgt_vocab_size must be positive"},
      {[](ModelConfig& c) { c.tgt_vocab_size = 100; }, "share_embeddings needs equal vocabularies"},
      {[](ModelConfig& c) { c.arch = Arch::DecoderOnly; c.tgt_vocab_size = 5; }, "tgt_vocab_size must be 0 or equal"},
      {[](ModelConfig& c) { c.pad_id = 37000; }, "pad_id 37000 is outside [0, 37000)"},
      {[](ModelConfig& c) { c.eos_id = -2; }, "eos_id -2"},
      {[](ModelConfig& c) { c.dtype = DType::I64; }, "dtype must be f32 or f64"},
  };
  for (const auto& k : cases) {
    ModelConfig c;
    k.edit(c);
    const std::string err = error_of([&] { c.validate(); });
    EXPECT_NE(err.find(k.message), std::string::npos) << "expected '" << k.message << "', got '" << err << "'";
  }
  ModelConfig different;
  different.tgt_vocab_size = 100;
  different.share_embeddings = false;
  EXPECT_NO_THROW(different.validate());
}

TEST(ModelConfig, LayerOptionsCarryTheStackHyperParameters) {
  ModelConfig c = ModelConfig::seed_small();
  c.norm_first = true;
  c.norm = nn::NormKind::RMS;
  const nn::LayerOptions o = c.layer_options();
  EXPECT_EQ(o.d_model, 64);
  EXPECT_EQ(o.n_heads, 4);
  EXPECT_EQ(o.d_ff, 256);
  EXPECT_TRUE(o.norm_first);
  EXPECT_EQ(o.norm, nn::NormKind::RMS);
}

}  // namespace
}  // namespace attn::models
