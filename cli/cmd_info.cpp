// attn info --model DIR [--json]: what a checkpoint folder holds. Checks it as strictly as
// loading does (so a broken checkpoint is reported, never half-printed) from config.json and
// the weights file's header alone: the model is laid out (names, shapes, tied names), its
// weights are neither allocated nor read. Then prints every config key, the parameter count
// (total and per top-level module, from the header's shapes), tied names, and every tensor of
// model.safetensors in file order with its dtype and shape; with --batch and --length, the
// memory a KV cache needs to decode that many hypotheses. Prints no weight values.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "attn/models/checkpoint.h"
#include "attn/models/config.h"
#include "attn/nn/kv_cache.h"
#include "commands.h"

namespace attn::cli {

namespace {

struct InfoOptions {
  std::string model_dir;
  bool json = false;
  // KV-cache planning: memory of decoding `batch` hypotheses to `length` target tokens over
  // sources of `source_length` tokens (0: the same as length). Printed when batch > 0.
  int64_t batch = 0;
  int64_t length = 0;
  int64_t source_length = 0;
};

// The KV cache a model needs for the requested batch and lengths: key/value heads only
// (n_kv_heads with grouped-query attention), at most sliding_window cached positions per layer,
// and cross-attention keys/values for an encoder-decoder model only.
nn::KVCacheSize cache_size(const InfoOptions& o, const models::ModelConfig& c) {
  const bool cross = c.arch == models::Arch::EncoderDecoder;
  const int64_t src_len = !cross ? 0 : (o.source_length > 0 ? o.source_length : o.length);
  const int64_t kv_heads = c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads;
  const int64_t cached = c.sliding_window > 0 ? std::min(o.length, c.sliding_window) : o.length;
  return nn::kv_cache_size(c.n_decoder_layers, o.batch, kv_heads, c.d_model / c.n_heads, cached, src_len, c.dtype);
}

bool wants_cache(const InfoOptions& o) { return o.batch > 0; }

void check_cache_request(const InfoOptions& o, const models::Model& model) {
  if (!wants_cache(o)) return;
  ATTN_CHECK(o.length > 0, "info", "--batch needs --length (target tokens to decode)");
  ATTN_CHECK(model.arch() != models::Arch::EncoderOnly, "info",
             "KV-cache memory is reported for models that decode (encoder_decoder, decoder_only); this one is ",
             models::arch_name(model.arch()));
  ATTN_CHECK(model.arch() == models::Arch::EncoderDecoder || o.source_length == 0, "info",
             "--source-length applies to encoder_decoder models only");
}

std::string mib(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

// Parameter count per top-level module ("encoder", "src_embedding", ...), in registration
// order, from the weights file's shapes; tied tensors count once, under the module that owns
// the embedding. The model is a layout (inspect_checkpoint): its names, never its values.
std::vector<std::pair<std::string, int64_t>> count_by_module(const models::LoadedCheckpoint& ckpt) {
  std::map<std::string, const Shape*> shape_of;
  for (const auto& t : ckpt.tensors) shape_of.emplace(t.name, &t.shape);
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& [name, t] : ckpt.model->named_parameters()) {
    const int64_t count = shape_numel(*shape_of.at(ckpt.sources.at(name)));
    const std::string top = name.substr(0, name.find('.'));
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == top; });
    if (it == out.end()) out.emplace_back(top, count);
    else it->second += count;
  }
  return out;
}

int64_t total_of(const std::vector<std::pair<std::string, int64_t>>& modules) {
  int64_t total = 0;
  for (const auto& [name, count] : modules) total += count;
  return total;
}

std::string value_text(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

int print_json(const InfoOptions& o, const models::LoadedCheckpoint& ckpt) {
  using ojson = nlohmann::ordered_json;
  const models::Model& model = *ckpt.model;
  ojson j;
  j["model"] = o.model_dir;
  j["config_file"] = ckpt.config_path;
  j["weights_file"] = ckpt.weights_path;
  j["config"] = ojson::parse(model.config().to_json().dump());
  const auto counts = count_by_module(ckpt);
  ojson params;
  params["total"] = total_of(counts);
  ojson modules = ojson::array();
  for (const auto& [name, count] : counts) modules.push_back({{"name", name}, {"count", count}});
  params["modules"] = modules;
  j["parameters"] = params;
  ojson tied = ojson::array();
  for (const auto& [alias, canonical] : model.tied_parameters())
    tied.push_back({{"name", alias}, {"stored_as", canonical}});
  j["tied"] = tied;
  ojson tensors = ojson::array();
  for (const auto& t : ckpt.tensors) tensors.push_back({{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}});
  j["tensors"] = tensors;
  j["metadata"] = ckpt.metadata;
  if (wants_cache(o)) {
    const nn::KVCacheSize kv = cache_size(o, model.config());
    j["kv_cache"] = {{"batch", o.batch}, {"length", o.length},
                     {"source_length", model.arch() != models::Arch::EncoderDecoder ? 0
                                       : o.source_length > 0 ? o.source_length : o.length},
                     {"self_attention_bytes", kv.self_bytes}, {"cross_attention_bytes", kv.cross_bytes},
                     {"total_bytes", kv.total()}};
  }
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

int print_text(const InfoOptions& o, const models::LoadedCheckpoint& ckpt) {
  const models::Model& model = *ckpt.model;
  std::printf("model %s (%s)\n\n", o.model_dir.c_str(), models::arch_name(model.arch()));

  const nlohmann::json config = model.config().to_json();
  size_t width = 0;
  for (const auto& [key, value] : config.items()) width = std::max(width, key.size());
  std::printf("config (%s, every key):\n", ckpt.config_path.c_str());
  for (const auto& [key, value] : config.items())
    std::printf("  %-*s  %s\n", static_cast<int>(width), key.c_str(), value_text(value).c_str());

  const auto modules = count_by_module(ckpt);
  const int64_t total = total_of(modules);
  width = 5;
  for (const auto& [name, count] : modules) width = std::max(width, name.size());
  std::printf("\nparameters: %lld total\n", static_cast<long long>(total));
  for (const auto& [name, count] : modules) {
    const double pct = total > 0 ? 100.0 * static_cast<double>(count) / static_cast<double>(total) : 0.0;
    std::printf("  %-*s  %12lld  %5.1f%%\n", static_cast<int>(width), name.c_str(), static_cast<long long>(count), pct);
  }
  for (const auto& [alias, canonical] : model.tied_parameters())
    std::printf("  tied: %s is %s (stored once)\n", alias.c_str(), canonical.c_str());

  width = 4;
  for (const auto& t : ckpt.tensors) width = std::max(width, t.name.size());
  std::printf("\ntensors (%s, %zu in file order):\n", ckpt.weights_path.c_str(), ckpt.tensors.size());
  for (const auto& t : ckpt.tensors)
    std::printf("  %-*s  %-4s  %s\n", static_cast<int>(width), t.name.c_str(), t.dtype.c_str(), shape_str(t.shape).c_str());

  if (!ckpt.metadata.empty()) {
    std::printf("\nmetadata:\n");
    for (const auto& [key, value] : ckpt.metadata) std::printf("  %s: %s\n", key.c_str(), value.c_str());
  }
  if (wants_cache(o)) {
    const nn::KVCacheSize kv = cache_size(o, model.config());
    const models::ModelConfig& c = model.config();
    if (c.arch == models::Arch::EncoderDecoder) {
      const int64_t src_len = o.source_length > 0 ? o.source_length : o.length;
      std::printf("\nKV cache for batch %lld, %lld target and %lld source tokens (%s):\n",
                  static_cast<long long>(o.batch), static_cast<long long>(o.length),
                  static_cast<long long>(src_len), dtype_name(c.dtype));
    } else {
      std::printf("\nKV cache for batch %lld, %lld tokens (prompt + generated; %s):\n",
                  static_cast<long long>(o.batch), static_cast<long long>(o.length), dtype_name(c.dtype));
    }
    if (c.n_kv_heads > 0 && c.n_kv_heads != c.n_heads)
      std::printf("  %lld key/value heads for %lld query heads (grouped-query attention)\n",
                  static_cast<long long>(c.n_kv_heads), static_cast<long long>(c.n_heads));
    if (c.sliding_window > 0 && o.length > c.sliding_window)
      std::printf("  sliding window: the last %lld positions are kept\n", static_cast<long long>(c.sliding_window));
    std::printf("  self-attention   %14lld bytes  %s  (grows with each step)\n",
                static_cast<long long>(kv.self_bytes), mib(kv.self_bytes).c_str());
    if (c.arch == models::Arch::EncoderDecoder)
      std::printf("  cross-attention  %14lld bytes  %s  (once per source)\n",
                  static_cast<long long>(kv.cross_bytes), mib(kv.cross_bytes).c_str());
    std::printf("  total            %14lld bytes  %s\n", static_cast<long long>(kv.total()),
                mib(kv.total()).c_str());
  }
  return 0;
}

int run_info(const InfoOptions& o) {
  // The header and config.json only: the model is laid out, never allocated or loaded.
  const models::LoadedCheckpoint ckpt = models::inspect_checkpoint(o.model_dir);
  check_cache_request(o, *ckpt.model);
  return o.json ? print_json(o, ckpt) : print_text(o, ckpt);
}

}  // namespace

void register_info(CLI::App& app, Action* action) {
  auto opts = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info", "print a checkpoint's configuration, parameter count and tensor shapes");
  cmd->add_option("--model", opts->model_dir, "model folder (config.json + model.safetensors)")->required();
  cmd->add_flag("--json", opts->json, "print machine-readable JSON instead of text");
  cmd->add_option("--batch", opts->batch, "also print the KV-cache memory for this many hypotheses")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--length", opts->length, "KV cache: target tokens decoded")->check(CLI::PositiveNumber);
  cmd->add_option("--source-length", opts->source_length, "KV cache: source tokens (default: --length)")
      ->check(CLI::PositiveNumber);
  cmd->callback([opts, action] { *action = [opts] { return run_info(*opts); }; });
}

}  // namespace attn::cli
