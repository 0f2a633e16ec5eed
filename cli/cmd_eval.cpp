// attn eval --model DIR (--task NAME | --data FILE): loss, accuracy and exact match of a model
// on a synthetic task's validation set or on a source<TAB>target file. Loss is the teacher-
// forced mean negative log-likelihood per target token (EOS included, no label smoothing);
// token and exact-sequence accuracy are measured on greedy outputs (or --beam), as the
// training run's val_token_acc / val_exact_acc. Without --task or --data the run's own
// validation data (train_config.json) is used. No BLEU: the tasks here are exact.
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/train/trainer.h"
#include "commands.h"
#include "infer_io.h"

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
  bool ids = false;
  int64_t batch_size = 64;
  SearchSettings search;
  int64_t max_len = 0;
  bool json = false;
};

// The task's symbols must have the ids the model was trained with.
void check_task_vocab(const ModelFolder& f, const train::TaskConfig& c) {
  const int64_t top = train::Vocab::kNumSpecial + c.n_symbols;
  ATTN_CHECK(top <= std::min(f.src_vocab_size, f.tgt_vocab_size), "eval", "the task's ", c.n_symbols, " symbols need ",
             top, " token ids but the model's vocabulary has ", std::min(f.src_vocab_size, f.tgt_vocab_size));
  if (!f.vocab) return;
  const train::Vocab tv = train::task_vocab(c);
  for (int64_t id = 0; id < top; ++id)
    ATTN_CHECK(id < f.vocab->size() && f.vocab->token(id) == tv.token(id), "eval", "the task's symbol '", tv.token(id),
               "' (id ", id, ") is not the model's token of that id: this model was not trained on the ",
               train::task_kind_name(c.kind), " task with ", c.n_symbols, " symbols");
}

// source<TAB>target pairs of `path`; empty lines are skipped, every other problem is an error
// naming the file and line.
std::vector<train::Example> read_pairs(const ModelFolder& f, const std::string& path, bool ids) {
  std::ifstream in(path);
  ATTN_CHECK(in, "eval", "cannot read --data file '", path, "'");
  TokenCodec src_codec;
  src_codec.vocab = ids ? nullptr : &*f.vocab;
  src_codec.vocab_size = f.src_vocab_size;
  src_codec.pad = f.pad;
  src_codec.command = "eval";
  src_codec.source = "'" + path + "'";
  TokenCodec tgt_codec = src_codec;
  tgt_codec.vocab_size = f.tgt_vocab_size;
  std::vector<train::Example> out;
  LineReader reader(in);
  std::string line;
  while (reader.next(line)) {
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const int64_t n = reader.line_number();
    const size_t tab = line.find('\t');
    ATTN_CHECK(tab != std::string::npos && line.find('\t', tab + 1) == std::string::npos, "eval", src_codec.source,
               " line ", n, ": expected exactly one tab (source<TAB>target)");
    train::Example ex;
    ex.src = src_codec.read(line.substr(0, tab), n, "source");
    ex.tgt = tgt_codec.read(line.substr(tab + 1), n, "target");
    out.push_back(std::move(ex));
  }
  ATTN_CHECK(!out.empty(), "eval", "--data file '", path, "' holds no source<TAB>target pairs");
  return out;
}

int run_eval(const EvalOptions& o) {
  ATTN_CHECK(o.threads >= 0, "eval", "--threads must be >= 0, got ", o.threads);
  if (o.threads > 0) train::set_num_threads(o.threads);
  ATTN_CHECK(o.max_len >= 0, "eval", "--max-len must be >= 1 (0: source length + 50), got ", o.max_len);
  SearchSettings search = o.search;
  if (o.max_len > 0) search.max_len = o.max_len;
  validate(search);
  ATTN_CHECK(o.count >= 0, "eval", "--count must be >= 1 (0: the run's validation size), got ", o.count);
  const bool text_data = !o.data.empty() && !o.ids;
  const ModelFolder f = open_model_folder(o.model_dir, "eval", text_data);

  std::vector<train::Example> examples;
  std::string what;
  const std::optional<RunTask> run_task = task_from_train_config(f.train_config);
  if (!o.data.empty()) {
    examples = read_pairs(f, o.data, o.ids);
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
    const std::string valid = valid_path_from_train_config(f.train_config, f.dir);
    ATTN_CHECK(!valid.empty(), "eval", "nothing to evaluate on: give --task NAME or --data FILE ('", o.model_dir,
               "' records no task or validation file)");
    ATTN_CHECK(f.vocab || o.ids, "eval", "'", o.model_dir, "' has no vocab.json to tokenize '", valid, "'");
    examples = read_pairs(f, valid, o.ids);
    what = valid;
  }

  const EvalMetrics m = evaluate(f, examples, o.batch_size, search);
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
  return 0;
}

}  // namespace

void register_eval(CLI::App& app, Action* action) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = app.add_subcommand("eval", "loss, token accuracy and exact match of a model on a task or a TSV file");
  cmd->add_option("--model", o->model_dir, "model folder (config.json, model.safetensors, vocab.json)")->required();
  CLI::Option* task = cmd->add_option("--task", o->task, "synthetic task: reverse, copy or sort (default: the run's)");
  CLI::Option* data = cmd->add_option("--data", o->data, "source<TAB>target file to evaluate on");
  task->excludes(data);
  cmd->add_option("--length", o->length, "task: symbols per sequence (default: the run's, else 8)");
  cmd->add_option("--min-length", o->min_length, "task: shortest length when lengths vary (default: the run's)");
  cmd->add_option("--n-symbols", o->n_symbols, "task: symbols in the alphabet (default: the run's, else 10)");
  cmd->add_option("--count", o->count,
                  "task: examples of the validation stream (default: the run's validation size, else 1000)");
  cmd->add_option("--seed", o->seed,
                  "task: data seed (default: the run's, else 1706 - the training run's validation set)");
  cmd->add_flag("--ids", o->ids, "--data holds space-separated token ids instead of text");
  cmd->add_option("--batch-size", o->batch_size, "examples per batch")->capture_default_str();
  cmd->add_option("--beam", o->search.beam, "beam size for the accuracy; 1 = greedy")->capture_default_str();
  cmd->add_option("--alpha", o->search.alpha, "length penalty exponent of beam search")->capture_default_str();
  cmd->add_option("--max-len", o->max_len, "at most this many generated tokens; 0 = source length + 50")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print the metrics as JSON");
  cmd->add_option("--threads", o->threads, "OpenMP/BLAS threads; 0 = the runtime's default");
  cmd->callback([o, action] { *action = [o] { return run_eval(*o); }; });
}

}  // namespace attn::cli
