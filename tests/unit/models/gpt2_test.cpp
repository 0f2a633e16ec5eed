// GPT-2 checkpoint folders: config.json translation, logits of a loaded folder against a
// brute-force GPT-2 written over the file's own tensors (Conv1D layout, double loops), the
// "transformer." prefix and tied head, F16/BF16 widening, save/load round trips, and every
// strict-loading error (missing, unexpected, repeated, mis-shaped tensors, bad configs,
// missing files). The live PyTorch comparison is tests/torch/gpt2_torch_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/core/rng.h"
#include "attn/io/atomic_file.h"
#include "attn/io/safetensors.h"
#include "attn/models/checkpoint.h"
#include "attn/models/gpt2.h"
#include "support/expect_close.h"

namespace attn::models {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Weights = std::map<std::string, Tensor>;  // Hugging Face name -> tensor (file layout)

struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/attn_gpt2_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
    path = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

// The test model: D=8, 2 heads, 2 layers, F=12, 6 positions, vocabulary 11.
struct Dims {
  int64_t D = 8, H = 2, L = 2, F = 12, P = 6, V = 11;
};

// A Hugging Face config.json for `d`, with some of the keys real configs carry and we ignore.
json hf_config(const Dims& d) {
  return json{{"architectures", {"GPT2LMHeadModel"}},
              {"model_type", "gpt2"},
              {"activation_function", "gelu_new"},
              {"n_embd", d.D},
              {"n_head", d.H},
              {"n_layer", d.L},
              {"n_inner", d.F},
              {"n_positions", d.P},
              {"n_ctx", d.P},
              {"vocab_size", d.V},
              {"layer_norm_epsilon", 1e-5},
              {"attn_pdrop", 0.1},
              {"embd_pdrop", 0.1},
              {"resid_pdrop", 0.1},
              {"bos_token_id", d.V - 1},
              {"eos_token_id", d.V - 1},
              {"initializer_range", 0.02},
              {"summary_type", "cls_index"},
              {"task_specific_params", {{"text-generation", {{"do_sample", true}, {"max_length", 50}}}}},
              {"use_cache", true}};
}

// Values k/64 with small integer k: exact in F32, F16 and BF16.
Tensor dyadic(const Shape& shape, Rng& rng, double offset = 0.0) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) {
    const int k = static_cast<int>(rng.next_u64() % 129) - 64;  // -64 .. 64
    x = static_cast<float>(offset + k / 64.0);
  }
  return Tensor::from_vector<float>(v, shape);
}

// Random GPT-2 weights under Hugging Face's names and shapes (Conv1D weights [in, out]).
Weights hf_weights(const Dims& d, uint64_t seed = 1) {
  Rng rng(seed);
  Weights w;
  w["wte.weight"] = dyadic({d.V, d.D}, rng);
  w["wpe.weight"] = dyadic({d.P, d.D}, rng);
  for (int64_t l = 0; l < d.L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    w[h + "ln_1.weight"] = dyadic({d.D}, rng, 1.0);
    w[h + "ln_1.bias"] = dyadic({d.D}, rng);
    w[h + "attn.c_attn.weight"] = dyadic({d.D, 3 * d.D}, rng);
    w[h + "attn.c_attn.bias"] = dyadic({3 * d.D}, rng);
    w[h + "attn.c_proj.weight"] = dyadic({d.D, d.D}, rng);
    w[h + "attn.c_proj.bias"] = dyadic({d.D}, rng);
    w[h + "ln_2.weight"] = dyadic({d.D}, rng, 1.0);
    w[h + "ln_2.bias"] = dyadic({d.D}, rng);
    w[h + "mlp.c_fc.weight"] = dyadic({d.D, d.F}, rng);
    w[h + "mlp.c_fc.bias"] = dyadic({d.F}, rng);
    w[h + "mlp.c_proj.weight"] = dyadic({d.F, d.D}, rng);
    w[h + "mlp.c_proj.bias"] = dyadic({d.D}, rng);
  }
  w["ln_f.weight"] = dyadic({d.D}, rng, 1.0);
  w["ln_f.bias"] = dyadic({d.D}, rng);
  return w;
}

void write_folder(const std::string& dir, const json& config, const Weights& w, const std::string& prefix = "") {
  fs::create_directories(dir);
  io::NamedTensors named;
  for (const auto& [name, t] : w) named.emplace_back(name == "lm_head.weight" ? name : prefix + name, t);
  io::save_safetensors(dir + "/model.safetensors", named);
  io::write_file_atomic(dir + "/config.json", config.dump(2));
}

// ---- the brute-force reference -----------------------------------------------------------------

using Mat = std::vector<std::vector<double>>;  // [rows][cols]

Mat mat(const Tensor& t) {
  const auto v = t.to_vector<double>();
  const int64_t cols = t.size(t.dim() - 1), rows = t.numel() / cols;
  Mat m(static_cast<size_t>(rows), std::vector<double>(static_cast<size_t>(cols)));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) m[r][c] = v[static_cast<size_t>(r * cols + c)];
  return m;
}

Mat layer_norm_rows(const Mat& x, const Tensor& w, const Tensor& b, double eps) {
  const auto g = w.to_vector<double>(), be = b.to_vector<double>();
  Mat y = x;
  for (auto& row : y) {
    double mean = 0, var = 0;
    for (double v : row) mean += v;
    mean /= static_cast<double>(row.size());
    for (double v : row) var += (v - mean) * (v - mean);
    var /= static_cast<double>(row.size());
    for (size_t i = 0; i < row.size(); ++i) row[i] = (row[i] - mean) / std::sqrt(var + eps) * g[i] + be[i];
  }
  return y;
}

// Conv1D: y = x W + b with W [in, out].
Mat conv1d(const Mat& x, const Tensor& w, const Tensor& b) {
  const Mat W = mat(w);
  const auto bias = b.to_vector<double>();
  Mat y(x.size(), std::vector<double>(bias.size()));
  for (size_t t = 0; t < x.size(); ++t)
    for (size_t j = 0; j < bias.size(); ++j) {
      double s = bias[j];
      for (size_t i = 0; i < x[t].size(); ++i) s += x[t][i] * W[i][j];
      y[t][j] = s;
    }
  return y;
}

// GPT-2 on one sequence, straight from the file tensors: logits [T][V].
Mat brute_force_gpt2(const Weights& w, const Dims& d, const std::vector<int64_t>& ids, const Tensor* head = nullptr) {
  const Mat wte = mat(w.at("wte.weight")), wpe = mat(w.at("wpe.weight"));
  const size_t T = ids.size(), D = static_cast<size_t>(d.D), Dh = D / static_cast<size_t>(d.H);
  Mat x(T, std::vector<double>(D));
  for (size_t t = 0; t < T; ++t)
    for (size_t i = 0; i < D; ++i) x[t][i] = wte[static_cast<size_t>(ids[t])][i] + wpe[t][i];
  for (int64_t l = 0; l < d.L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    const Mat qkv = conv1d(layer_norm_rows(x, w.at(h + "ln_1.weight"), w.at(h + "ln_1.bias"), 1e-5),
                           w.at(h + "attn.c_attn.weight"), w.at(h + "attn.c_attn.bias"));  // [T][q | k | v]
    Mat y(T, std::vector<double>(D, 0.0));
    for (size_t head_i = 0; head_i < static_cast<size_t>(d.H); ++head_i) {
      const size_t o = head_i * Dh;
      for (size_t t = 0; t < T; ++t) {
        std::vector<double> s(t + 1);
        double m = -INFINITY, z = 0;
        for (size_t u = 0; u <= t; ++u) {  // causal: keys u <= t
          double dot = 0;
          for (size_t e = 0; e < Dh; ++e) dot += qkv[t][o + e] * qkv[u][D + o + e];
          s[u] = dot / std::sqrt(static_cast<double>(Dh));
          m = std::max(m, s[u]);
        }
        for (double& v : s) z += (v = std::exp(v - m));
        for (size_t u = 0; u <= t; ++u)
          for (size_t e = 0; e < Dh; ++e) y[t][o + e] += s[u] / z * qkv[u][2 * D + o + e];
      }
    }
    const Mat a = conv1d(y, w.at(h + "attn.c_proj.weight"), w.at(h + "attn.c_proj.bias"));
    for (size_t t = 0; t < T; ++t)
      for (size_t i = 0; i < D; ++i) x[t][i] += a[t][i];
    Mat f = conv1d(layer_norm_rows(x, w.at(h + "ln_2.weight"), w.at(h + "ln_2.bias"), 1e-5),
                   w.at(h + "mlp.c_fc.weight"), w.at(h + "mlp.c_fc.bias"));
    for (auto& row : f)
      for (double& v : row) v = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    const Mat mlp = conv1d(f, w.at(h + "mlp.c_proj.weight"), w.at(h + "mlp.c_proj.bias"));
    for (size_t t = 0; t < T; ++t)
      for (size_t i = 0; i < D; ++i) x[t][i] += mlp[t][i];
  }
  x = layer_norm_rows(x, w.at("ln_f.weight"), w.at("ln_f.bias"), 1e-5);
  const Mat out_w = head ? mat(*head) : wte;  // [V][D]
  Mat logits(T, std::vector<double>(static_cast<size_t>(d.V)));
  for (size_t t = 0; t < T; ++t)
    for (size_t v = 0; v < static_cast<size_t>(d.V); ++v) {
      double s = 0;
      for (size_t i = 0; i < D; ++i) s += x[t][i] * out_w[v][i];
      logits[t][v] = s;
    }
  return logits;
}

// The brute-force logits of every row of `ids` as a [B, T, V] tensor.
Tensor reference_logits(const Weights& w, const Dims& d, const std::vector<std::vector<int64_t>>& ids,
                        const Tensor* head = nullptr) {
  std::vector<double> flat;
  for (const auto& row : ids)
    for (const auto& logits : brute_force_gpt2(w, d, row, head)) flat.insert(flat.end(), logits.begin(), logits.end());
  const auto B = static_cast<int64_t>(ids.size()), T = static_cast<int64_t>(ids[0].size());
  return Tensor::from_vector<double>(flat, {B, T, d.V});
}

const std::vector<std::vector<int64_t>> kIds = {{3, 1, 4, 1, 5, 9}, {10, 0, 2, 7, 7, 6}};
Tensor ids_tensor() { return Tensor::from_vector<int64_t>({3, 1, 4, 1, 5, 9, 10, 0, 2, 7, 7, 6}, {2, 6}); }

Tensor run(DecoderOnlyModel& model) {
  NoGradGuard no_grad;
  return model.forward(ids_tensor());
}

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

// ---- config.json ------------------------------------------------------------------------------

TEST(Gpt2, ConfigOfGpt2SmallTranslatesEveryKey) {
  const json hf = json::parse(R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12,
    "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": null, "summary_first_dropout": 0.1,
    "summary_proj_to_labels": true, "summary_type": "cls_index", "summary_use_proj": true,
    "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}}, "vocab_size": 50257})");
  const ModelConfig c = gpt2_config_from_json(hf);
  EXPECT_EQ(c.arch, Arch::DecoderOnly);
  EXPECT_EQ(c.d_model, 768);
  EXPECT_EQ(c.n_heads, 12);
  EXPECT_EQ(c.n_decoder_layers, 12);
  EXPECT_EQ(c.d_ff, 3072);  // n_inner absent: 4 n_embd
  EXPECT_EQ(c.max_len, 1024);
  EXPECT_EQ(c.vocab_size(), 50257);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_EQ(c.activation, nn::Activation::GELUTanh);
  EXPECT_TRUE(c.norm_first);
  EXPECT_TRUE(c.final_norm);
  EXPECT_EQ(c.norm, nn::NormKind::Layer);
  EXPECT_EQ(c.positional, nn::PositionalKind::Learned);
  EXPECT_TRUE(c.tie_output);
  EXPECT_FALSE(c.scale_embeddings);
  EXPECT_EQ(c.pad_id, -1);
  EXPECT_EQ(c.bos_id, 50256);
  EXPECT_EQ(c.eos_id, 50256);
  EXPECT_EQ(c.dtype, DType::F32);
  EXPECT_EQ(gpt2_config_from_json(hf, DType::F64).dtype, DType::F64);

  json other = hf;
  other["n_inner"] = 100;
  other["activation_function"] = "gelu";
  other.erase("bos_token_id");
  other["eos_token_id"] = nullptr;
  const ModelConfig o = gpt2_config_from_json(other);
  EXPECT_EQ(o.d_ff, 100);
  EXPECT_EQ(o.activation, nn::Activation::GELU);
  EXPECT_EQ(o.bos_id, -1);
  EXPECT_EQ(o.eos_id, -1);
}

TEST(Gpt2, ConfigErrorsNameTheKey) {
  const json base = hf_config(Dims{});
  auto with = [&](const std::string& key, const json& value) {
    json j = base;
    if (value.is_discarded()) j.erase(key);
    else j[key] = value;
    return j;
  };
  const json erase = json(json::value_t::discarded);
  expect_error([&] { gpt2_config_from_json(with("n_embd", erase)); }, {"lacks the key 'n_embd'"});
  expect_error([&] { gpt2_config_from_json(with("n_layer", "two")); }, {"n_layer"});
  expect_error([&] { gpt2_config_from_json(with("n_head", 3)); }, {"'n_embd' 8 is not divisible by 'n_head' 3"});
  expect_error([&] { gpt2_config_from_json(with("n_positions", 0)); }, {"'n_positions' must be positive"});
  expect_error([&] { gpt2_config_from_json(with("activation_function", "swish")); }, {"activation_function", "swish"});
  expect_error([&] { gpt2_config_from_json(with("model_type", "llama")); }, {"model_type", "llama"});
  expect_error([&] { gpt2_config_from_json(with("scale_attn_by_inverse_layer_idx", true)); },
               {"scale_attn_by_inverse_layer_idx"});
  expect_error([&] { gpt2_config_from_json(with("scale_attn_weights", false)); }, {"scale_attn_weights"});
  expect_error([&] { gpt2_config_from_json(with("add_cross_attention", true)); }, {"add_cross_attention"});
  expect_error([&] { gpt2_config_from_json(with("eos_token_id", 11)); }, {"'eos_token_id' 11 is outside [0, 11)"});
  expect_error([&] { gpt2_config_from_json(with("layer_norm_epsilon", -1.0)); }, {"layer_norm_epsilon"});
  expect_error([&] { gpt2_config_from_json(json::array()); }, {"JSON object"});
}

TEST(Gpt2, ConfigToJsonRejectsWhatGpt2CannotExpress) {
  const ModelConfig c = gpt2_config_from_json(hf_config(Dims{}));
  EXPECT_EQ(gpt2_config_from_json(gpt2_config_to_json(c)).to_json(), c.to_json());
  auto bad = [&](const std::function<void(ModelConfig&)>& change, const std::string& part) {
    ModelConfig x = c;
    change(x);
    expect_error([&] { gpt2_config_to_json(x); }, {part});
  };
  bad([](ModelConfig& x) { x.norm_first = false; }, "norm_first");
  bad([](ModelConfig& x) { x.scale_embeddings = true; }, "scale_embeddings");
  bad([](ModelConfig& x) { x.positional = nn::PositionalKind::Sinusoidal; }, "positional");
  bad([](ModelConfig& x) { x.pad_id = 0; }, "pad_id");
  bad([](ModelConfig& x) { x.arch = Arch::EncoderOnly; }, "decoder_only");
}

// ---- loading against the brute force -------------------------------------------------------

TEST(Gpt2, LoadedLogitsMatchABruteForceGpt2OverTheFileTensors) {
  const Dims d;
  const Weights w = hf_weights(d);
  TempDir dir;
  write_folder(dir.path, hf_config(d), w);
  const Tensor expected = reference_logits(w, d, kIds);  // [B, T, V]

  auto f64 = load_gpt2_model(dir.path, DType::F64);
  EXPECT_FALSE(f64->is_training());
  EXPECT_EQ(f64->config().dtype, DType::F64);
  EXPECT_TRUE(test::all_close(run(*f64), expected, 1e-10, 0.0, "f64 logits"));

  auto f32 = load_gpt2_model(dir.path);
  const Tensor logits = run(*f32);
  EXPECT_EQ(logits.dtype(), DType::F32);
  EXPECT_TRUE(test::all_close(logits, expected, 1e-4, 0.0, "f32 logits"));
}

TEST(Gpt2, PrefixedNamesAndAnEqualLmHeadLoadTheSameModel) {
  const Dims d;
  Weights w = hf_weights(d);
  TempDir plain, prefixed;
  write_folder(plain.path, hf_config(d), w);
  w["lm_head.weight"] = w.at("wte.weight").clone();
  write_folder(prefixed.path, hf_config(d), w, "transformer.");
  const Tensor a = run(*load_gpt2_model(plain.path, DType::F64));
  const Tensor b = run(*load_gpt2_model(prefixed.path, DType::F64));
  EXPECT_TRUE(test::all_close(a, b, 0.0, 0.0, "prefixed"));
}

TEST(Gpt2, AnLmHeadThatDiffersFromWteIsAnErrorUnlessUntied) {
  const Dims d;
  Weights w = hf_weights(d);
  Rng rng(5);
  w["lm_head.weight"] = dyadic({d.V, d.D}, rng);
  TempDir tied, untied;
  write_folder(tied.path, hf_config(d), w);
  expect_error([&] { load_gpt2_model(tied.path); }, {"'lm_head.weight': differs from 'wte.weight'"});

  json config = hf_config(d);
  config["tie_word_embeddings"] = false;
  write_folder(untied.path, config, w);
  auto model = load_gpt2_model(untied.path, DType::F64);
  EXPECT_FALSE(model->config().tie_output);
  const Tensor expected = reference_logits(w, d, kIds, &w.at("lm_head.weight"));
  EXPECT_TRUE(test::all_close(run(*model), expected, 1e-10, 0.0, "untied"));
  w.erase("lm_head.weight");
  write_folder(untied.path, config, w);
  expect_error([&] { load_gpt2_model(untied.path); }, {"'lm_head.weight': missing"});
}

TEST(Gpt2, MaskBuffersOfOlderCheckpointsAreCheckedAndSkipped) {
  const Dims d;
  Weights w = hf_weights(d);
  w["h.0.attn.bias"] = Tensor::ones({1, 1, d.P, d.P});
  w["h.1.attn.bias"] = Tensor::ones({1, 1, d.P, d.P});
  w["h.0.attn.masked_bias"] = Tensor::scalar(-1e4);
  TempDir dir;
  write_folder(dir.path, hf_config(d), w);
  EXPECT_TRUE(test::all_close(run(*load_gpt2_model(dir.path, DType::F64)), reference_logits(w, d, kIds), 1e-10));
  w["h.1.attn.bias"] = Tensor::ones({1, 1, d.P + 1, d.P + 1});
  write_folder(dir.path, hf_config(d), w);
  expect_error([&] { load_gpt2_model(dir.path); }, {"'h.1.attn.bias': shape [1, 1, 7, 7]", "[1, 1, 6, 6]"});
  w.erase("h.1.attn.bias");
  w["h.2.attn.bias"] = Tensor::ones({1, 1, d.P, d.P});  // there is no layer 2
  write_folder(dir.path, hf_config(d), w);
  expect_error([&] { load_gpt2_model(dir.path); }, {"'h.2.attn.bias': unexpected"});
}

// Every float of the F32 tensor as F16 or BF16 bits (the values are exact in both).
std::string as_16bit(const Tensor& t, bool bf16) {
  std::string bytes;
  for (float f : t.to_vector<float>()) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    uint16_t h;
    if (bf16) {
      h = static_cast<uint16_t>(bits >> 16);
    } else if ((bits & 0x7FFFFFFFu) == 0) {
      h = static_cast<uint16_t>(bits >> 16);
    } else {
      const uint32_t exp = ((bits >> 23) & 0xFF) - 127 + 15;
      h = static_cast<uint16_t>(((bits >> 16) & 0x8000u) | (exp << 10) | ((bits & 0x7FFFFFu) >> 13));
    }
    bytes += static_cast<char>(h & 0xFF);
    bytes += static_cast<char>(h >> 8);
  }
  return bytes;
}

// A safetensors file with every tensor stored as F16 or BF16, written by hand.
void write_16bit_weights(const std::string& path, const Weights& w, bool bf16) {
  json header = json::object();
  std::string data;
  for (const auto& [name, t] : w) {
    const std::string bytes = as_16bit(t, bf16);
    header[name] = {{"dtype", bf16 ? "BF16" : "F16"},
                    {"shape", t.shape()},
                    {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data += bytes;
  }
  const std::string h = header.dump();
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((h.size() >> (8 * i)) & 0xFF);
  io::write_file_atomic(path, file + h + data);
}

TEST(Gpt2, HalfAndBfloat16WeightsAreWidened) {
  const Dims d;
  const Weights w = hf_weights(d);
  TempDir f32, f16, bf16;
  write_folder(f32.path, hf_config(d), w);
  write_folder(f16.path, hf_config(d), w);
  write_folder(bf16.path, hf_config(d), w);
  write_16bit_weights(f16.path + "/model.safetensors", w, false);
  write_16bit_weights(bf16.path + "/model.safetensors", w, true);
  const Tensor expected = run(*load_gpt2_model(f32.path));
  EXPECT_TRUE(test::all_close(run(*load_gpt2_model(f16.path)), expected, 0.0, 0.0, "f16"));
  EXPECT_TRUE(test::all_close(run(*load_gpt2_model(bf16.path)), expected, 0.0, 0.0, "bf16"));
  EXPECT_TRUE(test::all_close(run(*load_gpt2_model(f16.path, DType::F64)), reference_logits(w, d, kIds), 1e-10));
}

// ---- round trip --------------------------------------------------------------------------

TEST(Gpt2, SaveThenLoadGivesTheSameModel) {
  ModelConfig c = gpt2_config_from_json(hf_config(Dims{}), DType::F64);
  c.seed = 3;
  DecoderOnlyModel model(c);
  model.eval();
  const io::NamedTensors state = gpt2_state_dict(model);
  ASSERT_EQ(state.size(), 4u + 12u * 2u);
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : state) shapes[name] = t.shape();
  EXPECT_EQ(shapes.at("h.1.attn.c_attn.weight"), (Shape{8, 24}));
  EXPECT_EQ(shapes.at("h.0.mlp.c_fc.weight"), (Shape{8, 12}));
  EXPECT_EQ(shapes.at("h.0.mlp.c_proj.weight"), (Shape{12, 8}));
  EXPECT_EQ(shapes.count("lm_head.weight"), 0u);
  TempDir dir;
  save_gpt2(dir.path, model);
  EXPECT_TRUE(is_gpt2_folder(dir.path));
  auto loaded = load_gpt2_model(dir.path, DType::F64);
  EXPECT_TRUE(test::all_close(run(*loaded), run(model), 0.0, 0.0, "round trip"));
  for (const auto& [name, p] : model.named_parameters())
    EXPECT_TRUE(test::all_close(loaded->parameter(name), p, 0.0, 0.0, name));
}

// ---- strict loading ----------------------------------------------------------------------

TEST(Gpt2, EveryTensorProblemIsListedInOneError) {
  const Dims d;
  Weights w = hf_weights(d);
  w.erase("h.1.mlp.c_fc.bias");                                                // missing
  w["h.0.attn.c_attn.weight"] = Tensor::zeros({3 * d.D, d.D});                 // nn.Linear layout
  w["h.0.attn.rotary.weight"] = Tensor::zeros({2});                            // unknown
  w["ln_f.weight"] = Tensor::zeros({d.D}, DType::I64);                         // integer weights
  TempDir dir;
  write_folder(dir.path, hf_config(d), w);
  expect_error([&] { load_gpt2_model(dir.path); },
               {"(4 problems)", "'h.1.mlp.c_fc.bias': missing from the file", "implies [12]",
                "'h.0.attn.c_attn.weight': shape [24, 8] in the file", "implies [8, 24]",
                "'h.0.attn.rotary.weight': unexpected", "'ln_f.weight': dtype I64 is not supported"});
}

TEST(Gpt2, ATensorGivenWithAndWithoutThePrefixIsAnError) {
  const Dims d;
  const Weights w = hf_weights(d);
  TempDir dir;
  write_folder(dir.path, hf_config(d), w);
  io::NamedTensors named;
  for (const auto& [name, t] : w) named.emplace_back(name, t);
  named.emplace_back("transformer.wpe.weight", w.at("wpe.weight"));
  io::save_safetensors(dir.file("model.safetensors"), named);
  expect_error([&] { load_gpt2_model(dir.path); }, {"repeats", "transformer.wpe.weight", "prefix"});
}

TEST(Gpt2, ConfigAndShapesMustAgree) {
  const Dims d;
  const Weights w = hf_weights(d);
  TempDir dir;
  json config = hf_config(d);
  config["n_layer"] = 3;  // the file has two
  write_folder(dir.path, config, w);
  expect_error([&] { load_gpt2_model(dir.path); }, {"'h.2.ln_1.weight': missing"});
  config["n_layer"] = 2;
  config["vocab_size"] = 12;
  write_folder(dir.path, config, w);
  expect_error([&] { load_gpt2_model(dir.path); }, {"'wte.weight': shape [11, 8] in the file", "implies [12, 8]"});
  config["vocab_size"] = 11;
  config["n_inner"] = nullptr;  // 4 * 8 = 32, but the file has 12
  write_folder(dir.path, config, w);
  expect_error([&] { load_gpt2_model(dir.path); }, {"'h.0.mlp.c_fc.weight'", "implies [8, 32]"});
}

TEST(Gpt2, MissingOrUnreadableFilesAreErrorsNamingThem) {
  TempDir dir;
  expect_error([&] { load_gpt2_model(dir.file("absent")); }, {"not a folder"});
  expect_error([&] { load_gpt2_model(dir.path); }, {"config.json': missing"});
  io::write_file_atomic(dir.file("config.json"), "{\"n_embd\": ");
  expect_error([&] { load_gpt2_model(dir.path); }, {"not valid JSON"});
  io::write_file_atomic(dir.file("config.json"), std::string(100, '[') + std::string(100, ']'));
  expect_error([&] { load_gpt2_model(dir.path); }, {"nested deeper"});
  io::write_file_atomic(dir.file("config.json"), "[1]");
  expect_error([&] { load_gpt2_model(dir.path); }, {"JSON object"});
  io::write_file_atomic(dir.file("config.json"), hf_config(Dims{}).dump());
  expect_error([&] { load_gpt2_model(dir.path); }, {"model.safetensors': missing"});
  io::write_file_atomic(dir.file("pytorch_model.bin"), "pickle");
  expect_error([&] { load_gpt2_model(dir.path); }, {"pytorch_model.bin"});
  io::write_file_atomic(dir.file("model.safetensors.index.json"), "{}");
  expect_error([&] { load_gpt2_model(dir.path); }, {"sharded"});
  io::write_file_atomic(dir.file("model.safetensors"), "not a safetensors file");
  EXPECT_THROW(load_gpt2_model(dir.path), Error);
  io::write_file_atomic(dir.file("config.json"), hf_config(Dims{}).dump());
  EXPECT_THROW(load_gpt2_model(dir.path, DType::I64), Error);
}

// ---- with the tokenizer ------------------------------------------------------------------

// A byte-level vocabulary of the 256 bytes, "he", and optionally <|endoftext|>.
std::string tokenizer_vocab(bool with_eot) {
  json j = json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    const char32_t cp = io::byte_to_unicode(static_cast<uint8_t>(b));
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    j[s] = b;
  }
  j["he"] = 256;
  if (with_eot) j["<|endoftext|>"] = 257;
  return j.dump();
}

TEST(Gpt2, LoadGpt2ReadsTheTokenizerAndUsesEndOfTextAsBosAndEos) {
  Dims d;
  d.V = 260;  // >= the tokenizer's 258 tokens
  const Weights w = hf_weights(d);
  TempDir dir;
  json config = hf_config(d);
  config.erase("bos_token_id");
  config.erase("eos_token_id");
  write_folder(dir.path, config, w);
  io::write_file_atomic(dir.file("vocab.json"), tokenizer_vocab(true));
  io::write_file_atomic(dir.file("merges.txt"), "#version: 0.2\nh e\n");
  const Gpt2 g = load_gpt2(dir.path);
  EXPECT_EQ(g.model->config().bos_id, 257);
  EXPECT_EQ(g.model->config().eos_id, 257);
  EXPECT_EQ(g.tokenizer.encode("hehe he"), (std::vector<int64_t>{256, 256, ' ', 256}));
  EXPECT_EQ(g.tokenizer.eos_id(), 257);

  config["eos_token_id"] = 3;
  io::write_file_atomic(dir.file("config.json"), config.dump());
  expect_error([&] { load_gpt2(dir.path); }, {"eos_token_id 3 is not the tokenizer's <|endoftext|> (id 257)"});
  config["eos_token_id"] = 257;
  io::write_file_atomic(dir.file("config.json"), config.dump());
  EXPECT_EQ(load_gpt2(dir.path).model->config().eos_id, 257);

  // Without <|endoftext|>, config.json's ids stand.
  io::write_file_atomic(dir.file("vocab.json"), tokenizer_vocab(false));
  EXPECT_EQ(load_gpt2(dir.path).model->config().bos_id, -1);
  fs::remove(dir.file("merges.txt"));
  expect_error([&] { load_gpt2(dir.path); }, {"expected merges.txt or vocab.bpe"});
}

TEST(Gpt2, ATokenizerLargerThanTheModelVocabularyIsAnError) {
  const Dims d;  // V = 11
  TempDir dir;
  write_folder(dir.path, hf_config(d), hf_weights(d));
  io::write_file_atomic(dir.file("vocab.json"), tokenizer_vocab(true));
  io::write_file_atomic(dir.file("merges.txt"), "h e\n");
  expect_error([&] { load_gpt2(dir.path); }, {"the tokenizer has 258 tokens, more than the vocab_size 11"});
}

TEST(Gpt2, IsGpt2FolderTellsHuggingFaceFoldersFromOurs) {
  TempDir hf, ours;
  write_folder(hf.path, hf_config(Dims{}), hf_weights(Dims{}));
  EXPECT_TRUE(is_gpt2_folder(hf.path));
  json no_type = hf_config(Dims{});
  no_type.erase("model_type");
  io::write_file_atomic(hf.file("config.json"), no_type.dump());
  EXPECT_TRUE(is_gpt2_folder(hf.path));
  ModelConfig c = gpt2_config_from_json(hf_config(Dims{}));
  save_model(ours.path, DecoderOnlyModel(c));
  EXPECT_FALSE(is_gpt2_folder(ours.path));
  EXPECT_FALSE(is_gpt2_folder(ours.file("absent")));
}

TEST(Gpt2, TokenIdsOutsideTheVocabularyAndTooLongPromptsAreErrors) {
  const Dims d;
  TempDir dir;
  write_folder(dir.path, hf_config(d), hf_weights(d));
  auto model = load_gpt2_model(dir.path);
  NoGradGuard no_grad;
  EXPECT_THROW(model->forward(Tensor::from_vector<int64_t>({1, 11}, {1, 2})), Error);
  EXPECT_THROW(model->forward(Tensor::from_vector<int64_t>({1, -1}, {1, 2})), Error);
  EXPECT_THROW(model->forward(Tensor::zeros({1, d.P + 1}, DType::I64)), Error);
  EXPECT_NO_THROW(model->forward(Tensor::zeros({1, d.P}, DType::I64)));
}

}  // namespace
}  // namespace attn::models
