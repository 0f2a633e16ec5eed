// TrainConfig: defaults (the seed's reversal recipe), validation, strict JSON in and out.
#include "attn/train/train_config.h"

#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "attn/core/error.h"
#include "attn/io/json_fields.h"
#include "attn/io/atomic_file.h"

namespace attn::train {

namespace {

constexpr const char* kOp = "TrainConfig";
using json = nlohmann::json;
using Setter = std::function<void(const std::string&, const json&)>;

int64_t read_int(const std::string& key, const json& v) { return io::json_int(kOp, key, v); }
uint64_t read_uint(const std::string& key, const json& v) { return io::json_uint(kOp, key, v); }
double read_double(const std::string& key, const json& v) { return io::json_double(kOp, key, v); }
bool read_bool(const std::string& key, const json& v) { return io::json_bool(kOp, key, v); }
std::string read_string(const std::string& key, const json& v) { return io::json_string(kOp, key, v); }
template <class F>
auto read_enum(const std::string& key, const json& v, F parse) {
  return io::json_enum(kOp, key, v, parse);
}

}  // namespace

models::ModelConfig TrainConfig::default_model() {
  models::ModelConfig m = models::ModelConfig::seed_small();
  m.src_vocab_size = task_vocab(TaskConfig{}).size();
  m.tgt_vocab_size = m.src_vocab_size;
  return m;
}

void TrainConfig::validate() const {
  const int sources = (task.empty() ? 0 : 1) + (train_path.empty() ? 0 : 1) + (text_path.empty() ? 0 : 1) +
                      (pairs_path.empty() ? 0 : 1);
  ATTN_CHECK(sources != 0, kOp,
             "no data: name a task (reverse, copy, sort), a TSV training corpus (data), a text file (text) or, for "
             "sft and dpo, a pairs file (pairs)");
  ATTN_CHECK(sources == 1, kOp, "give one of a task, a TSV corpus (data), a text file (text) or a pairs file (pairs), "
             "not both");
  const models::Arch arch = model.arch;
  ATTN_CHECK(uses_pairs() == !pairs_path.empty(), kOp,
             uses_pairs() ? str_cat("objective '", objective_kind_name(objective), "' trains on a pairs file (pairs)")
                          : std::string("a pairs file (pairs) needs objective sft or dpo"));
  ATTN_CHECK(valid_pairs_path.empty() || (!pairs_path.empty() && valid_pairs_path != pairs_path), kOp,
             pairs_path.empty() ? "valid_pairs needs a training pairs file (pairs)"
                                : "the validation pairs are the training pairs '" + pairs_path + "'");
  ATTN_CHECK(ref.empty() || objective == ObjectiveKind::Dpo, kOp, "a reference model (ref) is for objective dpo");
  ATTN_CHECK(dpo_beta > 0 && std::isfinite(dpo_beta), kOp, "dpo_beta must be positive, got ", dpo_beta);
  try {
    validate_template(prompt_template);
  } catch (const Error& e) {
    fail(kOp, "template: ", e.what());
  }
  if (uses_pairs()) {
    ATTN_CHECK(arch != models::Arch::EncoderOnly, kOp, "objective '", objective_kind_name(objective),
               "' needs a decoder_only or encoder_decoder model, not encoder_only");
    ATTN_CHECK(!stream && max_tokens == 0 && max_length == 0, kOp, "objective '", objective_kind_name(objective),
               "' reads its pairs into memory and caps batches by batch_size: stream, max_tokens and max_length do "
               "not apply");
  } else if (arch == models::Arch::EncoderDecoder) {
    ATTN_CHECK(text_path.empty(), kOp,
               "a text file (text) trains decoder_only or encoder_only models; set the arch, or give "
               "source<TAB>target pairs (data) to the encoder_decoder");
  } else {
    ATTN_CHECK(!text_path.empty(), kOp, "arch '", models::arch_name(arch),
               "' trains on a text file (text); the synthetic tasks and TSV pairs need encoder_decoder");
  }
  if (!task.empty()) {
    TaskConfig t;
    t.kind = parse_task_kind(task);
    t.length = length;
    t.min_length = min_length;
    t.n_symbols = symbols;
    ATTN_CHECK(length <= kMaxTaskLength, kOp, "length ", length, " is above the limit ", kMaxTaskLength,
               " of the synthetic tasks");
    train::validate(t);
    ATTN_CHECK(train_size >= 1, kOp, "train_size must be at least 1, got ", train_size);
    ATTN_CHECK(valid_size >= 0, kOp, "valid_size must not be negative, got ", valid_size);
    // The synthetic sets are made in memory: two sides of up to `length` ids per example.
    const double tokens =
        (static_cast<double>(train_size) + static_cast<double>(valid_size)) * static_cast<double>(length);
    ATTN_CHECK(tokens <= static_cast<double>(kMaxTaskTokens), kOp, "train_size ", train_size, " and valid_size ",
               valid_size, " of length ", length, " make ", tokens, " tokens per side, above the limit ",
               kMaxTaskTokens, " of the synthetic tasks; lower train_size or length");
  } else if (!train_path.empty()) {
    ATTN_CHECK(valid_path.empty() || valid_path != train_path, kOp, "the validation corpus is the training corpus '",
               train_path, "'");
  } else {
    ATTN_CHECK(valid_text_path.empty() || valid_text_path != text_path, kOp,
               "the validation text is the training text '", text_path, "'");
  }
  ATTN_CHECK(!(!text_path.empty() && !valid_path.empty()), kOp,
             "a TSV validation corpus (valid) does not fit a text run; use valid_text");
  ATTN_CHECK(!(text_path.empty() && !valid_text_path.empty()), kOp,
             "a validation text (valid_text) needs a training text (text)");
  ATTN_CHECK(pairs_path.empty() || (train_path.empty() && valid_path.empty() && valid_text_path.empty()), kOp,
             "a pairs run validates on valid_pairs, not on valid or valid_text");
  if (arch != models::Arch::DecoderOnly)
    ATTN_CHECK(model.n_encoder_layers >= 1, kOp, "the model needs at least one encoder layer, got ",
               model.n_encoder_layers);
  if (arch != models::Arch::EncoderOnly)
    ATTN_CHECK(model.n_decoder_layers >= 1, kOp, "the model needs at least one decoder layer, got ",
               model.n_decoder_layers);
  ATTN_CHECK((tokens == io::Tokenization::SentencePiece) == !vocab.empty(), kOp,
             vocab.empty() ? "tokens 'sentencepiece' needs a SentencePiece model (vocab)"
                           : "a SentencePiece model (vocab) needs tokens 'sentencepiece'");
  ATTN_CHECK(vocab.empty() || task.empty(), kOp, "a SentencePiece model (vocab) does not fit the synthetic task '",
             task, "' (give a TSV corpus or a text file)");
  ATTN_CHECK(mask_prob > 0 && mask_prob < 1, kOp, "mask_prob must be in (0, 1), got ", mask_prob);
  if (pack != 0) {
    ATTN_CHECK(pack >= 2, kOp, "pack must be 0 (one example per line) or at least 2 (<bos> and one token), got ", pack);
    const bool sft = objective == ObjectiveKind::Sft && !pairs_path.empty();
    ATTN_CHECK(objective != ObjectiveKind::Dpo, kOp, "pack is for a text file or sft pairs, not for dpo");
    ATTN_CHECK((arch == models::Arch::DecoderOnly || (sft && !init.empty())) && (!text_path.empty() || sft), kOp,
               "pack packs a text file (text) or sft pairs into blocks for a decoder_only model, not for arch '",
               models::arch_name(arch), "'", text_path.empty() && !sft ? " without a text file or sft pairs" : "");
    ATTN_CHECK(!stream, kOp, "pack does not work with stream: packed blocks are built in memory");
    ATTN_CHECK(model.positional != nn::PositionalKind::Learned || pack <= model.max_len, kOp, "pack ", pack,
               " is longer than the model's ", model.max_len, " learned positions (max_len)");
  }
  // Vocabulary sizes and special ids come from the data (the trainer sets them); validate the
  // rest with placeholders that satisfy the id checks.
  models::ModelConfig m = model;
  m.src_vocab_size = m.tgt_vocab_size = io::Vocab::kNumSpecial + 1;
  m.pad_id = io::Vocab::kPad;
  m.bos_id = io::Vocab::kBos;
  m.eos_id = io::Vocab::kEos;
  m.validate();
  ATTN_CHECK(epochs >= 1, kOp, "epochs must be at least 1, got ", epochs);
  for (auto [key, value] : {std::pair<const char*, int64_t>{"batch_size", batch_size}, {"max_tokens", max_tokens},
                            {"bucket_size", bucket_size}, {"chunk_lines", chunk_lines}})
    ATTN_CHECK(value <= kMaxBatchCount, kOp, key, " ", value, " is above the limit ", kMaxBatchCount);
  ATTN_CHECK(batch_size >= 0 && max_tokens >= 0, kOp, "batch_size and max_tokens must not be negative, got ",
             batch_size, " and ", max_tokens);
  ATTN_CHECK(batch_size > 0 || max_tokens > 0, kOp, "batch_size and max_tokens are both 0: no cap on a batch");
  ATTN_CHECK(bucket_size >= 0, kOp, "bucket_size must not be negative, got ", bucket_size);
  ATTN_CHECK(!stream || task.empty(), kOp, "stream reads a TSV corpus (data) or a text file (text), not a synthetic task");
  ATTN_CHECK(chunk_lines >= 1, kOp, "chunk_lines must be at least 1, got ", chunk_lines);
  ATTN_CHECK(chunk_bytes >= 0, kOp, "chunk_bytes must not be negative (0 = lines only), got ", chunk_bytes);
  ATTN_CHECK(max_length >= 0, kOp, "max_length must not be negative (0 = no limit), got ", max_length);
  ATTN_CHECK(beta1 >= 0 && beta1 < 1, kOp, "beta1 must be in [0, 1), got ", beta1);
  ATTN_CHECK(beta2 >= 0 && beta2 < 1, kOp, "beta2 must be in [0, 1), got ", beta2);
  ATTN_CHECK(eps > 0 && std::isfinite(eps), kOp, "eps must be positive, got ", eps);
  ATTN_CHECK(weight_decay >= 0 && std::isfinite(weight_decay), kOp, "weight_decay must not be negative, got ",
             weight_decay);
  if (schedule == ScheduleKind::Noam) {
    ATTN_CHECK(warmup >= 1, kOp, "warmup must be at least 1 step for the noam schedule, got ", warmup);
    ATTN_CHECK(lr_scale > 0 && std::isfinite(lr_scale), kOp, "lr_scale must be positive, got ", lr_scale);
  } else {
    ATTN_CHECK(warmup >= 0, kOp, "warmup must not be negative, got ", warmup);
    ATTN_CHECK(lr > 0 && std::isfinite(lr), kOp, "lr must be positive, got ", lr);
    ATTN_CHECK(min_lr >= 0 && min_lr <= lr, kOp, "min_lr must be in [0, lr], got ", min_lr);
  }
  ATTN_CHECK(label_smoothing >= 0 && label_smoothing < 1, kOp, "label_smoothing must be in [0, 1), got ",
             label_smoothing);
  ATTN_CHECK(clip >= 0 && std::isfinite(clip), kOp, "clip must not be negative (0 = off), got ", clip);
  ATTN_CHECK(threads >= 0 && threads <= 4096, kOp, "threads must be in [0, 4096] (0 = default), got ", threads);
  ATTN_CHECK(parallel == "auto" || parallel == "ops" || parallel == "batch", kOp,
             "parallel must be auto, ops or batch, got '", parallel, "'");
  ATTN_CHECK(keep >= 0, kOp, "keep must not be negative (0 = keep all), got ", keep);
  ATTN_CHECK(checkpoint_every >= 0, kOp, "checkpoint_every must not be negative (0 = epoch ends only), got ",
             checkpoint_every);
}

json TrainConfig::to_json() const {
  json j;
  j["task"] = task;
  j["length"] = length;
  j["min_length"] = min_length;
  j["symbols"] = symbols;
  j["train_size"] = train_size;
  j["valid_size"] = valid_size;
  j["data_seed"] = data_seed;
  j["data"] = train_path;
  j["valid"] = valid_path;
  j["text"] = text_path;
  j["valid_text"] = valid_text_path;
  j["tokens"] = io::tokenization_name(tokens);
  j["vocab"] = vocab;
  j["mask_prob"] = mask_prob;
  j["pack"] = pack;
  j["objective"] = objective_kind_name(objective);
  j["pairs"] = pairs_path;
  j["valid_pairs"] = valid_pairs_path;
  j["template"] = prompt_template;
  j["init"] = init;
  j["ref"] = ref;
  j["dpo_beta"] = dpo_beta;
  j["model"] = model.to_json();
  j["epochs"] = epochs;
  j["batch_size"] = batch_size;
  j["max_tokens"] = max_tokens;
  j["group_by_length"] = group_by_length;
  j["bucket_size"] = bucket_size;
  j["stream"] = stream;
  j["chunk_lines"] = chunk_lines;
  j["chunk_bytes"] = chunk_bytes;
  j["max_length"] = max_length;
  j["beta1"] = beta1;
  j["beta2"] = beta2;
  j["eps"] = eps;
  j["weight_decay"] = weight_decay;
  j["decoupled_weight_decay"] = decoupled_weight_decay;
  j["schedule"] = schedule_kind_name(schedule);
  j["warmup"] = warmup;
  j["lr_scale"] = lr_scale;
  j["lr"] = lr;
  j["min_lr"] = min_lr;
  j["label_smoothing"] = label_smoothing;
  j["clip"] = clip;
  j["precision"] = precision_name(precision);
  j["seed"] = seed;
  j["threads"] = threads;
  j["parallel"] = parallel;
  j["keep"] = keep;
  j["checkpoint_every"] = checkpoint_every;
  return j;
}

void TrainConfig::update_from_json(const json& j) {
  ATTN_CHECK(j.is_object(), kOp, "a training config must be a JSON object, got ", j.type_name());
  TrainConfig& c = *this;
  auto int_field = [](int64_t& f) -> Setter { return [&f](const std::string& k, const json& v) { f = read_int(k, v); }; };
  auto num_field = [](double& f) -> Setter { return [&f](const std::string& k, const json& v) { f = read_double(k, v); }; };
  auto bool_field = [](bool& f) -> Setter { return [&f](const std::string& k, const json& v) { f = read_bool(k, v); }; };
  auto str_field = [](std::string& f) -> Setter {
    return [&f](const std::string& k, const json& v) { f = read_string(k, v); };
  };
  auto uint_field = [](uint64_t& f) -> Setter { return [&f](const std::string& k, const json& v) { f = read_uint(k, v); }; };
  const std::map<std::string, Setter> setters = {
      {"task", [&](const std::string& k, const json& v) {
         c.task = v.is_null() ? std::string() : read_string(k, v);
         if (!c.task.empty()) read_enum(k, v, parse_task_kind);  // checks the name now
       }},
      {"length", int_field(c.length)},
      {"min_length", int_field(c.min_length)},
      {"symbols", int_field(c.symbols)},
      {"train_size", int_field(c.train_size)},
      {"valid_size", int_field(c.valid_size)},
      {"data_seed", uint_field(c.data_seed)},
      {"data", str_field(c.train_path)},
      {"valid", str_field(c.valid_path)},
      {"text", str_field(c.text_path)},
      {"valid_text", str_field(c.valid_text_path)},
      {"tokens", [&](const std::string& k, const json& v) { c.tokens = read_enum(k, v, io::parse_tokenization); }},
      {"vocab", str_field(c.vocab)},
      {"mask_prob", num_field(c.mask_prob)},
      {"pack", int_field(c.pack)},
      {"objective", [&](const std::string& k, const json& v) { c.objective = read_enum(k, v, parse_objective_kind); }},
      {"pairs", str_field(c.pairs_path)},
      {"valid_pairs", str_field(c.valid_pairs_path)},
      {"template", str_field(c.prompt_template)},
      {"init", str_field(c.init)},
      {"ref", str_field(c.ref)},
      {"dpo_beta", num_field(c.dpo_beta)},
      {"model", [&](const std::string& k, const json& v) {
         ATTN_CHECK(v.is_object(), kOp, "key '", k, "' must be an object of model keys, got ", v.type_name());
         json merged = c.model.to_json();
         for (const auto& [mk, mv] : v.items()) merged[mk] = mv;  // unknown keys: from_json names them
         try {
           c.model = models::ModelConfig::from_json(merged);
         } catch (const Error& e) {
           fail(kOp, "key 'model': ", e.what());
         }
       }},
      {"epochs", int_field(c.epochs)},
      {"batch_size", int_field(c.batch_size)},
      {"max_tokens", int_field(c.max_tokens)},
      {"group_by_length", bool_field(c.group_by_length)},
      {"bucket_size", int_field(c.bucket_size)},
      {"stream", bool_field(c.stream)},
      {"chunk_lines", int_field(c.chunk_lines)},
      {"chunk_bytes", int_field(c.chunk_bytes)},
      {"max_length", int_field(c.max_length)},
      {"beta1", num_field(c.beta1)},
      {"beta2", num_field(c.beta2)},
      {"eps", num_field(c.eps)},
      {"weight_decay", num_field(c.weight_decay)},
      {"decoupled_weight_decay", bool_field(c.decoupled_weight_decay)},
      {"schedule", [&](const std::string& k, const json& v) { c.schedule = read_enum(k, v, parse_schedule_kind); }},
      {"warmup", int_field(c.warmup)},
      {"lr_scale", num_field(c.lr_scale)},
      {"lr", num_field(c.lr)},
      {"min_lr", num_field(c.min_lr)},
      {"label_smoothing", num_field(c.label_smoothing)},
      {"clip", num_field(c.clip)},
      {"precision", [&](const std::string& k, const json& v) { c.precision = read_enum(k, v, parse_precision); }},
      {"seed", uint_field(c.seed)},
      {"threads", int_field(c.threads)},
      {"parallel", str_field(c.parallel)},
      {"keep", int_field(c.keep)},
      {"checkpoint_every", int_field(c.checkpoint_every)},
  };
  for (const auto& [key, value] : j.items()) {
    auto it = setters.find(key);
    if (it == setters.end()) {
      std::string known;
      for (const auto& [name, s] : setters) known += (known.empty() ? "" : ", ") + name;
      fail(kOp, "unknown key '", key, "' (known keys: ", known, ")");
    }
    it->second(key, value);
  }
}

TrainConfig TrainConfig::from_json(const json& j) {
  TrainConfig c;
  c.update_from_json(j);
  return c;
}

TrainConfig TrainConfig::load(const std::string& path) {
  const std::string text = io::read_file(path);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(kOp, "'", path, "' is not valid JSON: ", e.what());
  }
  try {
    return from_json(j);
  } catch (const Error& e) {
    fail(kOp, "'", path, "': ", e.what());
  }
}

bool TrainConfig::operator==(const TrainConfig& other) const { return to_json() == other.to_json(); }

ScheduleConfig schedule_config(const TrainConfig& config, int64_t steps_per_epoch) {
  ScheduleConfig s;
  s.kind = config.schedule;
  s.d_model = config.model.d_model;
  s.scale = config.lr_scale;
  s.warmup_steps = config.warmup;
  s.lr = config.lr;
  s.min_lr = config.min_lr;
  s.total_steps = config.epochs * steps_per_epoch;
  return s;
}

}  // namespace attn::train
