// tests/fuzz/model_config_fuzz.cpp — a model folder's config.json (models/checkpoint.h,
// load_model_config: JSON text -> ModelConfig, validated) and the same text as a Hugging Face
// GPT-2 config (models/gpt2.h). Bad text is an attn::Error; an accepted config writes back to
// JSON that reads as the same config. Building the model is not fuzzed here (it allocates what
// the config says).
#include <filesystem>

#include <nlohmann/json.hpp>

#include "attn/models/checkpoint.h"
#include "attn/models/config.h"
#include "attn/models/gpt2.h"
#include "fuzz_util.h"

using namespace attn;
using nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = fuzz::scratch_dir() + "/model";
  std::filesystem::create_directories(dir);
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::write_scratch("model/config.json", text);
  try {
    const models::ModelConfig config = models::load_model_config(dir);
    const json written = config.to_json();
    const models::ModelConfig again = models::ModelConfig::from_json(json::parse(written.dump()));
    again.validate();
    ATTN_FUZZ_ASSERT(again.to_json() == written);
  } catch (const Error&) {
  }
  // The GPT-2 reading of the same object (the harness parses the JSON, with a depth bound as the
  // loaders have; not-JSON is not this reader's input).
  (void)models::is_gpt2_folder(dir);
  json hf;
  try {
    hf = json::parse(text, [](int depth, json::parse_event_t, json&) {
      if (depth > 64) throw std::length_error("deep");
      return true;
    });
  } catch (const json::exception&) {
    return 0;
  } catch (const std::length_error&) {
    return 0;
  }
  try {
    const models::ModelConfig config = models::gpt2_config_from_json(hf);
    try {
      const json back = models::gpt2_config_to_json(config);
      ATTN_FUZZ_ASSERT(models::gpt2_config_from_json(back).to_json() == config.to_json());
    } catch (const Error&) {
    }
  } catch (const Error&) {
  }
  return 0;
}
