// bench/serve_bench.cpp — continuous batching measured (docs/serving.md). A load generator of
// C closed-loop clients, each sending its share of one request mix (mixed source and output
// lengths) with exponential think times between its requests (Poisson-like arrivals), against:
//   sequential   the engine with --max-batch 1: one request at a time;
//   static       wait for requests (up to the batch size, or a short window), decode them as one
//                batch until every one is done (rows leave at their limit, none join), answer;
//   continuous   the engine (serve/engine.h): requests join and leave at every step;
//   offline      the same work decoded as batches of the batch size in arrival order, no clients
//                (what `attn translate` on a file does): the throughput ceiling.
// It reports generated tokens per second, time to first token and time per token (p50, p99).
// Then: a short request arriving behind long ones (its time to first token against alone), and
// the engine's resident memory over many requests. Greedy decoding throughout; the same tokens
// are generated in every mode (checked).
//   serve_bench [--model DIR] [--threads N] [--clients C] [--requests R] [--batch B]
//               [--rss-requests K] [--kv-cache paged|contiguous] [--quantize int8|bf16]
// The engine's KV cache is attn serve's default (paged, blocks of 16) unless --kv-cache says.
// Without --model: the paper's base model with random weights (D=512, 6+6 layers, vocabulary
// 1000), which is what speed depends on. --quantize: the model's weights made int8 or bf16 in
// memory first (what `attn quantize` writes). The static and offline modes decode outside the
// engine's batch-invariant mode; with bf16 weights on AMX tiles their tokens can then differ
// from the engine's (a row's sums depend on the product's rows), so with --quantize differing
// answers are counted instead of stopping the run.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "attn/core/autograd.h"
#include "attn/decode/source_search.h"
#include "attn/decode/transformer_decoder.h"
#include "attn/models/factory.h"
#include "attn/ops/quantize.h"
#include "attn/ops/threads.h"
#include "attn/run/model_folder.h"
#include "attn/run/token_codec.h"
#include "attn/serve/engine.h"

namespace {

using namespace attn;
using Clock = std::chrono::steady_clock;

struct Work {
  std::vector<int64_t> prompt;
  int64_t max_tokens = 0;
  double think_s = 0;  // the client's pause before sending it
};

// The engine's options as `attn serve --max-batch batch` sets them (its KV cache: kv_paged).
bool kv_paged = true;
serve::EngineOptions engine_options(int64_t batch) {
  serve::EngineOptions o;
  o.max_batch = batch;
  o.max_queue = 1 << 20;
  o.kv.paged = kv_paged;
  return o;
}

struct Record {
  double submit = 0, first = 0, done = 0;  // seconds since the run began
  std::vector<int64_t> tokens;
  std::vector<double> gaps;  // between consecutive tokens
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

int64_t rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  return 0;
}

// Requests with sources of 8..40 tokens and 8..64 output tokens, think times of mean `think`.
std::vector<Work> workload(int64_t count, int64_t vocab, double think, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> len(8, 40), out(8, 64), tok(4, vocab - 1);
  std::exponential_distribution<double> pause(1.0 / think);
  std::vector<Work> w(static_cast<size_t>(count));
  for (Work& x : w) {
    x.prompt.resize(static_cast<size_t>(len(rng)));
    for (int64_t& t : x.prompt) t = tok(rng);
    x.max_tokens = out(rng);
    x.think_s = pause(rng);
  }
  return w;
}

// Sends request i through `serve` from client i % clients, each client in order.
template <class Serve>
std::vector<Record> drive(const std::vector<Work>& work, int64_t clients, Serve serve, double* seconds) {
  std::vector<Record> rec(work.size());
  const auto t0 = Clock::now();
  const auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  std::vector<std::thread> threads;
  for (int64_t c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      for (size_t i = static_cast<size_t>(c); i < work.size(); i += static_cast<size_t>(clients)) {
        std::this_thread::sleep_for(std::chrono::duration<double>(work[i].think_s));
        rec[i].submit = now();
        serve(work[i], rec[i], now);
      }
    });
  for (auto& t : threads) t.join();
  *seconds = now();
  return rec;
}

// Through the engine, reading its events as a streaming client does.
void via_engine(serve::Engine& engine, const Work& w, Record& r, const std::function<double()>& now) {
  serve::GenerationParams p;
  p.temperature = 0;
  p.max_tokens = w.max_tokens;
  auto req = engine.submit(w.prompt, p);
  serve::Event e;
  double last = 0;
  while (req->next(e, std::chrono::seconds(600))) {
    if (e.kind == serve::Event::Kind::Token) {
      const double t = now();
      if (r.tokens.empty()) r.first = t;
      else r.gaps.push_back(t - last);
      last = t;
      r.tokens.push_back(e.token);
    } else if (e.kind == serve::Event::Kind::Error) {
      std::fprintf(stderr, "serve_bench: engine error: %s\n", e.message.c_str());
      std::exit(1);
    }
  }
  r.done = now();
  if (r.tokens.empty()) r.first = r.done;
}

// Greedy decoding of a batch of sources, each with its own limit, rows leaving when done.
std::vector<std::vector<int64_t>> decode_batch(const run::ModelFolder& f, const std::vector<const Work*>& batch) {
  NoGradGuard no_grad;
  std::vector<std::vector<int64_t>> srcs;
  for (const Work* w : batch) srcs.push_back(w->prompt);
  decode::TransformerDecoder decoder(*f.model);
  std::vector<std::unique_ptr<decode::ChainSearch>> owned;
  std::vector<decode::SourceSearch*> searches;
  for (const Work* w : batch) {
    decode::GreedyOptions o;
    o.bos = f.bos;
    o.eos = f.eos;
    owned.push_back(decode::greedy_source(o, w->max_tokens));
    searches.push_back(owned.back().get());
  }
  decode::run_searches("serve_bench", decoder, run::pad_batch(srcs, f.pad), searches);
  std::vector<std::vector<int64_t>> out;
  for (auto& s : owned) out.push_back(s->results().at(0).tokens);
  return out;
}

// Static batching: a batcher thread takes up to `batch` waiting requests (waiting `window` after
// the first for more), decodes them together to the end and answers them all at once.
class StaticBatcher {
 public:
  StaticBatcher(const run::ModelFolder& f, int64_t batch, double window) : f_(f), batch_(batch), window_(window) {
    thread_ = std::thread([this] { loop(); });
  }
  ~StaticBatcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  std::vector<int64_t> serve(const Work& w) {
    std::promise<std::vector<int64_t>> answer;
    auto result = answer.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({&w, std::move(answer)});
    }
    cv_.notify_all();
    return result.get();
  }

 private:
  struct Item {
    const Work* work;
    std::promise<std::vector<int64_t>> answer;
  };
  void loop() {
    for (;;) {
      std::vector<Item> take;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_ && queue_.empty()) return;
        cv_.wait_for(lock, std::chrono::duration<double>(window_),
                     [&] { return stop_ || static_cast<int64_t>(queue_.size()) >= batch_; });
        while (!queue_.empty() && static_cast<int64_t>(take.size()) < batch_) {
          take.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
      }
      std::vector<const Work*> batch;
      for (const Item& i : take) batch.push_back(i.work);
      auto out = decode_batch(f_, batch);
      for (size_t i = 0; i < take.size(); ++i) take[i].answer.set_value(std::move(out[i]));
    }
  }
  const run::ModelFolder& f_;
  int64_t batch_;
  double window_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::thread thread_;
};

struct Row {
  std::string mode;
  double seconds = 0;
  int64_t tokens = 0;
  std::vector<double> ttft, gaps;
};

Row summarize(const std::string& mode, const std::vector<Record>& rec, double seconds) {
  Row row{mode, seconds, 0, {}, {}};
  for (const Record& r : rec) {
    row.tokens += static_cast<int64_t>(r.tokens.size());
    row.ttft.push_back(r.first - r.submit);
    row.gaps.insert(row.gaps.end(), r.gaps.begin(), r.gaps.end());
  }
  return row;
}

run::ModelFolder base_folder() {
  models::ModelConfig c = models::ModelConfig::paper_base();
  c.src_vocab_size = 1000;
  c.tgt_vocab_size = 1000;
  c.dropout = 0;
  c.attention_dropout = 0;
  c.max_len = 256;
  run::ModelFolder f;
  f.dir = "random base model";
  f.base = models::make_model(c);
  f.base->eval();
  f.model = std::dynamic_pointer_cast<models::EncoderDecoderModel>(f.base);
  f.pad = c.pad_id;
  f.bos = c.bos_id;
  f.eos = c.eos_id;
  f.src_vocab_size = f.tgt_vocab_size = 1000;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir;
  int threads = 2;
  int64_t clients = 16, requests = 96, batch = 16, rss_requests = 0;
  double think = 0.05;
  std::string quantize = "none";
  bool quantized = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--model") model_dir = next();
    else if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--clients") clients = std::atoll(next().c_str());
    else if (a == "--requests") requests = std::atoll(next().c_str());
    else if (a == "--batch") batch = std::atoll(next().c_str());
    else if (a == "--think") think = std::atof(next().c_str());
    else if (a == "--rss-requests") rss_requests = std::atoll(next().c_str());
    else if (a == "--kv-cache") kv_paged = next() != "contiguous";
    else if (a == "--quantize")
      quantize = next();
    else {
      std::fprintf(stderr, "serve_bench: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  set_num_threads(threads);
  const run::ModelFolder f = model_dir.empty() ? base_folder() : run::open_model_folder(model_dir, "serve_bench", false);
  try {
    const Quantization q = parse_quantization(quantize);
    if (q != Quantization::None) f.base->quantize(q);
    quantized = q != Quantization::None;
  } catch (const Error& e) {
    std::fprintf(stderr, "serve_bench: %s\n", e.what());
    return 2;
  }
  const models::ModelConfig& c = f.base->config();
  std::printf(
      "model: %s (D=%lld, layers %lld+%lld, vocabulary %lld, weights %s), %d threads, %lld clients, "
      "%lld requests, batch %lld, mean think %.3f s, %s KV cache\n",
      f.dir.c_str(), static_cast<long long>(c.d_model), static_cast<long long>(c.n_encoder_layers),
      static_cast<long long>(c.n_decoder_layers), static_cast<long long>(f.src_vocab_size), quantize.c_str(), threads,
      static_cast<long long>(clients), static_cast<long long>(requests), static_cast<long long>(batch), think,
      kv_paged ? "paged" : "contiguous");
  const std::vector<Work> work = workload(requests, f.src_vocab_size, think, 42);

  std::vector<Row> rows;
  std::vector<std::vector<int64_t>> reference;  // sequential answers: every mode must match them
  const auto check = [&](const std::string& mode, const std::vector<Record>& rec) {
    size_t differ = 0;
    for (size_t i = 0; i < rec.size(); ++i)
      if (rec[i].tokens != reference[i]) {
        if (!quantized) {
          std::fprintf(stderr, "serve_bench: %s answered request %zu differently\n", mode.c_str(), i);
          std::exit(1);
        }
        ++differ;
      }
    if (differ > 0) std::printf("%s: %zu of %zu answers differ from the engine's\n", mode.c_str(), differ, rec.size());
  };
  {
    serve::Engine engine(f, engine_options(1));
    double s = 0;
    auto rec = drive(work, clients, [&](const Work& w, Record& r, auto now) { via_engine(engine, w, r, now); }, &s);
    for (const Record& r : rec) reference.push_back(r.tokens);
    rows.push_back(summarize("sequential (one at a time)", rec, s));
  }
  {
    StaticBatcher batcher(f, batch, 0.01);
    double s = 0;
    auto rec = drive(work, clients, [&](const Work& w, Record& r, auto now) {
      r.tokens = batcher.serve(w);
      r.first = r.done = now();
    }, &s);
    check("static", rec);
    rows.push_back(summarize("static batching", rec, s));
  }
  {
    serve::Engine engine(f, engine_options(batch));
    double s = 0;
    auto rec = drive(work, clients, [&](const Work& w, Record& r, auto now) { via_engine(engine, w, r, now); }, &s);
    check("continuous", rec);
    rows.push_back(summarize("continuous batching", rec, s));
  }
  {
    // On a thread of its own, as the engine and the static batcher decode (OpenMP teams are per
    // thread).
    std::vector<Record> rec(work.size());
    double s = 0;
    std::thread offline([&] {
      const auto t0 = Clock::now();
      for (size_t i = 0; i < work.size(); i += static_cast<size_t>(batch)) {
        std::vector<const Work*> b;
        for (size_t j = i; j < std::min(work.size(), i + static_cast<size_t>(batch)); ++j) b.push_back(&work[j]);
        auto out = decode_batch(f, b);
        for (size_t j = 0; j < b.size(); ++j) rec[i + j].tokens = std::move(out[j]);
      }
      s = std::chrono::duration<double>(Clock::now() - t0).count();
    });
    offline.join();
    check("offline", rec);
    Row r = summarize("offline batches (no clients)", rec, s);
    r.ttft.clear();
    rows.push_back(r);
  }

  const double base_tps = static_cast<double>(rows[0].tokens) / rows[0].seconds;
  std::printf("\n| mode | tokens/s | vs sequential | TTFT p50 ms | TTFT p99 ms | per token p50 ms | per token p99 ms |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const double tps = static_cast<double>(r.tokens) / r.seconds;
    std::printf("| %s | %.0f | %.2fx | %s | %s | %s | %s |\n", r.mode.c_str(), tps, tps / base_tps,
                r.ttft.empty() ? "-" : std::to_string(static_cast<int>(percentile(r.ttft, 0.5) * 1000 + 0.5)).c_str(),
                r.ttft.empty() ? "-" : std::to_string(static_cast<int>(percentile(r.ttft, 0.99) * 1000 + 0.5)).c_str(),
                r.gaps.empty() ? "-" : std::to_string(percentile(r.gaps, 0.5) * 1000).substr(0, 5).c_str(),
                r.gaps.empty() ? "-" : std::to_string(percentile(r.gaps, 0.99) * 1000).substr(0, 5).c_str());
  }
  const double cont = static_cast<double>(rows[2].tokens) / rows[2].seconds;
  std::printf("\ncontinuous / static: %.2fx; continuous / offline: %.2f\n", cont / (rows[1].tokens / rows[1].seconds),
              cont / (rows[3].tokens / rows[3].seconds));

  // A short request behind long ones: its time to first token alone and behind batch - 1
  // long requests that are already decoding.
  {
    serve::Engine engine(f, engine_options(batch));
    Work shortw = work[0];
    shortw.max_tokens = 8;
    std::vector<double> alone;
    for (int k = 0; k < 5; ++k) {
      Record r;
      const auto t0 = Clock::now();
      via_engine(engine, shortw, r, [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); });
      alone.push_back(r.first);
    }
    std::vector<std::shared_ptr<serve::Request>> longs;
    serve::GenerationParams lp;
    lp.temperature = 0;
    for (int64_t k = 0; k + 1 < batch; ++k) {
      const std::vector<int64_t>& prompt = work[static_cast<size_t>(k) % work.size()].prompt;
      lp.max_tokens = std::min<int64_t>(200, engine.max_new_tokens(static_cast<int64_t>(prompt.size())));
      longs.push_back(engine.submit(prompt, lp));
    }
    serve::Event e;
    for (auto& l : longs) l->next(e, std::chrono::seconds(600));  // every long one is decoding
    std::vector<double> behind;
    for (int k = 0; k < 5; ++k) {
      Record r;
      const auto t0 = Clock::now();
      via_engine(engine, shortw, r, [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); });
      behind.push_back(r.first);
    }
    for (auto& l : longs) l->cancel();
    std::printf("short request, time to first token: alone %.1f ms, behind %lld long ones %.1f ms (%.2fx)\n",
                percentile(alone, 0.5) * 1000, static_cast<long long>(batch - 1), percentile(behind, 0.5) * 1000,
                percentile(behind, 0.5) / percentile(alone, 0.5));
  }

  if (rss_requests > 0) {
    // Rounds of 1,000 requests (their records freed after each round); resident memory after the
    // first round and after the last: flat when the engine keeps nothing per request.
    serve::Engine engine(f, engine_options(batch));
    std::vector<Work> round = workload(1000, f.src_vocab_size, 0.0001, 7);
    for (Work& w : round) w.max_tokens = std::min<int64_t>(w.max_tokens, 8);
    const int64_t rounds = std::max<int64_t>(2, rss_requests / 1000);
    int64_t first = 0, last = 0;
    std::printf("resident memory (KiB) after each 1,000 requests:");
    for (int64_t k = 0; k < rounds; ++k) {
      double s = 0;
      drive(round, clients, [&](const Work& w, Record& r, auto now) { via_engine(engine, w, r, now); }, &s);
      last = rss_kib();
      if (k == 0) first = last;
      std::printf(" %lld", static_cast<long long>(last));
      std::fflush(stdout);
    }
    std::printf("\nresident memory: %lld KiB after 1,000 requests, %lld KiB after %lld (%+.2f%%)\n",
                static_cast<long long>(first), static_cast<long long>(last), static_cast<long long>(rounds * 1000),
                100.0 * static_cast<double>(last - first) / static_cast<double>(first));
  }
  return 0;
}
