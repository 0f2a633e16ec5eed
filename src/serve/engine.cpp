// serve/engine.cpp — see attn/serve/engine.h. First version: the engine thread serves queued
// requests one at a time through the run layer (run::search_batch / run::generate_batch) and
// sends each choice's tokens when it is done. Continuous batching replaces the loop below.
#include "attn/serve/engine.h"

#include <cmath>
#include <random>

#include "attn/core/error.h"
#include "attn/models/decoder_only.h"
#include "attn/run/generate.h"
#include "attn/run/translate.h"

namespace attn::serve {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
  }
  return "stop";
}

bool Request::next(Event& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (read_over_) return false;
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  out = std::move(events_.front());
  events_.pop_front();
  if (out.kind == Event::Kind::Done || out.kind == Event::Kind::Error) read_over_ = true;
  return true;
}

void Request::cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
}

bool Request::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void Request::push(Event e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (e.kind == Event::Kind::Done || e.kind == Event::Kind::Error) over_ = true;
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

struct Engine::Impl {
  struct Job {
    std::shared_ptr<Request> request;
    std::vector<int64_t> prompt;
    GenerationParams params;
    std::chrono::steady_clock::time_point submitted;
  };

  const run::ModelFolder& folder;
  EngineOptions options;
  models::Arch arch = models::Arch::EncoderDecoder;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> queue;
  bool stopping = false;   // the thread ends
  bool draining = false;   // submit refuses
  bool busy = false;       // a job is running
  MetricsSnapshot stats;
  std::thread thread;

  Impl(const run::ModelFolder& f, EngineOptions o) : folder(f), options(o), stats(empty_metrics(o.max_batch)) {
    ATTN_CHECK(folder.base != nullptr, "serve", "no model loaded");
    arch = folder.base->config().arch;
    ATTN_CHECK(arch == models::Arch::EncoderDecoder || arch == models::Arch::DecoderOnly, "serve",
               "the engine decodes encoder-decoder and decoder-only models; '", folder.dir, "' is ",
               models::arch_name(arch));
  }

  void run_job(Job& job) {
    const GenerationParams& p = job.params;
    std::vector<std::vector<decode::Hypothesis>> found;
    if (arch == models::Arch::EncoderDecoder) {
      run::SearchSettings s;
      s.beam = p.beam >= 1 ? p.beam : 1;
      s.alpha = p.alpha;
      s.n_best = p.beam >= 1 ? p.n : 1;
      s.max_len = p.max_tokens;
      found = run::search_batch(folder, {job.prompt}, s);
    } else {
      run::GenerateSettings s;
      if (p.beam >= 1) {
        s.mode = run::GenerateSettings::Mode::Beam;
        s.beam = p.beam;
        s.alpha = p.alpha;
        s.n_best = p.n;
      } else if (p.temperature > 0) {
        s.mode = run::GenerateSettings::Mode::Sample;
        s.temperature = p.temperature;
        s.top_k = p.top_k;
        s.top_p = p.top_p;
        s.seed = *p.seed;
      }
      s.max_tokens = p.max_tokens;
      s.prepend_bos = options.prepend_bos;
      found = run::generate_batch(folder, {job.prompt}, s);
    }
    const auto now = std::chrono::steady_clock::now();
    const double ttft = std::chrono::duration<double>(now - job.submitted).count();
    std::lock_guard<std::mutex> lock(mu);
    stats.time_to_first_token_seconds.observe(ttft);
    const std::vector<decode::Hypothesis>& hyps = found.at(0);
    for (size_t c = 0; c < hyps.size(); ++c) {
      const decode::Hypothesis& h = hyps[c];
      if (p.beam < 1)
        for (int64_t t : h.tokens) {
          Event e;
          e.kind = Event::Kind::Token;
          e.choice = static_cast<int64_t>(c);
          e.token = t;
          job.request->push(std::move(e));
        }
      Event f;
      f.kind = Event::Kind::Finish;
      f.choice = static_cast<int64_t>(c);
      f.reason = h.finished ? FinishReason::Stop : FinishReason::Length;
      f.tokens = h.tokens;
      f.logprob = h.logprob;
      f.score = h.score;
      stats.completion_tokens_total += h.tokens.size();
      job.request->push(std::move(f));
    }
    ++stats.requests_finished_total;
    stats.request_seconds.observe(ttft);
  }

  void loop() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;
        job = std::move(queue.front());
        queue.pop_front();
        busy = true;
        stats.queue_length = static_cast<int64_t>(queue.size());
        stats.running_requests = 1;
      }
      if (job.request->cancelled()) {
        Event f;
        f.kind = Event::Kind::Finish;
        f.reason = FinishReason::Cancelled;
        job.request->push(f);
      } else {
        try {
          run_job(job);
        } catch (const std::exception& e) {
          Event err;
          err.kind = Event::Kind::Error;
          err.message = e.what();
          job.request->push(std::move(err));
        }
      }
      Event done;
      done.kind = Event::Kind::Done;
      job.request->push(done);
      std::lock_guard<std::mutex> lock(mu);
      busy = false;
      stats.running_requests = 0;
      cv.notify_all();
    }
  }
};

Engine::Engine(const run::ModelFolder& folder, EngineOptions options)
    : impl_(std::make_unique<Impl>(folder, options)) {
  ATTN_CHECK(options.max_batch >= 1, "serve", "--max-batch must be >= 1, got ", options.max_batch);
  ATTN_CHECK(options.max_queue >= 0, "serve", "--max-queue must be >= 0, got ", options.max_queue);
  impl_->thread = std::thread([this] { impl_->loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    for (auto& job : impl_->queue) job.request->cancel();
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int64_t Engine::max_prompt_tokens() const {
  const models::ModelConfig& c = impl_->folder.base->config();
  if (c.positional != nn::PositionalKind::Learned) return -1;
  if (impl_->arch == models::Arch::DecoderOnly) return c.max_len - (impl_->options.prepend_bos ? 1 : 0);
  return c.max_len;
}

int64_t Engine::max_new_tokens(int64_t prompt_tokens) const {
  const models::ModelConfig& c = impl_->folder.base->config();
  if (c.positional != nn::PositionalKind::Learned) return int64_t{1} << 20;
  if (impl_->arch == models::Arch::DecoderOnly)
    return c.max_len - (prompt_tokens + (impl_->options.prepend_bos ? 1 : 0)) + 1;
  return c.max_len;  // the target side has its own positions
}

std::shared_ptr<Request> Engine::submit(std::vector<int64_t> prompt, const GenerationParams& params) {
  const run::ModelFolder& f = impl_->folder;
  const int64_t vocab = f.src_vocab_size;
  if (prompt.empty()) throw RequestError("prompt", "invalid_value", "the prompt is empty");
  for (int64_t id : prompt)
    if (id < 0 || id >= vocab || id == f.pad)
      throw RequestError("prompt", "invalid_value",
                         str_cat("the prompt holds token id ", id,
                                 id == f.pad ? ", the padding token" : ", outside the vocabulary", " (", vocab,
                                 " ids)"));
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  const int64_t limit = max_prompt_tokens();
  if (limit >= 0 && n_prompt > limit)
    throw RequestError("prompt", "context_length_exceeded",
                       str_cat("the prompt has ", n_prompt, " tokens, more than the ", limit,
                               " the model accepts (its context is ", f.base->config().max_len, " positions)"));
  const int64_t max_new = max_new_tokens(n_prompt);
  if (params.max_tokens < 1 || params.max_tokens > max_new)
    throw RequestError("max_tokens", "invalid_value",
                       str_cat("max_tokens must be in [1, ", max_new, "] for this prompt, got ", params.max_tokens));
  if (!(std::isfinite(params.temperature) && params.temperature >= 0 && params.temperature <= 2))
    throw RequestError("temperature", "invalid_value",
                       str_cat("temperature must be in [0, 2], got ", params.temperature));
  if (!(params.top_p > 0 && params.top_p <= 1))
    throw RequestError("top_p", "invalid_value", str_cat("top_p must be in (0, 1], got ", params.top_p));
  if (params.top_k < 0) throw RequestError("top_k", "invalid_value", str_cat("top_k must be >= 0, got ", params.top_k));
  if (params.n < 1 || params.n > 16) throw RequestError("n", "invalid_value", str_cat("n must be in [1, 16], got ", params.n));
  if (params.beam < 0 || params.beam > 16)
    throw RequestError("beam_size", "invalid_value", str_cat("beam_size must be in [0, 16], got ", params.beam));
  if (params.beam >= 1 && params.n > params.beam)
    throw RequestError("n", "invalid_value", str_cat("n must be <= beam_size = ", params.beam, ", got ", params.n));
  if (!(std::isfinite(params.alpha) && params.alpha >= 0))
    throw RequestError("length_penalty", "invalid_value", str_cat("length_penalty must be >= 0, got ", params.alpha));
  if (params.logprobs < -1 || params.logprobs > 5)
    throw RequestError("logprobs", "invalid_value", str_cat("logprobs must be in [0, 5], got ", params.logprobs));
  if (params.beam >= 1 && params.logprobs >= 0)
    throw RequestError("logprobs", "invalid_value", "logprobs is not available with beam search");
  const int64_t rows = params.beam >= 1 ? params.beam : params.n;
  if (rows > impl_->options.max_batch)
    throw RequestError(params.beam >= 1 ? "beam_size" : "n", "invalid_value",
                       str_cat("the request needs ", rows, " decoder rows, more than --max-batch ",
                               impl_->options.max_batch));

  auto request = std::make_shared<Request>();
  request->prompt_tokens_ = n_prompt;
  Impl::Job job{request, std::move(prompt), params, std::chrono::steady_clock::now()};
  if (!job.params.seed) job.params.seed = std::random_device{}();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->draining || impl_->stopping) throw Unavailable("the server is shutting down");
    if (static_cast<int64_t>(impl_->queue.size()) >= impl_->options.max_queue)
      throw Unavailable(str_cat("the queue is full (", impl_->options.max_queue, " requests wait)"));
    impl_->queue.push_back(std::move(job));
    ++impl_->stats.requests_total;
    impl_->stats.prompt_tokens_total += static_cast<uint64_t>(n_prompt);
    impl_->stats.queue_length = static_cast<int64_t>(impl_->queue.size());
  }
  impl_->cv.notify_all();
  return request;
}

void Engine::drain(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->draining = true;
  if (!impl_->cv.wait_for(lock, timeout, [&] { return impl_->queue.empty() && !impl_->busy; }))
    for (auto& job : impl_->queue) job.request->cancel();
  impl_->cv.wait(lock, [&] { return impl_->queue.empty() && !impl_->busy; });
}

MetricsSnapshot Engine::metrics() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

}  // namespace attn::serve
