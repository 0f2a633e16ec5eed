// attn inspect --model DIR --src "3 7 1 4 9 2 8 5": the attention figures of seed 001 for one
// input (encoder self-attention, decoder cross-attention, layer x head grids, the causal mask,
// plus the training curve and PE figure) and report.html, written into --out (default the
// model folder). Prints the translation, the files written and the anti-diagonal score of the
// decoder cross-attention (target i -> source N-1-i). Without --src: the run's first validation example.
// Decoder-only and encoder-only folders: --src is a prompt or a text with [MASK]. The report
// itself is attn/run_report/run_report.h; this file holds the flags and the printing.
#include <cstdio>
#include <memory>
#include <string>

#include "attn/core/error.h"
#include "attn/ops/threads.h"
#include "attn/run_report/run_report.h"
#include "attn/train/trainer.h"
#include "commands.h"

namespace attn::cli {

namespace {

struct InspectOptions {
  int64_t threads = 0;  // 0: the runtime default
  std::string model_dir;
  std::string src;
  bool has_src = false;  // --src was given (possibly empty, which is an error)
  std::string out_dir;
  bool ids = false;
  int64_t max_len = 0;
  int64_t samples = 8;
};

int run_inspect(const InspectOptions& o) {
  ATTN_CHECK(o.threads >= 0, "inspect", "--threads must be >= 0, got ", o.threads);
  if (o.threads > 0) attn::set_num_threads(o.threads);
  ATTN_CHECK(o.max_len >= 0, "inspect", "--max-len must be >= 1 (0: source length + 50), got ", o.max_len);
  run_report::RunReportOptions ro;
  ro.out_dir = o.out_dir;
  if (o.has_src) ro.src = o.src;
  ro.src_ids = o.ids;
  if (o.max_len > 0) ro.max_len = o.max_len;
  ro.n_samples = o.samples;
  ro.command = "inspect";
  const run_report::RunReportResult r = run_report::write_run_report(o.model_dir, ro);
  std::printf("source:  %s\n", r.example_source.c_str());
  std::printf("output:  %s\n", r.example_output.c_str());
  if (r.arch == models::Arch::EncoderDecoder) {  // cross-attention exists only there
    for (size_t l = 0; l < r.anti_diagonal_per_layer.size(); ++l)
      std::printf("anti-diagonal score, decoder layer %zu (head average): %.4f\n", l + 1, r.anti_diagonal_per_layer[l]);
    if (r.anti_diagonal_per_layer.empty()) std::printf("anti-diagonal score: none (the output is empty)\n");
    if (r.anti_diagonal_mean)
      std::printf("anti-diagonal score, mean over validation examples (last layer): %.4f\n", *r.anti_diagonal_mean);
  }
  for (const std::string& p : r.figure_paths) std::printf("wrote %s\n", p.c_str());
  std::printf("wrote %s\n", r.report_path.c_str());
  return 0;
}

}  // namespace

void register_inspect(CLI::App& app, Action* action) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "write the attention figures and report.html for one input");
  cmd->add_option("--model", o->model_dir, "model folder (a run folder of attn train, or any model folder)")
      ->required();
  CLI::Option* src =
      cmd->add_option("--src", o->src, "the source to decode and draw (default: the run's first validation example)");
  cmd->add_flag("--ids", o->ids, "--src holds space-separated token ids instead of text");
  cmd->add_option("--out", o->out_dir, "folder for report.html and figures/ (default: the model folder)");
  cmd->add_option("--max-len", o->max_len, "at most this many generated tokens; 0 = source length + 50")
      ->capture_default_str();
  cmd->add_option("--samples", o->samples, "sample translations listed in the report")->capture_default_str();
  cmd->add_option("--threads", o->threads, "OpenMP/BLAS threads; 0 = the runtime's default");
  cmd->callback([o, src, action] {
    o->has_src = src->count() > 0;
    *action = [o] { return run_inspect(*o); };
  });
}

}  // namespace attn::cli
