// attn/attn.h — the umbrella header: tensors, autograd, ops, layers and models.
// Training, decoding, running model folders, checkpoints and figures have their own headers
// under attn/train, attn/decode, attn/run, attn/models/checkpoint.h and attn/report; include
// those where needed.
#pragma once

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/core/rng.h"
#include "attn/core/tensor.h"
#include "attn/io/safetensors.h"
#include "attn/models/config.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "attn/models/encoder_only.h"
#include "attn/models/factory.h"
#include "attn/nn/attention.h"
#include "attn/nn/decoder.h"
#include "attn/nn/encoder.h"
#include "attn/nn/feed_forward.h"
#include "attn/nn/module.h"
#include "attn/nn/positional.h"
#include "attn/nn/quantize.h"
#include "attn/ops/attention.h"
#include "attn/ops/ops.h"
#include "attn/ops/quantize.h"
#include "attn/ops/threads.h"
