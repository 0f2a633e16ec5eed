// attn/io/json_fields.h — typed reads of JSON configuration values (config.json,
// train_config.json), one place for the error wording: each names the owner (`op`), the key,
// what was expected and what was found, e.g. "[TrainConfig] key 'epochs' must be an integer,
// got string "ten"". Objects, arrays and unknown keys are the callers' business.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "attn/core/error.h"

namespace attn::io {

int64_t json_int(const char* op, const std::string& key, const nlohmann::json& v);
// A non-negative integer (seeds).
uint64_t json_uint(const char* op, const std::string& key, const nlohmann::json& v);
double json_double(const char* op, const std::string& key, const nlohmann::json& v);
bool json_bool(const char* op, const std::string& key, const nlohmann::json& v);
std::string json_string(const char* op, const std::string& key, const nlohmann::json& v);

// A string value turned into an enum by `parse`; a parse error is reported under the key.
template <class F>
auto json_enum(const char* op, const std::string& key, const nlohmann::json& v, F parse) {
  const std::string name = json_string(op, key, v);
  try {
    return parse(name);
  } catch (const Error& e) {
    fail(op, "key '", key, "': ", e.what());
  }
}

}  // namespace attn::io
