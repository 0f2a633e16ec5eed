// serve/engine: continuous batching against solo decoding. Requests that run together, join
// while others decode and leave early give the same tokens and the same log-probability bits as
// each alone (greedy, seeded sampling with n > 1, beam search), for encoder-decoder and
// decoder-only models; greedy and beam answers equal the run layer's (what `attn translate` and
// `attn generate` print); cancelled requests leave the others unchanged; bad requests are
// RequestErrors naming the field; a full queue is Unavailable. The same on the paged KV cache,
// where decoder-only prompts share their common first blocks and a small pool queues or refuses
// requests. Controls: another seed changes a sampled answer, so the equality checks can fail;
// with prefix sharing off nothing is shared.
#include "attn/serve/engine.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "attn/models/factory.h"
#include "attn/run/generate.h"
#include "attn/run/translate.h"

namespace attn::serve {
namespace {

using namespace std::chrono_literals;

run::ModelFolder folder_of(models::Arch arch, uint64_t seed = 3) {
  models::ModelConfig c;
  c.arch = arch;
  c.d_model = 32;
  c.n_heads = 4;
  c.n_encoder_layers = 2;
  c.n_decoder_layers = 2;
  c.d_ff = 64;
  c.dropout = 0;
  c.attention_dropout = 0;
  c.max_len = 64;
  c.src_vocab_size = 40;
  c.tgt_vocab_size = arch == models::Arch::EncoderDecoder ? 40 : 0;
  c.pad_id = 0;
  c.bos_id = 1;
  c.eos_id = 2;
  c.dtype = DType::F32;
  c.seed = seed;
  run::ModelFolder f;
  f.dir = "memory";
  f.base = models::make_model(c);
  f.base->eval();
  f.model = std::dynamic_pointer_cast<models::EncoderDecoderModel>(f.base);
  f.pad = 0;
  f.bos = 1;
  f.eos = 2;
  f.src_vocab_size = 40;
  f.tgt_vocab_size = 40;
  return f;
}

// max_batch and max_queue; the contiguous KV cache unless `paged` (blocks of `block` positions).
EngineOptions options_of(int64_t max_batch, int64_t max_queue, bool paged = false, int64_t block = 4) {
  EngineOptions o;
  o.max_batch = max_batch;
  o.max_queue = max_queue;
  o.kv.paged = paged;
  o.kv.block_size = block;
  return o;
}

// What a reader collects from one request.
struct Answer {
  std::vector<std::vector<int64_t>> tokens;      // per choice, from Token events
  std::vector<std::vector<double>> logprobs;     // per choice
  std::vector<std::vector<int64_t>> finished;    // per choice, from Finish events
  std::vector<FinishReason> reasons;
  std::vector<double> scores;
  bool done = false;
};

// Reads a request to its end; `first`: an event already read from it.
Answer read_all(Request& r, int64_t choices, const Event* first = nullptr) {
  Answer a;
  a.tokens.resize(static_cast<size_t>(choices));
  a.logprobs.resize(static_cast<size_t>(choices));
  a.finished.resize(static_cast<size_t>(choices));
  a.reasons.resize(static_cast<size_t>(choices), FinishReason::Cancelled);
  a.scores.resize(static_cast<size_t>(choices));
  Event e;
  bool have = first != nullptr;
  if (have) e = *first;
  while (have || r.next(e, 30s)) {
    have = false;
    if (e.kind == Event::Kind::Token) {
      a.tokens.at(static_cast<size_t>(e.choice)).push_back(e.token);
      a.logprobs.at(static_cast<size_t>(e.choice)).push_back(e.logprob);
    } else if (e.kind == Event::Kind::Finish) {
      a.finished.at(static_cast<size_t>(e.choice)) = e.tokens;
      a.reasons.at(static_cast<size_t>(e.choice)) = e.reason;
      a.scores.at(static_cast<size_t>(e.choice)) = e.score;
    } else if (e.kind == Event::Kind::Done) {
      a.done = true;
    } else {
      ADD_FAILURE() << "engine error: " << e.message;
    }
  }
  return a;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

struct Job {
  std::vector<int64_t> prompt;
  GenerationParams params;
};

std::vector<Job> mixed_jobs() {
  std::vector<Job> jobs;
  const std::vector<std::vector<int64_t>> prompts = {
      {5, 6, 7, 8, 9}, {10, 4}, {3, 12, 11, 6, 7, 9, 4, 20, 31}, {17}, {8, 8, 9, 30, 22, 5}, {13, 14, 15}};
  for (size_t i = 0; i < prompts.size(); ++i) {
    Job j;
    j.prompt = prompts[i];
    j.params.max_tokens = 6 + static_cast<int64_t>(i) * 3;
    j.params.logprobs = 2;
    if (i % 2 == 0) {
      j.params.temperature = 0;  // greedy
    } else {
      j.params.temperature = 0.9;
      j.params.top_p = 0.95;
      j.params.seed = 100 + i;
      j.params.n = i == 3 ? 3 : 1;
    }
    jobs.push_back(j);
  }
  return jobs;
}

// Every job alone, then all of them staggered (each submitted once the previous one has sent its
// first event, so that it joins while that one decodes), on an engine with room for `max_batch`
// rows: the answers must be identical.
// Each job alone, one after the other.
std::vector<Answer> run_solo(Engine& engine, const std::vector<Job>& jobs) {
  std::vector<Answer> out;
  for (const Job& j : jobs) out.push_back(read_all(*engine.submit(j.prompt, j.params), j.params.n));
  return out;
}

// The jobs staggered: each submitted once the previous one has sent its first event, so that it
// joins while that one decodes.
std::vector<Answer> run_staggered(Engine& engine, const std::vector<Job>& jobs) {
  std::vector<std::shared_ptr<Request>> handles;
  std::vector<Event> firsts(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    handles.push_back(engine.submit(jobs[i].prompt, jobs[i].params));
    EXPECT_TRUE(handles[i]->next(firsts[i], 30s));
  }
  std::vector<Answer> out;
  for (size_t i = 0; i < jobs.size(); ++i) out.push_back(read_all(*handles[i], jobs[i].params.n, &firsts[i]));
  return out;
}

// The jobs submitted at once (they join in one admission round, or within a step or two).
std::vector<Answer> run_together(Engine& engine, const std::vector<Job>& jobs) {
  std::vector<std::shared_ptr<Request>> handles;
  for (const Job& j : jobs) handles.push_back(engine.submit(j.prompt, j.params));
  std::vector<Answer> out;
  for (size_t i = 0; i < jobs.size(); ++i) out.push_back(read_all(*handles[i], jobs[i].params.n));
  return out;
}

// The paged pool's blocks in use once the engine has published its state after the last
// request (its Done event reaches the reader a moment before the engine drops the rows).
int64_t blocks_left(const Engine& engine) {
  for (int i = 0; i < 5000 && engine.metrics().kv_blocks_used != 0; ++i) std::this_thread::sleep_for(1ms);
  return engine.metrics().kv_blocks_used;
}

void expect_same_answers(const std::vector<Job>& jobs, const std::vector<Answer>& got, const std::vector<Answer>& solo) {
  ASSERT_EQ(got.size(), jobs.size());
  ASSERT_EQ(solo.size(), jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Answer& together = got[i];
    ASSERT_TRUE(together.done && solo[i].done);
    for (int64_t c = 0; c < jobs[i].params.n; ++c) {
      const size_t k = static_cast<size_t>(c);
      EXPECT_EQ(together.tokens[k], solo[i].tokens[k]) << "job " << i << " choice " << c;
      EXPECT_TRUE(same_bits(together.logprobs[k], solo[i].logprobs[k])) << "job " << i << " choice " << c;
      EXPECT_EQ(together.finished[k], solo[i].tokens[k]) << "Finish carries the choice's tokens";
      EXPECT_EQ(together.reasons[k], solo[i].reasons[k]);
    }
  }
}

void expect_batch_invariant(models::Arch arch, int64_t max_batch, bool paged = false) {
  const run::ModelFolder f = folder_of(arch);
  const std::vector<Job> jobs = mixed_jobs();
  std::vector<Answer> solo;
  {
    Engine engine(f, options_of(max_batch, 64, paged));
    solo = run_solo(engine, jobs);
  }
  Engine engine(f, options_of(max_batch, 64, paged));
  expect_same_answers(jobs, run_staggered(engine, jobs), solo);
  const MetricsSnapshot m = engine.metrics();
  EXPECT_EQ(m.requests_total, jobs.size());
  EXPECT_EQ(m.requests_finished_total, jobs.size());
  EXPECT_GT(m.batch_rows.sum / static_cast<double>(m.batch_rows.count), 1.0) << "requests did share steps";
}

TEST(ServeEngine, EncoderDecoderRequestsGiveTheirSoloBitsTogether) {
  expect_batch_invariant(models::Arch::EncoderDecoder, 16);
  expect_batch_invariant(models::Arch::EncoderDecoder, 3);  // little room: requests wait to join
}

TEST(ServeEngine, DecoderOnlyRequestsGiveTheirSoloBitsTogether) {
  expect_batch_invariant(models::Arch::DecoderOnly, 16);
  expect_batch_invariant(models::Arch::DecoderOnly, 3);
}

// The paged KV cache (blocks of 4 positions): the same invariance; and an encoder-decoder's
// answers are the contiguous cache's bits (its prompts are sources, so nothing is shared and
// its prefills run on the same kernels either way).
TEST(ServeEngine, PagedCacheRequestsGiveTheirSoloBitsTogether) {
  expect_batch_invariant(models::Arch::EncoderDecoder, 16, true);
  expect_batch_invariant(models::Arch::EncoderDecoder, 3, true);
  expect_batch_invariant(models::Arch::DecoderOnly, 16, true);
  expect_batch_invariant(models::Arch::DecoderOnly, 3, true);
  const run::ModelFolder f = folder_of(models::Arch::EncoderDecoder);
  const std::vector<Job> jobs = mixed_jobs();
  Engine contiguous(f, options_of(16, 64)), paged(f, options_of(16, 64, true));
  expect_same_answers(jobs, run_solo(paged, jobs), run_solo(contiguous, jobs));
  EXPECT_GT(paged.metrics().kv_blocks, 0);
  EXPECT_EQ(blocks_left(paged), 0) << "every block came back";
  EXPECT_EQ(contiguous.metrics().kv_blocks, 0);
}

// Decoder-only prompts with common beginnings: a request that joins while one with the same
// first tokens runs takes its whole blocks instead of computing them, and still gives the bits
// it gives alone. Control: with prefix sharing off nothing is taken.
TEST(ServeEngine, DecoderOnlyPromptsShareTheirPrefixBlocksWithTheirSoloBits) {
  const run::ModelFolder f = folder_of(models::Arch::DecoderOnly);
  std::vector<int64_t> base;
  for (int64_t i = 0; i < 19; ++i) base.push_back(3 + (i * 7) % 37);
  std::vector<Job> jobs(4);
  jobs[0].prompt = base;
  jobs[0].params.temperature = 0;
  jobs[0].params.max_tokens = 40;
  jobs[1].prompt.assign(base.begin(), base.begin() + 12);
  jobs[1].prompt.insert(jobs[1].prompt.end(), {30, 31, 5});
  jobs[1].params.temperature = 0.8;
  jobs[1].params.seed = 7;
  jobs[1].params.n = 2;
  jobs[1].params.max_tokens = 10;
  jobs[2].prompt = base;
  jobs[2].prompt.insert(jobs[2].prompt.end(), {8, 9});
  jobs[2].params.temperature = 0;
  jobs[2].params.logprobs = 2;
  jobs[2].params.max_tokens = 12;
  jobs[3].prompt = {5, 6};
  jobs[3].params.temperature = 0;
  jobs[3].params.max_tokens = 8;
  std::vector<Answer> solo;
  {
    Engine engine(f, options_of(16, 64, true));
    solo = run_solo(engine, jobs);
    EXPECT_EQ(engine.metrics().prefix_shared_positions_total, 0u) << "one at a time: nothing runs to share from";
  }
  ASSERT_GE(solo[0].tokens[0].size(), 20u) << "the first request must still run when the others join";
  Engine engine(f, options_of(16, 64, true));
  expect_same_answers(jobs, run_together(engine, jobs), solo);
  EXPECT_GT(engine.metrics().prefix_shared_positions_total, 0u);
  EXPECT_EQ(blocks_left(engine), 0) << "every block came back";
  EngineOptions off = options_of(16, 64, true);
  off.prefix_sharing = false;
  Engine unshared(f, off);
  run_together(unshared, jobs);
  EXPECT_EQ(unshared.metrics().prefix_shared_positions_total, 0u);
}

// A pool of 12 blocks of 4 positions: a request whose worst case needs more is Unavailable
// (503, naming --kv-pool-mb); requests of 6 blocks each run two at a time, the third waiting for
// room, and give their solo answers.
TEST(ServeEngine, ASmallKvPoolRefusesWhatCannotFitAndQueuesTheRest) {
  const run::ModelFolder f = folder_of(models::Arch::DecoderOnly);
  EngineOptions o = options_of(16, 64, true, 4);
  o.kv.pool_bytes = 12 * decode::kv_block_bytes(f.base->config(), 4);
  std::vector<Job> jobs(3);
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].prompt = {static_cast<int64_t>(5 + i), 6, 7};
    jobs[i].params.temperature = 0;
    jobs[i].params.max_tokens = 20;  // <bos> + 3 + 20 = 24 positions = 6 blocks
  }
  std::vector<Answer> solo;
  {
    Engine engine(f, o);
    solo = run_solo(engine, jobs);
  }
  Engine engine(f, o);
  GenerationParams big = jobs[0].params;
  big.n = 3;  // 18 blocks
  try {
    engine.submit({5, 6, 7}, big);
    ADD_FAILURE() << "a request needing 18 blocks of a 12-block pool was accepted";
  } catch (const Unavailable& e) {
    EXPECT_EQ(e.code(), "kv_cache_full");
    EXPECT_NE(std::string(e.what()).find("--kv-pool-mb"), std::string::npos) << e.what();
  }
  std::vector<std::shared_ptr<Request>> handles;
  for (const Job& j : jobs) handles.push_back(engine.submit(j.prompt, j.params));
  std::vector<Answer> got(jobs.size());
  std::thread reader([&] {
    for (size_t i = 0; i < jobs.size(); ++i) got[i] = read_all(*handles[i], 1);
  });
  int64_t most_running = 0;
  for (int i = 0; i < 2000 && engine.metrics().requests_finished_total < jobs.size(); ++i) {
    const MetricsSnapshot m = engine.metrics();
    most_running = std::max(most_running, m.running_requests);
    EXPECT_LE(m.kv_blocks_reserved, 12);
    EXPECT_LE(m.kv_blocks_used, m.kv_blocks_reserved);
    std::this_thread::sleep_for(1ms);
  }
  reader.join();
  EXPECT_LE(most_running, 2);
  expect_same_answers(jobs, got, solo);
  EXPECT_EQ(engine.metrics().kv_blocks, 12);
}

TEST(ServeEngine, SampledChoicesFollowTheirSeed) {
  const run::ModelFolder f = folder_of(models::Arch::EncoderDecoder);
  Engine engine(f, EngineOptions{});
  GenerationParams p;
  p.max_tokens = 12;
  p.temperature = 1.5;
  p.seed = 7;
  p.n = 2;
  const Answer a = read_all(*engine.submit({5, 6, 7}, p), 2);
  const Answer b = read_all(*engine.submit({5, 6, 7}, p), 2);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NE(a.tokens[0], a.tokens[1]) << "two choices draw from two streams";
  p.seed = 8;  // control: another seed, another answer
  const Answer c = read_all(*engine.submit({5, 6, 7}, p), 2);
  EXPECT_NE(a.tokens, c.tokens);
}

TEST(ServeEngine, GreedyAndBeamAnswersEqualTheRunLayers) {
  const run::ModelFolder f = folder_of(models::Arch::EncoderDecoder);
  const std::vector<std::vector<int64_t>> sources = {{5, 6, 7, 8, 9}, {10, 4}, {3, 12, 11, 6}};
  Engine engine(f, EngineOptions{});
  for (int64_t beam : {0, 1, 4}) {
    run::SearchSettings s;
    s.beam = beam >= 1 ? beam : 1;
    s.n_best = beam >= 1 ? 2 : 1;
    if (beam == 1) s.n_best = 1;
    s.max_len = 20;
    const auto expected = run::search_batch(f, sources, s);
    std::vector<std::shared_ptr<Request>> handles;
    GenerationParams p;
    p.temperature = 0;
    p.beam = beam;
    p.n = s.n_best;
    p.max_tokens = 20;
    for (const auto& src : sources) handles.push_back(engine.submit(src, p));
    for (size_t i = 0; i < sources.size(); ++i) {
      const Answer a = read_all(*handles[i], p.n);
      for (int64_t c = 0; c < p.n; ++c) {
        EXPECT_EQ(a.finished[static_cast<size_t>(c)], expected[i][static_cast<size_t>(c)].tokens)
            << "beam " << beam << " source " << i << " choice " << c;
        if (beam > 1) {  // beam_size 1 is greedy search in both (score = log-probability)
          EXPECT_NEAR(a.scores[static_cast<size_t>(c)], expected[i][static_cast<size_t>(c)].score, 1e-4);
        }
      }
    }
  }
}

TEST(ServeEngine, DecoderOnlyGreedyEqualsGenerate) {
  const run::ModelFolder f = folder_of(models::Arch::DecoderOnly);
  const std::vector<std::vector<int64_t>> prompts = {{5, 6, 7}, {10}, {3, 12, 11, 6, 9}};
  run::GenerateSettings s;
  s.max_tokens = 15;
  const auto expected = run::generate_batch(f, prompts, s);
  Engine engine(f, EngineOptions{});
  GenerationParams p;
  p.temperature = 0;
  p.max_tokens = 15;
  std::vector<std::shared_ptr<Request>> handles;
  for (const auto& pr : prompts) handles.push_back(engine.submit(pr, p));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(read_all(*handles[i], 1).tokens[0], expected[i][0].tokens);
}

TEST(ServeEngine, ACancelledRequestEndsAndLeavesTheOthersUnchanged) {
  const run::ModelFolder f = folder_of(models::Arch::EncoderDecoder);
  GenerationParams p;
  p.temperature = 0;
  p.max_tokens = 60;
  p.logprobs = 0;
  Engine engine(f, EngineOptions{});
  const Answer alone = read_all(*engine.submit({5, 6, 7}, p), 1);
  const Answer whole = read_all(*engine.submit({9, 9, 8, 7}, p), 1);  // the cancelled ones, uncut
  // A cancelled request ends cancelled, or, if it ran to its end before the cancel arrived (the
  // engine thread can finish a short answer while this thread waits for a core), with its whole
  // answer: never with anything else.
  const auto expect_cancelled_or_whole = [&](const Answer& a, const char* which) {
    EXPECT_TRUE(a.done) << which;
    if (a.reasons[0] != FinishReason::Cancelled) {
      EXPECT_EQ(a.tokens, whole.tokens) << which << " ended " << static_cast<int>(a.reasons[0]);
      EXPECT_EQ(a.reasons[0], whole.reasons[0]) << which;
    }
  };
  // Cancelled at once: it ends cancelled whether it was still waiting or had joined.
  auto early = engine.submit({9, 9, 8, 7}, p);
  early->cancel();
  auto victim = engine.submit({9, 9, 8, 7}, p);
  auto other = engine.submit({5, 6, 7}, p);
  Event e;
  ASSERT_TRUE(victim->next(e, 30s));  // decoding: cancelled mid-way (unless it already ran to its end)
  victim->cancel();
  expect_cancelled_or_whole(read_all(*early, 1), "early");
  expect_cancelled_or_whole(read_all(*victim, 1, &e), "victim");
  const Answer b = read_all(*other, 1);
  EXPECT_EQ(b.tokens, alone.tokens);
  EXPECT_TRUE(same_bits(b.logprobs[0], alone.logprobs[0]));
  EXPECT_GE(engine.metrics().requests_cancelled_total, 1u);
}

TEST(ServeEngine, ACancelledChoiceLeavesItsSiblingsUnchanged) {
  const run::ModelFolder f = folder_of(models::Arch::DecoderOnly);
  GenerationParams p;
  p.temperature = 1.2;
  p.seed = 21;
  p.n = 3;
  p.max_tokens = 30;
  p.logprobs = 0;
  Engine engine(f, EngineOptions{});
  const Answer all = read_all(*engine.submit({5, 6}, p), 3);
  ASSERT_FALSE(all.tokens[1].empty());
  auto r = engine.submit({5, 6}, p);
  r->cancel_choice(1);  // before the request joins: choice 1's row leaves at once
  const Answer cut = read_all(*r, 3);
  EXPECT_EQ(cut.reasons[1], FinishReason::Cancelled);
  EXPECT_LT(cut.tokens[1].size(), all.tokens[1].size()) << "the cancelled choice stopped early";
  for (size_t c : {size_t{0}, size_t{2}}) {
    EXPECT_EQ(cut.tokens[c], all.tokens[c]) << "choice " << c;
    EXPECT_TRUE(same_bits(cut.logprobs[c], all.logprobs[c])) << "choice " << c;
    EXPECT_EQ(cut.reasons[c], all.reasons[c]);
  }
  EXPECT_EQ(engine.metrics().requests_cancelled_total, 0u) << "the request itself finished";
}

TEST(ServeEngine, BadRequestsNameTheirField) {
  const run::ModelFolder f = folder_of(models::Arch::EncoderDecoder);
  Engine engine(f, options_of(4, 64));
  const auto field_of = [&](std::vector<int64_t> prompt, GenerationParams p) -> std::string {
    try {
      engine.submit(std::move(prompt), p);
    } catch (const RequestError& e) {
      return e.field() + ":" + e.code();
    }
    return "accepted";
  };
  GenerationParams ok;
  EXPECT_EQ(field_of({}, ok), "prompt:invalid_value");
  EXPECT_EQ(field_of({0, 5}, ok), "prompt:invalid_value");  // PAD
  EXPECT_EQ(field_of({40}, ok), "prompt:invalid_value");    // outside the vocabulary
  EXPECT_EQ(field_of(std::vector<int64_t>(65, 5), ok), "prompt:context_length_exceeded");
  GenerationParams p = ok;
  p.max_tokens = 0;
  EXPECT_EQ(field_of({5}, p), "max_tokens:invalid_value");
  p = ok;
  p.temperature = 2.5;
  EXPECT_EQ(field_of({5}, p), "temperature:invalid_value");
  p = ok;
  p.top_p = 0;
  EXPECT_EQ(field_of({5}, p), "top_p:invalid_value");
  p = ok;
  p.n = 5;  // more rows than --max-batch 4
  EXPECT_EQ(field_of({5}, p), "n:invalid_value");
  p = ok;
  p.beam = 2;
  p.n = 3;
  EXPECT_EQ(field_of({5}, p), "n:invalid_value");
  p = ok;
  p.beam = 2;
  p.logprobs = 1;
  EXPECT_EQ(field_of({5}, p), "logprobs:invalid_value");
  EXPECT_EQ(field_of({5}, ok), "accepted");  // control
}

TEST(ServeEngine, AFullQueueIsUnavailable) {
  const run::ModelFolder f = folder_of(models::Arch::EncoderDecoder);
  Engine engine(f, options_of(1, 2));
  GenerationParams p;
  p.temperature = 0;
  p.max_tokens = 60;
  std::vector<std::shared_ptr<Request>> held;
  int refused = 0;
  for (int i = 0; i < 20; ++i) {
    try {
      held.push_back(engine.submit({5, 6, 7}, p));
    } catch (const Unavailable&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_LE(held.size(), 4u);  // one running (maybe one more admitted meanwhile) and two waiting
  engine.drain(0ms);           // cancels what is left
  for (auto& h : held) EXPECT_TRUE(read_all(*h, 1).done);
  EXPECT_THROW(engine.submit({5}, p), Unavailable);  // draining refuses
}

// Speculative decoding in the engine: while one greedy request runs alone, rounds of drafted
// tokens checked in one pass give the plain steps' tokens and log-probability bits; mixed
// workloads (the engine going in and out of speculation as requests join and leave) give every
// request its solo bits. Drafters: the model itself (every draft accepted), another model (few
// accepted) and prompt lookup. Control: a wrong acceptance rule changes answers.
std::vector<Job> greedy_jobs() {
  std::vector<Job> jobs;
  const std::vector<std::vector<int64_t>> prompts = {{5, 6, 7, 8, 9}, {10, 4}, {3, 12, 11, 6, 7, 9, 4, 20, 31},
                                                     {17}, {8, 8, 9, 30, 22, 5}, {13, 14, 15, 13, 14}};
  const std::vector<int64_t> lengths = {1, 2, 40, 17, 33, 25};  // 1 and 2: nothing or one token to draft
  for (size_t i = 0; i < prompts.size(); ++i) {
    Job j;
    j.prompt = prompts[i];
    j.params.temperature = 0;
    j.params.max_tokens = lengths[i];
    j.params.logprobs = 2;
    jobs.push_back(j);
  }
  return jobs;
}

EngineOptions speculative_options(const run::ModelFolder* draft, bool lookup, bool paged, int64_t k = 4) {
  EngineOptions o = options_of(16, 64, paged);
  o.speculation.draft = draft;
  o.speculation.lookup = lookup;
  o.speculation.draft_tokens = k;
  return o;
}

void expect_speculation_exact(models::Arch arch, bool paged) {
  SCOPED_TRACE(std::string(models::arch_name(arch)) + (paged ? ", paged" : ", contiguous"));
  const run::ModelFolder f = folder_of(arch);
  const run::ModelFolder other = folder_of(arch, 11);
  const std::vector<Job> jobs = greedy_jobs(), mixed = mixed_jobs();
  std::vector<Answer> solo, mixed_solo;
  {
    Engine plain(f, options_of(16, 64, paged));
    solo = run_solo(plain, jobs);
    mixed_solo = run_solo(plain, mixed);
    EXPECT_EQ(plain.metrics().speculative_rounds_total, 0u);
  }
  {
    Engine self(f, speculative_options(&f, false, paged));
    expect_same_answers(jobs, run_solo(self, jobs), solo);
    const MetricsSnapshot m = self.metrics();
    EXPECT_GT(m.speculative_rounds_total, 0u);
    EXPECT_GT(m.draft_tokens_total, 0u);
    EXPECT_EQ(m.draft_accepted_total, m.draft_tokens_total) << "the model drafting for itself is always right";
    EXPECT_LT(m.steps_total, m.completion_tokens_total) << "rounds yield several tokens";
    expect_same_answers(mixed, run_staggered(self, mixed), mixed_solo);
  }
  for (int64_t k : {1, 3, 8}) {
    Engine foreign(f, speculative_options(&other, false, paged, k));
    expect_same_answers(jobs, run_solo(foreign, jobs), solo);
    expect_same_answers(mixed, run_together(foreign, mixed), mixed_solo);
    const MetricsSnapshot m = foreign.metrics();
    EXPECT_GT(m.speculative_rounds_total, 0u);
    EXPECT_LT(m.draft_accepted_total, m.draft_tokens_total) << "another model's drafts are rejected at times";
  }
  {
    Engine lookup(f, speculative_options(nullptr, true, paged));
    expect_same_answers(jobs, run_solo(lookup, jobs), solo);
    EXPECT_GT(lookup.metrics().speculative_rounds_total, 0u);
  }
  if (paged) {
    Engine self(f, speculative_options(&f, false, paged));
    run_solo(self, jobs);
    EXPECT_EQ(blocks_left(self), 0) << "rolled-back positions returned their blocks";
  }
}

TEST(ServeEngine, SpeculativeRoundsGiveThePlainStepsBits) {
  for (models::Arch arch : {models::Arch::EncoderDecoder, models::Arch::DecoderOnly})
    for (bool paged : {false, true}) expect_speculation_exact(arch, paged);
}

// Control: a rule that takes one rejected draft per round as accepted must change answers.
TEST(ServeEngine, AWrongAcceptanceRuleIsCaught) {
  for (models::Arch arch : {models::Arch::EncoderDecoder, models::Arch::DecoderOnly}) {
    const run::ModelFolder f = folder_of(arch);
    const run::ModelFolder other = folder_of(arch, 11);
    const std::vector<Job> jobs = greedy_jobs();
    std::vector<Answer> solo;
    {
      Engine plain(f, options_of(16, 64));
      solo = run_solo(plain, jobs);
    }
    EngineOptions o = speculative_options(&other, false, false);
    o.speculation.test_accept_offset = 1;
    Engine wrong(f, o);
    const std::vector<Answer> got = run_solo(wrong, jobs);
    int64_t differ = 0;
    for (size_t i = 0; i < jobs.size(); ++i) differ += got[i].tokens[0] != solo[i].tokens[0] ? 1 : 0;
    EXPECT_GT(differ, 0) << models::arch_name(arch);
  }
}

// Without batch-invariant steps a pass of K + 1 positions need not give a single step's bits,
// so the engine does not speculate there. Control: the same engine with them does.
TEST(ServeEngine, SpeculationNeedsBatchInvariantSteps) {
  const run::ModelFolder f = folder_of(models::Arch::DecoderOnly);
  for (bool invariant : {false, true}) {
    EngineOptions o = speculative_options(&f, false, false);
    o.batch_invariant = invariant;
    Engine engine(f, o);
    run_solo(engine, greedy_jobs());
    EXPECT_EQ(engine.metrics().speculative_rounds_total > 0, invariant) << "batch_invariant " << invariant;
  }
}

TEST(ServeEngine, ADraftOfAnotherVocabularyOrFamilyIsRefused) {
  const run::ModelFolder f = folder_of(models::Arch::DecoderOnly);
  run::ModelFolder small = folder_of(models::Arch::DecoderOnly);
  small.src_vocab_size = 30;
  small.tgt_vocab_size = 30;
  EXPECT_THROW(
      {
        try {
          Engine e(f, speculative_options(&small, false, false));
        } catch (const Error& err) {
          EXPECT_NE(std::string(err.what()).find("same vocabulary"), std::string::npos) << err.what();
          throw;
        }
      },
      Error);
  const run::ModelFolder seq2seq = folder_of(models::Arch::EncoderDecoder);
  EXPECT_THROW(Engine(f, speculative_options(&seq2seq, false, false)), Error);
  EXPECT_THROW(Engine(f, speculative_options(&f, true, false)), Error);  // a model and lookup
  EngineOptions zero = speculative_options(&f, false, false);
  zero.speculation.draft_tokens = 0;
  EXPECT_THROW(Engine(f, zero), Error);
}

}  // namespace
}  // namespace attn::serve
