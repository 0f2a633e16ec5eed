// serve/server.cpp — see attn/serve/server.h. cpp-httplib (Debian's compiled library) serves
// HTTP; each request runs on one of its worker threads. A completion is submitted to the engine
// once per prompt and its events are read back: all of them before answering, or, streamed,
// from a chunked content provider that blocks on the next event (the provider is called in a
// loop until it calls done(); returning without writing would spin) and whose releaser, which
// always runs, cancels the engine requests when the client goes away.
#include "attn/serve/server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "attn/core/error.h"
#include "attn/ops/threads.h"
#include "attn/run/fill_mask.h"
#include "attn/run/model_folder.h"
#include "attn/serve/api.h"
#include "attn/serve/engine.h"
#include "attn/serve/explorer.h"
#include "attn/serve/metrics.h"
#include "attn/serve/text.h"
#include "attn/serve/www.h"

namespace attn::serve {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kCmd = "serve";
constexpr auto kPoll = std::chrono::milliseconds(200);  // how often a waiting stream checks its client
constexpr auto kPing = std::chrono::seconds(15);        // an SSE comment after this long without data

enum class State { Loading, Ready, Draining };

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.status == 503) {
    res.set_header("Retry-After", "1");
    res.set_header("x-should-retry", "false");
  }
  send_json(res, e.status, error_json(e));
}

ApiError unavailable(const std::string& message, const std::string& code) {
  return ApiError(503, "unavailable_error", message, std::nullopt, code);
}

std::string random_id() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  const char* digits = "0123456789abcdef";
  std::string id = "cmpl-";
  for (int i = 0; i < 24; ++i) id += digits[rng() % 16];
  return id;
}

// A token's text in the logprobs object: valid UTF-8 (a BPE byte that is part of a character
// reads as U+FFFD there).
std::string shown_piece(const TextCodec& codec, int64_t id) {
  return io::utf8_replace_invalid(codec.piece(id));
}

// One choice being read from the engine.
struct ChoiceState {
  explicit ChoiceState(ChoiceText t) : text(std::move(t)) {}
  ChoiceText text;
  std::vector<Event> used;   // the Token events the text consumed (for logprobs)
  size_t logprobs_sent = 0;  // streaming: those already sent
  bool finished = false;
  std::string finish_reason;
};

// One prompt of a completion: one engine request with n choices.
struct PromptState {
  std::shared_ptr<Request> request;
  std::string echo;  // the prompt text prepended to each choice (echo: true), else empty
  int64_t echo_length = 0;
  int64_t prompt_tokens = 0;
  std::vector<ChoiceState> choices;
  bool started = false;  // streaming: the echo chunks went out
  bool done = false;
};

}  // namespace

struct Server::Impl {
  ServerOptions options;
  std::string model_id;
  int64_t created = 0;
  httplib::Server http;
  std::thread listener;
  std::atomic<bool> listener_done{false};  // set when the listening loop has returned
  std::atomic<State> state{State::Loading};

  // Set by load(), read only once state is Ready.
  run::GenerationFolder opened;
  std::optional<run::GenerationFolder> draft;  // --draft's folder
  std::unique_ptr<TextCodec> codec;
  std::unique_ptr<Engine> engine;
  models::Arch arch = models::Arch::EncoderDecoder;
  std::mutex fill_mu;  // encoder-only: one fill-mask pass at a time
  // The thread count of the thread that made the server (attn serve --threads): HTTP worker
  // threads take it before they run the model (OpenMP's default for new threads is every core).
  const int64_t threads = attn::num_threads();

  mutable std::mutex stats_mu;
  std::map<int, uint64_t> responses;  // HTTP status -> responses sent
  MetricsSnapshot local;              // encoder-only requests (no engine)

  explicit Impl(ServerOptions o) : options(std::move(o)) {
    std::filesystem::path dir = std::filesystem::path(options.model_dir).lexically_normal();
    if (dir.filename().empty()) dir = dir.parent_path();
    model_id = dir.filename().string();
    if (model_id.empty() || model_id == ".") model_id = std::filesystem::absolute(dir).lexically_normal().filename().string();
    created = static_cast<int64_t>(std::time(nullptr));
    local = empty_metrics(options.max_batch);
  }

  // ---- shared checks ------------------------------------------------------------------------

  // Bearer key and readiness; answers and returns false when the request may not go on.
  bool admit(const httplib::Request& req, httplib::Response& res) {
    if (!options.api_key.empty() && req.get_header_value("Authorization") != "Bearer " + options.api_key) {
      res.set_header("WWW-Authenticate", "Bearer");
      send_error(res, ApiError(401, "authentication_error",
                               req.has_header("Authorization") ? "the API key is wrong"
                                                               : "an API key is required: Authorization: Bearer KEY",
                               std::nullopt, std::string("invalid_api_key")));
      return false;
    }
    if (state.load() == State::Loading) {
      send_error(res, unavailable("Loading model", "model_loading"));
      return false;
    }
    return true;
  }

  // Runs a handler with every failure turned into an error response.
  template <class F>
  httplib::Server::Handler guarded(F f) {
    return [this, f](const httplib::Request& req, httplib::Response& res) {
      try {
        if (!admit(req, res)) return;
        f(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const RequestError& e) {
        send_error(res, ApiError(400, "invalid_request_error", e.what(), e.field(), e.code()));
      } catch (const Unavailable& e) {
        send_error(res, unavailable(e.what(), !e.code().empty()                 ? e.code()
                                              : state.load() == State::Draining ? "shutting_down"
                                                                                : "queue_full"));
      } catch (const std::exception& e) {
        send_error(res, ApiError(500, "server_error", str_cat("internal error: ", e.what())));
      }
    };
  }

  void check_model(const std::string& model) const {
    if (model != model_id)
      throw ApiError(404, "invalid_request_error",
                     str_cat("the model '", model, "' does not exist; this server serves '", model_id, "'"),
                     std::string("model"), std::string("model_not_found"));
  }

  // ---- routes -------------------------------------------------------------------------------

  void health(const httplib::Request&, httplib::Response& res) {
    switch (state.load()) {
      case State::Loading: send_error(res, unavailable("Loading model", "model_loading")); return;
      case State::Draining: send_error(res, unavailable("the server is shutting down", "shutting_down")); return;
      case State::Ready: send_json(res, 200, {{"status", "ok"}}); return;
    }
  }

  void models_list(const httplib::Request&, httplib::Response& res) {
    json model = {{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "attn"},
                  {"family", models::arch_name(arch)}};
    send_json(res, 200, {{"object", "list"}, {"data", json::array({model})}});
  }

  void metrics(const httplib::Request&, httplib::Response& res) {
    MetricsSnapshot m;
    std::map<int, uint64_t> by_status;
    {
      std::lock_guard<std::mutex> lock(stats_mu);
      m = local;
      by_status = responses;
    }
    if (engine) m = engine->metrics();
    res.status = 200;
    res.set_content(prometheus_text(m, by_status, state.load() != State::Loading), "text/plain; version=0.0.4");
  }

  void tokenize(const httplib::Request& req, httplib::Response& res) {
    const json j = parse_json_object(req.body);
    auto content = j.find("content");
    if (content == j.end() || !content->is_string())
      throw invalid("content", "content must be a string", content == j.end() ? "missing_required_parameter" : "invalid_type");
    bool with_pieces = false;
    if (auto w = j.find("with_pieces"); w != j.end() && !w->is_null()) {
      if (!w->is_boolean()) throw invalid("with_pieces", "with_pieces must be true or false", "invalid_type");
      with_pieces = w->get<bool>();
    }
    const std::string text = content->get<std::string>();
    std::vector<int64_t> ids;
    if (!text.empty()) {
      try {
        ids = codec->encode(text);
      } catch (const Error& e) {
        throw invalid("content", e.what());
      }
    }
    json tokens = json::array();
    for (int64_t id : ids) {
      if (!with_pieces) {
        tokens.push_back(id);
        continue;
      }
      const std::string piece = codec->piece(id);
      json shown;
      if (io::utf8_error_offset(piece) < 0) {
        shown = piece;
      } else {  // a piece that is part of a character: its bytes
        shown = json::array();
        for (unsigned char b : piece) shown.push_back(static_cast<int>(b));
      }
      tokens.push_back({{"id", id}, {"piece", shown}});
    }
    send_json(res, 200, {{"tokens", tokens}});
  }

  void detokenize(const httplib::Request& req, httplib::Response& res) {
    const json j = parse_json_object(req.body);
    auto tokens = j.find("tokens");
    if (tokens == j.end() || !tokens->is_array())
      throw invalid("tokens", "tokens must be a list of token ids", tokens == j.end() ? "missing_required_parameter" : "invalid_type");
    std::vector<int64_t> ids;
    for (const json& t : *tokens) {
      if (!t.is_number_integer()) throw invalid("tokens", str_cat("a token id must be an integer, got ", t.dump()), "invalid_type");
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id >= codec->vocab_size())
        throw invalid("tokens", str_cat("token id ", id, " is outside the vocabulary [0, ", codec->vocab_size(), ")"));
      ids.push_back(id);
    }
    send_json(res, 200, {{"content", codec->decode(ids)}});
  }

  // ---- completions --------------------------------------------------------------------------

  std::vector<int64_t> tokens_of(const RawPrompt& p) const {
    if (!p.text) return p.ids;
    try {
      return codec->encode(*p.text);
    } catch (const Error& e) {
      throw invalid("prompt", e.what());
    }
  }

  // Raw bytes of a choice's generated ids. A decoder-only model's continuation of a word or
  // SentencePiece prompt is the text the prompt and continuation make together, less the
  // prompt's own text (so that it starts with the space between them).
  ChoiceText::Decoder decoder_for(const std::vector<int64_t>& prompt) const {
    const TextCodec* c = codec.get();
    const bool has_eos = std::find(prompt.begin(), prompt.end(), c->eos()) != prompt.end();
    if (arch != models::Arch::DecoderOnly || !c->joins_prompt() || has_eos)
      return [c](const std::vector<int64_t>& ids) { return c->decode_bytes(ids); };
    const std::string base = c->decode_bytes(prompt);
    return [c, prompt, base](const std::vector<int64_t>& ids) {
      std::vector<int64_t> all = prompt;
      all.insert(all.end(), ids.begin(), ids.end());
      std::string text = c->decode_bytes(all);
      if (text.compare(0, base.size(), base) == 0) return text.substr(base.size());
      return c->decode_bytes(ids);
    };
  }

  // OpenAI's logprobs object for token events [from, to) of a choice.
  json logprobs_json(const PromptState& p, const ChoiceState& c, size_t from, size_t to) const {
    json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
    for (size_t i = from; i < to && i < c.used.size(); ++i) {
      const Event& e = c.used[i];
      tokens.push_back(shown_piece(*codec, e.token));
      lps.push_back(e.logprob);
      json top = json::object();
      for (const TokenLogprob& t : e.top) top[shown_piece(*codec, t.token)] = t.logprob;
      if (!top.contains(shown_piece(*codec, e.token))) top[shown_piece(*codec, e.token)] = e.logprob;
      tops.push_back(top);
      const int64_t offset = i < c.text.offsets().size() ? c.text.offsets()[i] : 0;
      offsets.push_back(p.echo_length + offset);
    }
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }

  struct Completion {
    CompletionRequest req;
    std::string id;
    std::vector<PromptState> prompts;
    size_t current = 0;  // streaming: the prompt being read
    int64_t n = 1;

    void cancel_all() {
      for (PromptState& p : prompts)
        if (p.request) p.request->cancel();
    }
    json usage() const {
      int64_t prompt = 0, completion = 0;
      for (const PromptState& p : prompts) {
        prompt += p.prompt_tokens;
        for (const ChoiceState& c : p.choices) completion += c.text.tokens_used();
      }
      return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
    }
  };

  json chunk(const Completion& job, json choices) const {
    json j = {{"id", job.id}, {"object", "text_completion"}, {"created", static_cast<int64_t>(std::time(nullptr))},
              {"model", model_id}, {"choices", std::move(choices)}};
    if (job.req.include_usage) j["usage"] = nullptr;
    return j;
  }

  static std::string sse(const json& j) {
    return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
  }

  // Submits every prompt (a refused one cancels those already queued).
  std::shared_ptr<Completion> submit(CompletionRequest req) {
    auto job = std::make_shared<Completion>();
    job->id = random_id();
    job->n = req.params.n;
    std::vector<std::vector<int64_t>> ids;
    for (const RawPrompt& p : req.prompts) ids.push_back(tokens_of(p));
    job->req = std::move(req);
    try {
      for (size_t i = 0; i < ids.size(); ++i) {
        PromptState p;
        p.prompt_tokens = static_cast<int64_t>(ids[i].size());
        if (job->req.echo) {
          p.echo = codec->decode(ids[i]);
          p.echo_length = utf8_length(p.echo);
        }
        for (int64_t c = 0; c < job->n; ++c) p.choices.emplace_back(ChoiceText(decoder_for(ids[i]), job->req.stop));
        p.request = engine->submit(ids[i], job->req.params);
        job->prompts.push_back(std::move(p));
      }
    } catch (...) {
      job->cancel_all();
      throw;
    }
    return job;
  }

  // Applies one engine event of prompt `p`; appends what a stream sends to `out` (when set).
  // Returns an error to report, if the engine failed.
  std::optional<ApiError> apply(Completion& job, size_t pi, const Event& e, std::string* out) {
    PromptState& p = job.prompts[pi];
    const bool want_logprobs = job.req.params.logprobs >= 0;
    const auto index = [&](int64_t c) { return static_cast<int64_t>(pi) * job.n + c; };
    if (e.kind == Event::Kind::Done) {
      p.done = true;
      // The engine promises a Finish for every choice before Done; an answer with a choice
      // missing would be wrong text, so it is an error instead.
      for (size_t c = 0; c < p.choices.size(); ++c)
        if (!p.choices[c].finished)
          return ApiError(500, "server_error", str_cat("the engine ended the request without finishing choice ", c),
                          std::nullopt, std::string("engine_error"));
      return std::nullopt;
    }
    if (e.kind == Event::Kind::Error)
      return ApiError(500, "server_error", str_cat("the engine failed: ", e.message), std::nullopt, std::string("engine_error"));
    if (e.choice < 0 || e.choice >= static_cast<int64_t>(p.choices.size())) return std::nullopt;
    ChoiceState& c = p.choices[static_cast<size_t>(e.choice)];
    if (c.finished) return std::nullopt;  // stopped by a stop string: the rest is ignored
    std::string delta;
    if (e.kind == Event::Kind::Token) {
      delta = c.text.add(e.token);
      c.used.push_back(e);
      if (c.text.stopped()) {
        c.finished = true;
        c.finish_reason = "stop";
        // The choice's row leaves the batch; once every choice is over, the whole request.
        p.request->cancel_choice(e.choice);
        bool all = true;
        for (const ChoiceState& o : p.choices) all = all && o.finished;
        if (all) p.request->cancel();
      }
      if (out && (!delta.empty() || want_logprobs || c.finished)) {
        json choice = {{"text", delta}, {"index", index(e.choice)}, {"logprobs", nullptr},
                       {"finish_reason", c.finished ? json(c.finish_reason) : json(nullptr)}};
        if (want_logprobs) {
          choice["logprobs"] = logprobs_json(p, c, c.logprobs_sent, c.used.size());
          c.logprobs_sent = c.used.size();
        }
        *out += sse(chunk(job, json::array({choice})));
      }
      return std::nullopt;
    }
    // Finish.
    delta = c.text.finish(e.tokens);
    c.finished = true;
    if (c.text.stopped() || e.reason == FinishReason::Stop) c.finish_reason = "stop";
    else if (e.reason == FinishReason::Length) c.finish_reason = "length";
    else c.finish_reason = "cancelled";  // the engine cancelled it (shutdown past --timeout)
    if (c.used.size() > static_cast<size_t>(c.text.tokens_used())) c.used.resize(static_cast<size_t>(c.text.tokens_used()));
    if (out) {
      json choice = {{"text", delta}, {"index", index(e.choice)}, {"logprobs", nullptr}, {"finish_reason", c.finish_reason}};
      if (want_logprobs) {
        choice["logprobs"] = logprobs_json(p, c, c.logprobs_sent, c.used.size());
        c.logprobs_sent = c.used.size();
      }
      *out += sse(chunk(job, json::array({choice})));
    }
    return std::nullopt;
  }

  void completions(const httplib::Request& req, httplib::Response& res) {
    CompletionRequest r = parse_completion_request(req.body);
    check_model(r.model);
    if (state.load() == State::Draining) throw Unavailable("the server is shutting down");
    if (arch == models::Arch::EncoderOnly) return fill_masks(std::move(r), res);
    std::shared_ptr<Completion> job = submit(std::move(r));
    if (job->req.stream) return stream(job, res);

    for (size_t pi = 0; pi < job->prompts.size(); ++pi) {
      PromptState& p = job->prompts[pi];
      Event e;
      while (!p.done) {
        if (!p.request->next(e, kPoll)) continue;
        if (auto err = apply(*job, pi, e, nullptr)) {
          job->cancel_all();
          throw *err;
        }
      }
    }
    json choices = json::array();
    for (size_t pi = 0; pi < job->prompts.size(); ++pi) {
      const PromptState& p = job->prompts[pi];
      for (size_t c = 0; c < p.choices.size(); ++c) {
        const ChoiceState& ch = p.choices[c];
        choices.push_back({{"text", p.echo + ch.text.text()},
                           {"index", static_cast<int64_t>(pi) * job->n + static_cast<int64_t>(c)},
                           {"logprobs", job->req.params.logprobs >= 0 ? logprobs_json(p, ch, 0, ch.used.size()) : json(nullptr)},
                           {"finish_reason", ch.finish_reason.empty() ? json("length") : json(ch.finish_reason)}});
      }
    }
    send_json(res, 200, {{"id", job->id}, {"object", "text_completion"}, {"created", static_cast<int64_t>(std::time(nullptr))},
                         {"model", model_id}, {"choices", choices}, {"usage", job->usage()}});
  }

  void stream(std::shared_ptr<Completion> job, httplib::Response& res) {
    auto last_write = std::make_shared<Clock::time_point>(Clock::now());
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    // Exactly "text/event-stream": cpp-httplib gzips any other text/* type, chunk by chunk
    // without flushing, which would hold every token back until the end.
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, last_write](size_t, httplib::DataSink& sink) -> bool {
          std::string out;
          bool over = false;
          while (out.empty()) {
            if (job->current >= job->prompts.size()) {
              if (job->req.include_usage) {
                json u = chunk(*job, json::array());
                u["usage"] = job->usage();
                out += sse(u);
              }
              out += "data: [DONE]\n\n";
              over = true;
              break;
            }
            PromptState& p = job->prompts[job->current];
            if (!p.started) {
              p.started = true;
              if (!p.echo.empty()) {
                json choices = json::array();
                for (size_t c = 0; c < p.choices.size(); ++c)
                  choices.push_back({{"text", p.echo}, {"index", static_cast<int64_t>(job->current) * job->n + static_cast<int64_t>(c)},
                                     {"logprobs", nullptr}, {"finish_reason", nullptr}});
                out += sse(chunk(*job, choices));
              }
              continue;
            }
            Event e;
            if (!p.request->next(e, kPoll)) {
              if (!sink.is_writable()) return false;  // the client went away: the releaser cancels
              if (Clock::now() - *last_write > kPing) out = ": ping\n\n";
              continue;
            }
            if (auto err = apply(*job, job->current, e, &out)) {
              out += sse(error_json(*err));
              over = true;
              break;
            }
            if (p.done) ++job->current;
          }
          if (!sink.write(out.data(), out.size())) return false;
          *last_write = Clock::now();
          if (over) sink.done();
          return true;
        },
        [job](bool) { job->cancel_all(); });
  }

  // Encoder-only: each prompt's [MASK] tokens replaced by their most probable symbol.
  void fill_masks(CompletionRequest r, httplib::Response& res) {
    if (r.params.n != 1) throw invalid("n", "an encoder-only model fills masks once per prompt: n must be 1");
    if (r.params.beam != 0) throw invalid("beam_size", "an encoder-only model does not search: no beam_size");
    if (r.params.logprobs >= 0) throw invalid("logprobs", "logprobs is not available for an encoder-only model");
    const run::ModelFolder& folder = opened.folder;
    const io::Vocab& vocab = *folder.vocab;
    std::vector<std::vector<int64_t>> seqs;
    for (const RawPrompt& p : r.prompts) {
      if (p.text) {
        try {
          seqs.push_back(run::read_masked_text(*p.text, vocab, kCmd, "the prompt"));
        } catch (const Error& e) {
          throw invalid("prompt", e.what());
        }
        continue;
      }
      for (int64_t id : p.ids)
        if (id < 0 || id >= folder.src_vocab_size || id == folder.pad)
          throw invalid("prompt", str_cat("the prompt holds token id ", id, ", outside the vocabulary or <pad>"));
      if (std::find(p.ids.begin(), p.ids.end(), vocab.mask_id()) == p.ids.end())
        throw invalid("prompt", str_cat("the prompt holds no [MASK] (id ", vocab.mask_id(), ")"));
      seqs.push_back(p.ids);
    }
    std::vector<std::vector<run::MaskPrediction>> found;
    {
      std::lock_guard<std::mutex> lock(fill_mu);
      attn::set_num_threads(threads);
      try {
        found = run::fill_masks(folder, seqs, 1);
      } catch (const Error& e) {
        throw invalid("prompt", e.what());
      }
    }
    json choices = json::array();
    int64_t prompt_tokens = 0, filled_tokens = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      std::vector<int64_t> filled = seqs[i];
      for (const run::MaskPrediction& m : found[i])
        if (!m.candidates.empty()) {
          filled[static_cast<size_t>(m.position)] = m.candidates.front().first;
          ++filled_tokens;
        }
      prompt_tokens += static_cast<int64_t>(seqs[i].size());
      choices.push_back({{"text", vocab.decode(filled)}, {"index", static_cast<int64_t>(i)}, {"logprobs", nullptr},
                         {"finish_reason", "stop"}});
    }
    {
      std::lock_guard<std::mutex> lock(stats_mu);
      local.requests_total += seqs.size();
      local.requests_finished_total += seqs.size();
      local.prompt_tokens_total += static_cast<uint64_t>(prompt_tokens);
      local.completion_tokens_total += static_cast<uint64_t>(filled_tokens);
    }
    const json usage = {{"prompt_tokens", prompt_tokens}, {"completion_tokens", filled_tokens},
                        {"total_tokens", prompt_tokens + filled_tokens}};
    const std::string id = random_id();
    const int64_t now = static_cast<int64_t>(std::time(nullptr));
    if (!r.stream) {
      send_json(res, 200, {{"id", id}, {"object", "text_completion"}, {"created", now}, {"model", model_id},
                           {"choices", choices}, {"usage", usage}});
      return;
    }
    std::string body;
    for (const json& c : choices) {
      json j = {{"id", id}, {"object", "text_completion"}, {"created", now}, {"model", model_id},
                {"choices", json::array({c})}};
      if (r.include_usage) j["usage"] = nullptr;
      body += sse(j);
    }
    if (r.include_usage)
      body += sse({{"id", id}, {"object", "text_completion"}, {"created", now}, {"model", model_id},
                   {"choices", json::array()}, {"usage", usage}});
    body += "data: [DONE]\n\n";
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_content(body, "text/event-stream");
  }

  // ---- the explorer (docs/explorer.md) ------------------------------------------------------

  // POST /v1/lab/attention: no model involved, only the attention op.
  void lab(const httplib::Request& req, httplib::Response& res) {
    send_json(res, 200, lab_attention(parse_json_object(req.body)));
  }

  // POST /v1/attention: one pass with capture on, while the engine waits between steps (the
  // capture flag and the weights it leaves are the model's, shared with the engine's passes).
  void attention(const httplib::Request& req, httplib::Response& res) {
    const json j = parse_json_object(req.body);
    if (auto m = j.find("model"); m != j.end() && !m->is_null()) {
      if (!m->is_string()) throw invalid("model", "model must be a string", "invalid_type");
      check_model(m->get<std::string>());
    }
    const AttentionRequest r = parse_attention_request(j);
    if (state.load() == State::Draining) throw Unavailable("the server is shutting down");
    json out;
    const auto run = [&] { out = model_attention(opened, *codec, r); };
    if (engine) {
      engine->with_model(run);
    } else {
      std::lock_guard<std::mutex> lock(fill_mu);
      attn::set_num_threads(threads);
      run();
    }
    out["model"] = model_id;
    send_json(res, 200, out);
  }

  // GET /v1/figures/NAME.svg[?tokens=T][&input=TEXT]: the served model's figures (T: 8 unless given,
  // 1..1024; the steps figure runs the model over TEXT).
  void figure(const httplib::Request& req, httplib::Response& res) {
    int64_t tokens = 8;
    if (req.has_param("tokens")) {
      const std::string t = req.get_param_value("tokens");
      if (t.empty() || t.size() > 4 || t.find_first_not_of("0123456789") != std::string::npos ||
          std::stoll(t) < 1 || std::stoll(t) > 1024)
        throw invalid("tokens", str_cat("tokens must be an integer in [1, 1024], got '", t, "'"));
      tokens = std::stoll(t);
    }
    std::optional<std::string> input;
    if (req.has_param("input")) input = req.get_param_value("input");
    const std::string name = req.matches[1].str();
    std::string svg;
    const auto run = [&] { svg = model_figure(opened, *codec, name, tokens, input); };
    if (name != "steps") {
      run();  // from the configuration alone
    } else if (engine) {
      if (state.load() == State::Draining) throw Unavailable("the server is shutting down");
      engine->with_model(run);
    } else {
      std::lock_guard<std::mutex> lock(fill_mu);
      attn::set_num_threads(threads);
      run();
    }
    res.status = 200;
    res.set_content(svg, "image/svg+xml");
  }

  // The page's files, embedded at build time; "/" is index.html. No key needed: they hold no
  // data (what the page asks for next does).
  void static_routes() {
    for (const www::File& f : www::files()) {
      const www::File* file = &f;
      const auto handler = [file](const httplib::Request&, httplib::Response& res) {
        res.status = 200;
        res.set_header("Cache-Control", "no-cache");
        res.set_content(std::string(file->bytes()), file->mime);
      };
      http.Get(f.path, handler);
      if (std::string(f.path) == "/index.html") http.Get("/", handler);
    }
  }

  // ---- wiring -------------------------------------------------------------------------------

  void routes() {
    http.Get("/health", [this](const httplib::Request& req, httplib::Response& res) { health(req, res); });
    http.Get("/v1/models", guarded([this](const httplib::Request& q, httplib::Response& s) { models_list(q, s); }));
    http.Get("/metrics", guarded([this](const httplib::Request& q, httplib::Response& s) { metrics(q, s); }));
    http.Post("/v1/completions", guarded([this](const httplib::Request& q, httplib::Response& s) { completions(q, s); }));
    http.Post("/tokenize", guarded([this](const httplib::Request& q, httplib::Response& s) { tokenize(q, s); }));
    http.Post("/detokenize", guarded([this](const httplib::Request& q, httplib::Response& s) { detokenize(q, s); }));
    http.Post("/v1/attention", guarded([this](const httplib::Request& q, httplib::Response& s) { attention(q, s); }));
    http.Post("/v1/lab/attention", guarded([this](const httplib::Request& q, httplib::Response& s) { lab(q, s); }));
    http.Get(R"(/v1/figures/([a-z_]+)\.svg)", guarded([this](const httplib::Request& q, httplib::Response& s) { figure(q, s); }));
    static_routes();
    // The other methods on these paths: 405.
    const auto not_allowed = [](const char* allow) {
      return [allow](const httplib::Request& req, httplib::Response& res) {
        res.set_header("Allow", allow);
        send_error(res, ApiError(405, "invalid_request_error", str_cat(req.method, " is not allowed on ", req.path,
                                                                        " (", allow, " is)"),
                                 std::nullopt, std::string("method_not_allowed")));
      };
    };
    for (const char* path : {"/health", "/v1/models", "/metrics"}) {
      http.Post(path, not_allowed("GET"));
      http.Put(path, not_allowed("GET"));
      http.Patch(path, not_allowed("GET"));
      http.Delete(path, not_allowed("GET"));
    }
    for (const char* path : {"/v1/completions", "/tokenize", "/detokenize", "/v1/attention", "/v1/lab/attention"}) {
      http.Get(path, not_allowed("POST"));
      http.Put(path, not_allowed("POST"));
      http.Patch(path, not_allowed("POST"));
      http.Delete(path, not_allowed("POST"));
    }
    // Errors cpp-httplib answers itself (no route, body too large, unreadable request) get a
    // JSON body; responses that have one already keep it.
    http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      if (res.status == 404)
        send_error(res, ApiError(404, "not_found_error", str_cat("no route ", req.method, " ", req.path), std::nullopt,
                                 std::string("not_found")));
      else if (res.status == 413)
        send_error(res, ApiError(413, "invalid_request_error", "the request body is too large (--max-body)",
                                 std::nullopt, std::string("payload_too_large")));
      else
        send_error(res, ApiError(res.status, res.status >= 500 ? "server_error" : "invalid_request_error",
                                 str_cat("the request could not be handled (HTTP ", res.status, ")")));
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown exception";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, ApiError(500, "server_error", "internal error: " + what));
    });
    http.set_logger([this](const httplib::Request&, const httplib::Response& res) {
      std::lock_guard<std::mutex> lock(stats_mu);
      ++responses[res.status];
    });
  }
};

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  const ServerOptions& o = impl_->options;
  ATTN_CHECK(o.max_batch >= 1, kCmd, "--max-batch must be >= 1, got ", o.max_batch);
  ATTN_CHECK(o.max_queue >= 0, kCmd, "--max-queue must be >= 0, got ", o.max_queue);
  ATTN_CHECK(o.port >= 0 && o.port <= 65535, kCmd, "--port must be in [0, 65535], got ", o.port);
  ATTN_CHECK(o.max_body >= 1, kCmd, "--max-body must be >= 1");
  httplib::Server& h = impl_->http;
  // Each request holds a worker for its whole life (a stream until its last token): enough
  // workers for every running and queued request, and a few for /health and /metrics.
  const size_t workers = static_cast<size_t>(std::min<int64_t>(512, std::max<int64_t>(16, o.max_batch + o.max_queue + 8)));
  h.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  h.set_payload_max_length(o.max_body);
  h.set_keep_alive_max_count(100);
  h.set_tcp_nodelay(true);
  impl_->routes();
}

Server::~Server() {
  if (impl_->listener.joinable()) {
    impl_->http.stop();
    impl_->listener.join();
  }
}

int Server::start() {
  Impl& m = *impl_;
  int port = m.options.port;
  if (port == 0) {
    port = m.http.bind_to_any_port(m.options.host);
    ATTN_CHECK(port > 0, kCmd, "cannot bind ", m.options.host, " to a free port");
  } else {
    ATTN_CHECK(m.http.bind_to_port(m.options.host, port), kCmd, "cannot bind ", m.options.host, ":", port,
               " (in use, or not an address of this machine)");
  }
  m.listener = std::thread([&m] {
    m.http.listen_after_bind();
    m.listener_done.store(true);
  });
  // httplib's stop() does nothing until the listening loop has begun (is_running()), so a stop
  // that came first (a model that fails to load right after start) would leave the loop running
  // for ever: wait for it to begin, or to have ended.
  while (!m.http.is_running() && !m.listener_done.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  return port;
}

void Server::load() {
  Impl& m = *impl_;
  m.opened = run::open_generation_folder(m.options.model_dir, kCmd, false, std::nullopt);
  const run::ModelFolder& folder = m.opened.folder;
  m.arch = folder.base->config().arch;
  m.codec = std::make_unique<TextCodec>(folder, m.opened.bpe ? &*m.opened.bpe : nullptr);
  if (m.arch == models::Arch::EncoderOnly) {
    ATTN_CHECK(m.options.draft_dir.empty() && !m.options.prompt_lookup, kCmd, "the encoder-only model in '",
               folder.dir, "' does not decode: --draft and --prompt-lookup need a model that generates");
    ATTN_CHECK(folder.vocab && folder.vocab->has_mask(), kCmd, "the encoder-only model in '", folder.dir,
               "' has no vocabulary with a ", io::Vocab::kMaskToken, " token, so it cannot fill masks");
  } else {
    EngineOptions e;
    e.max_batch = m.options.max_batch;
    e.max_queue = m.options.max_queue;
    e.prepend_bos = m.opened.prepend_bos;
    e.kv = m.options.kv;
    e.speculation.lookup = m.options.prompt_lookup;
    e.speculation.draft_tokens = m.options.draft_tokens;
    if (!m.options.draft_dir.empty()) {
      m.draft = run::open_generation_folder(m.options.draft_dir, kCmd, false, std::nullopt);
      ATTN_CHECK(m.draft->prepend_bos == m.opened.prepend_bos, kCmd, "the draft model in '", m.options.draft_dir,
                 "' reads prompts ", m.draft->prepend_bos ? "with" : "without", " a <bos> in front and the served one ",
                 m.opened.prepend_bos ? "with" : "without", ": they need the same tokenizer");
      e.speculation.draft = &m.draft->folder;
    }
    m.engine = std::make_unique<Engine>(folder, e);
  }
  m.state.store(State::Ready);
}

void Server::shutdown(std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  m.state.store(State::Draining);
  if (m.engine) m.engine->drain(timeout);
  if (m.listener.joinable()) {
    m.http.stop();
    m.listener.join();
  }
}

const std::string& Server::model_id() const { return impl_->model_id; }

}  // namespace attn::serve
