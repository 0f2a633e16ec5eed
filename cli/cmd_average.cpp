// attn average --model RUN [--last K] [--out DIR]: paper §6.1's checkpoint averaging. The
// parameters of the newest K checkpoints of a run folder (RUN/checkpoints/step_*) are averaged
// element-wise (in double) into a new model folder, ready for translate, eval and info.
// Optimizer state is not averaged and not written: the result is for inference.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "attn/core/error.h"
#include "attn/io/run_files.h"
#include "attn/train/checkpointing.h"
#include "commands.h"

namespace attn::cli {

namespace {

struct AverageOptions {
  std::string model_dir;
  int64_t last = 5;
  std::string out;
  bool force = false;
};

int run_average(const AverageOptions& o) {
  namespace fs = std::filesystem;
  ATTN_CHECK(o.last >= 1, "average", "--last must be at least 1, got ", o.last);
  const std::string out = o.out.empty() ? (fs::path(o.model_dir) / "averaged").string() : o.out;
  std::error_code ec;
  ATTN_CHECK(fs::is_directory(o.model_dir, ec), "average", "'", o.model_dir, "' is not a run folder");
  if (fs::exists(out, ec) && !fs::is_empty(out, ec)) {
    ATTN_CHECK(o.force, "average", "'", out, "' exists and is not empty; pass --force to overwrite it");
    ATTN_CHECK(fs::is_regular_file(fs::path(out) / io::kConfigFileName, ec), "average", "'", out,
               "' is not a model folder (no ", io::kConfigFileName, "); refusing to overwrite it");
  }
  const auto used = train::average_last_checkpoints(o.model_dir, o.last, out);
  std::printf("averaged %zu checkpoint%s into %s:\n", used.size(), used.size() == 1 ? "" : "s", out.c_str());
  for (const auto& dir : used) std::printf("  %s\n", dir.c_str());
  if (static_cast<int64_t>(used.size()) < o.last)
    std::printf("(asked for the last %lld; the run keeps only %zu)\n", static_cast<long long>(o.last), used.size());
  return 0;
}

}  // namespace

void register_average(CLI::App& app, Action* action) {
  auto o = std::make_shared<AverageOptions>();
  CLI::App* cmd = app.add_subcommand("average", "average the parameters of a run's last K checkpoints (paper §6.1)");
  cmd->add_option("--model", o->model_dir, "run folder written by attn train (holds checkpoints/)")->required();
  cmd->add_option("--last", o->last, "how many of the newest checkpoints to average")->capture_default_str();
  cmd->add_option("--out", o->out, "model folder to write (default: MODEL/averaged)");
  cmd->add_flag("--force", o->force, "overwrite an existing model folder at --out");
  cmd->callback([o, action] { *action = [o] { return run_average(*o); }; });
}

}  // namespace attn::cli
