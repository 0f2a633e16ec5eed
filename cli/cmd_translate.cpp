// attn translate --model DIR: one source per stdin line, its translation on stdout, in order.
// Greedy by default; --beam 4 --alpha 0.6 is the paper's beam search with the GNMT length
// penalty (§6.1). Lines are read and decoded in batches (--batch-size) and each batch's
// output is flushed before the next is read, so the command works in a pipe. --ids reads and
// writes token ids. A bad line stops the run after the lines before it have been translated.
// --draft DIR (a smaller model of the same vocabularies) or --prompt-lookup translate greedily
// and speculatively (decode/speculative.h): the same output; --draft-stats prints the counts.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/decode/speculative.h"
#include "attn/io/lines.h"
#include "attn/ops/threads.h"
#include "attn/run/model_folder.h"
#include "attn/run/token_codec.h"
#include "attn/run/translate.h"
#include "attn/train/trainer.h"
#include "commands.h"

namespace attn::cli {

namespace {

struct TranslateOptions {
  int64_t threads = 0;  // 0: the runtime default
  std::string model_dir;
  run::SearchSettings search;
  int64_t max_len = 0;  // 0: source length + 50
  int64_t batch_size = 32;
  bool ids = false;
  bool scores = false;
  std::string draft_dir;  // speculative decoding: a draft model folder
  bool prompt_lookup = false;
  int64_t draft_tokens = 4;
  bool draft_tokens_given = false;
  bool draft_stats = false;
  KvCacheFlags kv;
};

int run_translate(const TranslateOptions& o) {
  ATTN_CHECK(o.threads >= 0, "translate", "--threads must be >= 0, got ", o.threads);
  if (o.threads > 0) attn::set_num_threads(o.threads);
  ATTN_CHECK(o.max_len >= 0, "translate", "--max-len must be >= 1 (0: source length + 50), got ", o.max_len);
  run::SearchSettings search = o.search;
  if (o.max_len > 0) search.max_len = o.max_len;
  search.kv_cache = o.kv.resolve("translate");
  ATTN_CHECK(!o.draft_tokens_given || !o.draft_dir.empty() || o.prompt_lookup, "translate",
             "--draft-tokens needs --draft DIR or --prompt-lookup");
  ATTN_CHECK(!o.draft_stats || !o.draft_dir.empty() || o.prompt_lookup, "translate",
             "--draft-stats needs --draft DIR or --prompt-lookup");
  ATTN_CHECK(o.draft_dir.empty() || !o.prompt_lookup, "translate",
             "--draft and --prompt-lookup exclude each other (prompt lookup drafts without a model)");
  search.speculative.lookup = o.prompt_lookup;
  search.speculative.draft_tokens = o.draft_tokens;
  decode::SpeculativeStats stats;
  search.speculative.stats = &stats;
  std::optional<run::ModelFolder> draft;
  if (!o.draft_dir.empty()) search.speculative.draft = &draft.emplace();  // opened below, once checked
  run::validate(search);
  ATTN_CHECK(o.batch_size >= 1, "translate", "--batch-size must be >= 1, got ", o.batch_size);
  const run::ModelFolder folder = run::open_model_folder(o.model_dir, "translate", !o.ids);
  if (draft) {
    *draft = run::open_model_folder(o.draft_dir, "translate", false);
    run::check_draft(folder, *draft, "translate");
  }

  run::TokenCodec codec;
  codec.vocab = o.ids ? nullptr : &*folder.vocab;
  codec.vocab_size = folder.src_vocab_size;
  codec.pad = folder.pad;
  codec.command = "translate";

  std::vector<std::vector<int64_t>> pending;
  std::vector<int64_t> pending_lines;
  const auto flush = [&] {
    if (pending.empty()) return;
    const auto found = run::search_batch(folder, pending, search);
    for (size_t i = 0; i < found.size(); ++i) {
      for (size_t k = 0; k < found[i].size(); ++k) {
        const decode::Hypothesis& h = found[i][k];
        const std::string text = codec.write(h.tokens);
        if (search.n_best > 1)
          std::printf("%lld\t%zu\t%.6f\t%s\n", static_cast<long long>(pending_lines[i]), k + 1, h.score, text.c_str());
        else if (o.scores)
          std::printf("%.6f\t%s\n", h.score, text.c_str());
        else
          std::printf("%s\n", text.c_str());
      }
    }
    std::fflush(stdout);
    pending.clear();
    pending_lines.clear();
  };

  // At a terminal every line is answered at once; from a pipe or file, lines are batched.
  const int64_t batch = ::isatty(STDIN_FILENO) ? 1 : o.batch_size;
  io::LineReader reader(std::cin);
  std::string line;
  // A source longer than learned positions cannot be encoded: refused naming its line, not
  // from inside the batch's encoder (which knows no line numbers).
  const models::ModelConfig& config = folder.model->config();
  const bool learned = config.positional == nn::PositionalKind::Learned;
  while (reader.next(line)) {
    try {
      pending.push_back(codec.read(line, reader.line_number(), "source"));
      const auto n = static_cast<int64_t>(pending.back().size());
      if (learned && n > config.max_len) {
        pending.pop_back();
        fail("translate", "line ", reader.line_number(), ": the source has ", n, " tokens, more than the ",
             config.max_len, " learned positions of the model (max_len)");
      }
    } catch (const Error&) {
      flush();  // the lines before the bad one still get their translations
      throw;
    }
    pending_lines.push_back(reader.line_number());
    if (static_cast<int64_t>(pending.size()) >= batch) flush();
  }
  flush();
  if (o.draft_stats) std::fprintf(stderr, "%s\n", run::stats_line(stats).c_str());
  return 0;
}

}  // namespace

void register_translate(CLI::App& app, Action* action) {
  auto o = std::make_shared<TranslateOptions>();
  CLI::App* cmd = app.add_subcommand("translate", "translate stdin line by line with a trained encoder-decoder model");
  cmd->add_option("--model", o->model_dir, "model folder (config.json, model.safetensors, vocab.json)")->required();
  cmd->add_option("--beam", o->search.beam, "beam size; 1 = greedy search (the paper: 4)")->capture_default_str();
  cmd->add_option("--alpha", o->search.alpha,
                  "length penalty exponent of beam search, ((5+len)/6)^alpha (the paper: 0.6)")
      ->capture_default_str();
  cmd->add_option("--n-best", o->search.n_best,
                  "hypotheses per line, at most --beam; above 1 each is printed as LINE<TAB>RANK<TAB>SCORE<TAB>TEXT")
      ->capture_default_str();
  cmd->add_option("--max-len", o->max_len, "at most this many generated tokens (EOS included); 0 = source length + 50")
      ->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size, "lines decoded together (1 when stdin is a terminal)")
      ->capture_default_str();
  cmd->add_flag("--ids", o->ids, "read and write space-separated token ids instead of text");
  cmd->add_flag("--scores", o->scores, "prefix each translation with its score and a tab");
  cmd->add_option("--draft", o->draft_dir,
                  "speculative decoding: a smaller encoder-decoder model folder of the same vocabularies drafts "
                  "tokens that the model verifies in one pass (greedy only; the same output, faster)");
  cmd->add_flag("--prompt-lookup", o->prompt_lookup,
                "speculative decoding without a draft model: draft the tokens that followed the last n-gram's "
                "most recent earlier occurrence in the source and output (greedy only)");
  cmd->add_option_function<int64_t>(
      "--draft-tokens", [p = o.get()](const int64_t& v) {
        p->draft_tokens = v;
        p->draft_tokens_given = true;
      },
      "speculative decoding: tokens drafted per verification pass")
      ->default_str("4");
  cmd->add_flag("--draft-stats", o->draft_stats,
                "speculative decoding: print draft and acceptance counts on stderr at the end");
  o->kv.add(cmd);
  cmd->add_option("--threads", o->threads, "OpenMP/BLAS threads; 0 = the runtime's default");
  cmd->callback([o, action] { *action = [o] { return run_translate(*o); }; });
}

}  // namespace attn::cli
