// cli/commands.h — each subcommand registers itself on the CLI11 app from its own
// cmd_<name>.cpp; main.cpp only wires them up and turns errors into exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace attn::cli {

// A registered subcommand's action; runs after parsing succeeded.
using Action = std::function<int()>;

// Adds `attn info` to app; sets *action when the subcommand is chosen.
void register_info(CLI::App& app, Action* action);

}  // namespace attn::cli
