// attn/serve/api.h — the JSON side of `attn serve`'s OpenAI-compatible API: errors in OpenAI's
// shape {"error": {"message", "type", "param", "code"}} with their HTTP status, and the
// POST /v1/completions request read and checked field by field (every wrong type or value an
// ApiError naming the field as `param`). Parameters the engine checks against the model
// (max_tokens' upper bound, the prompt's length and ids) are the engine's (RequestError).
// Not here: HTTP (server.cpp), tokenization (text.h), decoding (engine.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "attn/serve/engine.h"

namespace attn::serve {

// An error answered to the client: HTTP status and OpenAI's error object.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message, std::optional<std::string> param = {},
           std::optional<std::string> code = {})
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type;  // invalid_request_error, authentication_error, not_found_error, ...
  std::optional<std::string> param, code;
};

// 400 invalid_request_error naming `param`, with code (default "invalid_value").
ApiError invalid(const std::string& param, const std::string& message, const std::string& code = "invalid_value");

// {"error": {"message", "type", "param", "code"}} (absent param/code as null).
nlohmann::json error_json(const ApiError& e);

// One prompt of a request: its token ids, and its text when it came as text.
struct Prompt {
  std::vector<int64_t> ids;
  std::optional<std::string> text;
};

// A prompt as the request gives it, before tokenization.
struct RawPrompt {
  std::optional<std::string> text;  // a string prompt
  std::vector<int64_t> ids;         // a token-id prompt (when text is unset)
};

// POST /v1/completions, read and checked.
struct CompletionRequest {
  std::string model;
  std::vector<RawPrompt> prompts;  // >= 1
  GenerationParams params;         // max_tokens, temperature, top_p, top_k, seed, n, beam, alpha, logprobs
  std::vector<std::string> stop;   // <= 4 non-empty strings
  bool stream = false;
  bool include_usage = false;      // stream_options.include_usage
  bool echo = false;
};

// Reads a request body. Malformed JSON, a body that is not an object, a missing `model` or
// `prompt`, a field of the wrong type, a value out of range, or a field attn does not support
// with a non-default value (suffix, best_of, logit_bias, presence/frequency penalties) is an
// ApiError 400 naming the field.
CompletionRequest parse_completion_request(const std::string& body);

// The body as a JSON object (malformed JSON or another type: ApiError 400).
nlohmann::json parse_json_object(const std::string& body);

}  // namespace attn::serve
