// attn train --out DIR: trains an encoder-decoder Transformer (paper §5) on a synthetic task
// (--task reverse|copy|sort) or on the user's TSV corpus (--data/--valid), with the seed's
// reversal recipe as the defaults; or, with --arch decoder-only|encoder-only, a GPT-style
// language model (lines packed into blocks with --pack N) or a BERT-style masked LM on a text
// file (--text/--valid-text). Every hyper-parameter is a flag; --config FILE.json sets any of
// them (flags win). --vocab takes a
// SentencePiece model (attn vocab train) for the corpus, shared by source and target (§5.1). A one-line
// progress bar on a terminal, plain log lines otherwise. Ends by writing report.html
// (attn/run_report/run_report.h), printing where everything is, and showing a few outputs of the model.
// Not here: the training loop itself (train/trainer.h).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/dist/communicator.h"
#include "attn/io/atomic_file.h"
#include "attn/io/run_files.h"
#include "attn/run/fill_mask.h"
#include "attn/run/generate.h"
#include "attn/run/model_folder.h"
#include "attn/run/translate.h"
#include "attn/run_report/run_report.h"
#include "attn/train/checkpointing.h"
#include "attn/train/text_data.h"
#include "attn/train/trainer.h"
#include "commands.h"

namespace attn::cli {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct TrainOptions {
  std::string out;
  std::string config_file;
  json flags = json::object();   // the hyper-parameter flags given, as train_config keys
  bool task_given = false, data_given = false, text_given = false, pairs_given = false;
  std::optional<int64_t> layers;  // --layers: the stack(s) of the chosen arch
  bool resume = false, force = false, quiet = false, no_report = false;
  int64_t samples = 5;
  int64_t log_every = 0;         // plain log lines: every N steps (0: ~10 per epoch)
};

// ---- formatting ------------------------------------------------------------------------------

std::string duration_text(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long long t = std::llround(s);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, (t / 60) % 60);
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", t / 60, t % 60);
  return buf;
}

std::string rate_text(double tokens_per_s) {
  char buf[32];
  if (tokens_per_s >= 1e6) std::snprintf(buf, sizeof buf, "%.1fM", tokens_per_s / 1e6);
  else if (tokens_per_s >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", tokens_per_s / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", tokens_per_s);
  return buf;
}

std::string percent(double v) {
  if (!std::isfinite(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100.0 * v);
  return buf;
}

std::string number(double v, const char* fmt) {
  if (!std::isfinite(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// DPO's validation preference accuracy, reward margin and KL to the reference ("" for other runs).
std::string preference_text(const train::EpochMetrics& m) {
  if (!m.has_preference) return "";
  return "  val_pref_acc " + percent(m.val_pref_acc) + "  val_reward_margin " + number(m.val_reward_margin, "%.4f") +
         "  val_kl_ref " + number(m.val_kl_ref, "%.4f");
}

std::string epoch_line(const train::EpochMetrics& m, int64_t epochs, models::Arch arch) {
  char buf[320];
  if (arch != models::Arch::EncoderDecoder) {
    std::snprintf(buf, sizeof buf,
                  "epoch %lld/%lld  step %lld  loss %s  val_loss %s  val_ppl %s  val_token_acc %s  lr %s  %s tok/s  "
                  "%.1fs",
                  static_cast<long long>(m.epoch), static_cast<long long>(epochs), static_cast<long long>(m.step),
                  number(m.loss, "%.4f").c_str(), number(m.val_loss, "%.4f").c_str(), number(m.val_ppl, "%.3f").c_str(),
                  percent(m.val_token_acc).c_str(), number(m.lr, "%.3g").c_str(), rate_text(m.tokens_per_s).c_str(),
                  m.seconds);
    return buf + preference_text(m);
  }
  std::snprintf(buf, sizeof buf,
                "epoch %lld/%lld  step %lld  loss %s  val_loss %s  val_token_acc %s  val_exact_acc %s  lr %s  "
                "%s tok/s  %.1fs",
                static_cast<long long>(m.epoch), static_cast<long long>(epochs), static_cast<long long>(m.step),
                number(m.loss, "%.4f").c_str(), number(m.val_loss, "%.4f").c_str(), percent(m.val_token_acc).c_str(),
                percent(m.val_exact_acc).c_str(), number(m.lr, "%.3g").c_str(), rate_text(m.tokens_per_s).c_str(),
                m.seconds);
  return buf + preference_text(m);
}

// The progress display: a bar redrawn in place on a terminal, log lines otherwise.
class Progress {
 public:
  Progress(bool tty, bool quiet, int64_t log_every, models::Arch arch, std::string validation)
      : tty_(tty), quiet_(quiet), log_every_(log_every), arch_(arch), validation_(std::move(validation)) {}

  void step(const train::TrainProgress& p) {
    if (quiet_) return;
    if (tty_) {
      if (p.phase == train::TrainProgress::Phase::Validate) {
        std::fprintf(stderr, "\r\033[Kepoch %lld/%lld  validating (%s)...", static_cast<long long>(p.epoch),
                     static_cast<long long>(p.epochs), validation_.c_str());
        std::fflush(stderr);
        return;
      }
      // At most ~10 redraws a second (and always the epoch's last batch).
      const auto now = std::chrono::steady_clock::now();
      if (p.batch != p.batches && now - last_draw_ < std::chrono::milliseconds(100)) return;
      last_draw_ = now;
      constexpr int kWidth = 20;
      const int filled = p.batches > 0 ? static_cast<int>(kWidth * p.batch / p.batches) : 0;
      std::string bar(static_cast<size_t>(filled), '#');
      bar.resize(kWidth, '.');
      std::fprintf(stderr, "\r\033[Kepoch %lld/%lld [%s] %lld/%lld  step %lld  loss %.4f  lr %.3g  %s tok/s  ETA %s",
                   static_cast<long long>(p.epoch), static_cast<long long>(p.epochs), bar.c_str(),
                   static_cast<long long>(p.batch), static_cast<long long>(p.batches), static_cast<long long>(p.step),
                   p.loss, p.lr, rate_text(p.tokens_per_s).c_str(), duration_text(p.eta_seconds).c_str());
      std::fflush(stderr);
      return;
    }
    if (p.phase != train::TrainProgress::Phase::Train) return;
    const int64_t every = log_every_ > 0 ? log_every_ : std::max<int64_t>(1, p.batches / 10);
    if (p.step % every != 0) return;
    std::fprintf(stderr, "epoch %lld/%lld  batch %lld/%lld  step %lld  loss %.6f  lr %.6g  %s tok/s  ETA %s\n",
                 static_cast<long long>(p.epoch), static_cast<long long>(p.epochs), static_cast<long long>(p.batch),
                 static_cast<long long>(p.batches), static_cast<long long>(p.step), p.loss, p.lr,
                 rate_text(p.tokens_per_s).c_str(), duration_text(p.eta_seconds).c_str());
  }

  void epoch(const train::EpochMetrics& m, int64_t epochs) {
    if (quiet_) return;
    std::fprintf(stderr, "%s%s\n", tty_ ? "\r\033[K" : "", epoch_line(m, epochs, arch_).c_str());
    std::fflush(stderr);
  }

  void clear_line() {
    if (tty_ && !quiet_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  bool tty_, quiet_;
  int64_t log_every_;
  models::Arch arch_;
  std::string validation_;
  std::chrono::steady_clock::time_point last_draw_{};
};

// SIGINT/SIGTERM ask the running trainer to stop at the next step with a checkpoint.
train::Trainer* g_trainer = nullptr;
extern "C" void on_stop_signal(int) {
  if (g_trainer) g_trainer->request_stop();
}

struct SignalScope {
  explicit SignalScope(train::Trainer* t) {
    g_trainer = t;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = static_cast<int>(SA_RESETHAND);  // a second Ctrl-C kills as usual
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalScope() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    g_trainer = nullptr;
  }
  struct sigaction old_int_ {}, old_term_ {};
};

std::string threads_text(const train::TrainConfig& c, int ranks) {
  const int64_t n = train::training_threads(c, ranks);
  std::string what = n > 0 ? std::to_string(n) : "all cores";
  if (c.threads == 0) what += " (auto)";
  if (n != 1) what += train::training_thread_split(c, ranks) == train::ThreadSplit::Batch ? ", one batch shard each"
                                                                                           : ", sharing each op";
  if (c.precision != Precision::F32) what += str_cat(", ", precision_name(c.precision), " matrix products");
  return what;
}

// ---- the command -----------------------------------------------------------------------------

json read_config_file(const std::string& path) {
  const std::string text = io::read_file(path);
  try {
    json j = json::parse(text);
    ATTN_CHECK(j.is_object(), "train", "--config '", path, "' must hold a JSON object, got ", j.type_name());
    return j;
  } catch (const json::exception& e) {
    fail("train", "--config '", path, "' is not valid JSON: ", e.what());
  }
}

// Applies `src` onto `dst`, merging the nested "model" object key by key.
void merge_keys(json& dst, const json& src) {
  for (const auto& [k, v] : src.items()) {
    if (k == "model" && v.is_object() && dst.contains("model") && dst["model"].is_object())
      for (const auto& [mk, mv] : v.items()) dst["model"][mk] = mv;
    else
      dst[k] = v;
  }
}

// Up to `count` lines of the run's validation text (else its training text) as ids, skipping
// lines with tokens the vocabulary lacks, lines shorter than `min_tokens`, and lines longer
// than max_length (the run skipped them too; a prompt of a 300 kB line would take minutes).
std::vector<std::vector<int64_t>> sample_lines(const train::TrainConfig& config, const io::Vocab& vocab,
                                               int64_t count, size_t min_tokens) {
  const std::string path = config.valid_text_path.empty() ? config.text_path : config.valid_text_path;
  const train::TextFile file = train::read_text(path, config.tokens);
  std::vector<std::vector<int64_t>> out;
  for (const auto& ids : train::encode_text(file, vocab, true)) {
    if (static_cast<int64_t>(out.size()) >= count) break;
    if (ids.size() < min_tokens || std::find(ids.begin(), ids.end(), io::Vocab::kUnk) != ids.end()) continue;
    if (config.max_length > 0 && static_cast<int64_t>(ids.size()) > config.max_length) continue;
    out.push_back(ids);
  }
  return out;
}

std::string decoded(const io::Vocab& vocab, const std::vector<int64_t>& ids) {
  return "\"" + vocab.decode(ids) + "\"";
}

std::string decoded_text(const std::string& text) { return "\"" + text + "\""; }

// Decoder-only: the first half of a few lines, continued greedily from the saved folder.
void print_continuations(const std::string& out, const train::TrainConfig& config, int64_t count) {
  const run::ModelFolder folder = run::open_model_folder(out, "train", true, models::Arch::DecoderOnly);
  const io::Vocab& vocab = *folder.vocab;
  const auto lines = sample_lines(config, vocab, count, 2);
  if (lines.empty()) return;
  std::vector<std::vector<int64_t>> prompts, rests;
  for (const auto& ids : lines) {
    const auto half = static_cast<std::ptrdiff_t>(ids.size() / 2);
    prompts.emplace_back(ids.begin(), ids.begin() + half);
    rests.emplace_back(ids.begin() + half, ids.end());
  }
  run::GenerateSettings settings;
  size_t longest = 0;
  for (const auto& r : rests) longest = std::max(longest, r.size());
  settings.max_tokens = static_cast<int64_t>(longest) + 1;
  const auto found = run::generate_batch(folder, prompts, settings);
  std::printf("\ncontinuations of the first half of %s lines (greedy, attn generate --model %s):\n",
              config.valid_text_path.empty() ? "training" : "validation", out.c_str());
  int64_t right = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& h = found[i].front();
    const bool ok = h.finished && h.tokens == rests[i];
    right += ok ? 1 : 0;
    std::printf("  %s  ->  %s   %s%s\n", decoded(vocab, prompts[i]).c_str(), decoded(vocab, h.tokens).c_str(),
                ok ? "ok" : "expected ", ok ? "" : decoded(vocab, rests[i]).c_str());
  }
  std::printf("  %lld of %zu right\n", static_cast<long long>(right), prompts.size());
}

// Encoder-only: the middle token of a few lines masked and predicted from the saved folder.
void print_fills(const std::string& out, const train::TrainConfig& config, int64_t count) {
  const run::ModelFolder folder = run::open_model_folder(out, "train", true, models::Arch::EncoderOnly);
  const io::Vocab& vocab = *folder.vocab;
  const auto lines = sample_lines(config, vocab, count, 1);
  if (lines.empty()) return;
  std::vector<std::vector<int64_t>> masked;
  std::vector<int64_t> truth;
  for (const auto& ids : lines) {
    const size_t mid = ids.size() / 2;
    masked.push_back(ids);
    masked.back()[mid] = vocab.mask_id();
    truth.push_back(ids[mid]);
  }
  const auto predictions = run::fill_masks(folder, masked, 1);
  std::printf("\nthe middle token of %s lines masked and filled (attn fill-mask --model %s):\n",
              config.valid_text_path.empty() ? "training" : "validation", out.c_str());
  int64_t right = 0;
  for (size_t i = 0; i < masked.size(); ++i) {
    const int64_t best = predictions[i].front().candidates.front().first;
    const bool ok = best == truth[i];
    right += ok ? 1 : 0;
    std::printf("  %s  ->  '%s' %.3f   %s%s\n", decoded(vocab, masked[i]).c_str(), vocab.token(best).c_str(),
                predictions[i].front().candidates.front().second, ok ? "ok" : "expected ",
                ok ? "" : ("'" + vocab.token(truth[i]) + "'").c_str());
  }
  std::printf("  %lld of %zu right\n", static_cast<long long>(right), masked.size());
}

// SFT: a few prompts of the validation pairs (else the training pairs) answered greedily from
// the saved folder (a GPT-2 start's OUT/hf, with its tokenizer), against their responses.
void print_responses(const std::string& out, const train::Trainer& trainer, int64_t count) {
  const train::TrainConfig& config = trainer.config();
  const bool valid = !config.valid_pairs_path.empty();
  const train::PairsFile file = train::read_pairs(valid ? config.valid_pairs_path : config.pairs_path, config.objective);
  const std::string dir = trainer.from_gpt2() ? (fs::path(out) / train::Trainer::kHfDirName).string() : out;
  const run::GenerationFolder g = run::open_generation_folder(dir, "train", true, config.model.arch);
  const bool decoder_only = config.model.arch == models::Arch::DecoderOnly;
  auto encode = [&](const std::string& text) { return g.bpe ? g.bpe->encode(text) : g.folder.vocab->encode(text, true); };
  auto decode = [&](const std::vector<int64_t>& ids) { return g.bpe ? g.bpe->decode(ids) : g.folder.vocab->decode(ids); };
  std::vector<std::vector<int64_t>> prompts, expected;
  std::vector<std::string> shown;
  for (const train::PairRecord& r : file.records) {
    if (static_cast<int64_t>(prompts.size()) >= count) break;
    prompts.push_back(encode(decoder_only ? train::apply_template(config.prompt_template, r.prompt) : r.prompt));
    expected.push_back(encode(r.response));
    shown.push_back(r.prompt);
  }
  size_t longest = 0;
  for (const auto& e : expected) longest = std::max(longest, e.size());
  std::vector<std::vector<decode::Hypothesis>> found;
  if (decoder_only) {
    run::GenerateSettings settings;
    settings.max_tokens = static_cast<int64_t>(longest) + 1;
    settings.prepend_bos = g.prepend_bos;
    found = run::generate_batch(g.folder, prompts, settings);
  } else {
    found = run::search_batch(g.folder, prompts, run::SearchSettings{});
  }
  std::printf("\nresponses to %s prompts (greedy, attn %s --model %s):\n", valid ? "validation" : "training",
              decoder_only ? "generate" : "translate", dir.c_str());
  int64_t right = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& h = found[i].front();
    const bool ok = h.finished && h.tokens == expected[i];
    right += ok ? 1 : 0;
    std::printf("  %s  ->  \"%s\"   %s%s\n", decoded_text(shown[i]).c_str(), decode(h.tokens).c_str(), ok ? "ok" : "expected ",
                ok ? "" : ("\"" + decode(expected[i]) + "\"").c_str());
  }
  std::printf("  %lld of %zu right\n", static_cast<long long>(right), prompts.size());
}

// A few inputs the model has not been trained on, translated greedily from the saved folder
// (for the single-stack models: continuations or filled masks of a few lines).
void print_samples(const std::string& out, const train::TrainConfig& config, int64_t count) {
  if (count <= 0) return;
  // A streamed training file may not fit in memory: samples come from a validation set only.
  if (config.stream && (config.uses_tsv() ? config.valid_path : config.valid_text_path).empty()) return;
  if (config.model.arch == models::Arch::DecoderOnly) return print_continuations(out, config, count);
  if (config.model.arch == models::Arch::EncoderOnly) return print_fills(out, config, count);
  const run::ModelFolder folder = run::open_model_folder(out, "train", true);
  const io::Vocab& vocab = *folder.vocab;
  std::vector<io::Example> examples;
  if (!config.uses_tsv()) {
    train::TaskConfig t;
    t.kind = train::parse_task_kind(config.task);
    t.length = config.length;
    t.min_length = config.min_length;
    t.n_symbols = config.symbols;
    Rng rng(train::stream_seed(config.data_seed, 7));  // a stream neither set was drawn from
    examples = train::make_task_examples(t, count, rng);
  } else {
    const std::string path = config.valid_path.empty() ? config.train_path : config.valid_path;
    const train::TsvFile file = train::read_tsv(path, config.tokens);
    examples = train::encode_tsv(file, vocab, true);
    if (static_cast<int64_t>(examples.size()) > count) examples.resize(static_cast<size_t>(count));
  }
  if (examples.empty()) return;
  std::vector<std::vector<int64_t>> srcs;
  for (const auto& e : examples) srcs.push_back(e.src);
  const auto found = run::search_batch(folder, srcs, run::SearchSettings{});
  std::printf("\n%s (greedy decoding, attn translate --model %s):\n",
              config.uses_tsv() ? "translations" : "translations of random inputs", out.c_str());
  int64_t right = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    const auto& h = found[i].front();
    const bool ok = h.finished && h.tokens == examples[i].tgt;
    right += ok ? 1 : 0;
    std::printf("  %s  ->  %s   %s%s\n", vocab.decode(examples[i].src).c_str(), vocab.decode(h.tokens).c_str(),
                ok ? "ok" : "expected ", ok ? "" : vocab.decode(examples[i].tgt).c_str());
  }
  std::printf("  %lld of %zu right\n", static_cast<long long>(right), examples.size());
}

// The flag that sets a train_config.json key, for errors that start with the key: "[ModelConfig]
// d_model 1000000000 is above the limit 65536 ..." gains " (--d-model)". The size keys and
// their flags (several are spelled differently: n_heads is --heads, n_experts --experts).
std::string with_flag(const std::string& message) {
  static const std::map<std::string, std::string> flags = {
      {"d_model", "--d-model"},
      {"n_heads", "--heads"},
      {"n_encoder_layers", "--encoder-layers or --layers"},
      {"n_decoder_layers", "--decoder-layers or --layers"},
      {"d_ff", "--d-ff"},
      {"max_len", "--max-len"},
      {"n_kv_heads", "--kv-heads"},
      {"sliding_window", "--sliding-window"},
      {"n_experts", "--experts"},
      {"expert_top_k", "--expert-top-k"},
      {"length", "--length"},
      {"train_size", "--train-size"},
      {"valid_size", "--valid-size"},
      {"batch_size", "--batch-size"},
      {"max_tokens", "--max-tokens"},
      {"bucket_size", "--bucket-size"},
      {"chunk_lines", "--chunk-lines"},
      {"chunk_bytes", "--chunk-bytes"},
      {"max_length", "--max-length"},
      {"epochs", "--epochs"},
      {"seed", "--seed"}};
  size_t begin = 0;
  if (!message.empty() && message[0] == '[' && message.find("] ") != std::string::npos) begin = message.find("] ") + 2;
  const size_t end = message.find(' ', begin);
  const auto it = flags.find(message.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
  return it == flags.end() ? message : message + " (" + it->second + ")";
}

// The trainer of a fresh run or of --resume, from the merged overrides.
std::unique_ptr<train::Trainer> make_trainer(const TrainOptions& o, const json& overrides) {
  if (o.resume) {
    // Incomplete checkpoints newer than the one resumed from (a save cut short): said aloud,
    // since their steps are trained again.
    const auto latest = train::latest_checkpoint(o.out);
    for (const train::SkippedCheckpoint& s : train::skipped_checkpoints(o.out))
      std::fprintf(stderr, "attn: warning: skipping checkpoint '%s' (step %lld): %s; %s\n", s.path.c_str(),
                   static_cast<long long>(s.step), s.reason.c_str(),
                   latest ? str_cat("resuming from '", latest->path, "' (step ", latest->step, ")").c_str()
                          : "no complete checkpoint to resume from");
    return train::Trainer::resume(o.out, overrides);
  }
  train::check_fresh_run_dir(o.out, o.force);  // before any work: a cheap, early refusal
  train::TrainConfig config;
  try {
    config.update_from_json(overrides);
  } catch (const Error& e) {
    if (o.config_file.empty()) throw;
    fail("train", "--config '", o.config_file, "' with the flags: ", e.what());
  }
  auto trainer = std::make_unique<train::Trainer>(config, o.out);  // validates, loads the data
  if (o.force && trainer->communicator().is_root()) train::clear_run_dir(o.out);
  return trainer;
}

int run_train(const TrainOptions& o) {
  ATTN_CHECK(o.samples >= 0, "train", "--samples must not be negative, got ", o.samples);
  ATTN_CHECK(o.log_every >= 0, "train", "--log-every must not be negative, got ", o.log_every);
  ATTN_CHECK(!(o.resume && o.force), "train", "--resume and --force exclude each other");
  ATTN_CHECK(o.task_given + o.data_given + o.text_given + o.pairs_given <= 1, "train",
             "give one of --task, --data, --text or --pairs, not both");
  json overrides = json::object();
  if (!o.config_file.empty()) overrides = read_config_file(o.config_file);
  merge_keys(overrides, o.flags);
  const auto given = [&](const char* key) {
    return overrides.contains(key) && overrides[key].is_string() && !overrides[key].get<std::string>().empty();
  };
  // --data or --text (or "data" / "text" in the config) without a task names a corpus run.
  if ((given("data") || given("text") || given("pairs")) && !overrides.contains("task")) overrides["task"] = "";
  // --init takes the model (and its vocabulary) from the folder: model flags would be ignored.
  if (given("init") && !o.resume && overrides.contains("model") && overrides["model"].is_object() &&
      !overrides["model"].empty()) {
    std::string keys;
    for (const auto& [k, v] : overrides["model"].items()) keys += (keys.empty() ? "" : ", ") + k;
    fail("train", "--init takes the model from '", overrides["init"].get<std::string>(),
         "'; model settings (", keys, ") do not apply");
  }
  ATTN_CHECK(!(given("init") && given("vocab")), "train", "--init brings its own vocabulary; --vocab does not apply");
  for (const char* key : {"data", "valid", "text", "valid_text", "vocab", "pairs", "valid_pairs", "init", "ref"})
    if (given(key)) overrides[key] = fs::absolute(overrides[key].get<std::string>()).string();
  // --vocab (a SentencePiece model) sets the tokenization unless it is given too.
  if (given("vocab") && !overrides.contains("tokens")) overrides["tokens"] = "sentencepiece";
  // --layers sets the stack(s) of the arch the run ends up with.
  if (o.layers) {
    std::string arch = "encoder_decoder";
    if (overrides.contains("model") && overrides["model"].contains("arch") && overrides["model"]["arch"].is_string())
      arch = overrides["model"]["arch"].get<std::string>();
    else if (o.resume)
      arch = models::arch_name(train::TrainConfig::load((fs::path(o.out) / io::kTrainConfigFileName).string())
                                   .model.arch);
    if (arch != "decoder_only") overrides["model"]["n_encoder_layers"] = *o.layers;
    if (arch != "encoder_only") overrides["model"]["n_decoder_layers"] = *o.layers;
  }

  std::unique_ptr<train::Trainer> trainer;
  try {
    trainer = make_trainer(o, overrides);
  } catch (const Error& e) {
    throw Error(with_flag(e.what()));
  }
  const train::TrainConfig& c = trainer->config();

  // Under mpirun every rank trains; rank 0 alone talks and writes (docs/distributed.md).
  const dist::Communicator& comm = trainer->communicator();
  if (!comm.is_root()) {
    SignalScope signals(trainer.get());
    trainer->run();
    return trainer->stopped() ? 130 : 0;
  }
  const bool tty = ::isatty(2) != 0;
  const models::Arch arch = c.model.arch;
  Progress progress(tty, o.quiet, o.log_every, arch, trainer->objective().validation_method());
  trainer->on_progress([&](const train::TrainProgress& p) { progress.step(p); });
  trainer->on_epoch([&](const train::EpochMetrics& m) { progress.epoch(m, c.epochs); });

  if (!o.quiet) {
    const auto& d = trainer->data();
    const std::string data = c.uses_tsv()     ? "corpus " + c.train_path
                             : c.uses_text()  ? "text " + c.text_path
                             : c.uses_pairs() ? std::string(train::objective_kind_name(c.objective)) + " pairs " + c.pairs_path
                                              : "task " + c.task;
    const char* unit = c.pack > 0 && c.uses_text() ? "blocks" : c.uses_text() ? "lines" : c.uses_pairs() ? "pairs" : "examples";
    std::fprintf(stderr, "attn train: %s, %zu training / %zu validation %s, vocabulary %lld\n", data.c_str(),
                 trainer->stream() ? static_cast<size_t>(trainer->stream()->stats().examples) : d.train.size(),
                 d.valid.size(), unit, static_cast<long long>(d.vocab.size()));
    if (const train::CorpusStream* s = trainer->stream())
      std::fprintf(stderr, "  streamed: %lld lines in %lld chunks of up to %lld lines, %lld batches per epoch\n",
                   static_cast<long long>(s->stats().lines), static_cast<long long>(s->stats().chunks),
                   static_cast<long long>(c.chunk_lines), static_cast<long long>(s->num_batches()));
    if (trainer->skipped_long() > 0)
      std::fprintf(stderr, "  %lld training examples longer than the limits skipped (each epoch)\n",
                   static_cast<long long>(trainer->skipped_long()));
    if (d.vocab.sentencepiece())
      std::fprintf(stderr, "  SentencePiece vocabulary %s (%lld pieces, fingerprint %s)%s\n", c.vocab.c_str(),
                   static_cast<long long>(d.vocab.size()), d.vocab.sentencepiece()->fingerprint().c_str(),
                   c.uses_tsv() ? ", shared by source and target" : "");
    if (d.train_unknown_tokens > 0 && !c.uses_pairs() && c.init.empty())
      std::fprintf(stderr, "  warning: %lld training characters are not in the SentencePiece model (read as <unk>)\n",
                   static_cast<long long>(d.train_unknown_tokens));
    if (d.vocab.has_mask())
      std::fprintf(stderr, "  masked LM: %g of each line's tokens chosen (80%% %s = id %lld, 10%% random, 10%% kept)\n",
                   c.mask_prob, io::Vocab::kMaskToken, static_cast<long long>(d.vocab.mask_id()));
    const std::string layers =
        arch == models::Arch::EncoderDecoder
            ? str_cat(c.model.n_encoder_layers, "+", c.model.n_decoder_layers, " layers")
            : str_cat(arch == models::Arch::DecoderOnly ? c.model.n_decoder_layers : c.model.n_encoder_layers,
                      " layers");
    std::fprintf(stderr,
                 "  %s model D=%lld, %lld heads, %s, d_ff %lld, dropout %g, %s, %lld parameters\n"
                 "  %lld epochs, batch %lld, %s, label smoothing %g, clip %g, seed %llu, threads %s\n",
                 models::arch_name(arch), static_cast<long long>(c.model.d_model),
                 static_cast<long long>(c.model.n_heads), layers.c_str(),
                 static_cast<long long>(c.model.d_ff), c.model.dropout, c.model.norm_first ? "pre-norm" : "post-norm",
                 static_cast<long long>(trainer->model().num_parameters()), static_cast<long long>(c.epochs),
                 static_cast<long long>(c.batch_size), trainer->describe_schedule().c_str(), c.label_smoothing, c.clip,
                 static_cast<unsigned long long>(c.seed), threads_text(c, comm.size()).c_str());
    if (!c.init.empty())
      std::fprintf(stderr, "  starting from %s (%s%s)\n", c.init.c_str(),
                   trainer->from_gpt2() ? "Hugging Face GPT-2, its BPE tokenizer" : "attn model folder, its vocab.json",
                   trainer->from_gpt2() ? "; also written in that layout to OUT/hf" : "");
    if (c.model.arch == models::Arch::DecoderOnly && c.uses_pairs()) {
      std::string shown;
      for (char ch : c.prompt_template) shown += ch == '\n' ? "\\n" : ch == '\t' ? "\\t" : std::string(1, ch);
      std::fprintf(stderr, "  rows: %s<template \"%s\"> response <eos>; the loss counts the response and <eos> only\n",
                   trainer->from_gpt2() ? "" : "<bos> ", shown.c_str());
    }
    if (c.objective == train::ObjectiveKind::Dpo)
      std::fprintf(stderr, "  dpo: beta %g, reference %s (log-probabilities measured once, no dropout)\n", c.dpo_beta,
                   c.ref.empty() ? (c.init.empty() ? "the initial model" : c.init.c_str()) : c.ref.c_str());
    if ((c.uses_pairs() || !c.init.empty()) && d.train_unknown_tokens > 0)
      std::fprintf(stderr, "  warning: %lld training tokens are not in the vocabulary (read as <unk>)\n",
                   static_cast<long long>(d.train_unknown_tokens));
    if (c.uses_text() && d.empty_lines > 0)
      std::fprintf(stderr, "  %lld blank lines skipped\n", static_cast<long long>(d.empty_lines));
    if (c.pack > 0 && c.uses_pairs())
      std::fprintf(stderr, "  packed: each batch's pairs into rows of at most %lld tokens, every pair attending only to "
                   "itself, its positions from 0\n", static_cast<long long>(c.pack));
    else if (c.pack > 0)
      std::fprintf(stderr, "  packed: %zu training / %zu validation blocks of %lld tokens (<bos> + %lld ids, <eos> "
                   "between lines)\n", d.train.size(), d.valid.size(), static_cast<long long>(c.pack),
                   static_cast<long long>(c.pack - 1));
    if (d.valid_unknown_tokens > 0)
      std::fprintf(stderr, "  warning: %lld validation tokens are not in the training vocabulary (read as <unk>)\n",
                   static_cast<long long>(d.valid_unknown_tokens));
    if (comm.size() > 1)
      std::fprintf(stderr, "  data parallel: %d ranks (MPI), each training on its 1/%d of every batch\n",
                   comm.size(), comm.size());
    if (o.resume)
      std::fprintf(stderr, "  resuming at step %lld (%lld epochs done)\n", static_cast<long long>(trainer->step()),
                   static_cast<long long>(trainer->epochs_done()));
  }

  const auto t0 = std::chrono::steady_clock::now();
  {
    SignalScope signals(trainer.get());
    trainer->run();
  }
  progress.clear_line();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (trainer->stopped()) {
    const auto latest = train::latest_checkpoint(o.out);
    std::printf("attn train: stopped at step %lld; checkpoint %s\ncontinue with: attn train --out %s --resume\n",
                static_cast<long long>(trainer->step()), latest ? latest->path.c_str() : "-", o.out.c_str());
    return 130;
  }

  const auto& metrics = trainer->metrics();
  std::printf("attn train: %lld epochs, %lld steps in %s", static_cast<long long>(trainer->epochs_done()),
              static_cast<long long>(trainer->step()), duration_text(seconds).c_str());
  if (!metrics.empty() && std::isfinite(metrics.back().val_token_acc)) {
    const train::EpochMetrics& m = metrics.back();
    if (arch == models::Arch::EncoderDecoder)
      std::printf("; validation (greedy): token accuracy %s, exact sequences %s", percent(m.val_token_acc).c_str(),
                  percent(m.val_exact_acc).c_str());
    else
      std::printf("; validation: perplexity %s, %s accuracy %s", number(m.val_ppl, "%.3f").c_str(),
                  arch == models::Arch::DecoderOnly ? (c.uses_pairs() ? "response-token" : "next-token") : "masked-token",
                  percent(m.val_token_acc).c_str());
  }
  if (!metrics.empty() && metrics.back().has_preference && std::isfinite(metrics.back().val_pref_acc))
    std::printf("; validation pairs: preference accuracy %s (epoch 1: %s), reward margin %s, KL to the reference %s "
                "per token",
                percent(metrics.back().val_pref_acc).c_str(), percent(metrics.front().val_pref_acc).c_str(),
                number(metrics.back().val_reward_margin, "%.4f").c_str(), number(metrics.back().val_kl_ref, "%.4f").c_str());
  std::printf("\n");
  std::printf("  model        %s  (config.json, model.safetensors, vocab.json%s)\n", o.out.c_str(),
              trainer->data().vocab.sentencepiece() ? ", sentencepiece.model" : "");
  if (trainer->from_gpt2())
    std::printf("  hf           %s  (the Hugging Face GPT-2 layout with its tokenizer: attn generate/serve --model)\n",
                (fs::path(o.out) / train::Trainer::kHfDirName).string().c_str());
  std::printf("  metrics      %s\n", (fs::path(o.out) / io::kMetricsFileName).string().c_str());
  std::printf("  checkpoints  %s  (the last %s; attn average --model %s)\n",
              (fs::path(o.out) / io::kCheckpointsDirName).string().c_str(),
              c.keep > 0 ? std::to_string(c.keep).c_str() : "all", o.out.c_str());
  if (!o.no_report) {
    try {
      run_report::RunReportOptions ro;
      ro.command = "train";
      const run_report::RunReportResult r = run_report::write_run_report(o.out, ro);
      std::printf("  report       %s\n", r.report_path.c_str());
    } catch (const Error& e) {
      std::printf("  report       not written: %s\n", e.what());
    }
  }
  std::fflush(stdout);
  if (c.objective == train::ObjectiveKind::Sft && o.samples > 0) print_responses(o.out, *trainer, o.samples);
  else if (!c.uses_pairs()) print_samples(o.out, c, o.samples);
  return 0;
}

// Registers --name as a hyper-parameter flag stored under `key` (and under model.<key> when
// `model` is set) in the overrides JSON.
template <class T>
CLI::Option* param(CLI::App* cmd, TrainOptions* o, const std::string& flag, const std::string& key, const std::string& help,
                   const std::string& default_text, bool model = false) {
  CLI::Option* opt = cmd->add_option_function<T>(
      flag,
      [o, key, model](const T& v) {
        if (model) o->flags["model"][key] = v;
        else o->flags[key] = v;
      },
      help);
  if (!default_text.empty()) opt->default_str(default_text);
  return opt;
}

std::string dstr(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

void register_train(CLI::App& app, Action* action) {
  auto o = std::make_shared<TrainOptions>();
  const train::TrainConfig d;
  TrainOptions* p = o.get();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "train an encoder-decoder Transformer (paper §5) on a synthetic task or a TSV corpus (the defaults are the "
      "seed's digit-reversal recipe), or a decoder-only / encoder-only model on a text file (--arch, --text); or "
      "fine-tune a model folder (--init, also a Hugging Face GPT-2 folder) by instruction tuning (--objective sft) "
      "or DPO (--objective dpo) on --pairs");
  cmd->add_option("--out", o->out, "run folder: the model, checkpoints, metrics.jsonl and report.html")->required();
  cmd->add_option("--config", o->config_file, "a JSON file of train_config.json keys (flags override it)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--resume", o->resume, "continue the run in --out from its latest checkpoint, exactly");
  cmd->add_flag("--force", o->force, "replace an existing run in --out");
  cmd->add_flag("--quiet", o->quiet, "no progress, only the final summary");
  cmd->add_flag("--no-report", o->no_report, "do not write report.html at the end");
  cmd->add_option("--samples", o->samples, "random inputs translated at the end")->capture_default_str();
  cmd->add_option("--log-every", o->log_every, "without a terminal: a log line every N steps (0: 10 per epoch)")
      ->capture_default_str();

  // Data.
  param<std::string>(cmd, p, "--task", "task", "synthetic task: reverse, copy or sort", d.task)
      ->check(CLI::IsMember({"reverse", "copy", "sort"}))
      ->each([p](const std::string&) { p->task_given = true; });
  param<int64_t>(cmd, p, "--length", "length", "symbols per synthetic sequence", std::to_string(d.length));
  param<int64_t>(cmd, p, "--min-length", "min_length", "shortest synthetic sequence (0: all --length)", "0");
  param<int64_t>(cmd, p, "--symbols", "symbols", "alphabet size of the synthetic task (1..62)", std::to_string(d.symbols));
  param<int64_t>(cmd, p, "--train-size", "train_size", "synthetic training examples", std::to_string(d.train_size));
  param<int64_t>(cmd, p, "--valid-size", "valid_size", "synthetic validation examples", std::to_string(d.valid_size));
  param<uint64_t>(cmd, p, "--data-seed", "data_seed", "seed of the synthetic data", std::to_string(d.data_seed))
      ->check(seed_validator());
  param<std::string>(cmd, p, "--data", "data", "training corpus, one 'source<TAB>target' pair per line", "")
      ->each([p](const std::string&) { p->data_given = true; });
  param<std::string>(cmd, p, "--valid", "valid", "validation corpus (TSV)", "");
  param<std::string>(cmd, p, "--text", "text",
                     "training text for --arch decoder-only or encoder-only: one sequence per non-blank line", "")
      ->each([p](const std::string&) { p->text_given = true; });
  param<std::string>(cmd, p, "--valid-text", "valid_text", "validation text (one sequence per non-blank line)", "");
  // Fine-tuning (docs/training.md, "Fine-tuning").
  param<std::string>(cmd, p, "--init", "init",
                     "start from this model folder (attn's, with its vocab.json, or a Hugging Face GPT-2 folder with "
                     "its tokenizer) instead of random weights; its architecture and vocabulary are the run's",
                     "");
  param<std::string>(cmd, p, "--objective", "objective",
                     "pretrain (the family's own: next-token, masked LM, seq2seq), sft (instruction tuning on --pairs: "
                     "the loss over response tokens only) or dpo (preference pairs, against a frozen reference)",
                     "pretrain")
      ->check(CLI::IsMember({"pretrain", "sft", "dpo"}));
  param<std::string>(cmd, p, "--pairs", "pairs",
                     "sft: prompt<TAB>response per line, or JSONL {\"prompt\", \"response\"}; dpo: "
                     "prompt<TAB>chosen<TAB>rejected, or JSONL {\"prompt\", \"chosen\", \"rejected\"} (.jsonl: JSONL)",
                     "")
      ->each([p](const std::string&) { p->pairs_given = true; });
  param<std::string>(cmd, p, "--valid-pairs", "valid_pairs", "validation pairs (the format of --pairs)", "");
  cmd->add_option_function<std::string>(
         "--template", [p](const std::string& v) { p->flags["template"] = train::unescape_template(v); },
         "decoder-only sft/dpo: the text before the response, {prompt} standing for the prompt; \\n and \\t are a "
         "newline and a tab")
      ->default_str("{prompt}\\n");
  param<std::string>(cmd, p, "--ref", "ref", "dpo: the frozen reference model's folder (default: the --init model)",
                     "");
  param<double>(cmd, p, "--beta", "dpo_beta", "dpo: beta, how strongly the policy is held to the reference",
                dstr(d.dpo_beta));
  param<int64_t>(cmd, p, "--pack", "pack",
                 "--arch decoder-only: pack the text's lines (<eos> after each) into blocks of this many tokens, "
                 "<bos> included, one example each (0: one example per line); sft: each batch's pairs into rows of "
                 "at most this many tokens, every pair attending only to itself",
                 "0");
  param<double>(cmd, p, "--mask-prob", "mask_prob",
                "encoder-only: share of each line's tokens chosen for the masked LM (80% [MASK], 10% random, 10% kept)",
                dstr(d.mask_prob));
  cmd->add_option_function<std::string>(
         "--tokens",
         [p](const std::string& v) { p->flags["tokens"] = (v == "chars" || v == "char") ? "char" : "whitespace"; },
         "how corpus lines split into tokens: chars or words")
      ->check(CLI::IsMember({"chars", "words", "char", "whitespace"}))
      ->default_str("chars");
  param<std::string>(cmd, p, "--vocab", "vocab",
                     "a SentencePiece vocabulary (attn vocab train), shared by source and target: a .model file or a "
                     "folder holding sentencepiece.model; the run and its model folders carry a copy",
                     "");

  // Model.
  cmd->add_option_function<std::string>(
         "--arch",
         [p](const std::string& v) {
           std::string name = v;
           std::replace(name.begin(), name.end(), '-', '_');
           p->flags["model"]["arch"] = name;
         },
         "model family: encoder-decoder (tasks, --data), decoder-only (GPT-style LM on --text) or encoder-only "
         "(BERT-style masked LM on --text)")
      ->check(CLI::IsMember({"encoder-decoder", "decoder-only", "encoder-only"}, [](std::string v) {
        std::replace(v.begin(), v.end(), '_', '-');  // config.json's spelling is accepted too
        return v;
      }))
      ->default_str("encoder-decoder");
  cmd->add_option_function<int64_t>(
         "--layers", [p](const int64_t& v) { p->layers = v; },
         "layers of the arch's stack(s): decoder-only's decoder, encoder-only's encoder, or both of an encoder-decoder");
  param<int64_t>(cmd, p, "--d-model", "d_model", "model width D", std::to_string(d.model.d_model), true);
  param<int64_t>(cmd, p, "--heads", "n_heads", "attention heads (must divide D)", std::to_string(d.model.n_heads), true);
  param<int64_t>(cmd, p, "--encoder-layers", "n_encoder_layers", "encoder layers",
                 std::to_string(d.model.n_encoder_layers), true);
  param<int64_t>(cmd, p, "--decoder-layers", "n_decoder_layers", "decoder layers",
                 std::to_string(d.model.n_decoder_layers), true);
  param<int64_t>(cmd, p, "--d-ff", "d_ff", "feed-forward width", std::to_string(d.model.d_ff), true);
  param<double>(cmd, p, "--dropout", "dropout", "dropout on sublayers and embeddings", dstr(d.model.dropout), true);
  param<double>(cmd, p, "--attention-dropout", "attention_dropout", "dropout on attention weights",
                dstr(d.model.attention_dropout), true);
  param<bool>(cmd, p, "--norm-first", "norm_first", "true: pre-norm; false: post-norm (the paper)", "false", true);
  param<std::string>(cmd, p, "--norm", "norm", "layer or rms", "layer", true);
  param<std::string>(cmd, p, "--activation", "activation",
                     "feed-forward activation: relu, gelu, gelu_tanh or swiglu (gated; linear1 is [2 d_ff, D])", "relu",
                     true);
  param<std::string>(cmd, p, "--positional", "positional",
                     "positions: sinusoidal, learned, rope (rotary, in attention), alibi (linear biases) or none",
                     "sinusoidal", true);
  param<double>(cmd, p, "--rope-theta", "rope_theta", "rope: the base of the rotation frequencies",
                dstr(d.model.rope_theta), true);
  param<std::string>(cmd, p, "--rope-pairing", "rope_pairing",
                     "rope: which features rotate together, interleaved (2i, 2i+1) or half (i, i + Dh/2)",
                     "interleaved", true);
  param<int64_t>(cmd, p, "--kv-heads", "n_kv_heads",
                 "key/value heads (grouped-query attention; 1: multi-query; 0: as many as --heads)", "0", true);
  param<int64_t>(cmd, p, "--sliding-window", "sliding_window",
                 "decoder-only: each query sees the last W keys, and the KV cache keeps W (0: all)", "0", true);
  param<std::string>(cmd, p, "--attention", "attention", "self-attention: softmax (the paper) or linear (elu+1)",
                     "softmax", true);
  param<int64_t>(cmd, p, "--experts", "n_experts", "mixture-of-experts FFN with this many experts (0: dense FFN)",
                 "0", true);
  param<int64_t>(cmd, p, "--expert-top-k", "expert_top_k", "experts per token", std::to_string(d.model.expert_top_k),
                 true);
  param<double>(cmd, p, "--expert-capacity", "expert_capacity_factor",
                "capacity factor per expert (tokens over it are dropped; 0: unlimited)", "0", true);
  param<double>(cmd, p, "--moe-aux-weight", "moe_aux_loss_weight", "weight of the load-balancing loss",
                dstr(d.model.moe_aux_loss_weight), true);
  param<int64_t>(cmd, p, "--max-len", "max_len", "positions of learned position embeddings",
                 std::to_string(d.model.max_len), true);
  param<std::string>(cmd, p, "--dtype", "dtype", "f32 or f64", "f32", true);

  // Optimisation.
  param<int64_t>(cmd, p, "--epochs", "epochs", "passes over the training data", std::to_string(d.epochs));
  param<int64_t>(cmd, p, "--batch-size", "batch_size", "examples per batch (0: only --max-tokens caps)",
                 std::to_string(d.batch_size));
  param<int64_t>(cmd, p, "--max-tokens", "max_tokens", "padded tokens per batch (0: no cap)", "0");
  param<bool>(cmd, p, "--group-by-length", "group_by_length", "batch sequences of similar length together", "true");
  param<int64_t>(cmd, p, "--bucket-size", "bucket_size", "examples per length bucket (0: the whole epoch)", "0");
  cmd->add_flag_function(
      "--stream", [p](int64_t) { p->flags["stream"] = true; },
      "read the training file (--data or --text) in chunks instead of into memory: batches are shuffled and "
      "grouped by length within each chunk, the chunk order per epoch");
  param<int64_t>(cmd, p, "--chunk-lines", "chunk_lines", "--stream: lines per chunk", std::to_string(d.chunk_lines));
  param<int64_t>(cmd, p, "--chunk-bytes", "chunk_bytes", "--stream: also end a chunk at this many bytes (0: lines only)",
                 "0");
  param<int64_t>(cmd, p, "--max-length", "max_length",
                 "skip (and count) training examples with a side longer than this many tokens (0: no limit)", "0");
  param<std::string>(cmd, p, "--schedule", "schedule", "learning-rate schedule: noam, constant or cosine", "noam")
      ->check(CLI::IsMember({"noam", "constant", "cosine"}));
  param<int64_t>(cmd, p, "--warmup", "warmup", "warmup steps", std::to_string(d.warmup));
  param<double>(cmd, p, "--lr-scale", "lr_scale", "noam: factor on D^-0.5 min(step^-0.5, step warmup^-1.5)",
                dstr(d.lr_scale));
  param<double>(cmd, p, "--lr", "lr", "constant/cosine: peak learning rate", dstr(d.lr));
  param<double>(cmd, p, "--min-lr", "min_lr", "cosine: final learning rate", dstr(d.min_lr));
  param<double>(cmd, p, "--beta1", "beta1", "Adam beta1", dstr(d.beta1));
  param<double>(cmd, p, "--beta2", "beta2", "Adam beta2", dstr(d.beta2));
  param<double>(cmd, p, "--adam-eps", "eps", "Adam epsilon", dstr(d.eps));
  param<double>(cmd, p, "--weight-decay", "weight_decay", "weight decay (decoupled, AdamW)", dstr(d.weight_decay));
  param<bool>(cmd, p, "--decoupled-weight-decay", "decoupled_weight_decay",
              "true: AdamW's decay; false: L2 added to the gradient", "true");
  param<double>(cmd, p, "--label-smoothing", "label_smoothing", "label smoothing eps_ls", dstr(d.label_smoothing));
  param<double>(cmd, p, "--clip", "clip", "clip gradients to this global norm (0: off)", dstr(d.clip));

  // Run.
  param<uint64_t>(cmd, p, "--seed", "seed", "initialisation, dropout and batch order", "0")->check(seed_validator());
  param<std::string>(cmd, p, "--precision", "precision",
                     "the training step's matrix products: f32, or bf16 (bf16 operands, float32 sums; weights, "
                     "Adam's moments, checkpoints and validation stay float32)",
                     "f32")
      ->check(CLI::IsMember({"f32", "bf16"}));
  param<int64_t>(cmd, p, "--threads", "threads",
                 "threads (0: auto: all cores; with --parallel ops, 1 for d_model <= 128)", "0");
  param<std::string>(cmd, p, "--parallel", "parallel",
                     "how threads share a step: batch (one batch shard per thread, each on a replica of the model), "
                     "ops (every op split among them) or auto (batch for d_model <= 128 in one process, else ops)",
                     "auto")
      ->check(CLI::IsMember({"auto", "batch", "ops"}));
  param<int64_t>(cmd, p, "--keep", "keep", "checkpoints kept (0: all)", std::to_string(d.keep));
  param<int64_t>(cmd, p, "--checkpoint-every", "checkpoint_every", "also checkpoint every N steps (0: epoch ends only)",
                 "0");
  cmd->callback([o, action] { *action = [o] { return run_train(*o); }; });
}

}  // namespace attn::cli
