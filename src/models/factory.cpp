// make_model: the family a config names, initialised or (for loaders) left to be filled.
#include "attn/models/factory.h"

#include <optional>

#include "attn/core/storage.h"
#include "attn/nn/init.h"
#include "attn/nn/quantize.h"

namespace attn::models {

namespace {

// Refuses a model whose parameters alone (ModelConfig::min_parameters, a lower bound) exceed
// the machine's memory, before the first of them is allocated: otherwise the allocation ends
// in std::bad_alloc naming nothing, or fills the machine page by page while it is initialised.
void check_fits_in_memory(const ModelConfig& config) {
  const uint64_t memory = physical_memory_bytes();
  if (memory == 0) return;
  const size_t element = config.quantization == Quantization::Int8   ? 1
                         : config.quantization == Quantization::BF16 ? 2
                                                                     : dtype_size(config.dtype);
  const double bytes = static_cast<double>(config.min_parameters()) * static_cast<double>(element);
  ATTN_CHECK(bytes <= static_cast<double>(memory), "make_model", "the model's parameters alone need at least ",
             format_bytes(bytes), ", more than this machine's ", format_bytes(static_cast<double>(memory)),
             " of memory; the largest part: ", config.largest_part());
}

std::shared_ptr<Model> build(const ModelConfig& config, ModelInit init) {
  std::optional<nn::SkipInitGuard> skip;
  if (init == ModelInit::None) skip.emplace();
  // A quantized model for a loader: its float copies of the weights that quantization replaces
  // get no memory (nn::QuantizedLayoutGuard), so loading holds only the quantized bytes.
  std::optional<nn::QuantizedLayoutGuard> layout;
  if (init == ModelInit::None && config.quantization != Quantization::None) layout.emplace();
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

}  // namespace

std::shared_ptr<Model> make_model(const ModelConfig& config, ModelInit init) {
  check_fits_in_memory(config);
  return build(config, init);
}

std::shared_ptr<Model> make_model_layout(const ModelConfig& config) {
  const ShapesOnlyGuard shapes_only;
  return build(config, ModelInit::None);
}

}  // namespace attn::models
