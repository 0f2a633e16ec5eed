// attn/models/factory.h — builds the model family a config names, validated and
// initialised from config.seed. Callers that need a family's own methods dynamic_cast
// (std::dynamic_pointer_cast<EncoderDecoderModel>(model)). ModelInit::None allocates the
// parameters without drawing their values, for loaders that overwrite every one of them.
// A config with "quantization" builds the quantized layout (nn/quantize.h) with zero weights.
#pragma once

#include <memory>

#include "attn/models/config.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "attn/models/encoder_only.h"
#include "attn/models/model.h"

namespace attn::models {

// Random: initialised from config.seed. None: every parameter allocated but left zero (random
// initialisers skipped, nn::SkipInitGuard); only for a loader that fills all of them next.
enum class ModelInit { Random, None };

std::shared_ptr<Model> make_model(const ModelConfig& config, ModelInit init = ModelInit::Random);

// The model's layout without its memory: the same modules, parameter names, shapes, dtypes and
// tied names as make_model(config), but every parameter a ShapesOnlyGuard tensor (no data). For
// describing or checking a checkpoint (attn info) at the cost of the module objects alone, even
// for a model larger than this machine's memory. It must never run: no forward, no training,
// no state_dict loading, no reading of a parameter's values.
std::shared_ptr<Model> make_model_layout(const ModelConfig& config);

}  // namespace attn::models
