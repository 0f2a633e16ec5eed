// attn score --model DIR: for each "source<TAB>target" line on stdin, the log-probability of
// the target under the model (natural log): the decoder is fed BOS + target and predicts
// target + EOS (teacher forcing, §5.3, without label smoothing or dropout). --per-token adds
// each predicted token's log-probability (EOS last); --ids reads token ids. Batched like
// translate; a bad line stops the run after the lines before it have been scored.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/io/lines.h"
#include "attn/io/tsv.h"
#include "attn/ops/threads.h"
#include "attn/run/model_folder.h"
#include "attn/run/token_codec.h"
#include "attn/run/translate.h"
#include "attn/train/trainer.h"
#include "commands.h"

namespace attn::cli {

namespace {

struct ScoreOptions {
  int64_t threads = 0;  // 0: the runtime default
  std::string model_dir;
  int64_t batch_size = 32;
  bool ids = false;
  bool per_token = false;
};

int run_score(const ScoreOptions& o) {
  ATTN_CHECK(o.threads >= 0, "score", "--threads must be >= 0, got ", o.threads);
  if (o.threads > 0) attn::set_num_threads(o.threads);
  ATTN_CHECK(o.batch_size >= 1, "score", "--batch-size must be >= 1, got ", o.batch_size);
  const run::ModelFolder folder = run::open_model_folder(o.model_dir, "score", !o.ids);
  ATTN_CHECK(folder.eos >= 0, "score", "the model in '", o.model_dir, "' has no EOS token (eos_id = -1)");

  run::TokenCodec src_codec;
  src_codec.vocab = o.ids ? nullptr : &*folder.vocab;
  src_codec.vocab_size = folder.src_vocab_size;
  src_codec.pad = folder.pad;
  src_codec.command = "score";
  run::TokenCodec tgt_codec = src_codec;
  tgt_codec.vocab_size = folder.tgt_vocab_size;

  std::vector<std::vector<int64_t>> srcs, tgts;
  const auto flush = [&] {
    if (srcs.empty()) return;
    for (const run::ForcedScores& s : run::teacher_forced(folder, srcs, tgts)) {
      std::printf("%.6f", s.total());
      if (o.per_token) {
        std::printf("\t");
        for (size_t i = 0; i < s.logprobs.size(); ++i) std::printf(i ? " %.6f" : "%.6f", s.logprobs[i]);
      }
      std::printf("\n");
    }
    std::fflush(stdout);
    srcs.clear();
    tgts.clear();
  };

  // At a terminal every line is answered at once; from a pipe or file, lines are batched.
  const int64_t batch = ::isatty(STDIN_FILENO) ? 1 : o.batch_size;
  io::LineReader reader(std::cin);
  std::string line;
  while (reader.next(line)) {
    try {
      const int64_t n = reader.line_number();
      if (line.empty()) fail("score", "stdin line ", n, ": the line is empty (expected source<TAB>target)");
      const io::TsvFields fields = io::split_tsv_line(line, n, "score", "stdin");
      std::vector<int64_t> src = src_codec.read(std::string(fields.source), n, "source");
      std::vector<int64_t> tgt = tgt_codec.read(std::string(fields.target), n, "target");
      srcs.push_back(std::move(src));
      tgts.push_back(std::move(tgt));
    } catch (const Error&) {
      flush();  // the lines before the bad one still get their scores
      throw;
    }
    if (static_cast<int64_t>(srcs.size()) >= batch) flush();
  }
  flush();
  return 0;
}

}  // namespace

void register_score(CLI::App& app, Action* action) {
  auto o = std::make_shared<ScoreOptions>();
  CLI::App* cmd = app.add_subcommand(
      "score", "print log p(target | source) for each source<TAB>target line of stdin (natural log, EOS included)");
  cmd->add_option("--model", o->model_dir, "model folder (config.json, model.safetensors, vocab.json)")->required();
  cmd->add_flag("--per-token", o->per_token,
                "also print each target token's log-probability (then EOS's): TOTAL<TAB>LP1 LP2 ... LP_EOS");
  cmd->add_flag("--ids", o->ids, "read space-separated token ids instead of text");
  cmd->add_option("--batch-size", o->batch_size, "lines scored together (1 when stdin is a terminal)")
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "OpenMP/BLAS threads; 0 = the runtime's default");
  cmd->callback([o, action] { *action = [o] { return run_score(*o); }; });
}

}  // namespace attn::cli
