// cli/commands.h — each subcommand registers itself on the CLI11 app from its own
// cmd_<name>.cpp; main.cpp only wires them up and turns errors into exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>

#include "attn/core/error.h"
#include "attn/decode/kv_pool.h"

namespace attn::cli {

// A seed option's value: decimal digits only, at most 2^64 - 1. CLI11 reads "-1" into an
// unsigned option as 2^64 - 1 without a word; this validator refuses it, naming the option.
inline CLI::Validator seed_validator() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        bool digits = !v.empty() && v.size() <= 20;
        for (const char c : v) digits = digits && c >= '0' && c <= '9';
        if (!digits || (v.size() == 20 && v > "18446744073709551615"))
          return "a seed is an integer in [0, 18446744073709551615], got '" + v + "'";
        return std::string();
      },
      "SEED");
}

// The KV cache flags of translate, generate, eval and serve: --kv-cache paged|contiguous, --kv-block N,
// --kv-pool-mb N and --kv-dtype f32|bf16, read by resolve() into decode::KvCacheOptions (errors
// name the flag). bf16 blocks need the paged layout: --kv-dtype bf16 alone selects it, and with
// an explicit --kv-cache contiguous it is an error.
struct KvCacheFlags {
  std::string layout = "contiguous";
  int64_t block = 16;
  int64_t pool_mb = 0;  // 0: sized for the batch's worst case
  std::string dtype = "f32";
  bool block_given = false, pool_given = false, layout_given = false;

  void add(CLI::App* cmd) {
    cmd->add_option_function<std::string>(
           "--kv-cache", [this](const std::string& v) { layout = v, layout_given = true; },
           "KV cache layout: contiguous (one buffer per layer) or paged (blocks from one pool, shared by "
           "beams); same output")
        ->default_str(layout);
    cmd->add_option("--kv-dtype", dtype,
                    "paged KV cache: the self-attention blocks' type: f32, or bf16 (keys and values rounded to "
                    "bf16 as written, read back exactly; half the bytes per block, so twice the blocks in "
                    "--kv-pool-mb; cross-attention stays f32; f32 models only; alone it selects --kv-cache paged)")
        ->check(CLI::IsMember({"f32", "bf16"}))
        ->capture_default_str();
    cmd->add_option_function<int64_t>(
        "--kv-block", [this](const int64_t& v) { block = v, block_given = true; },
        "paged KV cache: positions per block (default 16)");
    cmd->add_option_function<int64_t>(
        "--kv-pool-mb", [this](const int64_t& v) { pool_mb = v, pool_given = true; },
        "paged KV cache: the pool's size in MiB (default: enough for the batch's longest case)");
  }
  // Whether any of the flags was given (a command that does not decode refuses them).
  bool given() const { return layout_given || block_given || pool_given || dtype != "f32"; }
  decode::KvCacheOptions resolve(const char* cmd) const {
    ATTN_CHECK(layout == "paged" || layout == "contiguous", cmd, "--kv-cache must be paged or contiguous, got '",
               layout, "'");
    decode::KvCacheOptions o;
    o.dtype = decode::parse_kv_dtype(dtype);
    o.paged = layout == "paged";
    if (o.dtype == DType::BF16) {
      ATTN_CHECK(o.paged || !layout_given, cmd,
                 "--kv-dtype bf16 needs the paged KV cache; it cannot go with --kv-cache contiguous");
      o.paged = true;  // bf16 blocks exist in the paged layout only
    }
    ATTN_CHECK(o.paged || !(block_given || pool_given), cmd, block_given ? "--kv-block" : "--kv-pool-mb",
               " needs --kv-cache paged");
    ATTN_CHECK(block >= 1 && block <= 4096, cmd, "--kv-block must be in [1, 4096], got ", block);
    ATTN_CHECK(!pool_given || (pool_mb >= 1 && pool_mb <= (int64_t{1} << 24)), cmd,
               "--kv-pool-mb must be in [1, 16777216], got ", pool_mb);
    o.block_size = block;
    o.pool_bytes = pool_given ? pool_mb << 20 : 0;
    return o;
  }
};

// A registered subcommand's action; runs after parsing succeeded.
using Action = std::function<int()>;

// Adds `attn info` to app; sets *action when the subcommand is chosen.
void register_info(CLI::App& app, Action* action);
// Inference on a model folder (cmd_translate.cpp, cmd_score.cpp, cmd_eval.cpp, cmd_inspect.cpp).
void register_translate(CLI::App& app, Action* action);
void register_score(CLI::App& app, Action* action);
void register_eval(CLI::App& app, Action* action);
void register_inspect(CLI::App& app, Action* action);
// Training and checkpoint averaging (cmd_train.cpp, cmd_average.cpp).
void register_train(CLI::App& app, Action* action);
void register_average(CLI::App& app, Action* action);
// Reduced-precision weights for inference: attn quantize (cmd_quantize.cpp).
void register_quantize(CLI::App& app, Action* action);
// Decoder-only and encoder-only models: attn generate and attn fill-mask (cmd_generate.cpp, cmd_fill_mask.cpp).
void register_generate(CLI::App& app, Action* action);
void register_fill_mask(CLI::App& app, Action* action);
// Serving a model folder over HTTP: attn serve (cmd_serve.cpp).
void register_serve(CLI::App& app, Action* action);
// Subword vocabularies: attn vocab train|encode|decode (cmd_vocab.cpp).
void register_vocab(CLI::App& app, Action* action);
// The seeds' demonstrations: attn lab steps|scale|permutation|masks|rope|kv-cache|memory (cmd_lab.cpp).
void register_lab(CLI::App& app, Action* action);

}  // namespace attn::cli
