// Broken model folders for the checkpoint tests (unit: load_model's errors; e2e: `attn info`'s
// exit status and stderr). Each case damages a freshly saved good folder in one way and says
// which file, tensor (or config key) and problem the error message must name.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "attn/io/atomic_file.h"
#include "attn/io/safetensors.h"
#include "attn/models/checkpoint.h"
#include "attn/models/config.h"

namespace attn::models::test_util {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& prefix = "attn_ckpt") {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + "_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
    path = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path + "/" + name; }
};

inline std::string weights_path(const std::string& dir) { return dir + "/" + io::kWeightsFileName; }
inline std::string config_path(const std::string& dir) { return dir + "/" + io::kConfigFileName; }

// Rewrites the safetensors header of `path` through `edit`, keeping the data bytes as they are
// (the new header is padded with spaces to a multiple of 8, as writers do).
inline void edit_header(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  const std::string bytes = io::read_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  edit(header);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[static_cast<size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  io::write_file_atomic(path, len + text + bytes.substr(8 + n));
}

// Rewrites config.json through `edit`.
inline void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(io::read_file(config_path(dir)));
  edit(j);
  io::write_file_atomic(config_path(dir), j.dump(2));
}

// Rewrites model.safetensors with the tensors `edit` leaves in the list.
inline void edit_tensors(const std::string& dir, const std::function<void(io::NamedTensors&)>& edit) {
  io::NamedTensors tensors;
  {
    const io::SafetensorsFile file = io::SafetensorsFile::open(weights_path(dir));
    for (const std::string& name : file.names()) tensors.emplace_back(name, file.get(name).clone());
  }
  edit(tensors);
  io::save_safetensors(weights_path(dir), tensors);
}

// The tensor names of a folder's weights file, in file order.
inline std::vector<std::string> file_tensor_names(const std::string& dir) {
  return io::SafetensorsFile::open(weights_path(dir)).names();
}

struct BrokenCase {
  std::string name;
  // Damages a good folder; returns the tensor name (or config key) the error must name.
  std::function<std::string(const std::string& dir)> damage;
  std::string file;     // io::kWeightsFileName or io::kConfigFileName: the file the error must name
  std::string problem;  // a phrase of the problem the error must contain
};

// The config the cases start from: an encoder-decoder with D=8, d_ff 16, vocabulary 7, f32,
// embeddings shared and tied (so "generator.weight" is not in the file).
inline ModelConfig broken_base_config() {
  ModelConfig c;
  c.arch = Arch::EncoderDecoder;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_encoder_layers = 1;
  c.n_decoder_layers = 1;
  c.d_ff = 16;
  c.dropout = 0.0;
  c.attention_dropout = 0.0;
  c.max_len = 16;
  c.src_vocab_size = 7;
  c.tgt_vocab_size = 7;
  c.dtype = DType::F32;
  c.seed = 7;
  return c;
}

inline std::vector<BrokenCase> broken_cases() {
  const std::string kW = io::kWeightsFileName, kC = io::kConfigFileName;
  std::vector<BrokenCase> cases;
  cases.push_back({"TruncatedWeights",
                   [](const std::string& dir) {
                     const std::string last = file_tensor_names(dir).back();
                     std::filesystem::resize_file(weights_path(dir), std::filesystem::file_size(weights_path(dir)) - 12);
                     return last;
                   },
                   kW, "truncated"});
  cases.push_back({"HeaderLiesAboutOffsets",
                   [](const std::string& dir) {
                     const std::string t = file_tensor_names(dir)[1];
                     edit_header(weights_path(dir), [&](nlohmann::json& h) {
                       auto& off = h[t]["data_offsets"];
                       off[0] = off[0].get<uint64_t>() + 4;  // a gap before t and a t past the data
                       off[1] = off[1].get<uint64_t>() + 4;
                     });
                     return t;
                   },
                   kW, "data_offsets"});
  cases.push_back({"HeaderLiesAboutSizes",
                   [](const std::string& dir) {
                     const std::string t = "encoder.layers.0.linear1.weight";
                     edit_header(weights_path(dir), [&](nlohmann::json& h) { h[t]["shape"] = {32, 8}; });
                     return t;
                   },
                   kW, "need"});
  cases.push_back({"UnknownDtype",
                   [](const std::string& dir) {
                     const std::string t = "decoder.norm.bias";
                     edit_header(weights_path(dir), [&](nlohmann::json& h) { h[t]["dtype"] = "F31"; });
                     return t;
                   },
                   kW, "unknown dtype"});
  cases.push_back({"UnsupportedDtype",
                   [](const std::string& dir) {
                     const std::string t = "encoder.norm.weight";
                     edit_tensors(dir, [&](io::NamedTensors& ts) {
                       for (auto& [n, v] : ts)
                         if (n == t) v = Tensor::zeros(v.shape(), DType::I64);
                     });
                     return t;
                   },
                   kW, "not supported"});
  cases.push_back({"F64WeightsForAnF32Config",
                   [](const std::string& dir) {
                     const std::string t = "decoder.layers.0.linear2.bias";
                     edit_tensors(dir, [&](io::NamedTensors& ts) {
                       for (auto& [n, v] : ts)
                         if (n == t) v = v.to(DType::F64);
                     });
                     return t;
                   },
                   kW, "config.json says \"dtype\": \"f32\""});
  cases.push_back({"MissingTensor",
                   [](const std::string& dir) {
                     const std::string t = "encoder.layers.0.self_attn.in_proj_bias";
                     edit_tensors(dir, [&](io::NamedTensors& ts) {
                       std::erase_if(ts, [&](const auto& p) { return p.first == t; });
                     });
                     return t;
                   },
                   kW, "missing"});
  cases.push_back({"ExtraTensor",
                   [](const std::string& dir) {
                     const std::string t = "encoder.layers.0.extra.weight";
                     edit_tensors(dir, [&](io::NamedTensors& ts) { ts.emplace_back(t, Tensor::zeros({3}, DType::F32)); });
                     return t;
                   },
                   kW, "unexpected"});
  cases.push_back({"ShapeDisagreesWithConfig",
                   [](const std::string& dir) {
                     edit_config(dir, [](nlohmann::json& j) { j["d_ff"] = 32; });
                     return std::string("encoder.layers.0.linear1.weight");
                   },
                   kW, "shape [16, 8] in the file, but config.json implies [32, 8]"});
  cases.push_back({"ConfigWithAWrongType",
                   [](const std::string& dir) {
                     edit_config(dir, [](nlohmann::json& j) { j["d_model"] = "8"; });
                     return std::string("d_model");
                   },
                   kC, "must be an integer"});
  cases.push_back({"ConfigWithAnImpossibleValue",
                   [](const std::string& dir) {
                     edit_config(dir, [](nlohmann::json& j) { j["n_heads"] = 3; });
                     return std::string("n_heads");
                   },
                   kC, "not divisible"});
  cases.push_back({"ConfigWithAnUnknownKey",
                   [](const std::string& dir) {
                     edit_config(dir, [](nlohmann::json& j) { j["d_modle"] = 8; });
                     return std::string("d_modle");
                   },
                   kC, "unknown key"});
  cases.push_back({"ConfigThatIsNotJson",
                   [](const std::string& dir) {
                     io::write_file_atomic(config_path(dir), "{\"d_model\": 8,");
                     return std::string();
                   },
                   kC, "not valid JSON"});
  cases.push_back({"FolderWithoutConfig",
                   [](const std::string& dir) {
                     std::filesystem::remove(config_path(dir));
                     return std::string();
                   },
                   kC, "missing"});
  cases.push_back({"FolderWithoutWeights",
                   [](const std::string& dir) {
                     std::filesystem::remove(weights_path(dir));
                     return std::string();
                   },
                   kW, "missing"});
  return cases;
}

}  // namespace attn::models::test_util
