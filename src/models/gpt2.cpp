// Hugging Face GPT-2 folders <-> DecoderOnlyModel: config.json translated key by key, the
// weights renamed and their Conv1D matrices transposed, every file tensor checked against the
// config before anything is built, F16/BF16 widened. Deliberately strict (one error listing
// every problem); no pickle files, no sharded checkpoints, no guessing of missing tensors.
#include "attn/models/gpt2.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <tuple>
#include <nlohmann/json.hpp>
#include <system_error>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/io/json_fields.h"
#include "attn/models/factory.h"
#include "attn/ops/ops.h"

namespace attn::models {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kOp = "gpt2";
// Hugging Face's file names, which are their format's (attn's own are in io/run_files.h).
constexpr const char* kConfigFile = "config.json";
constexpr const char* kWeightsFile = "model.safetensors";
constexpr std::string_view kPrefix = "transformer.";  // GPT2LMHeadModel's name for the body
constexpr size_t kMaxConfigBytes = 1 << 20;
constexpr int kMaxJsonDepth = 32;
constexpr size_t kMaxListedProblems = 20;

// ---- config.json ----------------------------------------------------------------------------

struct TooDeep {};

// The parsed config.json of `dir`; errors name the path.
json read_config_json(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(kOp, "'", dir, "': not a folder (a GPT-2 model is a folder with ", kConfigFile,
                                       " and ", kWeightsFile, ")");
  const std::string path = (fs::path(dir) / kConfigFile).string();
  if (!fs::is_regular_file(path, ec)) fail(kOp, "'", path, "': missing");
  const uintmax_t size = fs::file_size(path, ec);
  ATTN_CHECK(ec || size <= kMaxConfigBytes, kOp, "'", path, "': ", size, " bytes is too large for a config (limit ",
             kMaxConfigBytes, ")");
  const std::string text = io::read_file(path);
  json::parser_callback_t limit = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) throw TooDeep{};
    return true;
  };
  try {
    json j = json::parse(text, limit);
    ATTN_CHECK(j.is_object(), kOp, "'", path, "': must hold a JSON object, got ", j.type_name());
    return j;
  } catch (const TooDeep&) {
    fail(kOp, "'", path, "': JSON nested deeper than ", kMaxJsonDepth, " levels");
  } catch (const json::exception& e) {
    fail(kOp, "'", path, "': not valid JSON: ", e.what());
  }
}

const json* find_key(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

int64_t required_int(const json& j, const char* key) {
  const json* v = find_key(j, key);
  ATTN_CHECK(v, kOp, "config.json lacks the key '", key, "'");
  return io::json_int(kOp, key, *v);
}

// A token id key: absent or null -> -1.
int64_t optional_token(const json& j, const char* key) {
  const json* v = find_key(j, key);
  return v && !v->is_null() ? io::json_int(kOp, key, *v) : -1;
}

double optional_double(const json& j, const char* key, double fallback) {
  const json* v = find_key(j, key);
  return v ? io::json_double(kOp, key, *v) : fallback;
}

// A boolean key that must have the value `required` (or be absent).
void require_flag(const json& j, const char* key, bool required, const char* why) {
  const json* v = find_key(j, key);
  if (v && io::json_bool(kOp, key, *v) != required)
    fail(kOp, "config.json's '", key, "': ", v->dump(), " is not supported (", why, ")");
}

nn::Activation parse_hf_activation(const std::string& name) {
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return nn::Activation::GELUTanh;
  if (name == "gelu") return nn::Activation::GELU;
  if (name == "relu") return nn::Activation::ReLU;
  fail(kOp, "config.json's 'activation_function': \"", name,
       "\" is not supported (gelu_new, gelu_pytorch_tanh, gelu_fast, gelu or relu)");
}

// "[gpt2] message" -> "message", to re-tag an error with the file it came from.
std::string without_tag(const std::string& message) {
  if (!message.empty() && message[0] == '[') {
    const size_t close = message.find("] ");
    if (close != std::string::npos) return message.substr(close + 2);
  }
  return message;
}

ModelConfig config_of_folder(const std::string& dir, const json& hf, DType dtype) {
  try {
    return gpt2_config_from_json(hf, dtype);
  } catch (const Error& e) {
    fail(kOp, "'", (fs::path(dir) / kConfigFile).string(), "': ", without_tag(e.what()));
  }
}

// ---- the tensor map -------------------------------------------------------------------------

struct Entry {
  std::string hf;    // Hugging Face name, without "transformer."
  std::string ours;  // our state_dict name
  Shape hf_shape;    // the shape in the file
  bool transpose;    // Conv1D [in, out] <-> nn.Linear [out, in]
};

std::vector<Entry> tensor_map(const ModelConfig& c) {
  const int64_t D = c.d_model, F = c.d_ff, V = c.vocab_size(), P = c.max_len;
  std::vector<Entry> m = {{"wte.weight", "embedding.weight", {V, D}, false},
                          {"wpe.weight", "pos_embedding.weight", {P, D}, false}};
  for (int64_t l = 0; l < c.n_decoder_layers; ++l) {
    const std::string h = str_cat("h.", l, "."), ours = str_cat("layers.", l, ".");
    m.push_back({h + "ln_1.weight", ours + "norm1.weight", {D}, false});
    m.push_back({h + "ln_1.bias", ours + "norm1.bias", {D}, false});
    m.push_back({h + "attn.c_attn.weight", ours + "self_attn.in_proj_weight", {D, 3 * D}, true});
    m.push_back({h + "attn.c_attn.bias", ours + "self_attn.in_proj_bias", {3 * D}, false});
    m.push_back({h + "attn.c_proj.weight", ours + "self_attn.out_proj.weight", {D, D}, true});
    m.push_back({h + "attn.c_proj.bias", ours + "self_attn.out_proj.bias", {D}, false});
    m.push_back({h + "ln_2.weight", ours + "norm2.weight", {D}, false});
    m.push_back({h + "ln_2.bias", ours + "norm2.bias", {D}, false});
    m.push_back({h + "mlp.c_fc.weight", ours + "linear1.weight", {D, F}, true});
    m.push_back({h + "mlp.c_fc.bias", ours + "linear1.bias", {F}, false});
    m.push_back({h + "mlp.c_proj.weight", ours + "linear2.weight", {F, D}, true});
    m.push_back({h + "mlp.c_proj.bias", ours + "linear2.bias", {D}, false});
  }
  m.push_back({"ln_f.weight", "norm.weight", {D}, false});
  m.push_back({"ln_f.bias", "norm.bias", {D}, false});
  if (!c.tie_output) m.push_back({"lm_head.weight", "lm_head.weight", {V, D}, false});
  return m;
}

// "h.N.attn.bias" / "h.N.attn.masked_bias" with N < n_layer: the causal-mask buffers that older
// checkpoints saved. Returns their expected shape through `shape`.
bool is_mask_buffer(const std::string& name, const ModelConfig& c, Shape& shape) {
  if (name.rfind("h.", 0) != 0) return false;
  size_t i = 2;
  int64_t layer = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i < 12) layer = layer * 10 + (name[i++] - '0');
  if (i == 2 || layer >= c.n_decoder_layers) return false;
  const std::string rest = name.substr(i);
  if (rest == ".attn.bias") shape = {1, 1, c.max_len, c.max_len};
  else if (rest == ".attn.masked_bias") shape = {};
  else return false;
  return true;
}

bool weight_dtype_supported(const std::string& d) { return d == "F32" || d == "F64" || d == "F16" || d == "BF16"; }

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  const uint32_t bits = exp == 31 ? (sign | 0x7F800000u | (mant << 13))       // inf / NaN
                                  : (sign | ((exp + 112u) << 23) | (mant << 13));  // rebias 15 -> 127
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <class T>
void widen_16bit(T* out, const unsigned char* bytes, int64_t n, bool bf16) {
  for (int64_t i = 0; i < n; ++i) {
    const auto h = static_cast<uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8));  // little-endian
    out[i] = static_cast<T>(bf16 ? bf16_to_float(h) : half_to_float(h));
  }
}

// A file tensor (already checked: supported dtype, expected shape) as a contiguous `dtype` tensor.
Tensor read_tensor(const io::SafetensorsFile& file, const std::string& name, DType dtype) {
  const io::SafetensorsTensorInfo& info = file.info(name);
  if (info.dtype == "F32" || info.dtype == "F64") return file.get(name).to(dtype).contiguous();
  const auto* bytes = static_cast<const unsigned char*>(file.mapped_data()) + 8 + file.header_size() + info.begin;
  Tensor out = Tensor::empty(info.shape, dtype);
  const bool bf16 = info.dtype == "BF16";
  if (dtype == DType::F64) widen_16bit(out.data<double>(), bytes, out.numel(), bf16);
  else widen_16bit(out.data<float>(), bytes, out.numel(), bf16);
  return out;
}

bool same_values(const Tensor& a, const Tensor& b) {
  const size_t n = static_cast<size_t>(a.numel()) * dtype_size(a.dtype());
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (n == 0 || std::memcmp(a.raw_data(), b.raw_data(), n) == 0);
}

std::shared_ptr<DecoderOnlyModel> load_weights(const std::string& dir, const ModelConfig& config) {
  std::error_code ec;
  const std::string path = (fs::path(dir) / kWeightsFile).string();
  if (!fs::exists(path, ec)) {
    if (fs::exists(fs::path(dir) / "model.safetensors.index.json", ec))
      fail(kOp, "'", path, "': missing; sharded checkpoints (model.safetensors.index.json) are not supported");
    if (fs::exists(fs::path(dir) / "pytorch_model.bin", ec))
      fail(kOp, "'", path, "': missing; pytorch_model.bin (a pickle) is not read: save the model as safetensors");
    fail(kOp, "'", path, "': missing");
  }
  const io::SafetensorsFile file = io::SafetensorsFile::open(path);
  // What config.json implies against what the file holds, from the size keys alone: when it
  // is more, the first problem listed names the key of the largest part (the tensor list
  // below is cheap to make and compare, the keys being bounded, so it is listed too).
  int64_t held = 0;
  for (const std::string& name : file.names())
    held = checked_add(held, checked_numel(file.info(name).shape, kOp), kOp, "the weights file's element count");
  std::vector<std::string> problems;
  if (config.min_parameters() > held) {
    std::string part = config.largest_part();  // in config.json's words
    for (auto [ours, theirs] : {std::pair<const char*, const char*>{"n_decoder_layers", "n_layer"},
                                {"src_vocab_size", "vocab_size"}, {"max_len", "n_positions"}, {"d_model", "n_embd"},
                                {"d_ff", "n_inner"}})
      for (size_t at = part.find(ours); at != std::string::npos; at = part.find(ours, at + std::strlen(theirs)))
        part.replace(at, std::strlen(ours), theirs);
    problems.push_back(str_cat(kConfigFile, " implies at least ", config.min_parameters(), " parameters, but the file ",
                               "holds ", held, " values in ", file.names().size(), " tensors; the largest part: ", part));
  }

  const std::vector<Entry> entries = tensor_map(config);
  std::map<std::string, const Entry*> expected;
  for (const Entry& e : entries) expected.emplace(e.hf, &e);
  std::map<std::string, std::string> source;  // Hugging Face name -> the file's name for it
  std::string tied_head;                      // the file's lm_head.weight when tied
  auto check = [&](const std::string& name, const io::SafetensorsTensorInfo& info, const Shape& shape) {
    if (!weight_dtype_supported(info.dtype))
      problems.push_back(str_cat("tensor '", name, "': dtype ", info.dtype, " is not supported (F32, F64, F16, BF16)"));
    if (info.shape != shape)
      problems.push_back(str_cat("tensor '", name, "': shape ", shape_str(info.shape), " in the file, but ",
                                 kConfigFile, " implies ", shape_str(shape)));
  };
  for (const std::string& name : file.names()) {
    const io::SafetensorsTensorInfo& info = file.info(name);
    const std::string key = name.rfind(kPrefix, 0) == 0 ? name.substr(kPrefix.size()) : name;
    Shape buffer_shape;
    if (auto it = expected.find(key); it != expected.end()) {
      if (auto s = source.find(key); s != source.end()) {
        problems.push_back(str_cat("tensor '", name, "': repeats '", s->second, "' (with and without the '",
                                   kPrefix, "' prefix)"));
        continue;
      }
      check(name, info, it->second->hf_shape);
      source.emplace(key, name);
    } else if (key == "lm_head.weight" && tied_head.empty()) {
      check(name, info, {config.vocab_size(), config.d_model});
      tied_head = name;
    } else if (is_mask_buffer(key, config, buffer_shape)) {
      if (info.shape != buffer_shape)
        problems.push_back(str_cat("tensor '", name, "': shape ", shape_str(info.shape), " in the file, but the ",
                                   "attention mask buffer of ", kConfigFile, " is ", shape_str(buffer_shape)));
    } else {
      problems.push_back(str_cat("tensor '", name, "': unexpected (", info.dtype, " ", shape_str(info.shape),
                                 "; not a tensor of the GPT-2 model ", kConfigFile, " describes)"));
    }
  }
  for (const Entry& e : entries)
    if (!source.count(e.hf))
      problems.push_back(str_cat("tensor '", e.hf, "': missing from the file (", kConfigFile, " implies ",
                                 shape_str(e.hf_shape), ")"));
  if (problems.empty() && !tied_head.empty() &&
      !same_values(read_tensor(file, tied_head, config.dtype),
                   read_tensor(file, source.at("wte.weight"), config.dtype)))
    problems.push_back(str_cat("tensor '", tied_head, "': differs from '", source.at("wte.weight"),
                               "', but GPT-2 ties them (set \"tie_word_embeddings\": false for an untied head)"));
  if (!problems.empty()) {
    std::string list;
    for (size_t i = 0; i < problems.size() && i < kMaxListedProblems; ++i) list += "\n  " + problems[i];
    if (problems.size() > kMaxListedProblems)
      list += str_cat("\n  ... and ", problems.size() - kMaxListedProblems, " more");
    fail(kOp, "'", path, "' does not match '", (fs::path(dir) / kConfigFile).string(), "' (", problems.size(),
         problems.size() == 1 ? " problem):" : " problems):", list);
  }

  // Every parameter is overwritten below: allocate them without drawing random values.
  auto model = std::dynamic_pointer_cast<DecoderOnlyModel>(make_model(config, ModelInit::None));
  NoGradGuard no_grad;
  nn::NamedTensors state;
  for (const Entry& e : entries) {
    Tensor t = read_tensor(file, source.at(e.hf), config.dtype);  // the file's layout
    if (e.transpose) t = transpose(t, 0, 1).contiguous();          // [in, out] -> [out, in]
    state.emplace_back(e.ours, t);
  }
  model->load_state_dict(state, /*strict=*/true);
  model->eval();
  return model;
}

}  // namespace

// ---- public API -----------------------------------------------------------------------------

ModelConfig gpt2_config_from_json(const json& hf, DType dtype) {
  ATTN_CHECK(hf.is_object(), kOp, "a GPT-2 config must be a JSON object, got ", hf.type_name());
  if (const json* v = find_key(hf, "model_type")) {
    const std::string type = io::json_string(kOp, "model_type", *v);
    ATTN_CHECK(type == "gpt2", kOp, "config.json's 'model_type' is \"", type, "\", not \"gpt2\"");
  }
  require_flag(hf, "scale_attn_weights", true, "GPT-2 scales attention scores by 1/sqrt(head size)");
  require_flag(hf, "scale_attn_by_inverse_layer_idx", false, "no per-layer attention scaling here");
  require_flag(hf, "add_cross_attention", false, "a decoder-only model has no cross-attention");
  ModelConfig c;
  c.arch = Arch::DecoderOnly;
  c.d_model = required_int(hf, "n_embd");
  c.n_heads = required_int(hf, "n_head");
  c.n_decoder_layers = required_int(hf, "n_layer");
  c.n_encoder_layers = 0;
  c.max_len = required_int(hf, "n_positions");
  c.src_vocab_size = required_int(hf, "vocab_size");
  c.tgt_vocab_size = 0;
  const json* inner = find_key(hf, "n_inner");
  c.d_ff = inner && !inner->is_null() ? io::json_int(kOp, "n_inner", *inner) : 0;
  // The bounds of ModelConfig::validate(), worded with config.json's keys, before any size is
  // multiplied (n_inner's default is 4 n_embd) or a tensor list is made for n_layer layers.
  using Bound = std::tuple<const char*, int64_t, int64_t>;
  for (auto [key, value, bound] : {Bound{"n_embd", c.d_model, kMaxDModel}, Bound{"n_head", c.n_heads, kMaxDModel},
                                   Bound{"n_layer", c.n_decoder_layers, kMaxLayers},
                                   Bound{"n_positions", c.max_len, kMaxPositions},
                                   Bound{"vocab_size", c.src_vocab_size, kMaxVocab}, Bound{"n_inner", c.d_ff, kMaxDFF}})
    ATTN_CHECK(value <= bound, kOp, "config.json's '", key, "' ", value, " is above the limit ", bound,
               " of this library");
  if (c.d_ff == 0) c.d_ff = 4 * c.d_model;
  c.norm_eps = optional_double(hf, "layer_norm_epsilon", 1e-5);
  const json* act = find_key(hf, "activation_function");
  c.activation = act ? parse_hf_activation(io::json_string(kOp, "activation_function", *act))
                     : nn::Activation::GELUTanh;
  // The checks that ModelConfig::validate() would make, worded with config.json's keys.
  for (auto [key, value] : {std::pair<const char*, int64_t>{"n_embd", c.d_model}, {"n_head", c.n_heads},
                            {"n_layer", c.n_decoder_layers}, {"n_positions", c.max_len},
                            {"vocab_size", c.src_vocab_size}, {"n_inner", c.d_ff}})
    ATTN_CHECK(value > 0, kOp, "config.json's '", key, "' must be positive, got ", value);
  ATTN_CHECK(c.d_model % c.n_heads == 0, kOp, "config.json's 'n_embd' ", c.d_model, " is not divisible by 'n_head' ",
             c.n_heads);
  ATTN_CHECK(c.norm_eps > 0, kOp, "config.json's 'layer_norm_epsilon' must be positive, got ", c.norm_eps);
  c.dropout = optional_double(hf, "resid_pdrop", 0.1);
  c.attention_dropout = optional_double(hf, "attn_pdrop", 0.1);
  const json* tie = find_key(hf, "tie_word_embeddings");
  c.tie_output = tie ? io::json_bool(kOp, "tie_word_embeddings", *tie) : true;
  c.norm_first = true;
  c.norm = nn::NormKind::Layer;
  c.final_norm = true;
  c.positional = nn::PositionalKind::Learned;
  c.scale_embeddings = false;
  c.share_embeddings = false;
  c.pad_id = -1;
  c.bos_id = optional_token(hf, "bos_token_id");
  c.eos_id = optional_token(hf, "eos_token_id");
  for (auto [key, id] : {std::pair<const char*, int64_t>{"bos_token_id", c.bos_id}, {"eos_token_id", c.eos_id}})
    ATTN_CHECK(id >= -1 && id < c.src_vocab_size, kOp, "config.json's '", key, "' ", id, " is outside [0, ",
               c.src_vocab_size, ") of 'vocab_size'");
  c.dtype = dtype;
  c.validate();
  return c;
}

json gpt2_config_to_json(const ModelConfig& c) {
  auto need = [](bool ok, const char* what) { ATTN_CHECK(ok, kOp, "GPT-2 cannot express this config: ", what); };
  need(c.arch == Arch::DecoderOnly, "arch must be decoder_only");
  need(c.norm_first, "norm_first must be true (GPT-2 is pre-norm)");
  need(c.final_norm, "final_norm must be true (GPT-2 has ln_f)");
  need(c.norm == nn::NormKind::Layer, "norm must be layer");
  need(c.positional == nn::PositionalKind::Learned, "positional must be learned");
  need(!c.scale_embeddings, "scale_embeddings must be false");
  need(c.pad_id < 0, "pad_id must be -1 (GPT-2 has no PAD token)");
  need(c.attention == nn::AttentionKind::Softmax, "attention must be softmax");
  need(c.n_experts == 0, "n_experts must be 0 (GPT-2's FFN is dense)");
  json j;
  j["architectures"] = json::array({"GPT2LMHeadModel"});
  j["model_type"] = "gpt2";
  j["activation_function"] = c.activation == nn::Activation::GELUTanh ? "gelu_new"
                             : c.activation == nn::Activation::GELU   ? "gelu"
                                                                      : "relu";
  j["n_embd"] = c.d_model;
  j["n_head"] = c.n_heads;
  j["n_layer"] = c.n_decoder_layers;
  j["n_positions"] = c.max_len;
  j["n_ctx"] = c.max_len;
  j["n_inner"] = c.d_ff == 4 * c.d_model ? json(nullptr) : json(c.d_ff);
  j["vocab_size"] = c.vocab_size();
  j["layer_norm_epsilon"] = c.norm_eps;
  j["resid_pdrop"] = c.dropout;
  j["embd_pdrop"] = c.dropout;
  j["attn_pdrop"] = c.attention_dropout;
  j["bos_token_id"] = c.bos_id >= 0 ? json(c.bos_id) : json(nullptr);
  j["eos_token_id"] = c.eos_id >= 0 ? json(c.eos_id) : json(nullptr);
  j["tie_word_embeddings"] = c.tie_output;
  j["scale_attn_weights"] = true;
  return j;
}

bool is_gpt2_folder(const std::string& dir) {
  try {
    const json j = read_config_json(dir);
    if (const json* t = find_key(j, "model_type")) return t->is_string() && t->get<std::string>() == "gpt2";
    return j.contains("n_embd") && j.contains("n_layer") && !j.contains("arch");
  } catch (...) {
    return false;
  }
}

io::NamedTensors gpt2_state_dict(const DecoderOnlyModel& model) {
  (void)gpt2_config_to_json(model.config());  // the same checks
  NoGradGuard no_grad;
  io::NamedTensors out;
  for (const Entry& e : tensor_map(model.config())) {
    Tensor p = model.parameter(e.ours).detach();
    out.emplace_back(e.hf, e.transpose ? transpose(p, 0, 1).contiguous() : p);  // [out, in] -> [in, out]
  }
  return out;
}

void save_gpt2(const std::string& dir, const DecoderOnlyModel& model) {
  const json config = gpt2_config_to_json(model.config());
  std::error_code ec;
  fs::create_directories(dir, ec);
  ATTN_CHECK(fs::is_directory(dir, ec), kOp, "'", dir, "': cannot create the folder");
  io::save_safetensors((fs::path(dir) / kWeightsFile).string(), gpt2_state_dict(model), {{"format", "pt"}});
  io::write_file_atomic((fs::path(dir) / kConfigFile).string(), config.dump(2) + "\n");
}

std::shared_ptr<DecoderOnlyModel> load_gpt2_model(const std::string& dir, DType dtype) {
  ATTN_CHECK(dtype == DType::F32 || dtype == DType::F64, kOp, "dtype must be f32 or f64, got ", dtype_name(dtype));
  const json hf = read_config_json(dir);
  return load_weights(dir, config_of_folder(dir, hf, dtype));
}

Gpt2 load_gpt2(const std::string& dir, DType dtype) {
  ATTN_CHECK(dtype == DType::F32 || dtype == DType::F64, kOp, "dtype must be f32 or f64, got ", dtype_name(dtype));
  const json hf = read_config_json(dir);
  ModelConfig config = config_of_folder(dir, hf, dtype);
  io::BpeTokenizer tokenizer = io::BpeTokenizer::load_folder(dir);
  const std::string config_path = (fs::path(dir) / kConfigFile).string();
  ATTN_CHECK(tokenizer.vocab_size() <= config.vocab_size(), kOp, "'", dir, "': the tokenizer has ",
             tokenizer.vocab_size(), " tokens, more than the vocab_size ", config.vocab_size(), " of '",
             config_path, "'");
  const int64_t eot = tokenizer.eos_id();
  using Slot = std::pair<const char*, int64_t*>;
  for (auto [key, id] : {Slot{"bos_token_id", &config.bos_id}, Slot{"eos_token_id", &config.eos_id}}) {
    if (*id < 0) *id = eot;
    else ATTN_CHECK(eot < 0 || *id == eot, kOp, "'", config_path, "': ", key, " ", *id, " is not the tokenizer's ",
                    io::BpeTokenizer::kEndOfText, " (id ", eot, ")");
  }
  config.validate();
  return Gpt2{load_weights(dir, config), std::move(tokenizer)};
}

}  // namespace attn::models
