// The trainer's fine-tuning setup (trainer.h; docs/training.md "Fine-tuning"): starting from a
// model folder (config.init: attn's, with its vocab.json, or a Hugging Face GPT-2 folder, with
// its byte-level BPE), reading a pairs file for sft or dpo with that vocabulary (or one built
// from the pairs), measuring DPO's frozen reference once before training (the init model, or
// config.ref), and writing the model folder after every epoch (for a GPT-2 start also OUT/hf in
// the layout it came in); the reference model is kept for validation's KL. Not here: the objectives (objective.cpp) or the loop (trainer.cpp).
#include <filesystem>
#include <set>

#include "attn/core/error.h"
#include "attn/io/run_files.h"
#include "attn/models/checkpoint.h"
#include "attn/models/factory.h"
#include "attn/models/gpt2.h"
#include "attn/train/trainer.h"

namespace attn::train {

namespace {

namespace fs = std::filesystem;
constexpr const char* kOp = "train";

void check_folder(const std::string& dir, const char* what) {
  std::error_code ec;
  ATTN_CHECK(fs::is_directory(dir, ec), kOp, what, " '", dir, "' is not a folder");
  ATTN_CHECK(fs::exists(fs::path(dir) / io::kConfigFileName, ec), kOp, what, " '", dir, "' is not a model folder: it has no ",
             io::kConfigFileName);
}

// The tokenizer files of a GPT-2 folder (whichever of each pair it has).
constexpr const char* kGpt2TokenizerFiles[] = {"vocab.json", "encoder.json", "merges.txt", "vocab.bpe"};

}  // namespace

void Trainer::adopt_init_config() {
  TrainConfig& c = config_;
  if (!c.init.empty()) {
    check_folder(c.init, "the init model");
    if (models::is_gpt2_folder(c.init)) {
      models::Gpt2 g = models::load_gpt2(c.init);
      bpe_ = std::move(g.tokenizer);
      init_model_ = g.model;
    } else {
      init_model_ = models::load_model(c.init);
      const fs::path vocab_path = fs::path(c.init) / io::kVocabFileName;
      std::error_code ec;
      ATTN_CHECK(fs::exists(vocab_path, ec), kOp, "the init model '", c.init, "' has no ", io::kVocabFileName,
                 " to read the training text with");
      init_vocab_ = io::Vocab::load(vocab_path.string());
      ATTN_CHECK(init_vocab_->size() <= init_model_->config().vocab_size(), kOp, "the init model '", c.init, "': ",
                 io::kVocabFileName, " has ", init_vocab_->size(), " tokens, more than the model's ",
                 init_model_->config().vocab_size());
      c.tokens = init_vocab_->tokenization();
      c.vocab = c.tokens == io::Tokenization::SentencePiece ? c.init : "";
    }
    c.model = init_model_->config();
  }
  // DPO compares the policy with reference log-probabilities measured without dropout, so it
  // trains without dropout too (as TRL's disable_dropout): at step 1 the loss is then log 2.
  if (c.objective == ObjectiveKind::Dpo) c.model.dropout = c.model.attention_dropout = 0.0;
}

void Trainer::load_init_weights() {
  ATTN_CHECK(init_model_ != nullptr, kOp, "no init model loaded");
  model_->load_state_dict(init_model_->named_parameters());
  init_model_.reset();
}

void Trainer::load_pairs_data() {
  const TrainConfig& c = config_;
  const bool templated = c.model.arch == models::Arch::DecoderOnly;
  const PairsFile train = read_pairs(c.pairs_path, c.objective);
  std::optional<PairsFile> valid;
  if (!c.valid_pairs_path.empty()) valid = read_pairs(c.valid_pairs_path, c.objective);
  data_ = Dataset{};
  if (bpe_) {
    data_.vocab = io::Vocab();  // unused: the text is read with GPT-2's BPE
  } else if (init_vocab_) {
    data_.vocab = *init_vocab_;
  } else if (c.tokens == io::Tokenization::SentencePiece) {
    data_.vocab = load_given_vocab(c.tokens, c.vocab);
  } else {
    // A fresh model: the specials, then every token of the training pairs (templated prompts
    // included) sorted by their UTF-8 bytes, as the other corpora's vocabularies.
    std::set<std::string> symbols;
    auto add = [&](const std::string& text) {
      for (std::string& t : io::tokenize(text, c.tokens)) symbols.insert(std::move(t));
    };
    for (const PairRecord& r : train.records) {
      add(templated ? apply_template(c.prompt_template, r.prompt) : r.prompt);
      add(r.response);
      add(r.rejected);
    }
    io::Vocab v(c.tokens);
    for (const std::string& s : symbols) {
      try {
        v.add(s);
      } catch (const Error& e) {
        fail("pairs", "'", train.path, "': ", e.what());
      }
    }
    data_.vocab = std::move(v);
  }
  int64_t* unknown = &data_.train_unknown_tokens;
  const TextEncoder encode = [&](const std::string& text) {
    if (bpe_) return bpe_->encode(text);
    std::vector<int64_t> ids = data_.vocab.encode(text, true);
    for (int64_t id : ids) *unknown += id == io::Vocab::kUnk ? 1 : 0;
    return ids;
  };
  PairExamples t = encode_pairs(train, c.prompt_template, templated, encode);
  data_.train = std::move(t.examples);
  if (c.objective == ObjectiveKind::Dpo) {
    train_pref_ = std::make_shared<PreferenceSet>();
    train_pref_->rejected = std::move(t.rejected);
  }
  if (valid) {
    unknown = &data_.valid_unknown_tokens;
    PairExamples v = encode_pairs(*valid, c.prompt_template, templated, encode);
    data_.valid = std::move(v.examples);
    if (c.objective == ObjectiveKind::Dpo) {
      valid_pref_ = std::make_shared<PreferenceSet>();
      valid_pref_->rejected = std::move(v.rejected);
    }
  }
}

void Trainer::adopt_init_vocab() {
  ATTN_CHECK(!from_gpt2(), kOp, "a GPT-2 start (--init '", config_.init,
             "') trains on prompt/response pairs (objective sft or dpo); pre-training text through its BPE is not "
             "supported");
  ATTN_CHECK(!config_.stream, kOp, "--init with stream is not supported: the stream builds its own vocabulary");
  // The data was read with a vocabulary of its own (same tokenization): every id is mapped to
  // the init vocabulary's id of the same token, unknown tokens to <unk> (counted).
  const io::Vocab& own = data_.vocab;
  const io::Vocab& init = *init_vocab_;
  std::vector<int64_t> map(static_cast<size_t>(own.size()));
  for (int64_t id = 0; id < own.size(); ++id)
    map[static_cast<size_t>(id)] = id < io::Vocab::kNumSpecial ? id : init.id(own.token(id), true);
  auto remap = [&](std::vector<io::Example>& set, int64_t* unknown) {
    for (io::Example& e : set)
      for (auto* side : {&e.src, &e.tgt})
        for (int64_t& id : *side) {
          const int64_t before = id;
          id = map[static_cast<size_t>(id)];
          *unknown += id == io::Vocab::kUnk && before != io::Vocab::kUnk ? 1 : 0;
        }
  };
  remap(data_.train, &data_.train_unknown_tokens);
  remap(data_.valid, &data_.valid_unknown_tokens);
  data_.vocab = init;
}

void Trainer::measure_reference() {
  const TrainConfig& c = config_;
  std::shared_ptr<models::Model> ref = model_;  // before any step: the init model
  if (!c.ref.empty()) {
    check_folder(c.ref, "the reference model");
    const bool gpt2 = models::is_gpt2_folder(c.ref);
    ATTN_CHECK(gpt2 == from_gpt2(), kOp, "the reference model '", c.ref, "' is ", gpt2 ? "" : "not ",
               "a GPT-2 folder, the init model is ", from_gpt2() ? "" : "not: they must share one vocabulary");
    if (gpt2) {
      models::Gpt2 g = models::load_gpt2(c.ref);
      ATTN_CHECK(g.tokenizer.vocab_size() == bpe_->vocab_size() && g.tokenizer.num_merges() == bpe_->num_merges(),
                 kOp, "the reference model '", c.ref, "' has another tokenizer (", g.tokenizer.vocab_size(),
                 " tokens) than the init model (", bpe_->vocab_size(), ")");
      ref = g.model;
    } else {
      ref = models::load_model(c.ref);
      const fs::path vocab_path = fs::path(c.ref) / io::kVocabFileName;
      std::error_code ec;
      ATTN_CHECK(fs::exists(vocab_path, ec), kOp, "the reference model '", c.ref, "' has no ", io::kVocabFileName);
      ATTN_CHECK(io::Vocab::load(vocab_path.string()) == data_.vocab, kOp, "the reference model '", c.ref,
                 "' has another vocabulary (", vocab_path.string(), ") than the run");
    }
    const models::ModelConfig& a = ref->config();
    const models::ModelConfig& b = config_.model;
    ATTN_CHECK(a.arch == b.arch, kOp, "the reference model '", c.ref, "' is ", models::arch_name(a.arch),
               ", the policy ", models::arch_name(b.arch));
    ATTN_CHECK(a.src_vocab_size == b.src_vocab_size && a.tgt_vocab_size == b.tgt_vocab_size && a.pad_id == b.pad_id &&
                   a.bos_id == b.bos_id && a.eos_id == b.eos_id,
               kOp, "the reference model '", c.ref, "' has another vocabulary size or special ids than the policy");
  }
  const int64_t bs = c.batch_size > 0 ? c.batch_size : 64;
  const SpecialIds ids{config_.model.pad_id, from_gpt2() ? -1 : config_.model.bos_id, config_.model.eos_id};
  for (auto [pref, set] : {std::pair{train_pref_.get(), &data_.train}, std::pair{valid_pref_.get(), &data_.valid}}) {
    if (!pref) continue;
    pref->ref_chosen = response_logprobs(*ref, *set, nullptr, bs, ids);
    pref->ref_rejected = response_logprobs(*ref, *set, &pref->rejected, bs, ids);
  }
  // Validation's KL to the reference needs its full distributions every epoch: the reference
  // model is kept, frozen (for the default reference, a copy of the init weights: the policy
  // moves away from them), only when there are validation pairs.
  if (valid_pref_ && !data_.valid.empty()) {
    if (ref == model_) {
      ref = models::make_model(config_.model, models::ModelInit::None);
      ref->load_state_dict(model_->named_parameters());
    }
    ref->eval();
    ref_model_ = ref;
  }
}

void Trainer::save_model_folders() {
  if (!from_gpt2()) {
    models::save_model(out_dir_, *model_, {{io::kVocabFileName, data_.vocab.to_json().dump(1) + "\n"}});
    return;
  }
  // OUT: an attn model folder (token ids only: the vocabulary is GPT-2's BPE); OUT/hf: the
  // Hugging Face layout with the init folder's tokenizer files, for attn generate and serve.
  models::save_model(out_dir_, *model_);
  const fs::path hf = fs::path(out_dir_) / kHfDirName;
  models::save_gpt2(hf.string(), dynamic_cast<const models::DecoderOnlyModel&>(*model_));
  for (const char* name : kGpt2TokenizerFiles) {
    const fs::path from = fs::path(config_.init) / name;
    std::error_code ec;
    if (!fs::exists(from, ec)) continue;
    fs::copy_file(from, hf / name, fs::copy_options::overwrite_existing, ec);
    ATTN_CHECK(!ec, kOp, "cannot copy '", from.string(), "' to '", (hf / name).string(), "': ", ec.message());
  }
}

}  // namespace attn::train
