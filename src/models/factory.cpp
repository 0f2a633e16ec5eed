// make_model: the family a config names, initialised or (for loaders) left to be filled.
#include "attn/models/factory.h"

#include <optional>

#include "attn/nn/init.h"

namespace attn::models {

std::shared_ptr<Model> make_model(const ModelConfig& config, ModelInit init) {
  std::optional<nn::SkipInitGuard> skip;
  if (init == ModelInit::None) skip.emplace();
  switch (config.arch) {
    case Arch::EncoderDecoder: return std::make_shared<EncoderDecoderModel>(config);
    case Arch::DecoderOnly: return std::make_shared<DecoderOnlyModel>(config);
    case Arch::EncoderOnly: return std::make_shared<EncoderOnlyModel>(config);
  }
  fail("make_model", "unknown arch");
}

}  // namespace attn::models
