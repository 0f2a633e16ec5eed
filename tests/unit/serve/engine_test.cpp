// serve/engine: continuous batching against solo decoding. Requests that run together, join
// while others decode and leave early give the same tokens and the same log-probability bits as
// each alone (greedy, seeded sampling with n > 1, beam search), for encoder-decoder and
// decoder-only models; greedy and beam answers equal the run layer's (what `attn translate` and
// `attn generate` print); cancelled requests leave the others unchanged; bad requests are
// RequestErrors naming the field; a full queue is Unavailable. Controls: another seed changes a
// sampled answer, so the equality checks can fail.
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
void expect_batch_invariant(models::Arch arch, int64_t max_batch) {
  const run::ModelFolder f = folder_of(arch);
  const std::vector<Job> jobs = mixed_jobs();
  std::vector<Answer> solo;
  {
    Engine engine(f, EngineOptions{max_batch, 64, true, true});
    for (const Job& j : jobs) solo.push_back(read_all(*engine.submit(j.prompt, j.params), j.params.n));
  }
  Engine engine(f, EngineOptions{max_batch, 64, true, true});
  std::vector<std::shared_ptr<Request>> handles;
  std::vector<Event> firsts(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    handles.push_back(engine.submit(jobs[i].prompt, jobs[i].params));
    ASSERT_TRUE(handles[i]->next(firsts[i], 30s));
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Answer together = read_all(*handles[i], jobs[i].params.n, &firsts[i]);
    ASSERT_TRUE(together.done && solo[i].done);
    for (int64_t c = 0; c < jobs[i].params.n; ++c) {
      const size_t k = static_cast<size_t>(c);
      EXPECT_EQ(together.tokens[k], solo[i].tokens[k]) << "job " << i << " choice " << c;
      EXPECT_TRUE(same_bits(together.logprobs[k], solo[i].logprobs[k])) << "job " << i << " choice " << c;
      EXPECT_EQ(together.finished[k], solo[i].tokens[k]) << "Finish carries the choice's tokens";
      EXPECT_EQ(together.reasons[k], solo[i].reasons[k]);
    }
  }
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
  // Cancelled at once: it ends cancelled whether it was still waiting or had joined.
  auto early = engine.submit({9, 9, 8, 7}, p);
  early->cancel();
  auto victim = engine.submit({9, 9, 8, 7}, p);
  auto other = engine.submit({5, 6, 7}, p);
  Event e;
  ASSERT_TRUE(victim->next(e, 30s));  // decoding: cancelled mid-way (unless it already ran to its end)
  victim->cancel();
  const Answer first = read_all(*early, 1);
  EXPECT_TRUE(first.done);
  EXPECT_EQ(first.reasons[0], FinishReason::Cancelled);
  const Answer cut = read_all(*victim, 1);
  EXPECT_TRUE(cut.done);
  if (cut.tokens[0].size() + 1 < static_cast<size_t>(p.max_tokens)) {
    EXPECT_EQ(cut.reasons[0], FinishReason::Cancelled);
  }
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
  Engine engine(f, EngineOptions{4, 64, true, true});
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
  Engine engine(f, EngineOptions{1, 2, true, true});
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

}  // namespace
}  // namespace attn::serve
