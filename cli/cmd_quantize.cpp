// attn quantize --model DIR --to int8|bf16 [--out DIR] [--force]: a model folder with its
// weights in reduced precision for inference (models::quantize_model_folder): int8 with a
// float scale per row, or bf16, for every linear layer, the attention projections and the
// embeddings (tied ones once); biases and norms stay float32. The new folder (default
// DIR-int8 or DIR-bf16) loads everywhere a model folder does; its config.json says
// "quantization". docs/checkpoint.md names the tensors.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "attn/core/error.h"
#include "attn/io/run_files.h"
#include "attn/models/checkpoint.h"
#include "commands.h"

namespace attn::cli {

namespace {

struct QuantizeOptions {
  std::string model_dir;
  std::string to;
  std::string out;
  bool force = false;
};

uintmax_t weights_bytes(const std::string& dir) {
  std::error_code ec;
  const uintmax_t n = std::filesystem::file_size(std::filesystem::path(dir) / io::kWeightsFileName, ec);
  return ec ? 0 : n;
}

int run_quantize(const QuantizeOptions& o) {
  namespace fs = std::filesystem;
  const Quantization q = parse_quantization(o.to);
  ATTN_CHECK(q != Quantization::None, "quantize", "--to takes int8 or bf16, got '", o.to, "'");
  std::string out = o.out;
  if (out.empty()) {
    std::string base = o.model_dir;
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    out = base + "-" + quantization_name(q);
  }
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_empty(out, ec)) {
    ATTN_CHECK(o.force, "quantize", "'", out, "' exists and is not empty; pass --force to overwrite it");
    ATTN_CHECK(fs::is_regular_file(fs::path(out) / io::kConfigFileName, ec), "quantize", "'", out,
               "' is not a model folder (no ", io::kConfigFileName, "); refusing to overwrite it");
  }
  const std::string written = models::quantize_model_folder(o.model_dir, out, q);
  std::printf("quantized %s to %s: %s (%.2f MB -> %.2f MB)\n", o.model_dir.c_str(), quantization_name(q),
              written.c_str(), static_cast<double>(weights_bytes(o.model_dir)) / 1e6,
              static_cast<double>(weights_bytes(written)) / 1e6);
  return 0;
}

}  // namespace

void register_quantize(CLI::App& app, Action* action) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* cmd = app.add_subcommand("quantize", "store a model folder's weights as int8 or bf16 for inference");
  cmd->add_option("--model", o->model_dir, "float32 model folder (config.json + model.safetensors)")->required();
  cmd->add_option("--to", o->to, "int8 (per-row scales, CTranslate2's scheme) or bf16")->required();
  cmd->add_option("--out", o->out, "model folder to write (default: MODEL-int8 or MODEL-bf16)");
  cmd->add_flag("--force", o->force, "overwrite an existing model folder at --out");
  cmd->callback([o, action] { *action = [o] { return run_quantize(*o); }; });
}

}  // namespace attn::cli
