// run/model_folder.cpp — see attn/run/model_folder.h. The checks run before the model loads
// where they can, so that a wrong path fails with a message about the path.
#include "attn/run/model_folder.h"

#include <algorithm>
#include <filesystem>

#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/io/run_files.h"
#include "attn/models/checkpoint.h"
#include "attn/models/gpt2.h"

namespace attn::run {

namespace fs = std::filesystem;

namespace {

// The command that serves a model family, for messages.
const char* command_for(models::Arch arch) {
  switch (arch) {
    case models::Arch::EncoderDecoder: return "attn translate, score, eval or inspect";
    case models::Arch::DecoderOnly: return "attn generate";
    case models::Arch::EncoderOnly: return "attn fill-mask";
  }
  return "?";
}

}  // namespace

ModelFolder open_model_folder(const std::string& dir, const char* command, bool need_vocab, models::Arch arch) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail(command, "model folder '", dir, "' does not exist");
  if (!fs::is_directory(dir, ec)) fail(command, "'", dir, "' is not a folder (--model takes a model folder)");
  if (!fs::exists(fs::path(dir) / io::kConfigFileName, ec))
    fail(command, "'", dir, "' is not a model folder: it has no ", io::kConfigFileName);

  ModelFolder f;
  f.dir = dir;
  f.base = models::load_model(dir);
  if (f.base->arch() != arch)
    fail(command, "the model in '", dir, "' is ", models::arch_name(f.base->arch()), "; ", command, " needs ",
         arch == models::Arch::DecoderOnly ? "a " : "an ", models::arch_name(arch), " model (",
         models::arch_name(f.base->arch()), " models: ", command_for(f.base->arch()), ")");
  f.model = std::dynamic_pointer_cast<models::EncoderDecoderModel>(f.base);
  f.base->eval();
  const models::ModelConfig& c = f.base->config();
  f.pad = c.pad_id;
  f.bos = c.bos_id;
  f.eos = c.eos_id;
  const bool single_stack = arch != models::Arch::EncoderDecoder;
  f.src_vocab_size = c.src_vocab_size;
  f.tgt_vocab_size = single_stack ? c.vocab_size() : c.tgt_vocab_size;
  if (f.bos < 0 && arch != models::Arch::EncoderOnly)
    fail(command, "the model in '", dir, "' has no BOS token (bos_id = -1), so it cannot decode");

  const fs::path vocab_path = fs::path(dir) / io::kVocabFileName;
  if (fs::exists(vocab_path, ec)) {
    f.vocab = io::Vocab::load(vocab_path.string());
    const int64_t limit = std::min(f.src_vocab_size, f.tgt_vocab_size);
    if (f.vocab->size() > limit)
      fail(command, "'", vocab_path.string(), "' has ", f.vocab->size(), " tokens but the model's vocabulary has ",
           limit, ": the vocabulary does not belong to this model");
  } else if (need_vocab) {
    fail(command, "'", dir, "' has no ", io::kVocabFileName,
         ", so text cannot be tokenized; pass --ids to read and write token ids");
  }

  const fs::path tc_path = fs::path(dir) / io::kTrainConfigFileName;
  if (fs::exists(tc_path, ec)) {
    try {
      f.train_config = nlohmann::json::parse(io::read_file(tc_path.string()));
    } catch (const nlohmann::json::exception& e) {
      fail(command, "'", tc_path.string(), "' is not valid JSON: ", e.what());
    }
  }
  return f;
}

GenerationFolder open_generation_folder(const std::string& dir, const char* command, bool need_vocab,
                                        std::optional<models::Arch> arch) {
  GenerationFolder g;
  if (models::is_gpt2_folder(dir)) {
    models::Gpt2 gpt2 = models::load_gpt2(dir);
    if (arch && *arch != models::Arch::DecoderOnly)
      fail(command, "'", dir, "' is a GPT-2 (decoder-only) folder; ", command, " needs an ",
           models::arch_name(*arch), " model");
    const models::ModelConfig& c = gpt2.model->config();
    g.folder.dir = dir;
    g.folder.base = gpt2.model;
    g.folder.pad = c.pad_id;
    g.folder.bos = c.bos_id;
    g.folder.eos = c.eos_id;
    g.folder.src_vocab_size = g.folder.tgt_vocab_size = c.vocab_size();
    g.bpe = std::move(gpt2.tokenizer);
    g.prepend_bos = false;
    return g;
  }
  std::error_code ec;
  models::Arch family = arch.value_or(models::Arch::EncoderDecoder);
  // Without a family asked for, config.json names it (a folder without one fails in
  // open_model_folder with its message about the path).
  if (!arch && fs::exists(fs::path(dir) / io::kConfigFileName, ec)) family = models::load_model_config(dir).arch;
  // One of our folders that reads text with GPT-2's BPE (a quantized GPT-2): encoder.json and
  // vocab.bpe beside config.json; prompts without a <bos> in front, as from the GPT-2 folder.
  const fs::path encoder = fs::path(dir) / io::kBpeEncoderFileName, merges = fs::path(dir) / io::kBpeMergesFileName;
  const bool bpe = fs::is_regular_file(encoder, ec) && fs::is_regular_file(merges, ec);
  g.folder = open_model_folder(dir, command, need_vocab && !bpe, family);
  if (bpe) {
    g.bpe = io::BpeTokenizer::load(encoder.string(), merges.string());
    const int64_t limit = std::min(g.folder.src_vocab_size, g.folder.tgt_vocab_size);
    if (g.bpe->vocab_size() > limit)
      fail(command, "'", encoder.string(), "' has ", g.bpe->vocab_size(), " tokens but the model's vocabulary has ",
           limit, ": the tokenizer does not belong to this model");
    g.prepend_bos = false;
  }
  return g;
}

}  // namespace attn::run
