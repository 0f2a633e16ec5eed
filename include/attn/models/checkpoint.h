// attn/models/checkpoint.h — a model on disk is a folder: config.json (every hyper-parameter,
// ModelConfig::to_json) and model.safetensors (the parameters under PyTorch's state_dict names,
// tied tensors stored once under the embedding's name). Layout, keys and names: docs/checkpoint.md.
// Loading is strict: every missing, unexpected, mis-shaped or mis-typed tensor is an error
// naming the file, the tensor and the problem. Weights are never converted between dtypes
// (an F64 file does not load into an f32 config); no optimizer state here (train/ owns that).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attn/core/shape.h"
#include "attn/io/run_files.h"
#include "attn/io/safetensors.h"
#include "attn/models/config.h"
#include "attn/models/model.h"

namespace attn::models {

// "__metadata__" of the weights file we write: {"format": "attn", "attn_version": "<version>"}.
inline constexpr const char* kCheckpointFormat = "attn";

// Further files to write into the folder (e.g. {"vocab.json", text}): a plain file name (no
// '/', not "." or "..", not config.json or model.safetensors) and its contents.
using ExtraFiles = std::vector<std::pair<std::string, std::string>>;

// Writes `model` into `dir` (created with its parents when absent): model.safetensors, then
// the extra files, then config.json, each atomically (io/atomic_file.h). An existing
// config.json is removed first, so a crash while saving leaves a folder without a config
// (which does not load) rather than a config next to weights it does not describe. Other
// files already in the folder are left alone. Throws attn::Error naming the path on failure.
void save_model(const std::string& dir, const Model& model, const ExtraFiles& extra_files = {});

// save_model into a fresh folder `dir` that appears whole or not at all: written into the
// hidden sibling ".<name>.partial-<pid>" and renamed to `dir` once complete; an existing `dir`
// is moved aside (".<name>.old-<pid>") just before and removed after, so a kill at any moment
// leaves `dir` complete or absent. For outputs made in one go (attn quantize, attn average).
void save_model_folder(const std::string& dir, const Model& model, const ExtraFiles& extra_files = {});

// One entry of the weights file's header.
struct CheckpointTensor {
  std::string name;
  std::string dtype;  // the file's dtype string: "F32", "F64", ...
  Shape shape;
};

// A loaded folder: the model, plus what `attn info` shows about the files.
struct LoadedCheckpoint {
  std::shared_ptr<Model> model;             // built by make_model(config), weights loaded
  std::string config_path;                  // dir/config.json
  std::string weights_path;                 // dir/model.safetensors
  std::vector<CheckpointTensor> tensors;    // the weights file's tensors, in file (offset) order
  io::SafetensorsMetadata metadata;         // its "__metadata__"
  // Each parameter's canonical name -> the file tensor that holds it (the canonical name, or the
  // alias of a tied parameter when only the alias is stored).
  std::map<std::string, std::string> sources;
};

// Reads and validates dir/config.json. Errors name the file and the key or the problem.
ModelConfig load_model_config(const std::string& dir);

// Loads a folder strictly: config.json (validated), then model.safetensors (validated by the
// safetensors reader, memory-mapped), checked tensor by tensor against the model config.json
// describes before anything is copied. The model is returned in training mode, like a freshly
// built one. Throws attn::Error naming the file, each offending tensor and the problem.
LoadedCheckpoint load_checkpoint(const std::string& dir);
// The checks of load_checkpoint without loading anything (attn info): config.json, the
// header of model.safetensors, every tensor's name, dtype and shape against the layout
// config.json implies (and tied copies against each other), with the same errors. The model
// is a make_model_layout(): names, shapes and tied names only, no parameter memory, never to
// run. Costs the header and the module objects, whatever the size of the weights.
LoadedCheckpoint inspect_checkpoint(const std::string& dir);
// load_checkpoint(dir).model.
std::shared_ptr<Model> load_model(const std::string& dir);

// `attn quantize`: loads the float32 model folder `dir`, quantizes it (Model::quantize: int8
// weights with "<name>_scale" F32 scales, or bf16 weights; nn/quantize.h) and saves it into
// `out` (default: dir + "-int8" / "-bf16") with config.json's "quantization" key; every other
// plain file of `dir` (vocab.json, train_config.json, ...) is copied. A Hugging Face GPT-2
// folder (is_gpt2_folder) is read with load_gpt2 and written as one of our decoder-only
// folders, its tokenizer files copied under OpenAI's names (io::kBpeEncoderFileName,
// io::kBpeMergesFileName; run::open_generation_folder reads them). Returns the folder
// written. Errors: out naming dir itself, a source that is quantized already, an f64 model, a
// NaN or Inf weight (named), and every load_checkpoint error.
std::string quantize_model_folder(const std::string& dir, const std::string& out, Quantization q);

}  // namespace attn::models
