// attn serve --model DIR: serves a model folder over HTTP with an OpenAI-compatible API
// (docs/serving.md). It binds --host:--port first (127.0.0.1 and 8080 by default; port 0 takes
// a free port), prints "attn serve: listening on http://HOST:PORT", loads the model (meanwhile
// /health answers 503) and prints "ready" once requests are served. SIGINT or SIGTERM stops
// it: new completions are refused, running ones get up to --timeout seconds to finish, then
// the server stops and the command exits 0.
// Not here: the HTTP routes (serve/server.cpp), decoding (serve/engine.cpp).
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include "attn/core/error.h"
#include "attn/ops/threads.h"
#include "attn/serve/server.h"
#include "commands.h"

namespace attn::cli {

namespace {

constexpr const char* kCmd = "serve";

struct ServeOptions {
  serve::ServerOptions server;
  int64_t threads = 0;
  double timeout = 30;
  int64_t max_body = 1 << 20;
  KvCacheFlags kv;
  bool draft_tokens_given = false;
};

int run_serve(ServeOptions o) {
  ATTN_CHECK(o.threads >= 0, kCmd, "--threads must be >= 0, got ", o.threads);
  ATTN_CHECK(o.timeout >= 0, kCmd, "--timeout must be >= 0, got ", o.timeout);
  ATTN_CHECK(o.max_body >= 1, kCmd, "--max-body must be >= 1, got ", o.max_body);
  if (o.threads > 0) attn::set_num_threads(o.threads);
  o.server.max_body = static_cast<size_t>(o.max_body);
  o.server.kv = o.kv.resolve(kCmd);
  ATTN_CHECK(!o.draft_tokens_given || !o.server.draft_dir.empty() || o.server.prompt_lookup, kCmd,
             "--draft-tokens needs --draft DIR or --prompt-lookup");
  ATTN_CHECK(o.server.draft_tokens >= 1, kCmd, "--draft-tokens must be >= 1, got ", o.server.draft_tokens);
  ATTN_CHECK(o.server.draft_dir.empty() || !o.server.prompt_lookup, kCmd,
             "--draft and --prompt-lookup exclude each other (prompt lookup drafts without a model)");

  // SIGINT and SIGTERM are blocked in every thread (the server's and the engine's threads inherit
  // this mask) and taken by sigwait below, so that shutting down runs as ordinary code.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  serve::Server server(o.server);
  const int port = server.start();
  std::printf("attn serve: listening on http://%s:%d (model '%s')\n", o.server.host.c_str(), port,
              server.model_id().c_str());
  std::fflush(stdout);
  server.load();
  std::printf("ready\n");
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "attn serve: %s, finishing running requests (up to %g s)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", o.timeout);
  server.shutdown(std::chrono::milliseconds(static_cast<int64_t>(o.timeout * 1000)));
  std::fprintf(stderr, "attn serve: stopped\n");
  return 0;
}

}  // namespace

void register_serve(CLI::App& app, Action* action) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "serve a model folder over HTTP with an OpenAI-compatible API (/v1/completions; docs/serving.md)");
  cmd->add_option("--model", o->server.model_dir,
                  "model folder (any family attn trains, or a Hugging Face GPT-2 folder); its base name is the model id")
      ->required();
  cmd->add_option("--host", o->server.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->server.port, "port to listen on (0: a free port, printed)")->capture_default_str();
  cmd->add_option("--threads", o->threads, "OpenMP/BLAS threads; 0 = the runtime's default");
  cmd->add_option("--max-batch", o->server.max_batch, "decoder rows decoded together at most")->capture_default_str();
  cmd->add_option("--max-queue", o->server.max_queue, "requests waiting at most; beyond that 503")
      ->capture_default_str();
  cmd->add_option("--api-key", o->server.api_key,
                  "require 'Authorization: Bearer KEY' on every route but /health");
  cmd->add_option("--timeout", o->timeout, "seconds running requests get to finish after SIGINT/SIGTERM")
      ->capture_default_str();
  o->kv.layout = "paged";  // serving: blocks as rows grow, prompt prefixes shared (docs/serving.md)
  o->kv.add(cmd);
  cmd->add_option("--max-body", o->max_body, "largest request body in bytes (larger: 413)")->capture_default_str();
  cmd->add_option("--draft", o->server.draft_dir,
                  "speculative decoding: a smaller model folder of the same family and vocabulary drafts tokens "
                  "while one greedy request runs alone (answers unchanged; docs/serving.md)");
  cmd->add_flag("--prompt-lookup", o->server.prompt_lookup,
                "speculative decoding without a draft model: draft the tokens that followed the last n-gram's "
                "latest earlier occurrence in the prompt and output");
  cmd->add_option("--draft-tokens", o->server.draft_tokens, "speculative decoding: tokens drafted per model pass")
      ->capture_default_str();
  cmd->callback([o, action, cmd] {
    o->draft_tokens_given = cmd->count("--draft-tokens") > 0;
    *action = [o] { return run_serve(*o); };
  });
}

}  // namespace attn::cli
