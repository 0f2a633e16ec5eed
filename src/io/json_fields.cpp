// Typed reads of JSON configuration values with errors that name the owner and the key.
#include "attn/io/json_fields.h"

namespace attn::io {

using json = nlohmann::json;

int64_t json_int(const char* op, const std::string& key, const json& v) {
  ATTN_CHECK(v.is_number_integer(), op, "key '", key, "' must be an integer, got ", v.type_name(), " ",
             v.dump());
  return v.get<int64_t>();
}

uint64_t json_uint(const char* op, const std::string& key, const json& v) {
  ATTN_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), op, "key '", key,
             "' must be a non-negative integer, got ", v.type_name(), " ", v.dump());
  return v.get<uint64_t>();
}

double json_double(const char* op, const std::string& key, const json& v) {
  ATTN_CHECK(v.is_number(), op, "key '", key, "' must be a number, got ", v.type_name(), " ", v.dump());
  return v.get<double>();
}

bool json_bool(const char* op, const std::string& key, const json& v) {
  ATTN_CHECK(v.is_boolean(), op, "key '", key, "' must be true or false, got ", v.type_name(), " ",
             v.dump());
  return v.get<bool>();
}

std::string json_string(const char* op, const std::string& key, const json& v) {
  ATTN_CHECK(v.is_string(), op, "key '", key, "' must be a string, got ", v.type_name(), " ", v.dump());
  return v.get<std::string>();
}

}  // namespace attn::io
