// bench/spec_bench.cpp — speculative decoding against plain greedy decoding, one prompt (or
// source) at a time by default (batch 1, where speculation pays most): wall time, tokens per
// second, acceptance rate, tokens per target pass and the speedup, for a target model folder
// with a draft model folder (--draft-tokens K, several values allowed) and with prompt lookup.
// Every speculative output is checked to be token for token the plain greedy output (run in the
// batch-invariant mode, as speculative decoding runs; plain greedy in the default mode is timed
// too, since that is what `attn generate` without --draft runs). Also what one pass of T positions
// costs for each model, and what starting a prompt costs (the encoder's pass, or the prefill),
// which every mode pays alike and which bounds the speedup.
//   spec_bench --model DIR --draft DIR --prompts FILE [--max-tokens 64] [--draft-tokens 2,4,6]
//              [--batch 1] [--repeat 1] [--threads 1]
// A decoder-only pair continues the prompts (attn generate); an encoder-decoder pair
// translates them as sources (attn translate, --max-tokens is then --max-len).
// Not here: training the pair (see docs/speculative.md for the recipe).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/decode/lm_decoder.h"
#include "attn/decode/transformer_decoder.h"
#include "attn/models/decoder_only.h"
#include "attn/decode/speculative.h"
#include "attn/ops/batch_invariant.h"
#include "attn/ops/threads.h"
#include "attn/run/generate.h"
#include "attn/run/model_folder.h"
#include "attn/run/speculative.h"
#include "attn/run/token_codec.h"
#include "attn/run/translate.h"

namespace {

using namespace attn;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string model, draft, prompts;
  int64_t max_tokens = 64, batch = 1, repeat = 1, threads = 1;
  std::vector<int64_t> ks = {2, 4, 6};
};

// One decoding configuration's outputs (token ids per prompt) and its time.
struct Result {
  std::vector<std::vector<int64_t>> out;
  double seconds = 0;
  decode::SpeculativeStats stats;
};

int bench_error(const std::string& msg) {
  std::fprintf(stderr, "spec_bench: %s\n", msg.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    const auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (s == "--model") a.model = next();
    else if (s == "--draft") a.draft = next();
    else if (s == "--prompts") a.prompts = next();
    else if (s == "--max-tokens") a.max_tokens = std::atoll(next().c_str());
    else if (s == "--batch") a.batch = std::atoll(next().c_str());
    else if (s == "--repeat") a.repeat = std::atoll(next().c_str());
    else if (s == "--threads") a.threads = std::atoll(next().c_str());
    else if (s == "--draft-tokens") {
      a.ks.clear();
      std::stringstream list(next());
      std::string k;
      while (std::getline(list, k, ',')) a.ks.push_back(std::atoll(k.c_str()));
    } else {
      return bench_error("unknown argument '" + s + "' (see the header of bench/spec_bench.cpp)");
    }
  }
  if (a.model.empty() || a.prompts.empty()) return bench_error("--model DIR and --prompts FILE are required");
  try {
    if (a.threads > 0) set_num_threads(static_cast<int>(a.threads));
    const run::GenerationFolder opened = run::open_generation_folder(a.model, "spec_bench", true, std::nullopt);
    const run::ModelFolder& target = opened.folder;
    const bool lm = target.model == nullptr;  // not an encoder-decoder: a decoder-only model
    std::optional<run::GenerationFolder> draft;
    if (!a.draft.empty()) {
      draft = run::open_generation_folder(a.draft, "spec_bench", false, std::nullopt);
      run::check_draft(target, draft->folder, "spec_bench");
    }
    if (!target.vocab) return bench_error("the target folder has no vocab.json (GPT-2 folders are not supported here)");
    // The prompts, through the target's vocabulary.
    run::TokenCodec codec;
    codec.vocab = &*target.vocab;
    codec.vocab_size = target.src_vocab_size;
    codec.pad = target.pad;
    codec.command = "spec_bench";
    std::ifstream in(a.prompts);
    if (!in) return bench_error("cannot read --prompts '" + a.prompts + "'");
    std::vector<std::vector<int64_t>> prompts;
    std::string line;
    int64_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (!line.empty()) prompts.push_back(codec.read(line, line_no, "prompt"));
    }
    if (prompts.empty()) return bench_error("no prompts in '" + a.prompts + "'");

    // Decodes every prompt, `batch` at a time, `repeat` times: the last repetition's outputs and
    // the fastest repetition's time.
    const auto decode_all = [&](const run::SpeculativeSettings& spec, bool invariant) {
      Result r;
      for (int64_t rep = 0; rep < a.repeat; ++rep) {
        r.out.clear();
        r.stats = {};
        run::SpeculativeSettings sp = spec;
        sp.stats = &r.stats;
        const auto t0 = Clock::now();
        for (size_t at = 0; at < prompts.size(); at += static_cast<size_t>(a.batch)) {
          const std::vector<std::vector<int64_t>> chunk(
              prompts.begin() + static_cast<std::ptrdiff_t>(at),
              prompts.begin() + static_cast<std::ptrdiff_t>(std::min(prompts.size(), at + static_cast<size_t>(a.batch))));
          BatchInvariantGuard guard(invariant);
          std::vector<std::vector<decode::Hypothesis>> found;
          if (lm) {
            run::GenerateSettings g;
            g.max_tokens = a.max_tokens;
            g.prepend_bos = opened.prepend_bos;
            g.speculative = sp;
            found = run::generate_batch(target, chunk, g);
          } else {
            run::SearchSettings g;
            g.max_len = a.max_tokens;
            g.speculative = sp;
            found = run::search_batch(target, chunk, g);
          }
          for (const auto& h : found) r.out.push_back(h.front().tokens);
        }
        const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        r.seconds = rep == 0 ? seconds : std::min(r.seconds, seconds);  // the fastest repetition
      }
      return r;
    };
    const auto count = [](const Result& r) {
      int64_t n = 0;
      for (const auto& o : r.out) n += static_cast<int64_t>(o.size());
      return n;
    };

    std::printf("target %s (%s), draft %s, %zu prompts, batch %lld, max %lld tokens, threads %lld\n", a.model.c_str(),
                lm ? "decoder-only" : "encoder-decoder", a.draft.empty() ? "-" : a.draft.c_str(), prompts.size(),
                static_cast<long long>(a.batch), static_cast<long long>(a.max_tokens), static_cast<long long>(a.threads));
    decode_all({}, false);  // warm-up: first-touch page faults and caches, not timed
    const Result plain = decode_all({}, false);
    const Result plain_inv = decode_all({}, true);
    // The speedup against plain greedy as `attn generate`/`translate` run it (the default mode),
    // and against the faster of the two plain greedy modes (the stricter figure).
    const double base = plain.seconds;
    const double best = std::min(plain.seconds, plain_inv.seconds);
    std::printf("%-22s %9s %9s %10s %11s %8s %8s %s\n", "mode", "seconds", "tokens/s", "acceptance", "tokens/pass",
                "speedup", "vs best", "output");
    const auto row = [&](const std::string& name, const Result& r, bool spec) {
      const bool same = r.out == plain_inv.out;
      std::printf("%-22s %9.3f %9.1f %10s %11s %7.2fx %7.2fx %s\n", name.c_str(), r.seconds, count(r) / r.seconds,
                  spec ? std::to_string(r.stats.acceptance()).substr(0, 5).c_str() : "-",
                  spec ? std::to_string(r.stats.tokens_per_pass()).substr(0, 5).c_str() : "-", base / r.seconds,
                  best / r.seconds, same ? "= greedy" : "DIFFERS from greedy");
    };
    row("greedy", plain, false);
    row("greedy, invariant", plain_inv, false);
    // An incremental decoder of folder f, for the first prompt (with BOS in front for a
    // decoder-only model): what the costs below time.
    struct Opened {
      std::unique_ptr<decode::IncrementalDecoder> dec;
      std::vector<int64_t> row;
      Tensor src;
    };
    const auto open_decoder = [&](const run::ModelFolder& f) {
      Opened o;
      o.row = prompts.front();
      if (lm) {
        o.row.insert(o.row.begin(), f.bos);
        o.dec = std::make_unique<decode::LmDecoder>(dynamic_cast<models::DecoderOnlyModel&>(*f.base));
      } else {
        o.dec = std::make_unique<decode::TransformerDecoder>(*f.model);
      }
      o.src = Tensor::from_vector<int64_t>(o.row, {1, static_cast<int64_t>(o.row.size())});
      return o;
    };
    constexpr int kTimed = 50;  // passes or starts per figure, after one untimed
    // What a verification pass costs: T positions scored in one pass over a cache of the first
    // prompt (then rolled back), against one position, for the target and the draft.
    const auto pass_cost = [&](const run::ModelFolder& f, int64_t t) {
      BatchInvariantGuard guard(true);
      NoGradGuard no_grad;
      Opened o = open_decoder(f);
      o.dec->start(o.src);
      o.dec->step(Tensor::from_vector<int64_t>({f.bos}, {1}));
      const Tensor tokens =
          Tensor::from_vector<int64_t>(std::vector<int64_t>(static_cast<size_t>(t), o.row.back()), {1, t});
      o.dec->step_many(tokens);
      o.dec->rollback(t);
      const auto t0 = Clock::now();
      for (int i = 0; i < kTimed; ++i) {
        o.dec->step_many(tokens);
        o.dec->rollback(t);
      }
      return std::chrono::duration<double>(Clock::now() - t0).count() / kTimed;
    };
    // What starting a prompt costs (for an encoder-decoder, the encoder's pass over the source
    // and the cross-attention keys and values; for a decoder-only model, the prompt's prefill),
    // paid once per prompt by every mode alike.
    const auto start_cost = [&](const run::ModelFolder& f) {
      BatchInvariantGuard guard(true);
      NoGradGuard no_grad;
      Opened o = open_decoder(f);
      o.dec->start(o.src);
      const auto t0 = Clock::now();
      for (int i = 0; i < kTimed; ++i) o.dec->start(o.src);
      return std::chrono::duration<double>(Clock::now() - t0).count() / kTimed;
    };
    std::printf("one pass of T positions (ms), batch 1:\n%-8s", "T");
    for (int64_t t : {1, 2, 3, 5, 7, 9}) std::printf(" %7lld", static_cast<long long>(t));
    std::printf("\n%-8s", "target");
    const double one = pass_cost(target, 1);
    for (int64_t t : {1, 2, 3, 5, 7, 9}) std::printf(" %7.3f", 1e3 * (t == 1 ? one : pass_cost(target, t)));
    if (draft) {
      std::printf("\n%-8s", "draft");
      for (int64_t t : {1, 2, 3, 5, 7, 9}) std::printf(" %7.3f", 1e3 * pass_cost(draft->folder, t));
    }
    std::printf("\nstart of a prompt (ms): target %.3f", 1e3 * start_cost(target));
    if (draft) std::printf(", draft %.3f", 1e3 * start_cost(draft->folder));
    std::printf("\n");
    int rc = 0;
    for (int64_t k : a.ks) {
      run::SpeculativeSettings sp;
      sp.draft_tokens = k;
      if (draft) {
        sp.draft = &draft->folder;
        const Result r = decode_all(sp, true);
        row("draft K=" + std::to_string(k), r, true);
        if (r.out != plain_inv.out) rc = 1;
      }
      sp.draft = nullptr;
      sp.lookup = true;
      const Result r = decode_all(sp, true);
      row("prompt lookup K=" + std::to_string(k), r, true);
      if (r.out != plain_inv.out) rc = 1;
    }
    return rc;
  } catch (const Error& e) {
    return bench_error(e.what());
  }
}
