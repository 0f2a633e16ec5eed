// ModelConfig: validation, strict JSON reading and writing, and the presets.
#include "attn/models/config.h"

#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "attn/core/error.h"
#include "attn/core/shape.h"
#include "attn/io/json_fields.h"

namespace attn::models {

namespace {

constexpr const char* kOp = "ModelConfig";
using json = nlohmann::json;

DType parse_dtype(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "f64") return DType::F64;
  fail(kOp, "unknown dtype '", name, "' (expected f32 or f64)");
}

int64_t read_int(const std::string& key, const json& v) { return io::json_int(kOp, key, v); }
double read_double(const std::string& key, const json& v) { return io::json_double(kOp, key, v); }
bool read_bool(const std::string& key, const json& v) { return io::json_bool(kOp, key, v); }
template <class F>
auto read_enum(const std::string& key, const json& v, F parse) {
  return io::json_enum(kOp, key, v, parse);
}

void check_token(const char* key, int64_t id, int64_t vocab, const char* vocab_name) {
  ATTN_CHECK(id >= -1 && id < vocab, kOp, key, " ", id, " is outside [0, ", vocab, ") of ", vocab_name,
             " (use -1 for none)");
}

}  // namespace

const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::EncoderDecoder: return "encoder_decoder";
    case Arch::DecoderOnly: return "decoder_only";
    case Arch::EncoderOnly: return "encoder_only";
  }
  return "?";
}

Arch parse_arch(const std::string& name) {
  if (name == "encoder_decoder") return Arch::EncoderDecoder;
  if (name == "decoder_only") return Arch::DecoderOnly;
  if (name == "encoder_only") return Arch::EncoderOnly;
  fail(kOp, "unknown arch '", name, "' (expected encoder_decoder, decoder_only or encoder_only)");
}

void ModelConfig::validate() const {
  // The size keys first, each against its bound: everything after (and the model built from
  // the config) may multiply them.
  using Bound = std::tuple<const char*, int64_t, int64_t>;
  for (auto [key, value, bound] : {Bound{"d_model", d_model, kMaxDModel}, Bound{"n_heads", n_heads, kMaxDModel},
                                   Bound{"n_encoder_layers", n_encoder_layers, kMaxLayers},
                                   Bound{"n_decoder_layers", n_decoder_layers, kMaxLayers}, Bound{"d_ff", d_ff, kMaxDFF},
                                   Bound{"src_vocab_size", src_vocab_size, kMaxVocab},
                                   Bound{"tgt_vocab_size", tgt_vocab_size, kMaxVocab},
                                   Bound{"max_len", max_len, kMaxPositions},
                                   Bound{"sliding_window", sliding_window, kMaxPositions},
                                   Bound{"n_kv_heads", n_kv_heads, kMaxDModel}, Bound{"n_experts", n_experts, kMaxExperts},
                                   Bound{"expert_top_k", expert_top_k, kMaxExperts}})
    ATTN_CHECK(value <= bound, kOp, key, " ", value, " is above the limit ", bound, " of this library");
  ATTN_CHECK(d_model > 0, kOp, "d_model must be positive, got ", d_model);
  ATTN_CHECK(n_heads > 0, kOp, "n_heads must be positive, got ", n_heads);
  ATTN_CHECK(d_model % n_heads == 0, kOp, "d_model ", d_model, " is not divisible by n_heads ", n_heads);
  ATTN_CHECK(d_ff > 0, kOp, "d_ff must be positive, got ", d_ff);
  ATTN_CHECK(n_encoder_layers >= 0, kOp, "n_encoder_layers must not be negative, got ", n_encoder_layers);
  ATTN_CHECK(n_decoder_layers >= 0, kOp, "n_decoder_layers must not be negative, got ", n_decoder_layers);
  const bool uses_encoder = arch != Arch::DecoderOnly, uses_decoder = arch != Arch::EncoderOnly;
  ATTN_CHECK(!uses_encoder || n_encoder_layers > 0, kOp, "n_encoder_layers must be at least 1 for ",
             arch_name(arch), ", got ", n_encoder_layers);
  ATTN_CHECK(!uses_decoder || n_decoder_layers > 0, kOp, "n_decoder_layers must be at least 1 for ",
             arch_name(arch), ", got ", n_decoder_layers);
  ATTN_CHECK(dropout >= 0.0 && dropout < 1.0, kOp, "dropout must be in [0, 1), got ", dropout);
  ATTN_CHECK(attention_dropout >= 0.0 && attention_dropout < 1.0, kOp,
             "attention_dropout must be in [0, 1), got ", attention_dropout);
  ATTN_CHECK(norm_eps > 0.0, kOp, "norm_eps must be positive, got ", norm_eps);
  ATTN_CHECK(max_len > 0, kOp, "max_len must be positive, got ", max_len);
  ATTN_CHECK(n_kv_heads >= 0 && n_kv_heads <= n_heads && (n_kv_heads == 0 || n_heads % n_kv_heads == 0), kOp,
             "n_kv_heads ", n_kv_heads, " must divide n_heads ", n_heads, " (0 = n_heads)");
  ATTN_CHECK(rope_theta > 0.0 && std::isfinite(rope_theta), kOp, "rope_theta must be positive, got ", rope_theta);
  ATTN_CHECK(positional != nn::PositionalKind::Rope || (d_model / n_heads) % 2 == 0, kOp,
             "rope needs an even head dimension; d_model / n_heads = ", d_model / n_heads);
  ATTN_CHECK(sliding_window >= 0, kOp, "sliding_window must be >= 0 (0 = none), got ", sliding_window);
  ATTN_CHECK(sliding_window == 0 || arch == Arch::DecoderOnly, kOp,
             "sliding_window is causal self-attention and needs arch decoder_only, got ", arch_name(arch));
  if (attention == nn::AttentionKind::Linear) {
    ATTN_CHECK(positional != nn::PositionalKind::Rope && positional != nn::PositionalKind::Alibi, kOp,
               "attention linear cannot be combined with positional ", nn::positional_kind_name(positional),
               " (linear attention forms no scores to rotate or bias); use sinusoidal, learned or none");
    ATTN_CHECK(sliding_window == 0, kOp, "attention linear cannot be combined with sliding_window ", sliding_window);
    ATTN_CHECK(n_kv_heads == 0 || n_kv_heads == n_heads, kOp, "attention linear cannot be combined with n_kv_heads ",
               n_kv_heads, " (grouped key/value heads); use 0");
  }
  ATTN_CHECK(n_experts >= 0, kOp, "n_experts must be >= 0 (0 = dense FFN), got ", n_experts);
  if (n_experts > 0) {
    ATTN_CHECK(expert_top_k >= 1 && expert_top_k <= n_experts, kOp, "expert_top_k must be in [1, n_experts = ",
               n_experts, "], got ", expert_top_k);
  }
  ATTN_CHECK(std::isfinite(expert_capacity_factor) && expert_capacity_factor >= 0.0, kOp,
             "expert_capacity_factor must be >= 0 (0 = unlimited), got ", expert_capacity_factor);
  ATTN_CHECK(std::isfinite(moe_aux_loss_weight) && moe_aux_loss_weight >= 0.0, kOp,
             "moe_aux_loss_weight must be >= 0, got ", moe_aux_loss_weight);
  ATTN_CHECK(activation != nn::Activation::SwiGLU || arch != Arch::EncoderOnly, kOp,
             "activation swiglu is a gated FFN; encoder_only's masked-LM head applies the activation element-wise");
  ATTN_CHECK(dtype == DType::F32 || dtype == DType::F64, kOp, "dtype must be f32 or f64, got ",
             dtype_name(dtype));
  ATTN_CHECK(quantization == Quantization::None || dtype == DType::F32, kOp, "quantization ",
             quantization_name(quantization), " needs dtype f32, got ", dtype_name(dtype));
  ATTN_CHECK(src_vocab_size > 0, kOp, "src_vocab_size must be positive, got ", src_vocab_size);
  if (arch == Arch::EncoderDecoder) {
    ATTN_CHECK(tgt_vocab_size > 0, kOp, "tgt_vocab_size must be positive, got ", tgt_vocab_size);
    ATTN_CHECK(!share_embeddings || src_vocab_size == tgt_vocab_size, kOp,
               "share_embeddings needs equal vocabularies, got src_vocab_size ", src_vocab_size,
               " and tgt_vocab_size ", tgt_vocab_size);
  } else {
    ATTN_CHECK(tgt_vocab_size == 0 || tgt_vocab_size == src_vocab_size, kOp, arch_name(arch),
               " uses src_vocab_size as its vocabulary; tgt_vocab_size must be 0 or equal to it, got ",
               tgt_vocab_size, " and ", src_vocab_size);
  }
  const int64_t tgt = arch == Arch::EncoderDecoder ? tgt_vocab_size : src_vocab_size;
  for (auto [name, id] : {std::pair<const char*, int64_t>{"pad_id", pad_id}, {"bos_id", bos_id}, {"eos_id", eos_id}}) {
    check_token(name, id, src_vocab_size, "src_vocab_size");
    check_token(name, id, tgt, "tgt_vocab_size");
  }
  const int64_t params = min_parameters();
  ATTN_CHECK(params <= kMaxParameters, kOp, "the config implies at least ", params,
             " parameters, above the limit ", kMaxParameters, " (2^36) of this library; the largest part: ",
             largest_part());
}

std::vector<ParameterPart> ModelConfig::parameter_parts() const {
  // Overflow-checked although the key bounds keep every product far below 2^63: parts may be
  // asked for before validate() has run its bounds (a loader's message).
  auto mul = [](int64_t a, int64_t b) { return checked_mul(a, b, kOp, "the parameter count"); };
  auto add = [](int64_t a, int64_t b) { return checked_add(a, b, kOp, "the parameter count"); };
  const int64_t D = d_model, F = d_ff, E = std::max<int64_t>(n_experts, 1);
  const bool single = arch != Arch::EncoderDecoder;
  std::vector<ParameterPart> parts;
  // Token embeddings [V, D], plus an untied output projection [V, D].
  const int64_t src_tables = single && !tie_output ? 2 : 1;
  parts.push_back({"src_vocab_size", src_vocab_size, mul(mul(src_vocab_size, D), src_tables),
                   str_cat(single && !tie_output ? "token embeddings and output projection" : "token embeddings",
                           " [src_vocab_size, d_model] (d_model ", D, ")")});
  if (!single) {
    const int64_t tgt_tables = (share_embeddings ? 0 : 1) + (tie_output ? 0 : 1);
    if (tgt_tables > 0)
      parts.push_back({"tgt_vocab_size", tgt_vocab_size, mul(mul(tgt_vocab_size, D), tgt_tables),
                       str_cat("target embeddings or output projection [tgt_vocab_size, d_model] (d_model ", D, ")")});
  }
  if (positional == nn::PositionalKind::Learned)
    parts.push_back({"max_len", max_len, mul(mul(max_len, D), single ? 1 : 2),
                     str_cat("learned position tables [max_len, d_model] (d_model ", D, ")")});
  // Per layer: self-attention's query and output projections (2 D^2; cross-attention adds as
  // much), and the FFN's two matrices per expert (2 D F E; swiglu has three).
  const int64_t ffn = mul(mul(2, mul(D, F)), E);
  const int64_t self_layer = add(mul(2, mul(D, D)), ffn);
  const std::string sizes = str_cat("(d_model ", D, ", d_ff ", F, n_experts > 0 ? str_cat(", n_experts ", n_experts) : "", ")");
  if (arch != Arch::DecoderOnly)
    parts.push_back({"n_encoder_layers", n_encoder_layers, mul(n_encoder_layers, self_layer),
                     str_cat("encoder layers of at least ", self_layer, " parameters each ", sizes)});
  if (arch != Arch::EncoderOnly) {
    const int64_t layer = single ? self_layer : add(self_layer, mul(2, mul(D, D)));
    parts.push_back({"n_decoder_layers", n_decoder_layers, mul(n_decoder_layers, layer),
                     str_cat("decoder layers of at least ", layer, " parameters each ", sizes)});
  }
  return parts;
}

int64_t ModelConfig::min_parameters() const {
  int64_t n = 0;
  for (const ParameterPart& p : parameter_parts()) n = checked_add(n, p.count, kOp, "the parameter count");
  return n;
}

std::string ModelConfig::largest_part() const {
  const std::vector<ParameterPart> parts = parameter_parts();
  const ParameterPart* big = &parts.front();
  for (const ParameterPart& p : parts)
    if (p.count > big->count) big = &p;
  return str_cat(big->key, " ", big->value, ": ", big->what, ", at least ", big->count, " parameters");
}

nn::LayerOptions ModelConfig::layer_options() const {
  nn::LayerOptions o;
  o.d_model = d_model;
  o.n_heads = n_heads;
  o.d_ff = d_ff;
  o.dropout = dropout;
  o.attention_dropout = attention_dropout;
  o.activation = activation;
  o.norm_first = norm_first;
  o.norm = norm;
  o.norm_eps = norm_eps;
  o.dtype = dtype;
  o.attention.n_kv_heads = n_kv_heads;
  o.attention.rope = positional == nn::PositionalKind::Rope;
  o.attention.rope_options.theta = rope_theta;
  o.attention.rope_options.pairing = rope_pairing;
  o.attention.alibi = positional == nn::PositionalKind::Alibi;
  o.attention.window = sliding_window;
  o.attention_kind = attention;
  o.n_experts = n_experts;
  o.expert_top_k = expert_top_k;
  o.expert_capacity_factor = expert_capacity_factor;
  return o;
}

json ModelConfig::to_json() const {
  json j;
  j["arch"] = arch_name(arch);
  j["d_model"] = d_model;
  j["n_heads"] = n_heads;
  j["n_encoder_layers"] = n_encoder_layers;
  j["n_decoder_layers"] = n_decoder_layers;
  j["d_ff"] = d_ff;
  j["dropout"] = dropout;
  j["attention_dropout"] = attention_dropout;
  j["activation"] = nn::activation_name(activation);
  j["norm_first"] = norm_first;
  j["norm"] = nn::norm_kind_name(norm);
  j["norm_eps"] = norm_eps;
  j["final_norm"] = final_norm;
  j["positional"] = nn::positional_kind_name(positional);
  j["max_len"] = max_len;
  // The descendants' keys only when set, so that a paper model's config stays as it was.
  const ModelConfig defaults;
  if (rope_theta != defaults.rope_theta) j["rope_theta"] = rope_theta;
  if (rope_pairing != defaults.rope_pairing) j["rope_pairing"] = rope_pairing_name(rope_pairing);
  if (n_kv_heads != defaults.n_kv_heads) j["n_kv_heads"] = n_kv_heads;
  if (sliding_window != defaults.sliding_window) j["sliding_window"] = sliding_window;
  if (attention != defaults.attention) j["attention"] = nn::attention_kind_name(attention);
  if (n_experts != defaults.n_experts) j["n_experts"] = n_experts;
  if (expert_top_k != defaults.expert_top_k) j["expert_top_k"] = expert_top_k;
  if (expert_capacity_factor != defaults.expert_capacity_factor) j["expert_capacity_factor"] = expert_capacity_factor;
  if (moe_aux_loss_weight != defaults.moe_aux_loss_weight) j["moe_aux_loss_weight"] = moe_aux_loss_weight;
  j["src_vocab_size"] = src_vocab_size;
  j["tgt_vocab_size"] = tgt_vocab_size;
  j["share_embeddings"] = share_embeddings;
  j["tie_output"] = tie_output;
  j["scale_embeddings"] = scale_embeddings;
  j["pad_id"] = pad_id;
  j["bos_id"] = bos_id;
  j["eos_id"] = eos_id;
  j["dtype"] = dtype_name(dtype);
  j["seed"] = seed;
  if (quantization != defaults.quantization) j["quantization"] = quantization_name(quantization);
  return j;
}

ModelConfig ModelConfig::from_json(const json& j) {
  ATTN_CHECK(j.is_object(), kOp, "a model config must be a JSON object, got ", j.type_name());
  ModelConfig c;
  using Setter = std::function<void(const std::string&, const json&)>;
  auto int_field = [](int64_t& f) -> Setter { return [&f](const std::string& k, const json& v) { f = read_int(k, v); }; };
  auto num_field = [](double& f) -> Setter { return [&f](const std::string& k, const json& v) { f = read_double(k, v); }; };
  auto bool_field = [](bool& f) -> Setter { return [&f](const std::string& k, const json& v) { f = read_bool(k, v); }; };
  const std::map<std::string, Setter> setters = {
      {"arch", [&](const std::string& k, const json& v) { c.arch = read_enum(k, v, parse_arch); }},
      {"d_model", int_field(c.d_model)},
      {"n_heads", int_field(c.n_heads)},
      {"n_encoder_layers", int_field(c.n_encoder_layers)},
      {"n_decoder_layers", int_field(c.n_decoder_layers)},
      {"d_ff", int_field(c.d_ff)},
      {"dropout", num_field(c.dropout)},
      {"attention_dropout", num_field(c.attention_dropout)},
      {"activation", [&](const std::string& k, const json& v) { c.activation = read_enum(k, v, nn::parse_activation); }},
      {"norm_first", bool_field(c.norm_first)},
      {"norm", [&](const std::string& k, const json& v) { c.norm = read_enum(k, v, nn::parse_norm_kind); }},
      {"norm_eps", num_field(c.norm_eps)},
      {"final_norm", bool_field(c.final_norm)},
      {"positional",
       [&](const std::string& k, const json& v) { c.positional = read_enum(k, v, nn::parse_positional_kind); }},
      {"max_len", int_field(c.max_len)},
      {"rope_theta", num_field(c.rope_theta)},
      {"rope_pairing",
       [&](const std::string& k, const json& v) { c.rope_pairing = read_enum(k, v, parse_rope_pairing); }},
      {"n_kv_heads", int_field(c.n_kv_heads)},
      {"sliding_window", int_field(c.sliding_window)},
      {"attention",
       [&](const std::string& k, const json& v) { c.attention = read_enum(k, v, nn::parse_attention_kind); }},
      {"n_experts", int_field(c.n_experts)},
      {"expert_top_k", int_field(c.expert_top_k)},
      {"expert_capacity_factor", num_field(c.expert_capacity_factor)},
      {"moe_aux_loss_weight", num_field(c.moe_aux_loss_weight)},
      {"src_vocab_size", int_field(c.src_vocab_size)},
      {"tgt_vocab_size", int_field(c.tgt_vocab_size)},
      {"share_embeddings", bool_field(c.share_embeddings)},
      {"tie_output", bool_field(c.tie_output)},
      {"scale_embeddings", bool_field(c.scale_embeddings)},
      {"pad_id", int_field(c.pad_id)},
      {"bos_id", int_field(c.bos_id)},
      {"eos_id", int_field(c.eos_id)},
      {"dtype", [&](const std::string& k, const json& v) { c.dtype = read_enum(k, v, parse_dtype); }},
      {"quantization",
       [&](const std::string& k, const json& v) { c.quantization = read_enum(k, v, parse_quantization); }},
      {"seed",
       [&](const std::string& k, const json& v) {
         ATTN_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), kOp, "key '", k,
                    "' must be a non-negative integer, got ", v.type_name(), " ", v.dump());
         c.seed = v.get<uint64_t>();
       }},
  };
  for (const auto& [key, value] : j.items()) {
    auto it = setters.find(key);
    ATTN_CHECK(it != setters.end(), kOp, "unknown key '", key, "'");
    it->second(key, value);
  }
  return c;
}

ModelConfig ModelConfig::paper_base() { return ModelConfig{}; }

ModelConfig ModelConfig::paper_big() {
  ModelConfig c;
  c.d_model = 1024;
  c.n_heads = 16;
  c.d_ff = 4096;
  c.dropout = 0.3;
  c.attention_dropout = 0.3;
  return c;
}

ModelConfig ModelConfig::seed_small() {
  ModelConfig c;
  c.d_model = 64;
  c.n_heads = 4;
  c.n_encoder_layers = 2;
  c.n_decoder_layers = 2;
  c.d_ff = 256;
  c.max_len = 64;
  c.src_vocab_size = 13;
  c.tgt_vocab_size = 13;
  return c;
}

ModelConfig ModelConfig::preset(const std::string& name) {
  if (name == "base") return paper_base();
  if (name == "big") return paper_big();
  if (name == "small") return seed_small();
  fail(kOp, "unknown preset '", name, "' (expected base, big or small)");
}

}  // namespace attn::models
