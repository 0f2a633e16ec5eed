// serve/engine.cpp — see attn/serve/engine.h. The engine thread loops: admit waiting requests
// while the batch has room (each joins the decoder alone: its source encoded or its prompt
// prefilled, TransformerDecoder::join / LmDecoder::join), drop cancelled ones, run one decoding
// step for every live row on batch-invariant kernels, hand each request's rows to its searches
// (decode/source_search.h: greedy, sampling, beam), send the events, and reorder the rows.
#include "attn/serve/engine.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/decode/lm_decoder.h"
#include "attn/decode/source_search.h"
#include "attn/decode/speculative.h"
#include "attn/decode/transformer_decoder.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "attn/ops/batch_invariant.h"
#include "attn/ops/threads.h"

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

void Request::cancel_choice(int64_t choice) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::find(cancelled_choices_.begin(), cancelled_choices_.end(), choice) == cancelled_choices_.end())
    cancelled_choices_.push_back(choice);
}

std::vector<int64_t> Request::cancelled_choices() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_choices_;
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

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// The `k` most probable tokens of a row, best first, ties to the lower id.
std::vector<TokenLogprob> top_tokens(const double* row, int64_t v, int64_t k) {
  std::vector<TokenLogprob> top;
  for (int64_t t = 0; t < v; ++t) {
    if (static_cast<int64_t>(top.size()) == k && !(row[t] > top.back().logprob)) continue;
    auto at = std::find_if(top.begin(), top.end(), [&](const TokenLogprob& x) { return row[t] > x.logprob; });
    top.insert(at, TokenLogprob{t, row[t]});
    if (static_cast<int64_t>(top.size()) > k) top.pop_back();
  }
  return top;
}

}  // namespace

// A choice that left the batch: no rows, nothing to advance.
struct Stopped : decode::SourceSearch {
  const std::vector<int64_t>& next_tokens() const override { return none; }
  std::vector<int64_t> advance(const double*, int64_t) override { return {}; }
  bool done() const override { return true; }
  std::vector<decode::Hypothesis> results() const override { return {}; }
  std::vector<int64_t> none;
};

struct Engine::Impl {
  struct Job {
    std::shared_ptr<Request> request;
    std::vector<int64_t> prompt;
    GenerationParams params;
    Clock::time_point submitted;
  };
  // One search of a running request and the rows it owns (consecutive in the decoder).
  struct Choice {
    std::unique_ptr<decode::SourceSearch> search;
    decode::ChainSearch* chain = nullptr;  // the same search when it is greedy or sampling
    int64_t index = 0;                     // its choice number (beam search: its results are 0..n-1)
    Clock::time_point last_token;
    int64_t sent = 0;  // Token events sent
    bool over = false;
    std::vector<int64_t> out;  // greedy and sampling: the tokens sent so far (speculation's history)
  };
  struct Running {
    Job job;
    std::vector<Choice> choices;
    std::vector<int64_t> prefix;  // decoder-only: what join() prefilled (<bos> + prompt but its last token)
    int64_t first_input = 0;      // the token its first step feeds (<bos>; decoder-only: the prompt's last)
    int64_t kv_blocks = 0;        // paged cache: the blocks reserved for its worst case
    bool first_sent = false;
    int64_t generated = 0;  // tokens sent
    int64_t rows() const {
      int64_t r = 0;
      for (const Choice& c : choices) r += static_cast<int64_t>(c.search->next_tokens().size());
      return r;
    }
    // Rows it may grow to: beam search keeps up to `beam` live hypotheses.
    int64_t reserved() const { return job.params.beam >= 1 ? job.params.beam : job.params.n; }
  };

  const run::ModelFolder& folder;
  EngineOptions options;
  models::Arch arch = models::Arch::EncoderDecoder;
  std::shared_ptr<models::EncoderDecoderModel> seq2seq;
  std::shared_ptr<models::DecoderOnlyModel> lm;
  std::unique_ptr<decode::TransformerDecoder> seq2seq_decoder;
  std::unique_ptr<decode::LmDecoder> lm_decoder;
  std::shared_ptr<nn::BlockPool> pool;  // the paged KV cache's, or null
  bool share_prefixes = false;
  // Speculative decoding with a draft model: its decoder (contiguous cache) holds one row, that
  // of the request `draft_for`, fed the first `draft_fed` tokens of its history (its first
  // input, then its output).
  std::shared_ptr<models::EncoderDecoderModel> draft_seq2seq;
  std::shared_ptr<models::DecoderOnlyModel> draft_lm;
  std::unique_ptr<decode::TransformerDecoder> draft_seq2seq_decoder;
  std::unique_ptr<decode::LmDecoder> draft_lm_decoder;
  std::shared_ptr<Request> draft_for;
  int64_t draft_fed = 0;

  mutable std::mutex mu;
  std::mutex model_mu;              // held by the engine thread while it steps, and by with_model()
  std::condition_variable cv;       // the engine thread waits here for work
  std::condition_variable idle_cv;  // drain() waits here for the engine to empty
  std::deque<Job> queue;
  std::vector<Running> running;     // engine thread only
  int64_t running_count = 0;        // under mu: running.size() as last published
  bool stopping = false;
  bool draining = false;
  bool cancel_all = false;  // cancel every running and waiting request (drain's deadline, shutdown)
  MetricsSnapshot stats;
  std::thread thread;
  int64_t threads = 0;  // OpenMP/BLAS threads of the engine thread and of with_model()'s callers

  Impl(const run::ModelFolder& f, EngineOptions o) : folder(f), options(o), stats(empty_metrics(o.max_batch)) {
    ATTN_CHECK(folder.base != nullptr, "serve", "no model loaded");
    arch = folder.base->config().arch;
    if (arch == models::Arch::EncoderDecoder) {
      seq2seq = std::dynamic_pointer_cast<models::EncoderDecoderModel>(folder.base);
      ATTN_CHECK(seq2seq != nullptr, "serve", "the model in '", folder.dir, "' is not an encoder-decoder model");
    } else if (arch == models::Arch::DecoderOnly) {
      lm = std::dynamic_pointer_cast<models::DecoderOnlyModel>(folder.base);
      ATTN_CHECK(lm != nullptr, "serve", "the model in '", folder.dir, "' is not a decoder-only model");
    } else {
      fail("serve", "the engine decodes encoder-decoder and decoder-only models; '", folder.dir, "' is ",
           models::arch_name(arch));
    }
    folder.base->eval();
    if (options.kv.paged) {
      const models::ModelConfig& c = folder.base->config();
      // Every row's self-attention history is at most max_len positions (Engine::max_new_tokens);
      // blocks_needed counts one more, so the default pool holds max_batch rows of that.
      pool = decode::kv_pool_for(c, options.kv, options.max_batch, c.max_len + 1);
      pool->set_full_hint(options.kv.pool_bytes > 0 ? "raise --kv-pool-mb or lower --max-batch"
                                                    : "lower --max-batch");
      share_prefixes = options.prefix_sharing && lm != nullptr && options.batch_invariant && c.sliding_window == 0;
      stats.kv_blocks = pool->num_blocks();
      stats.kv_block_bytes = pool->block_bytes();
      stats.kv_dtype = decode::kv_dtype_name(options.kv.dtype);
    }
    if (options.speculation.enabled()) open_draft();
    reset_decoder();
  }

  void open_draft() {
    const SpeculationOptions& so = options.speculation;
    ATTN_CHECK(so.draft_tokens >= 1, "serve", "the draft tokens per round must be >= 1, got ", so.draft_tokens);
    ATTN_CHECK(so.ngram_min >= 1 && so.ngram_max >= so.ngram_min, "serve",
               "prompt lookup's n-gram sizes need 1 <= ngram_min <= ngram_max, got ", so.ngram_min, " and ", so.ngram_max);
    ATTN_CHECK(so.draft == nullptr || !so.lookup, "serve",
               "a draft model and prompt lookup exclude each other (prompt lookup drafts without a model)");
    // Rounds take rejected positions back, which a sliding window's cache cannot once it has
    // dropped positions.
    ATTN_CHECK(folder.base->config().sliding_window == 0, "serve", "the model in '", folder.dir,
               "' has a sliding window, so speculative decoding cannot take rejected tokens back");
    if (so.draft == nullptr) return;
    const run::ModelFolder& d = *so.draft;
    ATTN_CHECK(d.base != nullptr, "serve", "no draft model loaded");
    const models::Arch darch = d.base->config().arch;
    ATTN_CHECK(darch == arch, "serve", "the draft model in '", d.dir, "' is ", models::arch_name(darch),
               " and the served model in '", folder.dir, "' ", models::arch_name(arch),
               ": speculative decoding needs a draft of the same family");
    ATTN_CHECK(d.tgt_vocab_size == folder.tgt_vocab_size && d.src_vocab_size == folder.src_vocab_size, "serve",
               "the draft model in '", d.dir, "' has vocabularies of ", d.src_vocab_size, " (source) and ",
               d.tgt_vocab_size, " (target) tokens and the served model in '", folder.dir, "' ", folder.src_vocab_size,
               " and ", folder.tgt_vocab_size, ": speculative decoding needs the same vocabulary (the same ids)");
    ATTN_CHECK(d.base->config().sliding_window == 0, "serve", "the draft model in '", d.dir,
               "' has a sliding window, so it cannot take rejected tokens back");
    d.base->eval();
    if (arch == models::Arch::EncoderDecoder) {
      draft_seq2seq = std::dynamic_pointer_cast<models::EncoderDecoderModel>(d.base);
      ATTN_CHECK(draft_seq2seq != nullptr, "serve", "the draft model in '", d.dir, "' is not an encoder-decoder model");
    } else {
      draft_lm = std::dynamic_pointer_cast<models::DecoderOnlyModel>(d.base);
      ATTN_CHECK(draft_lm != nullptr, "serve", "the draft model in '", d.dir, "' is not a decoder-only model");
    }
  }

  void reset_decoder() {
    if (seq2seq) {
      seq2seq_decoder = std::make_unique<decode::TransformerDecoder>(*seq2seq);
      seq2seq_decoder->set_kv_pool(pool);
    }
    if (lm) {
      lm_decoder = std::make_unique<decode::LmDecoder>(*lm);
      lm_decoder->set_kv_pool(pool);
    }
  }

  // The paged cache's blocks for a request's worst case: every row (beam or choice) with blocks
  // of its own for its longest self-attention history, one position to spare (decoder-only:
  // <bos> + prompt + max_tokens - 1 positions, as the last token is never fed back;
  // encoder-decoder: the target's <bos> + max_tokens - 1). 0 with the contiguous cache.
  int64_t blocks_needed(int64_t prompt_tokens, const GenerationParams& p) const {
    if (!pool) return 0;
    const int64_t rows = p.beam >= 1 ? p.beam : p.n;
    const int64_t positions = lm ? (options.prepend_bos ? 1 : 0) + prompt_tokens + p.max_tokens : 1 + p.max_tokens;
    return decode::kv_blocks_for(rows, positions, pool->block_size());
  }

  // Prefix sharing: the running request whose prefilled prefix shares the most whole blocks
  // with `prefix`; sets its first decoder row and the positions shared (0: none).
  void find_shared_prefix(const std::vector<int64_t>& prefix, int64_t& row, int64_t& positions) const {
    row = -1;
    positions = 0;
    const int64_t bs = pool->block_size();
    int64_t offset = 0;
    for (const Running& run : running) {
      const int64_t rows = run.rows();
      if (rows > 0) {
        const size_t n = std::min(prefix.size(), run.prefix.size());
        size_t common = 0;
        while (common < n && prefix[common] == run.prefix[common]) ++common;
        const int64_t whole = static_cast<int64_t>(common) / bs * bs;
        if (whole > positions) {
          positions = whole;
          row = offset;
        }
      }
      offset += rows;
    }
  }
  decode::IncrementalDecoder& decoder() {
    if (seq2seq_decoder) return *seq2seq_decoder;
    return *lm_decoder;
  }
  int64_t decoder_rows() const {
    if (seq2seq_decoder) return seq2seq_decoder->cache().rows();
    return lm_decoder->cache().rows();
  }
  int64_t rows_in_use() const {
    int64_t r = 0;
    for (const Running& x : running) r += x.rows();
    return r;
  }

  // The searches of a new request, and its row(s) in the decoder (appended after the others).
  Running admit(Job job) {
    const GenerationParams& p = job.params;
    Running run;
    run.job = std::move(job);
    const std::vector<int64_t>& prompt = run.job.prompt;
    int64_t bos = folder.bos;
    const int64_t before = rows_in_use();
    std::vector<int64_t> prefix;  // decoder-only: <bos> + prompt without its last token
    if (lm_decoder) {
      if (options.prepend_bos) prefix.push_back(folder.bos);
      prefix.insert(prefix.end(), prompt.begin(), prompt.end());
      bos = prefix.back();  // the last input token is fed at the row's first step
      prefix.pop_back();
    }
    // The searches first (nothing to undo if one is refused), then the row joins the batch.
    const int64_t limit = p.max_tokens;
    if (p.beam >= 1) {
      decode::BeamOptions o;
      o.beam = p.beam;
      o.alpha = p.alpha;
      o.n_best = p.n;
      o.bos = bos;
      o.eos = folder.eos;
      Choice c;
      c.search = decode::beam_source(o, limit);
      run.choices.push_back(std::move(c));
    } else {
      Rng master(*p.seed);
      for (int64_t i = 0; i < p.n; ++i) {
        Choice c;
        std::unique_ptr<decode::ChainSearch> chain;
        if (p.temperature == 0) {
          decode::GreedyOptions o;
          o.bos = bos;
          o.eos = folder.eos;
          chain = decode::greedy_source(o, limit);
        } else {
          decode::SamplingOptions o;
          o.temperature = p.temperature;
          o.top_k = p.top_k;
          o.top_p = p.top_p;
          o.bos = bos;
          o.eos = folder.eos;
          chain = decode::sampling_source(o, limit, Rng(master.next_u64()));
        }
        c.chain = chain.get();
        c.search = std::move(chain);
        c.index = i;
        run.choices.push_back(std::move(c));
      }
    }
    run.first_input = bos;
    run.kv_blocks = blocks_needed(static_cast<int64_t>(prompt.size()), p);
    if (seq2seq_decoder) {
      seq2seq_decoder->join(Tensor::from_vector<int64_t>(prompt, {1, static_cast<int64_t>(prompt.size())}));
    } else {
      int64_t share_row = -1, share_positions = 0;
      if (share_prefixes) find_shared_prefix(prefix, share_row, share_positions);
      {
        // With prefix sharing every prompt is prefilled on the batch-invariant kernels, so that
        // the keys and values a later request takes are the bits it would compute itself.
        BatchInvariantGuard invariant(share_prefixes);
        lm_decoder->join(prefix, share_row, share_positions);
      }
      if (share_positions > 0) {
        std::lock_guard<std::mutex> lock(mu);
        stats.prefix_shared_positions_total += static_cast<uint64_t>(share_positions);
      }
      run.prefix = std::move(prefix);
    }
    if (p.beam < 1) {
      if (p.n > 1) {  // the other choices' rows: copies of the joined row
        std::vector<int64_t> rows(static_cast<size_t>(before));
        for (int64_t r = 0; r < before; ++r) rows[static_cast<size_t>(r)] = r;
        for (int64_t i = 0; i < p.n; ++i) rows.push_back(before);
        decoder().reorder(rows);
      }
    }
    const auto now = Clock::now();
    for (Choice& c : run.choices) c.last_token = now;
    return run;
  }

  void finish_choice(Running& run, Choice& c, FinishReason forced, bool use_forced) {
    c.over = true;
    const std::vector<decode::Hypothesis> hyps = c.search->results();
    if (hyps.empty()) {
      Event f;
      f.kind = Event::Kind::Finish;
      f.choice = c.index;
      f.reason = use_forced ? forced : FinishReason::Length;
      run.job.request->push(std::move(f));
      return;
    }
    const size_t count = run.job.params.beam >= 1 ? hyps.size() : 1;
    for (size_t k = 0; k < count; ++k) {
      const decode::Hypothesis& h = hyps[k];
      Event f;
      f.kind = Event::Kind::Finish;
      f.choice = run.job.params.beam >= 1 ? static_cast<int64_t>(k) : c.index;
      f.reason = use_forced ? forced : (h.finished ? FinishReason::Stop : FinishReason::Length);
      f.tokens = h.tokens;
      f.logprob = h.logprob;
      f.score = h.score;
      if (run.job.params.beam >= 1 && !use_forced) {
        std::lock_guard<std::mutex> lock(mu);
        stats.completion_tokens_total += h.tokens.size();
      }
      run.job.request->push(std::move(f));
    }
  }

  // Ends a request: Done, metrics.
  void close(Running& run, bool cancelled) {
    {
      std::lock_guard<std::mutex> lock(mu);  // counted before the reader can see Done
      if (cancelled) ++stats.requests_cancelled_total;
      else ++stats.requests_finished_total;
      stats.request_seconds.observe(seconds_between(run.job.submitted, Clock::now()));
    }
    Event done;
    done.kind = Event::Kind::Done;
    run.job.request->push(std::move(done));
  }

  void note_first(Running& run) {
    if (run.first_sent) return;
    run.first_sent = true;
    std::lock_guard<std::mutex> lock(mu);
    stats.time_to_first_token_seconds.observe(seconds_between(run.job.submitted, Clock::now()));
  }

  // Hands one choice its rows' log-probabilities [rows, v]; a greedy or sampling choice sends
  // its token (EOS is not sent), a choice that ends sends its Finish. Returns the search's
  // parents (advance()).
  std::vector<int64_t> advance(Running& run, Choice& c, const double* row, int64_t v, Clock::time_point now,
                               int64_t& sent) {
    std::vector<int64_t> parents = c.search->advance(row, v);
    if (c.chain != nullptr && c.chain->last_token() != folder.eos) {
      Event e;
      e.kind = Event::Kind::Token;
      e.choice = c.index;
      e.token = c.chain->last_token();
      e.logprob = c.chain->last_logprob();
      if (run.job.params.logprobs >= 1) e.top = top_tokens(row, v, run.job.params.logprobs);
      c.out.push_back(e.token);
      note_first(run);
      run.job.request->push(std::move(e));
      ++sent;
      ++run.generated;
      if (c.sent > 0) {  // the time between this choice's consecutive tokens
        std::lock_guard<std::mutex> lock(mu);
        stats.time_per_token_seconds.observe(seconds_between(c.last_token, now));
      }
      ++c.sent;
      c.last_token = now;
    }
    if (c.search->done()) {
      if (c.chain == nullptr) note_first(run);
      finish_choice(run, c, FinishReason::Stop, false);
    }
    return parents;
  }

  // Speculation applies while the batch is one greedy choice (one row), on batch-invariant
  // steps (where a position's bits do not depend on how many positions a pass scores).
  bool speculation_applies() const {
    if (!options.speculation.enabled() || !options.batch_invariant || running.size() != 1) return false;
    const Running& run = running.front();
    if (run.choices.size() != 1 || run.job.params.beam >= 1 || run.job.params.temperature != 0) return false;
    const Choice& c = run.choices.front();
    return c.chain != nullptr && !c.over && c.search->next_tokens().size() == 1;
  }

  decode::IncrementalDecoder& draft_decoder() {
    if (draft_seq2seq_decoder) return *draft_seq2seq_decoder;
    return *draft_lm_decoder;
  }

  // The draft model's k greedy tokens after `history` (the request's first input and output;
  // the last one not yet fed to the served model). The draft decoder keeps the request's row
  // between rounds and is fed only what it has not seen.
  std::vector<int64_t> draft_tokens(const Running& run, const std::vector<int64_t>& history, int64_t k) {
    if (draft_for != run.job.request) {
      const std::vector<int64_t>& prompt = run.job.prompt;
      if (draft_seq2seq) {
        draft_seq2seq_decoder = std::make_unique<decode::TransformerDecoder>(*draft_seq2seq);
        draft_seq2seq_decoder->join(Tensor::from_vector<int64_t>(prompt, {1, static_cast<int64_t>(prompt.size())}));
      } else {
        draft_lm_decoder = std::make_unique<decode::LmDecoder>(*draft_lm);
        draft_lm_decoder->join(run.prefix);
      }
      draft_for = run.job.request;
      draft_fed = 0;
    }
    decode::IncrementalDecoder& d = draft_decoder();
    const int64_t v = d.vocab_size();
    std::vector<int64_t> chunk(history.begin() + draft_fed, history.end());
    std::vector<int64_t> out;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t w = static_cast<int64_t>(chunk.size());
      const Tensor lp = d.step_many(Tensor::from_vector<int64_t>(chunk, {1, w}));  // [1, w, V]
      const std::vector<double> last = lp.slice(1, w - 1, w).to_vector<double>();  // the last position's [V]
      int64_t best = 0;
      for (int64_t t = 1; t < v; ++t)
        if (last[static_cast<size_t>(t)] > last[static_cast<size_t>(best)]) best = t;
      out.push_back(best);
      chunk.assign(1, best);
    }
    draft_fed = static_cast<int64_t>(history.size()) + k - 1;  // its drafts but the last were fed
    return out;
  }

  // One round of speculative decoding for the one running greedy choice: up to K drafted
  // tokens, the served model scores the choice's last token and the drafts in one pass, the
  // choice advances on each position's log-probabilities while its token equals the draft
  // (what plain steps would have given, bit for bit), and the positions after the first
  // mismatch are taken back. Falls back to a plain step when nothing can be drafted.
  void speculate() {
    Running& run = running.front();
    Choice& c = run.choices.front();
    const SpeculationOptions& so = options.speculation;
    std::vector<int64_t> history{run.first_input};
    history.insert(history.end(), c.out.begin(), c.out.end());
    const int64_t g = static_cast<int64_t>(c.out.size());
    // A round yields up to k + 1 tokens: k stays below what the choice may still generate, so
    // the model is never fed past its worst case (the paged pool's reservation, the positions).
    int64_t k = std::min(so.draft_tokens, run.job.params.max_tokens - g - 1);
    std::vector<int64_t> drafts;
    Tensor lp;
    {
      NoGradGuard no_grad;
      BatchInvariantGuard invariant(options.batch_invariant);
      if (k >= 1 && so.draft != nullptr) {
        drafts = draft_tokens(run, history, k);
      } else if (k >= 1) {
        std::vector<int64_t> context = run.job.prompt;
        context.insert(context.end(), c.out.begin(), c.out.end());
        drafts = decode::lookup_draft(context, k, so.ngram_max, so.ngram_min);
        const int64_t v = decoder().vocab_size();
        for (size_t j = 0; j < drafts.size(); ++j)
          if (drafts[j] < 0 || drafts[j] >= v) {  // a source id outside the target vocabulary
            drafts.resize(j);
            break;
          }
      }
      if (drafts.empty()) {
        step();
        return;
      }
      k = static_cast<int64_t>(drafts.size());
      std::vector<int64_t> verify{history.back()};
      verify.insert(verify.end(), drafts.begin(), drafts.end());
      lp = decoder().step_many(Tensor::from_vector<int64_t>(verify, {1, k + 1}));  // [1, k + 1, V]
    }
    const int64_t v = lp.size(2);
    const std::vector<double> values = lp.to_vector<double>();
    const auto now = Clock::now();
    int64_t sent = 0, used = 0, matched = 0, slack = so.test_accept_offset;
    for (int64_t j = 0; j <= k; ++j) {
      advance(run, c, values.data() + j * v, v, now, sent);
      used = j + 1;
      if (c.search->done() || j == k) break;
      if (c.chain->last_token() == drafts[static_cast<size_t>(j)]) {
        if (matched == j) ++matched;
      } else if (slack > 0) {
        --slack;  // the test hook: a wrong rule that goes on past a mismatch
      } else {
        break;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      ++stats.steps_total;
      ++stats.speculative_rounds_total;
      stats.draft_tokens_total += static_cast<uint64_t>(k);
      stats.draft_accepted_total += static_cast<uint64_t>(matched);
      stats.batch_rows.observe(1);
      stats.completion_tokens_total += static_cast<uint64_t>(sent);
    }
    if (c.over) {
      close(run, false);
      running.clear();
      draft_for.reset();
      reorder_or_reset({});
      return;
    }
    // The model keeps the last token and the drafts it used; the draft model the drafts that
    // agree with the output.
    decoder().rollback(k + 1 - used);
    if (so.draft != nullptr) {
      const int64_t keep = g + 1 + std::min(matched, k - 1);
      draft_decoder().rollback(draft_fed - keep);
      draft_fed = keep;
    }
  }

  // One decoding step of every live row; requests that end leave the batch.
  void step() {
    std::vector<int64_t> tokens;
    for (const Running& run : running)
      for (const Choice& c : run.choices) {
        const auto& t = c.search->next_tokens();
        tokens.insert(tokens.end(), t.begin(), t.end());
      }
    const int64_t n = static_cast<int64_t>(tokens.size());
    Tensor lp;
    {
      NoGradGuard no_grad;
      BatchInvariantGuard invariant(options.batch_invariant);
      lp = decoder().step(Tensor::from_vector<int64_t>(tokens, {n}));  // [N, V]
    }
    const int64_t v = lp.size(1);
    const std::vector<double> values = lp.to_vector<double>();
    const auto now = Clock::now();
    std::vector<int64_t> rows;  // the decoder's rows after the step
    int64_t offset = 0, sent = 0;
    std::vector<Running> still;
    for (Running& run : running) {
      for (Choice& c : run.choices) {
        const int64_t k = static_cast<int64_t>(c.search->next_tokens().size());
        if (k == 0) continue;
        for (int64_t parent : advance(run, c, values.data() + offset * v, v, now, sent)) rows.push_back(offset + parent);
        offset += k;
      }
      bool over = true;
      for (const Choice& c : run.choices) over = over && c.over;
      if (over) close(run, false);
      else still.push_back(std::move(run));
    }
    running = std::move(still);
    {
      std::lock_guard<std::mutex> lock(mu);
      ++stats.steps_total;
      stats.batch_rows.observe(static_cast<double>(n));
      stats.completion_tokens_total += static_cast<uint64_t>(sent);
    }
    if (static_cast<int64_t>(rows.size()) != n || !std::is_sorted(rows.begin(), rows.end()) ||
        std::adjacent_find(rows.begin(), rows.end()) != rows.end()) {
      reorder_or_reset(rows);
    }
  }

  void reorder_or_reset(const std::vector<int64_t>& rows) {
    if (rows.empty()) {
      reset_decoder();  // nothing runs: a fresh decoder for the next request
      return;
    }
    decoder().reorder(rows);
    if (seq2seq_decoder) seq2seq_decoder->trim_padding();
    else lm_decoder->trim_padding();
  }

  // Requests whose client went away, and choices whose stop string completed, leave before the
  // step.
  void drop_cancelled() {
    bool any = false;
    for (const Running& run : running)
      any = any || run.job.request->cancelled() || !run.job.request->cancelled_choices().empty();
    if (!any) return;
    std::vector<int64_t> rows;
    std::vector<Running> still;
    int64_t offset = 0;
    for (Running& run : running) {
      const bool whole = run.job.request->cancelled() || (run.job.params.beam >= 1 && !run.job.request->cancelled_choices().empty());
      const std::vector<int64_t> some = run.job.request->cancelled_choices();
      bool over = true;
      for (Choice& c : run.choices) {
        const int64_t k = static_cast<int64_t>(c.search->next_tokens().size());
        const bool cut = whole || std::find(some.begin(), some.end(), c.index) != some.end();
        if (cut && !c.over) finish_choice(run, c, FinishReason::Cancelled, true);
        if (!c.over)
          for (int64_t r = 0; r < k; ++r) rows.push_back(offset + r);
        else {
          c.chain = nullptr;
          c.search = std::make_unique<Stopped>();  // its rows are gone
        }
        over = over && c.over;
        offset += k;
      }
      if (over) close(run, whole);
      else still.push_back(std::move(run));
    }
    running = std::move(still);
    if (static_cast<int64_t>(rows.size()) != offset) reorder_or_reset(rows);
  }

  void publish() {
    std::lock_guard<std::mutex> lock(mu);
    running_count = static_cast<int64_t>(running.size());
    stats.running_requests = running_count;
    stats.running_rows = rows_in_use();
    if (pool) {
      stats.kv_blocks_used = pool->used_blocks();
      stats.kv_blocks_reserved = 0;
      for (const Running& run : running) stats.kv_blocks_reserved += run.kv_blocks;
    }
    stats.queue_length = static_cast<int64_t>(queue.size());
    if (running.empty() && queue.empty()) idle_cv.notify_all();
  }

  void fail_all(const std::string& message) {
    for (Running& run : running) {
      Event err;
      err.kind = Event::Kind::Error;
      err.message = message;
      run.job.request->push(std::move(err));
    }
    running.clear();
    reset_decoder();
  }

  void loop() {
    for (;;) {
      // Admission: waiting requests join while their rows fit (in arrival order: no overtaking).
      std::vector<Job> joining;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || cancel_all || !queue.empty() || !running.empty(); });
        if (cancel_all) {
          for (Running& run : running) run.job.request->cancel();
          for (Job& job : queue) job.request->cancel();
          if (running.empty() && queue.empty() && !stopping) {
            cancel_all = false;  // everything is cancelled; wait for new work again
            idle_cv.notify_all();
            continue;
          }
        }
        if (stopping && running.empty()) {
          for (Job& job : queue) {
            Event f;
            f.kind = Event::Kind::Finish;
            f.reason = FinishReason::Cancelled;
            job.request->push(f);
            Event done;
            done.kind = Event::Kind::Done;
            job.request->push(done);
          }
          queue.clear();
          idle_cv.notify_all();
          return;
        }
        int64_t reserved = 0, blocks = 0;
        for (const Running& run : running) {
          reserved += run.reserved();
          blocks += run.kv_blocks;
        }
        while (!queue.empty()) {
          const Job& next = queue.front();
          const int64_t need = next.params.beam >= 1 ? next.params.beam : next.params.n;
          const int64_t need_blocks = blocks_needed(static_cast<int64_t>(next.prompt.size()), next.params);
          if (reserved + need > options.max_batch || (pool && blocks + need_blocks > pool->num_blocks())) break;
          reserved += need;
          blocks += need_blocks;
          joining.push_back(std::move(queue.front()));
          queue.pop_front();
        }
      }
      try {
        std::lock_guard<std::mutex> model_lock(model_mu);
        for (Job& job : joining) {
          if (job.request->cancelled()) {
            Running gone;
            gone.job = std::move(job);
            Event f;
            f.kind = Event::Kind::Finish;
            f.reason = FinishReason::Cancelled;
            gone.job.request->push(f);
            close(gone, true);
            continue;
          }
          // A request that cannot join (its source or prompt fails in the model) ends alone with
          // an Error; the batch goes on when the decoder holds exactly the running rows.
          std::shared_ptr<Request> request = job.request;
          try {
            running.push_back(admit(std::move(job)));
          } catch (const std::exception& e) {
            Event err;
            err.kind = Event::Kind::Error;
            err.message = e.what();
            request->push(std::move(err));
            if (decoder_rows() != rows_in_use()) throw;
          }
        }
        drop_cancelled();
        publish();
        if (speculation_applies()) speculate();
        else if (!running.empty()) step();
        publish();
      } catch (const std::exception& e) {
        fail_all(e.what());
        publish();
      }
    }
  }
};

Engine::Engine(const run::ModelFolder& folder, EngineOptions options) {
  ATTN_CHECK(options.max_batch >= 1, "serve", "--max-batch must be >= 1, got ", options.max_batch);
  ATTN_CHECK(options.max_queue >= 0, "serve", "--max-queue must be >= 0, got ", options.max_queue);
  impl_ = std::make_unique<Impl>(folder, options);
  // The engine thread decodes with the thread count of the thread that made the engine
  // (attn serve --threads), not OpenMP's default for new threads.
  impl_->threads = attn::num_threads();
  impl_->thread = std::thread([this] {
    attn::set_num_threads(impl_->threads);
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      impl_->stats.engine_threads = attn::num_threads();  // as this thread sees it
    }
    impl_->loop();
  });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    impl_->cancel_all = true;  // what still runs or waits ends with Finish(cancelled) and Done
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

// The served context is the config's max_len for every positional kind: a hard limit for learned
// positions, and the length the model was configured for otherwise (a bound on what one request
// may make the server compute and hold).
int64_t Engine::max_prompt_tokens() const {
  const models::ModelConfig& c = impl_->folder.base->config();
  if (impl_->arch == models::Arch::DecoderOnly) return c.max_len - (impl_->options.prepend_bos ? 1 : 0);
  return c.max_len;
}

int64_t Engine::max_new_tokens(int64_t prompt_tokens) const {
  const models::ModelConfig& c = impl_->folder.base->config();
  // Decoder-only: the last generated token is never fed back, so input + limit - 1 positions.
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
    throw RequestError("temperature", "invalid_value", str_cat("temperature must be in [0, 2], got ", params.temperature));
  if (!(params.top_p > 0 && params.top_p <= 1))
    throw RequestError("top_p", "invalid_value", str_cat("top_p must be in (0, 1], got ", params.top_p));
  if (params.top_k < 0) throw RequestError("top_k", "invalid_value", str_cat("top_k must be >= 0, got ", params.top_k));
  if (params.n < 1 || params.n > 16)
    throw RequestError("n", "invalid_value", str_cat("n must be in [1, 16], got ", params.n));
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
                       str_cat("the request needs ", rows, " decoder rows, more than the server's --max-batch ",
                               impl_->options.max_batch));
  if (impl_->pool) {
    const int64_t need = impl_->blocks_needed(n_prompt, params);
    const nn::BlockPool& pool = *impl_->pool;
    if (need > pool.num_blocks())
      throw Unavailable(str_cat("the KV cache pool cannot hold this request: its worst case needs ", need,
                                " blocks of ", pool.block_size(), " positions, the pool has ", pool.num_blocks(),
                                " (", pool.num_blocks() * pool.block_bytes() / (1024 * 1024),
                                " MiB; --kv-pool-mb); ask for fewer tokens or choices"),
                        "kv_cache_full");
  }

  auto request = std::make_shared<Request>();
  request->prompt_tokens_ = n_prompt;
  Impl::Job job{request, std::move(prompt), params, Clock::now()};
  if (!job.params.seed) job.params.seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
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
  const auto idle = [&] { return impl_->queue.empty() && impl_->running_count == 0; };
  if (!impl_->idle_cv.wait_for(lock, timeout, idle)) {
    impl_->cancel_all = true;
    impl_->cv.notify_all();
    impl_->idle_cv.wait(lock, idle);
  }
}

void Engine::with_model(const std::function<void()>& f) {
  std::lock_guard<std::mutex> lock(impl_->model_mu);
  attn::set_num_threads(impl_->threads);  // the caller may be a thread of OpenMP's default size
  f();
}

MetricsSnapshot Engine::metrics() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

}  // namespace attn::serve
