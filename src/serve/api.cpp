// serve/api.cpp — see attn/serve/api.h.
#include "attn/serve/api.h"

#include <cmath>
#include <limits>

#include "attn/core/error.h"

namespace attn::serve {

using nlohmann::json;

ApiError invalid(const std::string& param, const std::string& message, const std::string& code) {
  return ApiError(400, "invalid_request_error", message, param, code);
}

json error_json(const ApiError& e) {
  json err = {{"message", e.what()}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (e.param) err["param"] = *e.param;
  if (e.code) err["code"] = *e.code;
  return json{{"error", err}};
}

json parse_json_object(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    throw ApiError(400, "invalid_request_error", str_cat("the request body is not valid JSON: ", e.what()),
                   std::nullopt, std::string("invalid_json"));
  }
  if (!j.is_object())
    throw ApiError(400, "invalid_request_error",
                   str_cat("the request body must be a JSON object, got ", j.type_name()), std::nullopt,
                   std::string("invalid_json"));
  return j;
}

namespace {

const char* type_of(const json& v) { return v.type_name(); }

// A JSON integer that fits int64 (a float, even 16.0, a bool or a string is not one).
bool is_int(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  return v.is_number_integer();
}

int64_t get_int(const json& j, const char* name, int64_t fallback) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return fallback;
  if (!is_int(*it)) throw invalid(name, str_cat(name, " must be an integer, got ", it->dump()), "invalid_type");
  return it->get<int64_t>();
}

double get_number(const json& j, const char* name, double fallback) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw invalid(name, str_cat(name, " must be a number, got ", type_of(*it)), "invalid_type");
  return it->get<double>();
}

bool get_bool(const json& j, const char* name, bool fallback) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw invalid(name, str_cat(name, " must be true or false, got ", type_of(*it)), "invalid_type");
  return it->get<bool>();
}

std::vector<int64_t> id_list(const json& list) {
  std::vector<int64_t> ids;
  ids.reserve(list.size());
  for (const json& v : list) {
    if (!is_int(v)) throw invalid("prompt", str_cat("a token-id prompt holds integers only, got ", v.dump()), "invalid_type");
    ids.push_back(v.get<int64_t>());
  }
  if (ids.empty()) throw invalid("prompt", "a token-id prompt is empty");
  return ids;
}

// prompt: "text" | ["text", ...] | [id, ...] | [[id, ...], ...] (a list may mix texts and id lists).
std::vector<RawPrompt> read_prompts(const json& j) {
  auto it = j.find("prompt");
  if (it == j.end() || it->is_null()) throw invalid("prompt", "prompt is required", "missing_required_parameter");
  const json& p = *it;
  std::vector<RawPrompt> out;
  if (p.is_string()) {
    out.push_back({p.get<std::string>(), {}});
    return out;
  }
  if (!p.is_array())
    throw invalid("prompt", str_cat("prompt must be a string, a list of strings, a list of token ids or a list of "
                                    "token-id lists, got ", type_of(p)), "invalid_type");
  if (p.empty()) throw invalid("prompt", "prompt is an empty list");
  if (is_int(p.front()) || p.front().is_number()) {
    out.push_back({std::nullopt, id_list(p)});
    return out;
  }
  for (const json& e : p) {
    if (e.is_string()) out.push_back({e.get<std::string>(), {}});
    else if (e.is_array()) out.push_back({std::nullopt, id_list(e)});
    else
      throw invalid("prompt", str_cat("each prompt of a list must be a string or a list of token ids, got ", type_of(e)),
                    "invalid_type");
  }
  return out;
}

}  // namespace

CompletionRequest parse_completion_request(const std::string& body) {
  const json j = parse_json_object(body);
  CompletionRequest r;
  auto model = j.find("model");
  if (model == j.end() || model->is_null()) throw invalid("model", "model is required", "missing_required_parameter");
  if (!model->is_string()) throw invalid("model", str_cat("model must be a string, got ", type_of(*model)), "invalid_type");
  r.model = model->get<std::string>();
  r.prompts = read_prompts(j);

  GenerationParams& g = r.params;
  g.max_tokens = get_int(j, "max_tokens", 16);
  if (g.max_tokens < 1) throw invalid("max_tokens", str_cat("max_tokens must be >= 1, got ", g.max_tokens));
  g.temperature = get_number(j, "temperature", 1.0);
  if (!(std::isfinite(g.temperature) && g.temperature >= 0 && g.temperature <= 2))
    throw invalid("temperature", str_cat("temperature must be in [0, 2], got ", g.temperature));
  g.top_p = get_number(j, "top_p", 1.0);
  if (!(g.top_p > 0 && g.top_p <= 1)) throw invalid("top_p", str_cat("top_p must be in (0, 1], got ", g.top_p));
  g.top_k = get_int(j, "top_k", 0);
  if (g.top_k < 0) throw invalid("top_k", str_cat("top_k must be >= 0, got ", g.top_k));
  g.n = get_int(j, "n", 1);
  if (g.n < 1 || g.n > 16) throw invalid("n", str_cat("n must be in [1, 16], got ", g.n));
  g.beam = get_int(j, "beam_size", 0);
  if (g.beam < 0 || g.beam > 16) throw invalid("beam_size", str_cat("beam_size must be in [0, 16], got ", g.beam));
  if (g.beam >= 1 && g.n > g.beam)
    throw invalid("n", str_cat("n must be <= beam_size (", g.beam, ") with beam search, got ", g.n));
  g.alpha = get_number(j, "length_penalty", 0.6);
  if (!(std::isfinite(g.alpha) && g.alpha >= 0))
    throw invalid("length_penalty", str_cat("length_penalty must be >= 0, got ", g.alpha));
  g.logprobs = get_int(j, "logprobs", -1);
  if (j.contains("logprobs") && !j["logprobs"].is_null() && (g.logprobs < 0 || g.logprobs > 5))
    throw invalid("logprobs", str_cat("logprobs must be in [0, 5], got ", g.logprobs));
  if (g.beam >= 1 && g.logprobs >= 0) throw invalid("logprobs", "logprobs is not available with beam search");
  auto seed = j.find("seed");
  if (seed != j.end() && !seed->is_null()) {
    if (!(seed->is_number_integer() || seed->is_number_unsigned()))
      throw invalid("seed", str_cat("seed must be an integer, got ", seed->dump()), "invalid_type");
    g.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : static_cast<uint64_t>(seed->get<int64_t>());
  }

  auto stop = j.find("stop");
  if (stop != j.end() && !stop->is_null()) {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > 4) throw invalid("stop", str_cat("stop holds at most 4 strings, got ", stop->size()));
      for (const json& s : *stop) {
        if (!s.is_string()) throw invalid("stop", str_cat("stop must be a string or a list of strings, got ", s.dump()), "invalid_type");
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      throw invalid("stop", str_cat("stop must be a string or a list of strings, got ", type_of(*stop)), "invalid_type");
    }
    for (const std::string& s : r.stop)
      if (s.empty()) throw invalid("stop", "a stop string is empty");
  }

  r.stream = get_bool(j, "stream", false);
  r.echo = get_bool(j, "echo", false);
  auto options = j.find("stream_options");
  if (options != j.end() && !options->is_null()) {
    if (!r.stream) throw invalid("stream_options", "stream_options is only allowed with stream: true");
    if (!options->is_object())
      throw invalid("stream_options", str_cat("stream_options must be an object, got ", type_of(*options)), "invalid_type");
    r.include_usage = get_bool(*options, "include_usage", false);
  }

  // OpenAI fields attn does not implement: accepted at their neutral value, refused otherwise.
  auto suffix = j.find("suffix");
  if (suffix != j.end() && !suffix->is_null() && !(suffix->is_string() && suffix->get<std::string>().empty()))
    throw invalid("suffix", "suffix is not supported");
  if (get_int(j, "best_of", 1) != 1 && get_int(j, "best_of", 1) != g.n)
    throw invalid("best_of", "best_of is not supported (use n, or beam_size for the n best of a beam search)");
  for (const char* name : {"presence_penalty", "frequency_penalty"}) {
    const double v = get_number(j, name, 0.0);
    if (v != 0.0) throw invalid(name, str_cat(name, " is not supported (only 0)"));
  }
  auto bias = j.find("logit_bias");
  if (bias != j.end() && !bias->is_null() && !(bias->is_object() && bias->empty()))
    throw invalid("logit_bias", "logit_bias is not supported");
  auto user = j.find("user");
  if (user != j.end() && !user->is_null() && !user->is_string())
    throw invalid("user", str_cat("user must be a string, got ", type_of(*user)), "invalid_type");
  return r;
}

}  // namespace attn::serve
