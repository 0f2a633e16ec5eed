// Quantized models (nn/quantize.h, models::quantize_model_folder): int8 and bf16 logits of every
// family stay within a stated bound of float32 (max |delta logit| and the mean KL divergence of
// the next-token distributions), with a control showing the bound catches a scale taken from the
// wrong row; the folder round trip (tensor names, dtypes, tied weights stored once, the same
// logits bit for bit after loading, other files copied); the layout of the quantized modules;
// and the errors: a quantized folder without the config key and the reverse, a wrong dtype or
// shape, -128 in int8 weights, NaN/Inf weights, quantizing twice, an f64 model, an unknown kind,
// training a quantized model.
#include "attn/models/checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "attn/core/autograd.h"
#include "attn/core/storage.h"
#include "attn/io/atomic_file.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "attn/models/encoder_only.h"
#include "attn/models/factory.h"
#include "attn/nn/linear.h"
#include "attn/nn/quantize.h"
#include "attn/ops/ops.h"
#include "attn/ops/quantize.h"
#include "support/error_of.h"
#include "unit/models/broken_checkpoints.h"

namespace attn::models {
namespace {

using test_util::TempDir;
using attn::test::error_of;

ModelConfig small(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.d_model = 64;
  c.n_heads = 4;
  c.n_encoder_layers = 2;
  c.n_decoder_layers = 2;
  c.d_ff = 128;
  c.dropout = 0.0;
  c.attention_dropout = 0.0;
  c.src_vocab_size = 50;
  c.tgt_vocab_size = arch == Arch::EncoderDecoder ? 50 : 0;
  c.seed = 3;
  return c;
}

Tensor ids(const std::vector<int64_t>& v, int64_t B) {
  return Tensor::from_vector<int64_t>(v, {B, static_cast<int64_t>(v.size()) / B});
}

// Logits [B, T, V] of a model of any family on fixed inputs, in eval mode without gradients.
Tensor logits_of(Model& m) {
  NoGradGuard no_grad;
  m.eval();
  const Tensor src = ids({1, 5, 9, 12, 33, 2, 1, 7, 8, 40, 41, 2}, 2);
  const Tensor tgt = ids({1, 14, 15, 16, 17, 1, 20, 21, 22, 23}, 2);
  if (auto* ed = dynamic_cast<EncoderDecoderModel*>(&m)) return ed->forward(src, tgt);
  if (auto* lm = dynamic_cast<DecoderOnlyModel*>(&m)) return lm->forward(src);
  return dynamic_cast<EncoderOnlyModel&>(m).forward(src);
}

struct Delta {
  double max_abs = 0.0;  // max |logit - reference logit|
  double mean_kl = 0.0;  // mean over positions of KL(softmax(reference) || softmax(logits))
  double ref_range = 0.0;  // max |reference logit|
};

Delta compare(const Tensor& ref, const Tensor& got) {
  const auto a = ref.to_vector<double>(), b = got.to_vector<double>();
  const int64_t V = ref.size(-1), rows = ref.numel() / V;
  Delta d;
  for (int64_t r = 0; r < rows; ++r) {
    double ma = -1e300, mb = -1e300;
    for (int64_t v = 0; v < V; ++v) {
      ma = std::max(ma, a[r * V + v]);
      mb = std::max(mb, b[r * V + v]);
      d.max_abs = std::max(d.max_abs, std::fabs(a[r * V + v] - b[r * V + v]));
      d.ref_range = std::max(d.ref_range, std::fabs(a[r * V + v]));
    }
    double za = 0.0, zb = 0.0;
    for (int64_t v = 0; v < V; ++v) {
      za += std::exp(a[r * V + v] - ma);
      zb += std::exp(b[r * V + v] - mb);
    }
    double kl = 0.0;
    for (int64_t v = 0; v < V; ++v) {
      const double lpa = a[r * V + v] - ma - std::log(za), lpb = b[r * V + v] - mb - std::log(zb);
      kl += std::exp(lpa) * (lpa - lpb);
    }
    d.mean_kl += kl / static_cast<double>(rows);
  }
  return d;
}

// The bounds, relative to the largest float32 logit |l|max of these random-init models (two
// layers per stack, d_model 64). Measured: max |delta logit| / |l|max <= 0.023 for int8 (per-row
// steps of amax/127 on weights and activations) and <= 0.0068 for bf16 (8 significant bits);
// mean KL <= 1.9e-4 nats (int8) and 1.6e-5 (bf16). The bounds leave a factor of 2 to 6.
constexpr double kInt8Rel = 0.05, kBf16Rel = 0.02, kInt8Kl = 1e-3, kBf16Kl = 1e-4;

TEST(QuantizedModel, LogitsOfEveryFamilyStayNearFloat32) {
  for (Arch arch : {Arch::EncoderDecoder, Arch::DecoderOnly, Arch::EncoderOnly}) {
    for (Quantization q : {Quantization::Int8, Quantization::BF16}) {
      auto model = make_model(small(arch));
      const Tensor ref = logits_of(*model);
      model->quantize(q);
      EXPECT_EQ(model->config().quantization, q);
      const Delta d = compare(ref, logits_of(*model));
      const double rel = q == Quantization::Int8 ? kInt8Rel : kBf16Rel;
      EXPECT_LE(d.max_abs, rel * d.ref_range) << arch_name(arch) << " " << quantization_name(q);
      EXPECT_LE(d.mean_kl, q == Quantization::Int8 ? kInt8Kl : kBf16Kl) << arch_name(arch) << " " << quantization_name(q);
      EXPECT_GT(d.max_abs, 0.0) << "the quantized model must actually differ";
      const std::string key = std::string(arch_name(arch)) + "_" + quantization_name(q);
      RecordProperty(key + "_max_abs_rel", std::to_string(d.max_abs / d.ref_range));
      RecordProperty(key + "_mean_kl", std::to_string(d.mean_kl));
    }
  }
}

TEST(QuantizedModel, ControlScalesOfTheWrongRowBreakTheBound) {
  auto model = make_model(small(Arch::DecoderOnly));
  const Tensor ref = logits_of(*model);
  model->quantize(Quantization::Int8);
  // Shift every scale vector by one row: each output row is dequantized with its neighbour's scale.
  for (auto& [name, t] : model->named_parameters()) {
    if (name.size() < 6 || name.compare(name.size() - 6, 6, "_scale") != 0) continue;
    std::vector<float> s = t.to_vector<float>();
    std::rotate(s.begin(), s.begin() + 1, s.end());
    for (size_t i = 0; i < s.size(); ++i) t.data<float>()[i] = s[i];
  }
  const Delta d = compare(ref, logits_of(*model));
  EXPECT_GT(d.max_abs, kInt8Rel * d.ref_range);
}

TEST(QuantizedModel, LayoutNamesDtypesAndTiedWeights) {
  auto model = make_model(small(Arch::EncoderDecoder));  // shared embeddings, tied output
  model->quantize(Quantization::Int8);
  std::map<std::string, Tensor> p;
  for (auto& [n, t] : model->named_parameters()) p[n] = t;
  EXPECT_EQ(p.at("src_embedding.weight").dtype(), DType::I8);
  EXPECT_EQ(p.at("src_embedding.weight_scale").shape(), (Shape{50}));
  EXPECT_EQ(p.at("encoder.layers.0.self_attn.in_proj_weight").dtype(), DType::I8);
  EXPECT_EQ(p.at("encoder.layers.0.self_attn.in_proj_weight_scale").shape(), (Shape{192}));
  EXPECT_EQ(p.at("encoder.layers.0.self_attn.out_proj.weight").dtype(), DType::I8);
  EXPECT_EQ(p.at("encoder.layers.0.linear1.weight_scale").shape(), (Shape{128}));
  EXPECT_EQ(p.at("encoder.layers.0.linear1.bias").dtype(), DType::F32);
  EXPECT_EQ(p.at("encoder.layers.0.norm1.weight").dtype(), DType::F32);
  // Tied: the target embedding and the generator share the source table and its scales.
  EXPECT_EQ(p.count("tgt_embedding.weight"), 0u);
  EXPECT_EQ(p.count("generator.weight_scale"), 0u);
  EXPECT_TRUE(model->parameter("generator.weight").same(p.at("src_embedding.weight")));
  EXPECT_TRUE(model->parameter("generator.weight_scale").same(p.at("src_embedding.weight_scale")));

  auto bf = make_model(small(Arch::EncoderDecoder));
  bf->quantize(Quantization::BF16);
  EXPECT_EQ(bf->parameter("src_embedding.weight").dtype(), DType::BF16);
  EXPECT_THROW(bf->parameter("src_embedding.weight_scale"), Error);
}

// A quantized layout for a loader (make_model with ModelInit::None, what loading a quantized
// folder builds) never allocates the float32 copies of the weights it quantizes: the storage
// cache, where freed blocks wait, does not grow by their bytes, every parameter has its memory,
// and the tensors are those of the old layout, value for value. Control: the same layout made the old
// way (a float model, then prepare_quantized_module) frees at least those bytes into the cache.
TEST(QuantizedModel, ALoaderLayoutAllocatesNoFloatCopyOfTheQuantizedWeights) {
  for (Arch arch : {Arch::EncoderDecoder, Arch::DecoderOnly, Arch::EncoderOnly})
    for (Quantization q : {Quantization::Int8, Quantization::BF16}) {
      SCOPED_TRACE(std::string(arch_name(arch)) + " " + quantization_name(q));
      ModelConfig c = small(arch);
      c.d_model = 256;  // weights large enough to dwarf any other block
      c.d_ff = 1024;
      c.quantization = q;
      int64_t quantized_float_bytes = 0;  // what their float32 copies would take
      release_cached_memory();  // an empty cache: every block freed from here on stays in it
      const size_t before = storage_cache_stats().cached_bytes;
      auto model = make_model(c, ModelInit::None);
      const size_t grew = storage_cache_stats().cached_bytes - std::min(before, storage_cache_stats().cached_bytes);
      for (auto& [name, t] : model->named_parameters()) {
        ASSERT_NE(t.impl_ptr()->storage->data(), nullptr) << name << " has no memory";
        if (t.dtype() == DType::I8 || t.dtype() == DType::BF16) quantized_float_bytes += t.numel() * 4;
      }
      ASSERT_GT(quantized_float_bytes, 4 << 20);
      EXPECT_LT(static_cast<int64_t>(grew), quantized_float_bytes / 8) << "float copies were made and freed";

      ModelConfig f = c;
      f.quantization = Quantization::None;
      release_cached_memory();
      const size_t before_old = storage_cache_stats().cached_bytes;
      auto old_way = make_model(f, ModelInit::None);
      nn::prepare_quantized_module(*old_way, q);
      const size_t grew_old = storage_cache_stats().cached_bytes - std::min(before_old, storage_cache_stats().cached_bytes);
      EXPECT_GE(static_cast<int64_t>(grew_old), quantized_float_bytes) << "control: the float copies land in the cache";
      // Both layouts hold the same tensors with the same values (zeros, norms' ones, scales' ones).
      std::map<std::string, Tensor> old_params;
      for (auto& [name, t] : old_way->named_parameters()) old_params[name] = t;
      for (auto& [name, t] : model->named_parameters()) {
        ASSERT_EQ(old_params.count(name), 1u) << name;
        EXPECT_EQ(t.dtype(), old_params.at(name).dtype()) << name;
        EXPECT_EQ(t.to_vector<double>(), old_params.at(name).to_vector<double>()) << name;
      }
    }
}

TEST(QuantizedModel, FolderRoundTripGivesTheSameLogitsBitForBit) {
  TempDir tmp;
  const std::string src = tmp.file("m");
  auto model = make_model(small(Arch::EncoderDecoder));
  save_model(src, *model, {{"vocab.json", "{\"x\": 1}"}, {"train_config.json", "{}"}});
  for (Quantization q : {Quantization::Int8, Quantization::BF16}) {
    const std::string out = quantize_model_folder(src, "", q);
    EXPECT_EQ(out, src + "-" + quantization_name(q));
    EXPECT_EQ(io::read_file(out + "/vocab.json"), "{\"x\": 1}");
    EXPECT_EQ(io::read_file(out + "/train_config.json"), "{}");
    const auto cfg = nlohmann::json::parse(io::read_file(out + "/config.json"));
    EXPECT_EQ(cfg.at("quantization"), quantization_name(q));
    const LoadedCheckpoint loaded = load_checkpoint(out);
    std::map<std::string, std::string> dtypes;
    for (const auto& t : loaded.tensors) dtypes[t.name] = t.dtype;
    EXPECT_EQ(dtypes.at("src_embedding.weight"), q == Quantization::Int8 ? "I8" : "BF16");
    EXPECT_EQ(dtypes.count("src_embedding.weight_scale"), q == Quantization::Int8 ? 1u : 0u);
    EXPECT_EQ(dtypes.count("generator.weight"), 0u);  // tied: stored once
    EXPECT_EQ(dtypes.at("decoder.layers.1.linear2.bias"), "F32");
    auto in_memory = load_model(src);
    in_memory->quantize(q);
    const auto a = logits_of(*in_memory).to_vector<float>(), b = logits_of(*loaded.model).to_vector<float>();
    EXPECT_EQ(a, b) << quantization_name(q);
  }
  // A float folder's config has no "quantization" key: existing folders stay as they were.
  EXPECT_FALSE(nlohmann::json::parse(io::read_file(src + "/config.json")).contains("quantization"));
}

std::string rewrite_config(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  auto j = nlohmann::json::parse(io::read_file(dir + "/config.json"));
  edit(j);
  io::write_file_atomic(dir + "/config.json", j.dump(2));
  return dir;
}

TEST(QuantizedModel, MismatchesBetweenConfigAndWeightsAreClearErrors) {
  TempDir tmp;
  const std::string src = tmp.file("m");
  save_model(src, *make_model(small(Arch::DecoderOnly)));
  const std::string q8 = quantize_model_folder(src, tmp.file("q8"), Quantization::Int8);
  // Quantized tensors without the config key.
  rewrite_config(q8, [](nlohmann::json& j) { j.erase("quantization"); });
  std::string e = error_of([&] { load_model(q8); });
  EXPECT_NE(e.find("(quantized) in the file, but config.json has no \"quantization\" key"), std::string::npos) << e;
  // The reverse: a float folder whose config says int8.
  const std::string f = tmp.file("f");
  save_model(f, *make_model(small(Arch::DecoderOnly)));
  rewrite_config(f, [](nlohmann::json& j) { j["quantization"] = "int8"; });
  e = error_of([&] { load_model(f); });
  EXPECT_NE(e.find("dtype F32 in the file, but config.json says \"quantization\": \"int8\", which stores it as I8"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("weight_scale': missing from the file"), std::string::npos) << e;
  // An int8 folder whose config says bf16.
  rewrite_config(q8, [](nlohmann::json& j) { j["quantization"] = "bf16"; });
  e = error_of([&] { load_model(q8); });
  EXPECT_NE(e.find("dtype I8 in the file, but config.json says \"quantization\": \"bf16\""), std::string::npos) << e;
  EXPECT_NE(e.find("weight_scale': unexpected"), std::string::npos) << e;
  // Unknown kinds and quantization of an f64 model.
  rewrite_config(q8, [](nlohmann::json& j) { j["quantization"] = "int4"; });
  e = error_of([&] { load_model(q8); });
  EXPECT_NE(e.find("unknown quantization 'int4'"), std::string::npos) << e;
  rewrite_config(q8, [](nlohmann::json& j) { j["quantization"] = "int8"; j["dtype"] = "f64"; });
  e = error_of([&] { load_model(q8); });
  EXPECT_NE(e.find("quantization int8 needs dtype f32"), std::string::npos) << e;
}

TEST(QuantizedModel, BadQuantizedValuesAreRefusedOnLoad) {
  TempDir tmp;
  const std::string src = tmp.file("m");
  save_model(src, *make_model(small(Arch::DecoderOnly)));
  const std::string q8 = quantize_model_folder(src, tmp.file("q8"), Quantization::Int8);
  // -128 in an int8 weight (the kernels' exactness needs [-127, 127]), then a NaN scale.
  auto model = load_model(q8);
  model->parameter("layers.0.linear1.weight").data<int8_t>()[3] = -128;
  save_model(tmp.file("bad"), *model);
  std::string e = error_of([&] { load_model(tmp.file("bad")); });
  EXPECT_NE(e.find("'layers.0.linear1.weight' holds -128"), std::string::npos) << e;
  model = load_model(q8);
  model->parameter("layers.1.linear2.weight_scale").data<float>()[0] = NAN;
  save_model(tmp.file("bad"), *model);
  e = error_of([&] { load_model(tmp.file("bad")); });
  EXPECT_NE(e.find("of 'layers.1.linear2.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("scales must be finite"), std::string::npos) << e;
  // A scale of the wrong shape.
  model = load_model(q8);
  const auto fixed = model->named_parameters();
  nn::NamedTensors edited;
  for (const auto& [n, t] : fixed) edited.emplace_back(n, n == "layers.0.linear1.weight_scale" ? Tensor::ones({3}) : t);
  io::save_safetensors(test_util::weights_path(tmp.file("bad")), edited);
  e = error_of([&] { load_model(tmp.file("bad")); });
  EXPECT_NE(e.find("'layers.0.linear1.weight_scale': shape [3] in the file"), std::string::npos) << e;
}

TEST(QuantizedModel, QuantizeErrorsNameTheProblem) {
  TempDir tmp;
  const std::string src = tmp.file("m");
  auto model = make_model(small(Arch::DecoderOnly));
  save_model(src, *model);
  const std::string q8 = quantize_model_folder(src, tmp.file("q8"), Quantization::Int8);
  std::string e = error_of([&] { quantize_model_folder(q8, tmp.file("again"), Quantization::BF16); });
  EXPECT_NE(e.find("is quantized already (\"quantization\": \"int8\")"), std::string::npos) << e;
  e = error_of([&] { quantize_model_folder(src, src, Quantization::Int8); });
  EXPECT_NE(e.find("is the model folder itself"), std::string::npos) << e;
  e = error_of([&] { (void)parse_quantization("int4"); });
  EXPECT_NE(e.find("unknown quantization 'int4' (expected int8 or bf16)"), std::string::npos) << e;
  // A NaN weight, named with its row and column.
  model->parameter("layers.1.linear2.weight").data<float>()[2 * 128 + 5] = INFINITY;  // [64, 128]
  save_model(tmp.file("nan"), *model);
  e = error_of([&] { quantize_model_folder(tmp.file("nan"), tmp.file("nan-q"), Quantization::BF16); });
  EXPECT_NE(e.find("'layers.1.linear2.weight' holds inf at row 2, column 5"), std::string::npos) << e;
  // An f64 model.
  ModelConfig c64 = small(Arch::DecoderOnly);
  c64.dtype = DType::F64;
  e = error_of([&] { make_model(c64)->quantize(Quantization::Int8); });
  EXPECT_NE(e.find("only f32 models can be quantized"), std::string::npos) << e;
}

TEST(QuantizedModel, TrainingAQuantizedModelIsRefused) {
  auto model = make_model(small(Arch::DecoderOnly));
  model->quantize(Quantization::Int8);
  model->train();
  auto& lm = dynamic_cast<DecoderOnlyModel&>(*model);
  const std::string e = error_of([&] { lm.forward(ids({1, 2, 3}, 1)); });
  EXPECT_NE(e.find("run under NoGradGuard"), std::string::npos) << e;
}

}  // namespace
}  // namespace attn::models
