// attn — command-line entry point. Subcommands live in cmd_<name>.cpp and register
// themselves here; every attn::Error becomes "attn: error: ..." and exit status 1,
// every command-line mistake (CLI11's message, or the unknown command named) the same prefix
// and status 1; --help and --version exit 0. Started by an MPI
// launcher (mpirun -np N attn train ...), a rank that fails stops the whole job instead
// (the others would wait for it forever), and a rank that succeeds ends MPI.
// On a CPU that OpenBLAS does not recognise (attn/ops/threads.h: blas_core_type_fix) the
// process first executes itself again, once, with OPENBLAS_CORETYPE set to the right kernels.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "attn/core/error.h"
#include "attn/dist/communicator.h"
#include "attn/ops/threads.h"
#include "commands.h"

namespace {

// OpenBLAS chose its kernels when it was loaded, before main(); if it fell back to its generic
// ones on an AVX-512 CPU, run this program again with OPENBLAS_CORETYPE naming the right ones
// (the same process id, arguments, environment otherwise and open files, so pipes and MPI
// launchers see nothing). OPENBLAS_CORETYPE being set afterwards, this happens at most once.
// ATTN_KEEP_BLAS_CORE=1 keeps OpenBLAS's own choice. If the exec fails, the run goes on as is.
void fix_blas_core(char** argv) {
  const char* keep = std::getenv("ATTN_KEEP_BLAS_CORE");
  if (keep != nullptr && std::string(keep) == "1") return;
  const std::string core = attn::blas_core_type_fix();
  if (core.empty()) return;
  if (setenv("OPENBLAS_CORETYPE", core.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");  // the exec failed: nothing changed
}

}  // namespace

int main(int argc, char** argv) {
  fix_blas_core(argv);
  CLI::App app{"attn: the Transformer of \"Attention Is All You Need\", from scratch in C++"};
  app.set_version_flag("--version", std::string("attn ") + ATTN_VERSION);
  app.require_subcommand(1);
  attn::cli::Action action;
  attn::cli::register_info(app, &action);
  attn::cli::register_translate(app, &action);
  attn::cli::register_score(app, &action);
  attn::cli::register_eval(app, &action);
  attn::cli::register_inspect(app, &action);
  attn::cli::register_train(app, &action);
  attn::cli::register_average(app, &action);
  attn::cli::register_quantize(app, &action);
  attn::cli::register_generate(app, &action);
  attn::cli::register_fill_mask(app, &action);
  attn::cli::register_serve(app, &action);
  attn::cli::register_vocab(app, &action);
  attn::cli::register_lab(app, &action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // A mistake on the command line is an error like any other (docs/conventions.md): the
    // prefix, the message, status 1. An unknown first word is named with the commands.
    std::string message = e.what();
    if (argc > 1 && argv[1][0] != '-' && app.get_subcommands().empty()) {
      std::string names;
      for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
        names += (names.empty() ? "" : ", ") + sub->get_name();
      message = std::string("unknown command '") + argv[1] + "' (the commands: " + names + ")";
    }
    std::fprintf(stderr, "attn: error: %s\nRun with --help for more information.\n", message.c_str());
    return 1;
  }
  const bool ranks = attn::dist::launcher_world_size() > 1;
  try {
    const int rc = action ? action() : 0;
    attn::dist::finalize();
    return rc;
  } catch (const attn::Error& e) {
    if (ranks) attn::dist::abort_job(std::string("error: ") + e.what());
    std::fprintf(stderr, "attn: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    if (ranks) attn::dist::abort_job(std::string("internal error: ") + e.what());
    std::fprintf(stderr, "attn: internal error: %s\n", e.what());
    return 1;
  }
}
