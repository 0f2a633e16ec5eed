// attn generate --model DIR --prompt TEXT: continues prompts with a decoder-only (GPT-style)
// model, printing one continuation per prompt, in order. Prompts come from --prompt (repeatable),
// --input FILE or stdin, one per line, and are decoded in batches through the KV-cached
// decode::LmDecoder: greedy by default, --beam N for beam search, sampling with --temperature,
// --top-k, --top-p and --seed (or --sample). Contradictory choices are errors, never guesses.
// A Hugging Face GPT-2 folder (config.json, model.safetensors, vocab.json + merges.txt) works
// too: prompts go through its byte-level BPE and are read without a <bos> in front.
// --ids reads prompts as space-separated token ids and prints ids, as `attn translate --ids`
// does (ids in [0, vocabulary size), never <pad>; an empty line is an error); for a GPT-2
// folder they are ids of its BPE vocabulary.
// --draft DIR (a smaller model of the same vocabulary) or --prompt-lookup decode speculatively
// (decode/speculative.h): greedy output unchanged, sampling in the same distribution;
// --draft-tokens K, --draft-stats prints the acceptance counts on stderr.
// Not here: encoder-decoder models (attn translate), streaming token by token.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/decode/speculative.h"
#include "attn/io/bpe.h"
#include "attn/io/lines.h"
#include "attn/ops/threads.h"
#include "attn/run/generate.h"
#include "attn/run/model_folder.h"
#include "attn/run/token_codec.h"
#include "attn/train/trainer.h"
#include "commands.h"

namespace attn::cli {

namespace {

constexpr const char* kCmd = "generate";

struct GenerateOptions {
  std::string model_dir;
  std::vector<std::string> prompts;
  std::string input;  // a file of prompts, one per line
  run::GenerateSettings settings;
  // Which flags were given (CLI11 counts), to refuse contradictory choices.
  bool greedy = false, sample = false;
  bool beam_given = false, alpha_given = false, n_best_given = false;
  std::vector<std::string> sampling_flags;  // the sampling flags given, by name
  int64_t batch_size = 32;
  bool with_prompt = false;
  bool ids = false;  // prompts and output as space-separated token ids
  bool scores = false;
  int64_t threads = 0;
  // Speculative decoding: a draft model folder or prompt lookup, K, and the statistics line.
  std::string draft_dir;
  bool prompt_lookup = false;
  int64_t draft_tokens = 4;
  bool draft_tokens_given = false;
  bool draft_stats = false;
  KvCacheFlags kv;
};


// The search the flags ask for; contradictions are errors naming both sides.
run::GenerateSettings resolve_mode(const GenerateOptions& o) {
  run::GenerateSettings s = o.settings;
  const bool sampling = o.sample || !o.sampling_flags.empty();
  std::string sampling_names;
  for (const std::string& f : o.sampling_flags) sampling_names += (sampling_names.empty() ? "" : ", ") + f;
  if (o.sample) sampling_names = sampling_names.empty() ? "--sample" : "--sample, " + sampling_names;
  ATTN_CHECK(!(o.greedy && o.beam_given), kCmd, "--greedy and --beam exclude each other (greedy is beam search of 1)");
  ATTN_CHECK(!(o.greedy && sampling), kCmd, "--greedy picks the most probable token and cannot be combined with "
             "sampling (", sampling_names, ")");
  ATTN_CHECK(!(o.beam_given && sampling), kCmd, "--beam searches for the most probable continuation and cannot be "
             "combined with sampling (", sampling_names, ")");
  ATTN_CHECK(o.beam_given || !(o.alpha_given || o.n_best_given), kCmd, "--alpha and --n-best need --beam");
  if (o.beam_given) s.mode = run::GenerateSettings::Mode::Beam;
  else if (sampling) s.mode = run::GenerateSettings::Mode::Sample;
  else s.mode = run::GenerateSettings::Mode::Greedy;
  run::validate(s);
  return s;
}

int run_generate(const GenerateOptions& o) {
  ATTN_CHECK(o.threads >= 0, kCmd, "--threads must be >= 0, got ", o.threads);
  if (o.threads > 0) attn::set_num_threads(o.threads);
  ATTN_CHECK(o.batch_size >= 1, kCmd, "--batch-size must be >= 1, got ", o.batch_size);
  ATTN_CHECK(o.prompts.empty() || o.input.empty(), kCmd, "give prompts with --prompt or --input, not both");
  run::GenerateSettings settings = resolve_mode(o);
  settings.kv_cache = o.kv.resolve(kCmd);
  // A GPT-2 checkpoint brings its own tokenizer; anything else is one of our model folders.
  run::GenerationFolder opened = run::open_generation_folder(o.model_dir, kCmd, !o.ids, models::Arch::DecoderOnly);
  const run::ModelFolder& folder = opened.folder;
  const std::optional<io::BpeTokenizer>& bpe = opened.bpe;
  settings.prepend_bos = opened.prepend_bos;
  // Speculative decoding: the draft folder opens like the target's (a GPT-2 draft for a GPT-2 target).
  ATTN_CHECK(!o.draft_tokens_given || !o.draft_dir.empty() || o.prompt_lookup, kCmd,
             "--draft-tokens needs --draft DIR or --prompt-lookup");
  ATTN_CHECK(!o.draft_stats || !o.draft_dir.empty() || o.prompt_lookup, kCmd,
             "--draft-stats needs --draft DIR or --prompt-lookup");
  std::optional<run::GenerationFolder> draft;
  decode::SpeculativeStats stats;
  if (!o.draft_dir.empty()) {
    ATTN_CHECK(!o.prompt_lookup, kCmd, "--draft and --prompt-lookup exclude each other (prompt lookup drafts "
               "without a model)");
    draft = run::open_generation_folder(o.draft_dir, kCmd, false, models::Arch::DecoderOnly);
    settings.speculative.draft = &draft->folder;
  }
  settings.speculative.lookup = o.prompt_lookup;
  settings.speculative.draft_tokens = o.draft_tokens;
  settings.speculative.stats = &stats;
  run::validate(settings);

  run::TokenCodec codec;
  codec.vocab = bpe || o.ids ? nullptr : &*folder.vocab;
  codec.vocab_size = folder.tgt_vocab_size;
  codec.pad = folder.pad;
  codec.command = kCmd;
  // Text <-> ids through the model's own tokenizer.
  const auto encode = [&](const std::string& text, int64_t line_no) {
    if (!bpe || o.ids) return codec.read(text, line_no, "prompt");
    std::vector<int64_t> ids = bpe->encode(text);
    ATTN_CHECK(!ids.empty(), kCmd, codec.source, line_no > 0 ? str_cat(" line ", line_no) : std::string(),
               ": the prompt is empty");
    return ids;
  };
  const auto decode = [&](const std::vector<int64_t>& ids) {
    return bpe && !o.ids ? bpe->decode(ids) : codec.write(ids);
  };

  std::vector<std::vector<int64_t>> pending;
  std::vector<std::string> pending_text;
  int64_t done = 0;
  const auto flush = [&] {
    if (pending.empty()) return;
    const auto found = run::generate_batch(folder, pending, settings, done + 1);
    for (size_t i = 0; i < found.size(); ++i) {
      for (size_t k = 0; k < found[i].size(); ++k) {
        const decode::Hypothesis& h = found[i][k];
        std::string text = decode(h.tokens);
        if (o.with_prompt && o.ids) {
          // Ids mode: the prompt's ids (as read, without <bos>) and then the continuation's.
          std::vector<int64_t> all = pending[i];
          all.insert(all.end(), h.tokens.begin(), h.tokens.end());
          text = decode(all);
        } else if (o.with_prompt && !bpe && folder.vocab->sentencepiece()) {
          // Subwords detokenize together: the continuation's first piece may join the prompt's word.
          std::vector<int64_t> all = pending[i];
          all.insert(all.end(), h.tokens.begin(), h.tokens.end());
          text = decode(all);
        } else if (o.with_prompt) {
          const bool words = !bpe && folder.vocab->tokenization() == io::Tokenization::Whitespace;
          text = pending_text[i] + (words && !text.empty() ? " " : "") + text;
        }
        if (settings.mode == run::GenerateSettings::Mode::Beam && settings.n_best > 1)
          std::printf("%lld\t%zu\t%.6f\t%s\n", static_cast<long long>(done + static_cast<int64_t>(i) + 1), k + 1,
                      h.score, text.c_str());
        else if (o.scores)
          std::printf("%.6f\t%s\n", h.score, text.c_str());
        else
          std::printf("%s\n", text.c_str());
      }
    }
    std::fflush(stdout);
    done += static_cast<int64_t>(pending.size());
    pending.clear();
    pending_text.clear();
  };
  const auto add = [&](const std::string& text, int64_t line_no) {
    try {
      pending.push_back(encode(text, line_no));
    } catch (const Error&) {
      flush();  // the prompts before the bad one still get their continuations
      throw;
    }
    pending_text.push_back(text);
    if (static_cast<int64_t>(pending.size()) >= o.batch_size) flush();
  };

  if (!o.prompts.empty()) {
    for (size_t i = 0; i < o.prompts.size(); ++i) {
      codec.source = str_cat("--prompt ", i + 1);
      add(o.prompts[i], 0);
    }
  } else {
    std::ifstream file;
    if (!o.input.empty()) {
      file.open(o.input);
      ATTN_CHECK(file.good(), kCmd, "cannot read --input '", o.input, "'");
      codec.source = "'" + o.input + "'";
    }
    io::LineReader reader(o.input.empty() ? std::cin : file);
    std::string line;
    int64_t n = 0;
    while (reader.next(line)) {
      add(line, reader.line_number());
      ++n;
    }
    ATTN_CHECK(n > 0, kCmd, o.input.empty() ? std::string("stdin") : "--input '" + o.input + "'", " holds no prompt");
  }
  flush();
  if (o.draft_stats) std::fprintf(stderr, "%s\n", run::stats_line(stats).c_str());
  return 0;
}

}  // namespace

void register_generate(CLI::App& app, Action* action) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "continue prompts with a decoder-only (GPT-style) model: greedy, beam search or sampling");
  cmd->add_option("--model", o->model_dir, "model folder of a decoder-only model (attn train --arch decoder-only), or a Hugging Face GPT-2 folder")
      ->required();
  // One value per --prompt, taken as it is (CLI11 would otherwise read "[a,b]" as a list).
  cmd->add_option("--prompt", o->prompts, "a prompt to continue (repeat for several; they are decoded as a batch)")
      ->allow_extra_args(false);
  cmd->add_option("--input", o->input, "a file of prompts, one per line (without --prompt or --input: stdin)");
  cmd->add_option("--max-tokens", o->settings.max_tokens, "generated tokens at most, <eos> included")
      ->capture_default_str();
  cmd->add_flag("--greedy", o->greedy, "always the most probable token (the default)");
  cmd->add_option_function<int64_t>(
      "--beam", [p = o.get()](const int64_t& v) {
        p->settings.beam = v;
        p->beam_given = true;
      },
      "beam search with this many hypotheses");
  cmd->add_option_function<double>(
      "--alpha", [p = o.get()](const double& v) {
        p->settings.alpha = v;
        p->alpha_given = true;
      },
      "beam search: length penalty exponent, ((5+len)/6)^alpha")
      ->default_str("0.6");
  cmd->add_option_function<int64_t>(
      "--n-best", [p = o.get()](const int64_t& v) {
        p->settings.n_best = v;
        p->n_best_given = true;
      },
      "beam search: hypotheses per prompt; above 1 printed as PROMPT<TAB>RANK<TAB>SCORE<TAB>TEXT")
      ->default_str("1");
  cmd->add_flag("--sample", o->sample, "sample from the model's distribution (temperature 1, no filter)");
  cmd->add_option_function<double>(
      "--temperature",
      [p = o.get()](const double& v) {
        p->settings.temperature = v;
        p->sampling_flags.push_back("--temperature");
      },
      "sampling: divide the log-probabilities by this (> 0)")
      ->default_str("1");
  cmd->add_option_function<int64_t>(
      "--top-k", [p = o.get()](const int64_t& v) {
        p->settings.top_k = v;
        p->sampling_flags.push_back("--top-k");
      },
      "sampling: keep the k most probable tokens (0: all)")
      ->default_str("0");
  cmd->add_option_function<double>(
      "--top-p", [p = o.get()](const double& v) {
        p->settings.top_p = v;
        p->sampling_flags.push_back("--top-p");
      },
      "sampling: keep the smallest set of most probable tokens whose mass reaches p, in (0, 1]")
      ->default_str("1");
  cmd->add_option_function<uint64_t>(
      "--seed", [p = o.get()](const uint64_t& v) {
        p->settings.seed = v;
        p->sampling_flags.push_back("--seed");
      },
      "sampling: the seed (the same prompts, order and --batch-size give the same samples)")
      ->default_str("0")
      ->check(seed_validator());
  cmd->add_option("--batch-size", o->batch_size, "prompts decoded together")->capture_default_str();
  cmd->add_flag("--with-prompt", o->with_prompt, "print each prompt followed by its continuation");
  cmd->add_flag("--ids", o->ids,
                "read prompts and write continuations as space-separated token ids instead of text");
  cmd->add_flag("--scores", o->scores, "prefix each continuation with its log-probability and a tab");
  cmd->add_option("--draft", o->draft_dir,
                  "speculative decoding: a smaller decoder-only model folder of the same vocabulary drafts "
                  "tokens that the model verifies in one pass (greedy: the same output, faster; sampling: "
                  "the same distribution)");
  cmd->add_flag("--prompt-lookup", o->prompt_lookup,
                "speculative decoding without a draft model: draft the tokens that followed the last n-gram's "
                "most recent earlier occurrence in the prompt and output");
  cmd->add_option_function<int64_t>(
      "--draft-tokens", [p = o.get()](const int64_t& v) {
        p->draft_tokens = v;
        p->draft_tokens_given = true;
      },
      "speculative decoding: tokens drafted per verification pass")
      ->default_str("4");
  cmd->add_flag("--draft-stats", o->draft_stats,
                "speculative decoding: print draft and acceptance counts on stderr at the end");
  cmd->add_option("--threads", o->threads, "OpenMP/BLAS threads; 0 = the runtime's default");
  o->kv.add(cmd);
  cmd->callback([o, action] { *action = [o] { return run_generate(*o); }; });
}

}  // namespace attn::cli
