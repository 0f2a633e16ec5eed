// src/dist/launcher.h — what the MPI and the stub backends of attn/dist/communicator.h share
// beyond the public API: the exit of a rank that fails before (or without) MPI, named by the
// launcher's environment. Not here: reading that environment (launcher.cpp, communicator.h).
#pragma once

#include <string>

namespace attn::dist {

// Writes "attn: rank r of N: <message>" (the launcher's rank and size; "attn: <message>"
// outside a job) to stderr, flushes every stream and exits with `code` at once.
[[noreturn]] void print_and_exit(const std::string& message, int code);

}  // namespace attn::dist
