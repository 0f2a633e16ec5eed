// attn eval --model DIR (--task NAME | --data FILE): loss, accuracy and exact match of a model
// on a synthetic task's validation set or on a source<TAB>target file. Loss is the teacher-
// forced mean negative log-likelihood per target token (EOS included, no label smoothing);
// token and exact-sequence accuracy are measured on greedy outputs (or --beam), as the
// training run's val_token_acc / val_exact_acc. Without --task or --data the run's own
// validation data (train_config.json) is used. --metric bleu,chrf adds corpus BLEU and chrF
// (sacreBLEU's defaults, train/metrics.h) of the detokenized outputs, as `attn translate` prints
// them, against the references; attn eval --hyp FILE --ref FILE... scores existing outputs.
// Decoder-only and encoder-only models are evaluated on a text file (--text, default the run's
// validation text): held-out perplexity per token and per character, or masked-token accuracy.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/io/lines.h"
#include "attn/io/run_files.h"
#include "attn/io/tsv.h"
#include "attn/models/checkpoint.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_only.h"
#include "attn/ops/threads.h"
#include "attn/run/evaluate.h"
#include "attn/run/model_folder.h"
#include "attn/run/token_codec.h"
#include "attn/run/translate.h"
#include "attn/train/metrics.h"
#include "attn/train/objective.h"
#include "attn/train/run_record.h"
#include "attn/train/text_data.h"
#include "attn/train/trainer.h"
#include "commands.h"

namespace attn::cli {

namespace {

struct EvalOptions {
  int64_t threads = 0;  // 0: the runtime default
  std::string model_dir;
  std::string task;
  int64_t length = 0;       // 0: the run's (or the default 8)
  int64_t min_length = -1;  // -1: the run's
  int64_t n_symbols = 0;    // 0: the run's (or the default 10)
  int64_t count = 0;        // 0: the run's validation size (default 1000)
  int64_t seed = -1;        // -1: the run's data seed (default 1706)
  std::string data;
  std::string text;         // single-stack models: held-out text lines
  double mask_prob = 0;     // encoder-only: 0 = the run's (else 0.15)
  bool ids = false;
  int64_t batch_size = 64;
  run::SearchSettings search;
  KvCacheFlags kv;  // the search's KV cache (encoder-decoder models: the accuracy and corpus metrics)
  int64_t max_len = 0;
  bool json = false;
  // Corpus metrics: of the model's outputs, or of --hyp against --ref without a model.
  std::string metric;
  std::string hyp;
  std::vector<std::string> refs;
  std::string bleu_tokenize = "13a";
  std::string bleu_smooth = "exp";
};

// The metrics of --metric: a comma-separated subset of bleu, chrf, chrf++.
struct MetricChoice {
  bool bleu = false, chrf = false, chrf_pp = false;
  bool any() const { return bleu || chrf || chrf_pp; }
};

MetricChoice parse_metrics(const std::string& list) {
  MetricChoice m;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string name = list.substr(at, comma - at);
    if (name == "bleu")
      m.bleu = true;
    else if (name == "chrf")
      m.chrf = true;
    else if (name == "chrf++")
      m.chrf_pp = true;
    else
      fail("eval", "unknown metric '", name, "' in --metric '", list,
           "' (expected a comma-separated list of bleu, chrf, chrf++)");
    at = comma + 1;
  }
  return m;
}

// Corpus scores of hypotheses against reference streams (refs[k][i]: the k-th reference of line i).
struct CorpusScores {
  std::optional<train::BleuScore> bleu;
  std::optional<train::ChrfScore> chrf, chrf_pp;
};

CorpusScores score_corpus(const MetricChoice& m, const EvalOptions& o, const std::vector<std::string>& hyps,
                          const std::vector<std::vector<std::string>>& refs) {
  CorpusScores s;
  if (m.bleu) {
    train::BleuOptions b;
    b.tokenize = train::parse_bleu_tokenize(o.bleu_tokenize);
    b.smooth = train::parse_bleu_smooth(o.bleu_smooth);
    s.bleu = train::corpus_bleu(hyps, refs, b);
  }
  if (m.chrf) s.chrf = train::corpus_chrf(hyps, refs);
  if (m.chrf_pp) {
    train::ChrfOptions c;
    c.word_order = 2;
    s.chrf_pp = train::corpus_chrf(hyps, refs, c);
  }
  return s;
}

void add_json(nlohmann::ordered_json& j, const CorpusScores& s) {
  if (s.bleu) {
    nlohmann::ordered_json b;
    b["score"] = s.bleu->score;
    b["precisions"] = s.bleu->precisions;
    b["bp"] = s.bleu->bp;
    b["ratio"] = s.bleu->ratio();
    b["hyp_len"] = s.bleu->stats.hyp_len;
    b["ref_len"] = s.bleu->stats.ref_len;
    b["counts"] = s.bleu->stats.correct;
    b["totals"] = s.bleu->stats.total;
    b["signature"] = s.bleu->signature();
    j["bleu"] = b;
  }
  for (const auto* c : {&s.chrf, &s.chrf_pp}) {
    if (!*c) continue;
    nlohmann::ordered_json f;
    f["score"] = (*c)->score;
    f["name"] = (*c)->name();
    f["signature"] = (*c)->signature();
    j[c == &s.chrf ? "chrf" : "chrf++"] = f;
  }
}

// sacreBLEU's lines: "BLEU = 37.99 83.3/60.0/25.0/16.7 (BP = ...)  nrefs:1|case:mixed|...".
void print_scores(const CorpusScores& s, const char* indent) {
  if (s.bleu) std::printf("%s%s  %s\n", indent, s.bleu->format().c_str(), s.bleu->signature().c_str());
  for (const auto* c : {&s.chrf, &s.chrf_pp})
    if (*c) std::printf("%s%s  %s\n", indent, (*c)->format().c_str(), (*c)->signature().c_str());
}

// The lines of a text file (io::LineReader: no "\r", no byte-order mark); invalid UTF-8 is an error
// naming the file and line.
std::vector<std::string> read_lines(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  ATTN_CHECK(in, "eval", "cannot read ", flag, " file '", path, "'");
  std::vector<std::string> out;
  io::LineReader reader(in);
  std::string line;
  while (reader.next(line)) {
    const int64_t bad = io::utf8_error_offset(line);
    ATTN_CHECK(bad < 0, "eval", flag, " '", path, "' line ", reader.line_number(), ": invalid UTF-8 at byte ", bad);
    out.push_back(line);
  }
  return out;
}

// attn eval --hyp FILE --ref FILE...: no model, only the corpus metrics.
int run_score_files(const EvalOptions& o) {
  ATTN_CHECK(!o.refs.empty(), "eval", "--hyp needs at least one --ref file");
  const MetricChoice m = parse_metrics(o.metric.empty() ? std::string("bleu,chrf") : o.metric);
  const std::vector<std::string> hyps = read_lines(o.hyp, "--hyp");
  ATTN_CHECK(!hyps.empty(), "eval", "--hyp file '", o.hyp, "' is empty");
  std::vector<std::vector<std::string>> refs;
  for (const std::string& path : o.refs) {
    refs.push_back(read_lines(path, "--ref"));
    ATTN_CHECK(refs.back().size() == hyps.size(), "eval", "--hyp '", o.hyp, "' has ", hyps.size(), " lines but --ref '",
               path, "' has ", refs.back().size());
  }
  for (size_t i = 0; i < hyps.size(); ++i) {
    bool any = false;
    for (const auto& r : refs) any = any || !r[i].empty();
    ATTN_CHECK(any, "eval", "--ref '", o.refs.front(), "' line ", i + 1,
               " is empty: every line needs a reference (an empty hypothesis is fine)");
  }
  const CorpusScores s = score_corpus(m, o, hyps, refs);
  if (o.json) {
    nlohmann::ordered_json j;
    j["hyp"] = o.hyp;
    j["refs"] = o.refs;
    j["segments"] = hyps.size();
    add_json(j, s);
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  print_scores(s, "");
  return 0;
}

// The task's symbols must have the ids the model was trained with.
void check_task_vocab(const run::ModelFolder& f, const train::TaskConfig& c) {
  const int64_t top = io::Vocab::kNumSpecial + c.n_symbols;
  ATTN_CHECK(top <= std::min(f.src_vocab_size, f.tgt_vocab_size), "eval", "the task's ", c.n_symbols, " symbols need ",
             top, " token ids but the model's vocabulary has ", std::min(f.src_vocab_size, f.tgt_vocab_size));
  if (!f.vocab) return;
  const io::Vocab tv = train::task_vocab(c);
  for (int64_t id = 0; id < top; ++id)
    ATTN_CHECK(id < f.vocab->size() && f.vocab->token(id) == tv.token(id), "eval", "the task's symbol '", tv.token(id),
               "' (id ", id, ") is not the model's token of that id: this model was not trained on the ",
               train::task_kind_name(c.kind), " task with ", c.n_symbols, " symbols");
}

// source<TAB>target pairs of `path`; empty lines are skipped, every other problem is an error
// naming the file and line.
// The raw target field of each pair is appended to *ref_texts when given.
// Tokens the vocabulary lacks read as <unk>, counted per side.
struct UnknownCounts {
  int64_t source = 0, target = 0;
};
std::vector<io::Example> read_pairs(const run::ModelFolder& f, const std::string& path, bool ids,
                                    std::vector<std::string>* ref_texts = nullptr,
                                    UnknownCounts* unknown = nullptr) {
  std::ifstream in(path);
  ATTN_CHECK(in, "eval", "cannot read --data file '", path, "'");
  run::TokenCodec src_codec;
  src_codec.vocab = ids ? nullptr : &*f.vocab;
  src_codec.vocab_size = f.src_vocab_size;
  src_codec.pad = f.pad;
  src_codec.command = "eval";
  src_codec.source = "'" + path + "'";
  run::TokenCodec tgt_codec = src_codec;
  tgt_codec.vocab_size = f.tgt_vocab_size;
  if (unknown) {
    src_codec.unknown = &unknown->source;
    tgt_codec.unknown = &unknown->target;
  }
  std::vector<io::Example> out;
  io::LineReader reader(in);
  std::string line;
  while (reader.next(line)) {
    if (line.empty()) continue;
    const int64_t n = reader.line_number();
    const io::TsvFields fields = io::split_tsv_line(line, n, "eval", src_codec.source);
    io::Example ex;
    ex.src = src_codec.read(std::string(fields.source), n, "source");
    ex.tgt = tgt_codec.read(std::string(fields.target), n, "target");
    if (ref_texts) ref_texts->emplace_back(fields.target);
    out.push_back(std::move(ex));
  }
  ATTN_CHECK(!out.empty(), "eval", "--data file '", path, "' holds no source<TAB>target pairs");
  return out;
}

// Detokenized outputs (as `attn translate` prints them, same search settings) of the sources.
std::vector<std::string> translate_all(const run::ModelFolder& f, const std::vector<io::Example>& examples,
                                       int64_t batch_size, const run::SearchSettings& search, bool ids) {
  run::TokenCodec codec;
  codec.vocab = ids ? nullptr : &*f.vocab;
  codec.vocab_size = f.tgt_vocab_size;
  codec.pad = f.pad;
  codec.command = "eval";
  std::vector<std::string> out;
  for (size_t start = 0; start < examples.size(); start += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(examples.size(), start + static_cast<size_t>(batch_size));
    std::vector<std::vector<int64_t>> srcs;
    for (size_t i = start; i < end; ++i) srcs.push_back(examples[i].src);
    for (const auto& found : run::search_batch(f, srcs, search)) out.push_back(codec.write(found.front().tokens));
  }
  return out;
}

// Decoder-only: held-out cross-entropy and perplexity per token (EOS included, no label
// smoothing, as val_ppl) and per character (the same total over the text's characters, each
// line's EOS counting as its line break). Encoder-only: masked-token accuracy and perplexity at
// BERT-masked positions drawn with a seed (train::validate_masked_lm). Tokens the vocabulary
// lacks read as <unk> and are counted.
int run_eval_single_stack(const EvalOptions& o, models::Arch arch) {
  const char* kCmd = "eval";
  ATTN_CHECK(o.data.empty() && o.task.empty(), kCmd, "the model in '", o.model_dir, "' is ", models::arch_name(arch),
             ": run::evaluate it on a text file (--text FILE), not --data or --task (its outputs: ",
             arch == models::Arch::DecoderOnly ? "attn generate" : "attn fill-mask", ")");
  ATTN_CHECK(!o.ids && o.metric.empty(), kCmd, "--ids and --metric go with encoder-decoder models");
  ATTN_CHECK(o.batch_size >= 1, kCmd, "--batch-size must be >= 1, got ", o.batch_size);
  const run::ModelFolder f = run::open_model_folder(o.model_dir, kCmd, true, arch);
  const io::Vocab& vocab = *f.vocab;
  const std::optional<train::TrainConfig> run = train::run_train_config(f.train_config);
  std::string path = o.text;
  if (path.empty() && run && !run->valid_text_path.empty()) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(run->valid_text_path, ec)) path = run->valid_text_path;
  }
  ATTN_CHECK(!path.empty(), kCmd, "nothing to run::evaluate on: give --text FILE ('", o.model_dir,
             "' records no validation text that still exists)");
  const train::TextFile file = train::read_text(path, vocab.tokenization());
  ATTN_CHECK(!file.lines.empty(), kCmd, "'", path, "' holds no text (every line is empty or blank)");
  int64_t unknown = 0;
  std::vector<io::Example> examples;
  for (auto& ids : train::encode_text(file, vocab, true, &unknown)) examples.push_back(train::text_example(arch, ids));
  // Characters of the text: SentencePiece and character lines are one token; word lines are
  // joined back with single spaces.
  int64_t chars = 0;
  for (const auto& tokens : file.lines) {
    for (const std::string& t : tokens) chars += static_cast<int64_t>(io::utf8_chars(t).size());
    if (vocab.tokenization() == io::Tokenization::Whitespace && !tokens.empty())
      chars += static_cast<int64_t>(tokens.size()) - 1;
  }
  train::ValidationResult r;
  uint64_t seed = 0;
  double prob = 0;
  if (arch == models::Arch::DecoderOnly) {
    auto* model = dynamic_cast<models::DecoderOnlyModel*>(f.base.get());
    ATTN_CHECK(model != nullptr, kCmd, "the model in '", o.model_dir, "' is not decoder_only");
    r = train::validate_language_model(*model, examples, o.batch_size, 0.0);
  } else {
    auto* model = dynamic_cast<models::EncoderOnlyModel*>(f.base.get());
    ATTN_CHECK(model != nullptr, kCmd, "the model in '", o.model_dir, "' is not encoder_only");
    ATTN_CHECK(vocab.has_mask(), kCmd, "the vocabulary of '", o.model_dir, "' has no ", io::Vocab::kMaskToken);
    train::MaskingOptions masking;
    masking.prob = o.mask_prob > 0 ? o.mask_prob : run ? run->mask_prob : masking.prob;
    masking.mask_id = vocab.mask_id();
    masking.first_symbol = vocab.num_special();
    masking.vocab_size = std::min(vocab.size(), f.src_vocab_size);
    train::validate(masking);
    seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : run ? run->seed : 0;
    prob = masking.prob;
    r = train::validate_masked_lm(*model, examples, o.batch_size, 0.0, masking, seed);
  }
  const int64_t lines = static_cast<int64_t>(examples.size());
  const double total = r.nll * static_cast<double>(r.tokens);
  const double per_char = arch == models::Arch::DecoderOnly ? total / static_cast<double>(chars + lines) : NAN;
  if (o.json) {
    nlohmann::ordered_json j;
    j["data"] = path;
    j["arch"] = models::arch_name(arch);
    j["lines"] = lines;
    j["tokens"] = r.tokens;
    j["unknown_tokens"] = unknown;
    j["loss"] = r.nll;
    j["perplexity"] = std::exp(r.nll);
    j["token_acc"] = r.token_acc;
    if (arch == models::Arch::DecoderOnly) {
      j["characters"] = chars + lines;
      j["loss_per_char"] = per_char;
      j["perplexity_per_char"] = std::exp(per_char);
      j["bits_per_char"] = per_char / std::log(2.0);
    } else {
      j["mask_prob"] = prob;
      j["seed"] = seed;
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("data:             %s (%lld lines)\n", path.c_str(), static_cast<long long>(lines));
  if (arch == models::Arch::DecoderOnly) {
    std::printf("tokens:           %lld predicted (EOS included)\n", static_cast<long long>(r.tokens));
    std::printf("loss:             %.6f (NLL per token)\n", r.nll);
    std::printf("perplexity:       %.6f (per token)\n", std::exp(r.nll));
    std::printf("loss_per_char:    %.6f (the same total over %lld characters, line breaks included; %.4f bits)\n",
                per_char, static_cast<long long>(chars + lines), per_char / std::log(2.0));
    std::printf("perplexity_char:  %.6f\n", std::exp(per_char));
    std::printf("token_acc:        %.6f (next-token argmax)\n", r.token_acc);
  } else {
    std::printf("masked:           %lld tokens (mask_prob %g, seed %llu)\n", static_cast<long long>(r.tokens), prob,
                static_cast<unsigned long long>(seed));
    std::printf("loss:             %.6f (NLL per masked token)\n", r.nll);
    std::printf("perplexity:       %.6f\n", std::exp(r.nll));
    std::printf("masked_token_acc: %.6f\n", r.token_acc);
  }
  if (unknown > 0)
    std::printf("unknown:          %lld tokens not in the vocabulary (read as <unk>)\n", static_cast<long long>(unknown));
  return 0;
}

int run_eval(const EvalOptions& o) {
  ATTN_CHECK(o.threads >= 0, "eval", "--threads must be >= 0, got ", o.threads);
  if (o.threads > 0) attn::set_num_threads(o.threads);
  if (!o.hyp.empty()) return run_score_files(o);
  ATTN_CHECK(!o.model_dir.empty(), "eval",
             "give --model DIR to run::evaluate a model, or --hyp FILE --ref FILE to score outputs");
  ATTN_CHECK(o.refs.empty(), "eval", "--ref goes with --hyp (a model is scored against its --data or task targets)");
  const MetricChoice metrics = o.metric.empty() ? MetricChoice{} : parse_metrics(o.metric);
  ATTN_CHECK(o.max_len >= 0, "eval", "--max-len must be >= 1 (0: source length + 50), got ", o.max_len);
  run::SearchSettings search = o.search;
  if (o.max_len > 0) search.max_len = o.max_len;
  run::validate(search);
  search.kv_cache = o.kv.resolve("eval");
  ATTN_CHECK(o.count >= 0, "eval", "--count must be >= 1 (0: the run's validation size), got ", o.count);
  {
    std::error_code ec;
    if (std::filesystem::is_regular_file(std::filesystem::path(o.model_dir) / io::kConfigFileName, ec)) {
      const models::Arch arch = models::load_model_config(o.model_dir).arch;
      // Perplexity and masked-token accuracy are one forward pass each: no KV cache to lay out.
      ATTN_CHECK(arch == models::Arch::EncoderDecoder || !o.kv.given(), "eval",
                 "--kv-cache, --kv-block, --kv-pool-mb and --kv-dtype lay out the KV cache of decoding; the ",
                 models::arch_name(arch), " model in '", o.model_dir, "' is evaluated without decoding");
      if (arch != models::Arch::EncoderDecoder) return run_eval_single_stack(o, arch);
    }
  }
  ATTN_CHECK(o.text.empty(), "eval", "--text evaluates decoder-only and encoder-only models; give an encoder-decoder "
             "model --data FILE (source<TAB>target)");
  const bool text_data = !o.data.empty() && !o.ids;
  const run::ModelFolder f = run::open_model_folder(o.model_dir, "eval", text_data);
  UnknownCounts unknown;

  std::vector<io::Example> examples;
  std::vector<std::string> ref_texts;  // the references of --metric: raw target text of --data
  std::string what;
  const std::optional<train::RunTask> run_task = train::task_from_train_config(f.train_config);
  if (!o.data.empty()) {
    examples = read_pairs(f, o.data, o.ids, &ref_texts, &unknown);
    what = o.data;
  } else if (!o.task.empty() || run_task) {
    train::TaskConfig c = run_task ? run_task->task : train::TaskConfig{};
    if (!o.task.empty()) c.kind = train::parse_task_kind(o.task);
    if (o.length > 0) c.length = o.length;
    if (o.min_length >= 0) c.min_length = o.min_length;
    if (o.n_symbols > 0) c.n_symbols = o.n_symbols;
    train::validate(c);
    check_task_vocab(f, c);
    const uint64_t seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed)
                          : run_task  ? run_task->data_seed
                                      : train::kTaskSeed;
    const int64_t count = o.count > 0                            ? o.count
                          : run_task && run_task->valid_size > 0 ? run_task->valid_size
                                                                 : train::kTaskValidSize;
    examples = train::make_task_dataset(c, 0, count, seed).valid;
    what = str_cat(train::task_kind_name(c.kind), " task, length ", c.length,
                   c.min_length > 0 ? str_cat(" (from ", c.min_length, ")") : std::string(), ", ", c.n_symbols,
                   " symbols, validation seed ", seed);
  } else {
    const std::string valid = train::valid_path_from_train_config(f.train_config, f.dir);
    ATTN_CHECK(!valid.empty(), "eval", "nothing to run::evaluate on: give --task NAME or --data FILE ('", o.model_dir,
               "' records no task or validation file)");
    ATTN_CHECK(f.vocab || o.ids, "eval", "'", o.model_dir, "' has no vocab.json to tokenize '", valid, "'");
    examples = read_pairs(f, valid, o.ids, &ref_texts, &unknown);
    what = valid;
  }
  if (ref_texts.empty()) {  // a task: its targets as the vocabulary writes them
    run::TokenCodec codec;
    codec.vocab = f.vocab ? &*f.vocab : nullptr;
    codec.vocab_size = f.tgt_vocab_size;
    codec.pad = f.pad;
    codec.command = "eval";
    for (const io::Example& ex : examples) ref_texts.push_back(codec.write(ex.tgt));
  }

  const run::EvalMetrics m = run::evaluate(f, examples, o.batch_size, search);
  CorpusScores scores;
  if (metrics.any()) {
    const bool ids = o.ids || !f.vocab;
    scores = score_corpus(metrics, o, translate_all(f, examples, o.batch_size, search, ids), {ref_texts});
  }
  const std::string decoding =
      search.beam == 1 ? std::string("greedy") : str_cat("beam ", search.beam, ", alpha ", search.alpha);
  if (o.json) {
    nlohmann::ordered_json j;
    j["data"] = what;
    j["decoding"] = decoding;
    j["examples"] = m.examples;
    j["tokens"] = m.tokens;
    j["loss"] = m.loss;
    j["perplexity"] = m.perplexity;
    j["token_acc"] = m.token_acc;
    j["exact_acc"] = m.exact_acc;
    j["forced_token_acc"] = m.forced_token_acc;
    j["unknown_source_tokens"] = unknown.source;
    j["unknown_target_tokens"] = unknown.target;
    add_json(j, scores);
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("data:             %s\n", what.c_str());
  std::printf("examples:         %lld (%lld target tokens, EOS included)\n", static_cast<long long>(m.examples),
              static_cast<long long>(m.tokens));
  std::printf("loss:             %.6f (teacher-forced NLL per token)\n", m.loss);
  std::printf("perplexity:       %.6f\n", m.perplexity);
  std::printf("token_acc:        %.6f (%s)\n", m.token_acc, decoding.c_str());
  std::printf("exact_acc:        %.6f (%s)\n", m.exact_acc, decoding.c_str());
  std::printf("forced_token_acc: %.6f (teacher-forced argmax)\n", m.forced_token_acc);
  if (unknown.source + unknown.target > 0)
    std::printf("unknown:          %lld source, %lld target tokens not in the vocabulary (read as <unk>)\n",
                static_cast<long long>(unknown.source), static_cast<long long>(unknown.target));
  print_scores(scores, "");
  return 0;
}

}  // namespace

void register_eval(CLI::App& app, Action* action) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = app.add_subcommand("eval", "loss, token accuracy and exact match of a model on a task or a TSV file");
  CLI::Option* model =
      cmd->add_option("--model", o->model_dir, "model folder (config.json, model.safetensors, vocab.json)");
  CLI::Option* task = cmd->add_option("--task", o->task, "synthetic task: reverse, copy or sort (default: the run's)");
  CLI::Option* data = cmd->add_option("--data", o->data, "source<TAB>target file to run::evaluate on");
  task->excludes(data);
  CLI::Option* text = cmd->add_option("--text", o->text,
                                      "decoder-only / encoder-only models: a text file, one sequence per non-blank line "
                                      "(default: the run's validation text)");
  text->excludes(data)->excludes(task);
  cmd->add_option("--length", o->length, "task: symbols per sequence (default: the run's, else 8)");
  cmd->add_option("--min-length", o->min_length, "task: shortest length when lengths vary (default: the run's)");
  cmd->add_option("--n-symbols", o->n_symbols, "task: symbols in the alphabet (default: the run's, else 10)");
  cmd->add_option("--count", o->count,
                  "task: examples of the validation stream (default: the run's validation size, else 1000)");
  cmd->add_option("--seed", o->seed,
                  "task: data seed (default: the run's, else 1706 - the training run's validation set); "
                  "encoder-only: the masking seed (default: the run's seed)");
  cmd->add_option("--mask-prob", o->mask_prob, "encoder-only: share of each line's tokens masked (default: the run's)");
  cmd->add_flag("--ids", o->ids, "--data holds space-separated token ids instead of text");
  cmd->add_option("--batch-size", o->batch_size, "examples per batch")->capture_default_str();
  cmd->add_option("--beam", o->search.beam, "beam size for the accuracy; 1 = greedy")->capture_default_str();
  cmd->add_option("--alpha", o->search.alpha, "length penalty exponent of beam search")->capture_default_str();
  cmd->add_option("--max-len", o->max_len, "at most this many generated tokens; 0 = source length + 50")
      ->capture_default_str();
  o->kv.add(cmd);
  cmd->add_flag("--json", o->json, "print the metrics as JSON");
  cmd->add_option("--metric", o->metric,
                  "corpus metrics of the detokenized outputs: comma-separated bleu, chrf, chrf++ "
                  "(sacreBLEU's defaults; with --hyp: bleu,chrf)");
  CLI::Option* hyp = cmd->add_option("--hyp", o->hyp, "score this file of outputs (one per line) instead of a model");
  cmd->add_option("--ref", o->refs, "with --hyp: reference file, line by line; repeat for more references")
      ->expected(1, -1);
  cmd->add_option("--tokenize", o->bleu_tokenize, "BLEU tokenizer: 13a, or none for pre-tokenized text")
      ->capture_default_str();
  cmd->add_option("--smooth", o->bleu_smooth, "BLEU smoothing: exp, none, floor or add-k")->capture_default_str();
  hyp->excludes(model)->excludes(task)->excludes(data);
  cmd->add_option("--threads", o->threads, "OpenMP/BLAS threads; 0 = the runtime's default");
  cmd->callback([o, action] { *action = [o] { return run_eval(*o); }; });
}

}  // namespace attn::cli
