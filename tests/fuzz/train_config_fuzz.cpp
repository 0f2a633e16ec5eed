// tests/fuzz/train_config_fuzz.cpp — `attn train --config`'s file (train/train_config.h,
// TrainConfig::load, then validate()). Bad text is an attn::Error; an accepted config writes
// back to JSON that reads as the same config.
#include <nlohmann/json.hpp>

#include "attn/train/train_config.h"
#include "fuzz_util.h"

using namespace attn;
using nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      fuzz::write_scratch("train.json", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const train::TrainConfig config = train::TrainConfig::load(path);
    const json written = config.to_json();
    const train::TrainConfig again = train::TrainConfig::from_json(json::parse(written.dump()));
    ATTN_FUZZ_ASSERT(again == config);
    config.validate();
  } catch (const Error&) {
  }
  return 0;
}
