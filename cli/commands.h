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

// The KV cache flags of translate and generate: --kv-cache paged|contiguous, --kv-block N and
// --kv-pool-mb N, read by resolve() into decode::KvCacheOptions (errors name the flag).
struct KvCacheFlags {
  std::string layout = "contiguous";
  int64_t block = 16;
  int64_t pool_mb = 0;  // 0: sized for the batch's worst case
  bool block_given = false, pool_given = false;

  void add(CLI::App* cmd) {
    cmd->add_option("--kv-cache", layout,
                    "KV cache layout: contiguous (one buffer per layer) or paged (blocks from one pool, shared by "
                    "beams); same output")
        ->capture_default_str();
    cmd->add_option_function<int64_t>(
        "--kv-block", [this](const int64_t& v) { block = v, block_given = true; },
        "paged KV cache: positions per block (default 16)");
    cmd->add_option_function<int64_t>(
        "--kv-pool-mb", [this](const int64_t& v) { pool_mb = v, pool_given = true; },
        "paged KV cache: the pool's size in MiB (default: enough for the batch's longest case)");
  }
  decode::KvCacheOptions resolve(const char* cmd) const {
    ATTN_CHECK(layout == "paged" || layout == "contiguous", cmd, "--kv-cache must be paged or contiguous, got '",
               layout, "'");
    decode::KvCacheOptions o;
    o.paged = layout == "paged";
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
