// attn/run/model_folder.h — a model folder opened for inference: config.json and
// model.safetensors (any model family), and when present vocab.json (io/vocab.h) and
// train_config.json (kept as JSON: reading it as a training configuration is train/'s job).
// This is the entry point of the run layer: translate.h, generate.h, fill_mask.h, evaluate.h
// and attention.h take a ModelFolder. Not here: training, or writing model folders.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "attn/io/bpe.h"
#include "attn/io/vocab.h"
#include "attn/models/config.h"
#include "attn/models/encoder_decoder.h"
#include "attn/models/model.h"

namespace attn::run {

// The most tokens a search may generate per input (translate --max-len, generate
// --max-tokens): far beyond any model's positions, small enough that a typo such as 10^12 is
// an error naming the option rather than a search that grows its caches without end.
inline constexpr int64_t kMaxOutputTokens = int64_t{1} << 20;

// A model folder opened for inference: the model in evaluation mode (no dropout), and the
// vocabulary and training configuration when the folder has them.
struct ModelFolder {
  std::string dir;
  std::shared_ptr<models::Model> base;                 // the model, whatever its family
  std::shared_ptr<models::EncoderDecoderModel> model;  // the same model as an encoder-decoder (else null)
  std::optional<io::Vocab> vocab;        // vocab.json
  nlohmann::json train_config;           // train_config.json; null when absent
  int64_t pad = -1, bos = -1, eos = -1;  // the model config's special ids
  int64_t src_vocab_size = 0, tgt_vocab_size = 0;  // a single-stack model's vocabulary in both
};

// Opens `dir` for `command` (used in messages), which needs a model of family `arch`. A
// missing folder, a folder without a checkpoint, a model of another family (the message names
// the command that serves it), a decoding family without a BOS id, a vocab.json larger than the
// model's vocabulary, or (when need_vocab) a missing vocab.json is an attn::Error naming the path.
ModelFolder open_model_folder(const std::string& dir, const char* command, bool need_vocab,
                              models::Arch arch = models::Arch::EncoderDecoder);

// A folder that a command generates or serves from: one of our model folders, or a Hugging
// Face GPT-2 folder (config.json, model.safetensors, vocab.json + merges.txt), which brings its
// own byte-level BPE tokenizer and reads prompts without a <bos> in front.
struct GenerationFolder {
  ModelFolder folder;                  // GPT-2: vocab empty, src and tgt vocabulary its BPE's size
  std::optional<io::BpeTokenizer> bpe;  // GPT-2's tokenizer (null for folders read with vocab.json)
  bool prepend_bos = true;             // false with GPT-2's BPE (run::GenerateSettings::prepend_bos)
};

// Opens `dir` as a GPT-2 folder when models::is_gpt2_folder says it is one, else as
// open_model_folder(dir, command, need_vocab, arch); `arch` unset takes the family the
// folder's config.json names (attn serve serves every family). One of our folders with
// encoder.json and vocab.bpe (a GPT-2 folder after attn quantize) reads text with that BPE
// and without <bos>, as the GPT-2 folder did; a BPE larger than the model is an error.
GenerationFolder open_generation_folder(const std::string& dir, const char* command, bool need_vocab,
                                        std::optional<models::Arch> arch = models::Arch::DecoderOnly);

}  // namespace attn::run
