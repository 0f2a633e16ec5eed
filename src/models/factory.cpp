// make_model: the family a config names, initialised or (for loaders) left to be filled.
#include "attn/models/factory.h"

#include <optional>

#include "attn/nn/init.h"
#include "attn/nn/quantize.h"

namespace attn::models {

std::shared_ptr<Model> make_model(const ModelConfig& config, ModelInit init) {
  std::optional<nn::SkipInitGuard> skip;
  if (init == ModelInit::None) skip.emplace();
  std::shared_ptr<Model> model;
  switch (config.arch) {
    case Arch::EncoderDecoder: model = std::make_shared<EncoderDecoderModel>(config); break;
    case Arch::DecoderOnly: model = std::make_shared<DecoderOnlyModel>(config); break;
    case Arch::EncoderOnly: model = std::make_shared<EncoderOnlyModel>(config); break;
  }
  if (model == nullptr) fail("make_model", "unknown arch");
  // A quantized config: the layout of nn/quantize.h with zero weights, for a loader to fill.
  if (config.quantization != Quantization::None) nn::prepare_quantized_module(*model, config.quantization);
  return model;
}

}  // namespace attn::models
