// attn/serve/server.h — `attn serve`'s HTTP server: an OpenAI-compatible API over one model
// folder (docs/serving.md). GET /health, GET /v1/models, POST /v1/completions (streamed as
// server-sent events or not), POST /tokenize, POST /detokenize and GET /metrics; and the attention
// explorer: its page at / (www.h) and its POST /v1/attention and /v1/lab/attention (explorer.h).
// Encoder-decoder and decoder-only models decode in the engine (engine.h); encoder-only models
// fill [MASK] tokens synchronously, one request at a time. The server binds first and loads the model
// after, so /health can answer 503 while it loads. Every request is answered on its own: a
// malformed one gets an OpenAI-shaped error and disturbs no other.
// Not here: the command line (cli/cmd_serve.cpp), signals, decoding.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "attn/decode/kv_pool.h"

namespace attn::serve {

struct ServerOptions {
  std::string model_dir;
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: an ephemeral port (start() returns it)
  int64_t max_batch = 16;           // EngineOptions::max_batch
  int64_t max_queue = 64;           // EngineOptions::max_queue
  // EngineOptions::kv: paged by default, blocks of 16 positions, a pool for max_batch rows at
  // the model's context (pool_bytes 0)
  decode::KvCacheOptions kv{/*paged=*/true, /*block_size=*/16, /*pool_bytes=*/0};
  std::string api_key;              // non-empty: every route but /health needs "Authorization: Bearer KEY"
  size_t max_body = 1 << 20;        // request bodies larger than this are refused (413)
  // Speculative decoding (EngineOptions::speculation): a draft model folder of the same family
  // and vocabulary, or prompt lookup; neither by default.
  std::string draft_dir;
  bool prompt_lookup = false;
  int64_t draft_tokens = 4;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();  // stops the HTTP server (without draining) if shutdown() was not called
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port and starts answering on a thread of its own (/health says 503 until
  // load() is done). Returns the bound port. A port that cannot be bound is an attn::Error.
  int start();
  // Opens the model folder (any family, or a GPT-2 folder) and starts the engine; from then on
  // requests are served. A folder that cannot be served is an attn::Error.
  void load();
  // Refuses new completions (503), lets running ones finish for up to `timeout` (then cancels
  // them), stops the HTTP server and waits for its threads.
  void shutdown(std::chrono::milliseconds timeout);

  // The served model's id: the model folder's base name (the `model` field must equal it).
  const std::string& model_id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn::serve
