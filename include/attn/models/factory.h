// attn/models/factory.h — builds the model family a config names, validated and
// initialised from config.seed. Callers that need a family's own methods dynamic_cast
// (std::dynamic_pointer_cast<EncoderDecoderModel>(model)).
#pragma once

#include <memory>

#include "attn/models/config.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "attn/models/encoder_only.h"
#include "attn/models/model.h"

namespace attn::models {

std::shared_ptr<Model> make_model(const ModelConfig& config);

}  // namespace attn::models
