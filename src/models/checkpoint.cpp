// Model folders: save_model writes model.safetensors, extra files, then config.json, all
// atomically; load_model reads config.json, builds the model it describes and checks every
// tensor of the memory-mapped weights file against it before copying anything in.
// Deliberately strict: no dtype conversion, no partial loads, no guessing of missing keys
// beyond ModelConfig's documented defaults (docs/checkpoint.md).
#include "attn/models/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <system_error>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/io/bpe.h"
#include "attn/models/factory.h"
#include "attn/models/gpt2.h"

#ifndef ATTN_VERSION
#define ATTN_VERSION "unknown"  // the build defines it from CMake's PROJECT_VERSION
#endif

namespace attn::models {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kSave = "save_model";
constexpr const char* kLoad = "load_model";
constexpr size_t kMaxConfigBytes = 1 << 20;  // config.json is a few hundred bytes
constexpr int kMaxJsonDepth = 32;             // deeper JSON is refused before it is built
constexpr size_t kMaxListedProblems = 20;

std::string join_path(const std::string& dir, const char* name) { return (fs::path(dir) / name).string(); }

// "[ModelConfig] key ..." -> "key ...": the file name replaces the component tag.
std::string without_tag(const std::string& message) {
  if (!message.empty() && message[0] == '[') {
    const size_t close = message.find("] ");
    if (close != std::string::npos) return message.substr(close + 2);
  }
  return message;
}

struct TooDeep {};

// Parses JSON text, refusing nesting deeper than kMaxJsonDepth (so that neither parsing nor
// destruction can recurse without bound). Throws json::exception or TooDeep.
json parse_json_bounded(const std::string& text) {
  json::parser_callback_t limit = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) throw TooDeep{};
    return true;
  };
  return json::parse(text, limit);
}

// Fails unless `dir` is an existing folder.
void check_model_folder(const std::string& dir) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st)) {
    fail(kLoad, "'", dir, "': no such model folder (a model is a folder holding ", io::kConfigFileName, " and ",
         io::kWeightsFileName, ")");
  }
  if (!fs::is_directory(st)) {
    fail(kLoad, "'", dir, "': not a folder (a model is a folder holding ", io::kConfigFileName, " and ",
         io::kWeightsFileName, ")");
  }
}

// On a weights file that failed to open: when its header is intact but its data is cut short,
// the names of the tensors that lie (partly) past the end, as " (tensors cut off: ...)".
// Diagnostics only: reads at most the header, never throws, "" when it cannot tell.
std::string cut_off_tensors(const std::string& path) {
  try {
    std::error_code ec;
    const uintmax_t size = fs::file_size(path, ec);
    if (ec || size < 8) return "";
    std::ifstream in(path, std::ios::binary);
    unsigned char len[8];
    if (!in.read(reinterpret_cast<char*>(len), 8)) return "";
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
    if (n > 100'000'000 || n > size - 8) return "";
    std::string header(static_cast<size_t>(n), '\0');
    if (!in.read(header.data(), static_cast<std::streamsize>(n))) return "";
    const json h = parse_json_bounded(header);
    if (!h.is_object()) return "";
    const uint64_t data_bytes = size - 8 - n;
    std::vector<std::pair<uint64_t, std::string>> cut;  // (begin, name)
    for (const auto& [name, entry] : h.items()) {
      if (name == "__metadata__" || !entry.is_object()) continue;
      auto off = entry.find("data_offsets");
      if (off == entry.end() || !off->is_array() || off->size() != 2) continue;
      const json& b = (*off)[0];
      const json& e = (*off)[1];
      if (!b.is_number_unsigned() || !e.is_number_unsigned()) continue;
      if (e.get<uint64_t>() > data_bytes) cut.emplace_back(b.get<uint64_t>(), name);
    }
    if (cut.empty()) return "";
    std::sort(cut.begin(), cut.end());
    std::string s = " (tensors cut off by the truncation: ";
    for (size_t i = 0; i < cut.size() && i < 5; ++i) s += (i ? ", '" : "'") + cut[i].second + "'";
    if (cut.size() > 5) s += str_cat(" and ", cut.size() - 5, " more");
    return s + ")";
  } catch (...) {
    return "";
  }
}

io::SafetensorsFile open_weights(const std::string& path) {
  try {
    return io::SafetensorsFile::open(path);
  } catch (const Error& e) {
    const std::string cut = cut_off_tensors(path);
    if (cut.empty()) throw;
    throw Error(e.what() + cut);
  }
}

// The file's dtype string as a weight dtype, or false for anything but F32/F64 and the
// quantized weights' I8/BF16.
bool weight_dtype(const std::string& name, DType& out) {
  if (name == "F32") out = DType::F32;
  else if (name == "F64") out = DType::F64;
  else if (name == "I8") out = DType::I8;
  else if (name == "BF16") out = DType::BF16;
  else return false;
  return true;
}

std::string file_dtype_str(DType d) {
  switch (d) {
    case DType::F64: return "F64";
    case DType::I8: return "I8";
    case DType::BF16: return "BF16";
    default: return "F32";
  }
}

// The problems of one file tensor against the parameter `expected` (dtype, then shape).
// `quantization` is config.json's.
void check_entry(const std::string& name, const io::SafetensorsTensorInfo& info, const Tensor& expected,
                 Quantization quantization, std::vector<std::string>& problems) {
  DType d{};
  if (!weight_dtype(info.dtype, d)) {
    problems.push_back(str_cat("tensor '", name, "': dtype ", info.dtype, " is not supported (weights are F32 or ",
                               "F64; config.json says \"dtype\": \"", dtype_name(expected.dtype()), "\")"));
  } else if (d != expected.dtype() && (d == DType::I8 || d == DType::BF16) && quantization == Quantization::None) {
    problems.push_back(str_cat("tensor '", name, "': dtype ", info.dtype, " (quantized) in the file, but config.json ",
                               "has no \"quantization\" key (a quantized folder's config says \"quantization\": ",
                               "\"int8\" or \"bf16\")"));
  } else if (d != expected.dtype() && quantization != Quantization::None) {
    problems.push_back(str_cat("tensor '", name, "': dtype ", info.dtype, " in the file, but config.json says ",
                               "\"quantization\": \"", quantization_name(quantization), "\", which stores it as ",
                               file_dtype_str(expected.dtype())));
  } else if (d != expected.dtype()) {
    problems.push_back(str_cat("tensor '", name, "': dtype ", info.dtype, " in the file, but config.json says ",
                               "\"dtype\": \"", dtype_name(expected.dtype()), "\" (", file_dtype_str(expected.dtype()),
                               "); weights are not converted"));
  }
  if (info.shape != expected.shape()) {
    problems.push_back(str_cat("tensor '", name, "': shape ", shape_str(info.shape), " in the file, but config.json ",
                               "implies ", shape_str(expected.shape())));
  }
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  const size_t n = static_cast<size_t>(a.numel()) * dtype_size(a.dtype());
  return n == static_cast<size_t>(b.numel()) * dtype_size(b.dtype()) &&
         (n == 0 || std::memcmp(a.raw_data(), b.raw_data(), n) == 0);
}

}  // namespace

void save_model(const std::string& dir, const Model& model, const ExtraFiles& extra_files) {
  for (const auto& [name, contents] : extra_files) {
    ATTN_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                   name.find('\0') == std::string::npos,
               kSave, "extra file name '", name, "' must be a plain file name");
    ATTN_CHECK(name != io::kConfigFileName && name != io::kWeightsFileName, kSave, "extra file name '", name,
               "' is reserved for the model itself");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) {
    fail(kSave, "'", dir, "': cannot create the model folder", ec ? ": " + ec.message() : std::string());
  }
  const std::string config_path = join_path(dir, io::kConfigFileName);
  const std::string weights_path = join_path(dir, io::kWeightsFileName);
  // Until the new config.json lands, the folder must not describe the new weights with the old
  // config: drop the old one first (the weights' directory fsync makes the removal durable).
  if (fs::exists(fs::symlink_status(config_path, ec))) {
    fs::remove(config_path, ec);
    if (ec) fail(kSave, "'", config_path, "': cannot remove the previous config: ", ec.message());
  }
  io::save_safetensors(weights_path, model.named_parameters(),
                       {{"format", kCheckpointFormat}, {"attn_version", ATTN_VERSION}});
  for (const auto& [name, contents] : extra_files) io::write_file_atomic(join_path(dir, name.c_str()), contents);
  io::write_file_atomic(config_path, model.config().to_json().dump(2) + "\n");
}

void save_model_folder(const std::string& dir, const Model& model, const ExtraFiles& extra_files) {
  fs::path target = fs::path(dir).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "out/" -> "out"
  ATTN_CHECK(!target.empty() && target.filename() != "." && target.filename() != "..", kSave, "'", dir,
             "' cannot be a model folder to write");
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string stem = "." + target.filename().string();
  const std::string pid = std::to_string(::getpid());
  const fs::path tmp = parent / (stem + ".partial-" + pid), old = parent / (stem + ".old-" + pid);
  std::error_code ec;
  fs::create_directories(parent, ec);
  fs::remove_all(tmp, ec);
  try {
    save_model(tmp.string(), model, extra_files);
    if (fs::exists(fs::symlink_status(target, ec))) {
      // The previous folder steps aside, the new one takes its place, then the old one goes: a
      // kill in between leaves no folder at `dir` (and the old one beside it), never a mix.
      fs::remove_all(old, ec);
      fs::rename(target, old, ec);
      if (ec) fail(kSave, "'", target.string(), "': cannot move the previous folder aside: ", ec.message());
    }
    fs::rename(tmp, target, ec);
    if (ec) fail(kSave, "'", target.string(), "': cannot rename '", tmp.string(), "' into place: ", ec.message());
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
  fs::remove_all(old, ec);
  // The renames made durable (a folder some file systems cannot fsync is no error here).
  const int fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    (void)::fsync(fd);
    ::close(fd);
  }
}

ModelConfig load_model_config(const std::string& dir) {
  check_model_folder(dir);
  const std::string path = join_path(dir, io::kConfigFileName);
  std::error_code ec;
  if (!fs::exists(fs::status(path, ec))) {
    fail(kLoad, "'", path, "': missing (a model folder holds ", io::kConfigFileName, " and ", io::kWeightsFileName,
         "; weights without a config are an interrupted save)");
  }
  const uintmax_t size = fs::file_size(path, ec);
  if (!ec && size > kMaxConfigBytes) {
    fail(kLoad, "'", path, "': ", size, " bytes is too large for a model config (limit ", kMaxConfigBytes, ")");
  }
  const std::string text = io::read_file(path);
  json j;
  try {
    j = parse_json_bounded(text);
  } catch (const TooDeep&) {
    fail(kLoad, "'", path, "': not a model config: JSON nested deeper than ", kMaxJsonDepth, " levels");
  } catch (const json::exception& e) {
    fail(kLoad, "'", path, "': not valid JSON: ", e.what());
  }
  try {
    ModelConfig config = ModelConfig::from_json(j);
    config.validate();
    return config;
  } catch (const Error& e) {
    fail(kLoad, "'", path, "': ", without_tag(e.what()));
  } catch (const json::exception& e) {
    fail(kLoad, "'", path, "': ", e.what());
  }
}

namespace {

// load_checkpoint, or with layout_only its checks alone: the model is laid out without memory
// (make_model_layout), checked against the header the same way, and no weight is loaded.
LoadedCheckpoint read_checkpoint(const std::string& dir, bool layout_only) {
  LoadedCheckpoint out;
  const ModelConfig config = load_model_config(dir);
  out.config_path = join_path(dir, io::kConfigFileName);
  out.weights_path = join_path(dir, io::kWeightsFileName);
  std::error_code ec;
  if (!fs::exists(fs::status(out.weights_path, ec))) {
    fail(kLoad, "'", out.weights_path, "': missing (", out.config_path, " is there, the weights are not)");
  }
  const io::SafetensorsFile file = open_weights(out.weights_path);
  for (const std::string& name : file.names()) {
    const io::SafetensorsTensorInfo& info = file.info(name);
    out.tensors.push_back({name, info.dtype, info.shape});
  }
  out.metadata = file.metadata();
  // Before building anything: the parameters config.json implies (a lower bound, from its size
  // keys alone) against what the file holds. Far more (by more than the file itself and 2^20
  // parameters) is refused at once, naming the key of the largest part: a config of 10^12
  // layers next to a small file would allocate for minutes before the first tensor is
  // compared. A smaller excess builds the model, so that every tensor is listed, and the
  // summary comes first in the list.
  int64_t held = 0;
  for (const CheckpointTensor& t : out.tensors)
    held = checked_add(held, checked_numel(t.shape, kLoad), kLoad, "the weights file's element count");
  const int64_t implied = config.min_parameters();
  const std::string too_many = str_cat("'", out.config_path, "' implies at least ", implied, " parameters, but '",
                                       out.weights_path, "' holds ", held, " values in ", out.tensors.size(),
                                       " tensors; the largest part: ", config.largest_part());
  if (implied > held && implied - held > std::max<int64_t>(held, int64_t{1} << 20)) fail(kLoad, too_many);

  try {
    // Every parameter is filled from the file below (or, for a layout, never).
    out.model = layout_only ? make_model_layout(config) : make_model(config, ModelInit::None);
  } catch (const Error& e) {
    fail(kLoad, "'", out.config_path, "': ", without_tag(e.what()));
  }
  const nn::NamedTensors own = out.model->named_parameters();
  std::map<std::string, Tensor> param;  // canonical name -> parameter
  for (const auto& [name, t] : own) param.emplace(name, t);
  std::map<std::string, std::string> canonical_of;  // alias -> canonical (tied parameters)
  for (const auto& [alias, canonical] : out.model->tied_parameters()) canonical_of.emplace(alias, canonical);

  // Every file tensor against the model, in file order, then every parameter the file lacks.
  std::vector<std::string> problems;
  if (implied > held) problems.push_back(too_many);
  std::map<std::string, std::string> source_of;  // canonical -> the file tensor that fills it
  std::vector<std::pair<std::string, std::string>> alias_copies;  // (alias, canonical), both in file
  for (const CheckpointTensor& t : out.tensors) {
    const io::SafetensorsTensorInfo& info = file.info(t.name);
    if (auto p = param.find(t.name); p != param.end()) {
      check_entry(t.name, info, p->second, config.quantization, problems);
      source_of[t.name] = t.name;
    } else if (auto a = canonical_of.find(t.name); a != canonical_of.end()) {
      const std::string& canonical = a->second;
      check_entry(t.name, info, param.at(canonical), config.quantization, problems);
      // The canonical name fills the parameter when present, else the first alias met; any
      // further copy must equal it.
      if (file.has(canonical)) alias_copies.emplace_back(t.name, canonical);
      else if (auto s = source_of.find(canonical); s != source_of.end()) alias_copies.emplace_back(t.name, s->second);
      else source_of.emplace(canonical, t.name);
    } else {
      problems.push_back(str_cat("tensor '", t.name, "': unexpected (", info.dtype, " ", shape_str(info.shape),
                                 "; no such parameter in the ", arch_name(config.arch),
                                 " model config.json describes)"));
    }
  }
  for (const auto& [name, t] : own) {
    if (!source_of.count(name)) {
      problems.push_back(str_cat("tensor '", name, "': missing from the file (config.json implies ",
                                 dtype_name(t.dtype()), " ", shape_str(t.shape()), ")"));
    }
  }
  // A writer that keeps tied names apart (PyTorch's state_dict does) must store equal values.
  if (problems.empty()) {
    for (const auto& [alias, canonical] : alias_copies) {
      if (!same_bytes(file.get_stored(alias), file.get_stored(canonical))) {
        problems.push_back(str_cat("tensor '", alias, "': differs from '", canonical,
                                   "', but config.json ties them (share_embeddings / tie_output)"));
      }
    }
  }
  if (!problems.empty()) {
    std::string list;
    for (size_t i = 0; i < problems.size() && i < kMaxListedProblems; ++i) list += "\n  " + problems[i];
    if (problems.size() > kMaxListedProblems) list += str_cat("\n  ... and ", problems.size() - kMaxListedProblems, " more");
    fail(kLoad, "'", out.weights_path, "' does not match '", out.config_path, "' (", problems.size(),
         problems.size() == 1 ? " problem):" : " problems):", list);
  }

  out.sources = source_of;
  if (layout_only) return out;

  // One tensor at a time (the checks above matched every name, shape and dtype), each one's
  // mapped pages released once copied: loading holds the model and one tensor's pages, not
  // the model and the whole file's.
  {
    NoGradGuard no_grad;
    for (const auto& [canonical, source] : source_of) {
      param.at(canonical).copy_from(file.get_stored(source));
      file.release(source);
    }
  }
  // Quantized weights: values the kernels rely on (int8 in [-127, 127], finite scales; bf16
  // finite, subnormals flushed in place).
  for (const auto& [name, t] : own) {
    if (t.dtype() != DType::I8 && t.dtype() != DType::BF16) continue;
    const Tensor scale = t.dtype() == DType::I8 ? param.at(name + "_scale") : Tensor();
    try {
      validate_quantized_values(t, scale, name);
    } catch (const Error& e) {
      fail(kLoad, "'", out.weights_path, "': ", without_tag(e.what()));
    }
  }
  return out;
}

}  // namespace

LoadedCheckpoint load_checkpoint(const std::string& dir) { return read_checkpoint(dir, false); }

LoadedCheckpoint inspect_checkpoint(const std::string& dir) { return read_checkpoint(dir, true); }

std::shared_ptr<Model> load_model(const std::string& dir) { return load_checkpoint(dir).model; }

std::string quantize_model_folder(const std::string& dir, const std::string& out_dir, Quantization q) {
  constexpr const char* kOp = "quantize";
  ATTN_CHECK(q != Quantization::None, kOp, "no quantization given (int8 or bf16)");
  std::string out = out_dir;
  if (out.empty()) {
    std::string base = dir;
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    out = base + "-" + quantization_name(q);
  }
  std::error_code ec;
  if (fs::exists(out, ec) && fs::exists(dir, ec) && fs::equivalent(out, dir, ec))
    fail(kOp, "the output folder '", out, "' is the model folder itself; choose another --out");
  // A Hugging Face GPT-2 folder becomes one of our folders (its names and config.json keys
  // cannot say "quantization"), with the tokenizer under OpenAI's file names (io/bpe.h).
  const bool gpt2 = is_gpt2_folder(dir);
  std::shared_ptr<Model> model;
  std::string weights_path = join_path(dir, io::kWeightsFileName);
  ExtraFiles extra;
  if (gpt2) {
    model = load_gpt2(dir).model;  // the tokenizer is read, and checked against the model, too
    const auto [vocab, merges] = io::BpeTokenizer::folder_files(dir);
    extra.emplace_back(io::kBpeEncoderFileName, io::read_file(vocab));
    extra.emplace_back(io::kBpeMergesFileName, io::read_file(merges));
  } else {
    const LoadedCheckpoint loaded = load_checkpoint(dir);
    model = loaded.model;
    weights_path = loaded.weights_path;
  }
  const Quantization already = model->config().quantization;
  ATTN_CHECK(already == Quantization::None, kOp, "'", dir, "' is quantized already (\"quantization\": \"",
             quantization_name(already), "\"); quantize its float32 model instead");
  try {
    model->quantize(q);
  } catch (const Error& e) {
    fail(kOp, "'", weights_path, "': ", without_tag(e.what()));
  }
  // Every other plain file of one of our folders comes along (vocab.json, train_config.json,
  // ...); of a GPT-2 folder, only the tokenizer (its other files describe the Hugging Face layout).
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (gpt2) break;
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name.empty() || name[0] == '.') continue;
    if (name == io::kConfigFileName || name == io::kWeightsFileName) continue;
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) extra.emplace_back(name, io::read_file(join_path(dir, name.c_str())));
  save_model_folder(out, *model, extra);
  return out;
}

}  // namespace attn::models
