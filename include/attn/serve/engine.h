// attn/serve/engine.h — the engine behind `attn serve`: one thread owns a model folder's model
// and a running batch of decoder rows; HTTP worker threads only submit requests (token ids and
// generation parameters) and read back each request's events. At every decoding step finished
// or cancelled rows leave the batch and waiting requests join it (continuous batching, Orca's
// iteration-level scheduling): a request that arrives while others decode waits at most one
// step. Each request's prompt is encoded (or prefilled) alone and its decoding steps run on
// batch-invariant kernels, so its tokens and log-probabilities are the same bits whether it
// runs alone or among others, whenever it joined (docs/serving.md).
// Families: encoder-decoder (the prompt is the source; greedy, sampling, beam search) and
// decoder-only (the prompt is continued; greedy, sampling, beam search). Not here: HTTP,
// JSON, text (the server and run::TokenCodec do that), encoder-only models (no decoding).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "attn/decode/kv_pool.h"
#include "attn/run/model_folder.h"
#include "attn/serve/metrics.h"

namespace attn::serve {

// How one request decodes (OpenAI's completion fields, and attn's own where OpenAI has none).
struct GenerationParams {
  // Generated tokens at most, EOS included (as `attn generate --max-tokens`); >= 1. A choice
  // cut here finishes with FinishReason::Length.
  int64_t max_tokens = 16;
  // 0: greedy (the most probable token, ties to the lower id); > 0: sampling at this temperature.
  double temperature = 1.0;
  double top_p = 1.0;  // in (0, 1]
  int64_t top_k = 0;   // >= 0 (0: no top-k filter)
  // The sampling seed; unset: the engine draws one. Choice i of a request samples from the i-th
  // stream of Rng(seed), as prompt i of `attn generate --seed` does.
  std::optional<uint64_t> seed;
  int64_t n = 1;  // choices, >= 1 (independent samples; with beam search the n best hypotheses)
  // >= 1: beam search with this many live hypotheses and the GNMT length penalty `alpha`
  // (as `attn translate --beam`); temperature, top_p, top_k are then ignored and n <= beam.
  // 0: no beam search.
  int64_t beam = 0;
  double alpha = 0.6;
  // -1: no log-probabilities; 0..5: each token event carries its log-probability and this
  // many most probable alternatives (not with beam search).
  int64_t logprobs = -1;
};

// A request the engine refuses: `field` names the offending request field (OpenAI's `param`),
// `code` is OpenAI's error code ("context_length_exceeded", "invalid_value", ...).
class RequestError : public std::runtime_error {
 public:
  RequestError(std::string field, std::string code, const std::string& message)
      : std::runtime_error(message), field_(std::move(field)), code_(std::move(code)) {}
  const std::string& field() const { return field_; }
  const std::string& code() const { return code_; }

 private:
  std::string field_, code_;
};

// The queue is full (503 with Retry-After), the engine is draining (503), or the paged KV
// cache's pool is too small for the request (503, code "kv_cache_full"). `code`: OpenAI's
// error code when it is not the queue's ("" otherwise).
class Unavailable : public std::runtime_error {
 public:
  explicit Unavailable(const std::string& message, std::string code = "")
      : std::runtime_error(message), code_(std::move(code)) {}
  const std::string& code() const { return code_; }

 private:
  std::string code_;
};

enum class FinishReason { Stop, Length, Cancelled };  // Stop: EOS; Length: max_tokens
const char* finish_reason_name(FinishReason r);       // "stop", "length", "cancelled"

struct TokenLogprob {
  int64_t token = -1;
  double logprob = 0;
};

// What a request's reader sees, in order. Greedy and sampling choices send one Token event per
// generated token (EOS is never sent as a token) and then one Finish; beam search sends no Token
// events and its n best hypotheses as Finish events (choice 0 the best) when the search ends.
// Events of different choices interleave. After every choice has finished, one Done event.
struct Event {
  enum class Kind { Token, Finish, Done, Error };
  Kind kind = Kind::Token;
  int64_t choice = 0;
  // Token: the token, its log-probability under the model, and (with logprobs >= 1) the
  // `logprobs` most probable tokens of that step, best first (ties: lower id first).
  int64_t token = -1;
  double logprob = 0;
  std::vector<TokenLogprob> top;
  // Finish: why the choice ended, all its generated tokens (EOS excluded) and their summed
  // log-probability (EOS included when it ended with EOS); beam search also its score.
  FinishReason reason = FinishReason::Stop;
  std::vector<int64_t> tokens;
  double score = 0;
  // Error: what went wrong inside the engine (the request is over).
  std::string message;
};

class Engine;

// One submitted request, shared by the HTTP thread that reads it and the engine that fills it.
class Request {
 public:
  // Waits up to `timeout` for the next event; false on timeout (or after Done/Error was read).
  bool next(Event& out, std::chrono::milliseconds timeout);
  // Frees the request's rows at the engine's next step (a client that went away, a stop
  // string found); its remaining choices finish with FinishReason::Cancelled. Idempotent.
  void cancel();
  bool cancelled() const;
  // Frees one choice's row at the engine's next step (a stop string found in that choice); it
  // finishes with FinishReason::Cancelled and the request's other choices go on. Beam search
  // has one search for all its choices: there the whole request is cancelled.
  void cancel_choice(int64_t choice);
  // The choices cancel_choice() named so far.
  std::vector<int64_t> cancelled_choices() const;
  int64_t prompt_tokens() const { return prompt_tokens_; }

 private:
  friend class Engine;
  void push(Event e);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  bool over_ = false;        // Done or Error pushed
  bool read_over_ = false;   // ... and read
  bool cancelled_ = false;
  std::vector<int64_t> cancelled_choices_;
  int64_t prompt_tokens_ = 0;
};

// Speculative decoding in the engine: a draft model or prompt lookup (neither: off).
struct SpeculationOptions {
  // A smaller model of the same family and vocabulary (the folder must outlive the engine), or
  // null. With prepend_bos it reads <bos> + prompt as the served model does.
  const run::ModelFolder* draft = nullptr;
  // Prompt lookup (decode::lookup_draft): the tokens that followed the latest earlier
  // occurrence of the last n-gram of prompt + output. Not with a draft model.
  bool lookup = false;
  int64_t draft_tokens = 4;  // K, drafted per round (>= 1)
  int64_t ngram_max = 3, ngram_min = 1;
  // Test hook, 0 in real use: this many rejected draft tokens per round are taken as accepted
  // (a wrong acceptance rule that the tests must catch).
  int64_t test_accept_offset = 0;
  bool enabled() const { return draft != nullptr || lookup; }
};

struct EngineOptions {
  int64_t max_batch = 16;  // decoder rows per step at most (choices x beams of running requests)
  int64_t max_queue = 64;  // requests waiting to join at most; beyond that submit() is Unavailable
  bool batch_invariant = true;  // decoding steps on batch-invariant kernels (ops/batch_invariant.h)
  // Decoder-only: the model reads <bos> + prompt (off for GPT-2 checkpoints, which read the
  // prompt as it is, as run::GenerateSettings::prepend_bos).
  bool prepend_bos = true;
  // The KV cache: contiguous, or paged (decode/kv_pool.h) over one pool of kv.pool_bytes (0:
  // enough for max_batch rows at the model's max_len). With the paged cache a request joins
  // only when the pool can hold its worst case (every row at prompt + max_tokens positions, no
  // block shared) beside the worst cases of the running ones, so a running request never finds
  // the pool full; one whose worst case exceeds the whole pool is refused (Unavailable).
  decode::KvCacheOptions kv;
  // Paged cache, decoder-only models, batch-invariant steps: a joining request takes the
  // blocks of its prompt's longest block-aligned prefix that a running request's prompt shares
  // (KVCache::share_prefix) instead of computing them. Prompts are then prefilled on the
  // batch-invariant kernels too, so the shared keys and values are the bits the request would
  // have computed itself.
  bool prefix_sharing = true;
  // Speculative decoding (decode/speculative.h, docs/serving.md): while the running batch is
  // one greedy choice (the case where a step leaves the machine idle), each step drafts up to
  // speculation.draft_tokens tokens and the model checks them in one pass. The answer is token
  // for token, log-probability for log-probability, the one plain steps give (batch-invariant
  // steps, which make a position's bits the same whether scored alone or with the drafts;
  // with batch_invariant off, speculation is off too).
  SpeculationOptions speculation;
};

class Engine {
 public:
  // Starts the engine thread over the folder's model (encoder-decoder or decoder-only; else
  // attn::Error). The folder must outlive the engine.
  Engine(const run::ModelFolder& folder, EngineOptions options);
  ~Engine();  // cancels what is left and joins the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Checks the request against the model (ids in range and not PAD, the prompt within the
  // model's context, max_tokens, the parameters: RequestError naming the field) and queues it.
  // Unavailable when max_queue requests already wait, the engine is draining, or the paged KV
  // cache's whole pool could not hold the request's worst case.
  std::shared_ptr<Request> submit(std::vector<int64_t> prompt, const GenerationParams& params);

  // Stops accepting (submit -> Unavailable), lets running and queued requests finish for up to
  // `timeout`, then cancels the rest; returns when the engine thread is idle.
  void drain(std::chrono::milliseconds timeout);

  // The longest prompt accepted, in tokens (encoder-decoder: source tokens; decoder-only: prompt
  // tokens without the <bos> the engine prepends): the served context is the config's max_len,
  // whatever the positional encoding.
  int64_t max_prompt_tokens() const;
  // The most generated tokens a request may ask for (its max_tokens), given its prompt length.
  int64_t max_new_tokens(int64_t prompt_tokens) const;

  MetricsSnapshot metrics() const;

  // Runs `f` on the calling thread while the engine thread is between steps, so that `f` may
  // use the model alone (a pass with attention capture on, a greedy search); the engine waits
  // until it returns. What `f` throws is passed on.
  void with_model(const std::function<void()>& f);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn::serve
