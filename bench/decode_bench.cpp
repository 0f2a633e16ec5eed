// bench/decode_bench.cpp — greedy decoding speed of the paper's base model (§3, Table 3: 6+6
// layers, D=512, h=8, d_ff=2048; vocabulary 1000 shared, source length 32, float32, eval mode):
// 64 target tokens for a batch of 1 and of 8 sources, through decode::greedy_search and the
// TransformerDecoder, with the KV cache (the default) and without it (the whole prefix re-run
// every step). EOS is disabled so that every case decodes exactly 64 tokens per source.
// Twin: `torch_bench.py run --topics decode` (nn.Transformer re-running the decoder over the
// prefix, and a hand-written PyTorch KV-cache loop). Also beam search (beam 4, 32 tokens, KV
// cache), with the cache's self- and cross-attention bytes at the end; it has no torch twin.
// And greedy decoding with the KV cache in and out of the batch-invariant mode
// (attn/ops/batch_invariant.h) for batches of 1, 8 and 16 sources: the mode's cost.
// And the same greedy and beam searches with int8 and bf16 weights (decode_quantized).
// Not here: sampling.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "attn/core/autograd.h"
#include "attn/decode/beam_search.h"
#include "attn/decode/greedy.h"
#include "attn/decode/transformer_decoder.h"
#include "attn/models/encoder_decoder.h"
#include "attn/ops/batch_invariant.h"
#include "attn/ops/quantize.h"
#include "bench_common.h"

namespace attn::bench {
namespace {

constexpr int64_t kSrcLen = 32, kNewTokens = 64, kVocab = 1000;

models::ModelConfig base_config() {
  models::ModelConfig c = models::ModelConfig::paper_base();
  c.src_vocab_size = kVocab;
  c.tgt_vocab_size = kVocab;
  c.dropout = 0.0;
  c.attention_dropout = 0.0;
  c.max_len = 256;
  return c;
}

// Source ids in [4, V): no PAD, BOS or EOS inside a source.
Tensor random_sources(int64_t batch) {
  Tensor src = Tensor::empty({batch, kSrcLen}, DType::I64);  // [B, S]
  Rng rng(7);
  int64_t* p = src.data<int64_t>();
  for (int64_t i = 0; i < batch * kSrcLen; ++i) p[i] = 4 + static_cast<int64_t>(rng.next_u64() % (kVocab - 4));
  return src;
}

void decode_greedy(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const bool kv_cache = state.range(1) != 0;
  models::EncoderDecoderModel model(base_config());
  model.eval();
  const Tensor src = random_sources(batch);  // [B, S]
  decode::GreedyOptions options;
  options.bos = model.config().bos_id;
  options.eos = -1;  // run to the limit: always kNewTokens tokens
  options.pad = model.config().pad_id;
  options.max_len = kNewTokens;
  NoGradGuard no_grad;
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over every decoded token, to check that speedups keep the output
  for (auto _ : state) {
    decode::TransformerDecoder decoder(model, kv_cache);
    const auto out = decode::greedy_search(decoder, src, options);
    if (static_cast<int64_t>(out.size()) != batch || static_cast<int64_t>(out[0].tokens.size()) != kNewTokens) {
      state.SkipWithError("greedy_search did not decode 64 tokens per source");
      break;
    }
    benchmark::DoNotOptimize(out.data());
    hash = 1469598103934665603ull;
    for (const auto& row : out)
      for (int64_t t : row.tokens) hash = (hash ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  }
  state.counters["tokens_hash"] = static_cast<double>(hash & ((1ull << 48) - 1));
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(batch * kNewTokens), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(decode_greedy)
    ->ArgNames({"B", "kv"})
    ->Args({1, 1})
    ->Args({8, 1})
    ->Args({1, 0})
    ->Args({8, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Greedy decoding with the KV cache, the whole search (the encoder's pass included) in the
// batch-invariant mode (inv:1) or not (inv:0); ms_per_step = the wall time / 64 steps. The
// tokens may differ between the two (other rounding), not between runs.
void decode_greedy_invariant(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const bool invariant = state.range(1) != 0;
  models::EncoderDecoderModel model(base_config());
  model.eval();
  const Tensor src = random_sources(batch);  // [B, S]
  decode::GreedyOptions options;
  options.bos = model.config().bos_id;
  options.eos = -1;  // run to the limit: always kNewTokens tokens
  options.pad = model.config().pad_id;
  options.max_len = kNewTokens;
  NoGradGuard no_grad;
  BatchInvariantGuard mode(invariant);
  uint64_t hash = 0;
  double seconds = 0.0;  // the searches' wall time
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    decode::TransformerDecoder decoder(model, true);
    const auto out = decode::greedy_search(decoder, src, options);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (static_cast<int64_t>(out.size()) != batch || static_cast<int64_t>(out[0].tokens.size()) != kNewTokens) {
      state.SkipWithError("greedy_search did not decode 64 tokens per source");
      break;
    }
    benchmark::DoNotOptimize(out.data());
    hash = 1469598103934665603ull;
    for (const auto& row : out)
      for (int64_t t : row.tokens) hash = (hash ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  }
  state.counters["tokens_hash"] = static_cast<double>(hash & ((1ull << 48) - 1));
  state.counters["ms_per_step"] =
      1e3 * seconds / static_cast<double>(std::max<int64_t>(1, static_cast<int64_t>(state.iterations())) * kNewTokens);
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(batch * kNewTokens), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(decode_greedy_invariant)
    ->ArgNames({"B", "inv"})
    ->ArgsProduct({{1, 8, 16}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Beam search (paper §6.1: beam 4, alpha 0.6) over the KV cache, EOS disabled so that every
// source runs kBeamTokens steps with `beam` live rows. Counters: the cache's bytes after the
// last step, self-attention K/V (grows with every step and row) and cross-attention K/V (the
// encoder output's keys and values), and a hash of every returned token and score bit.
constexpr int64_t kBeam = 4, kBeamTokens = 32;

void decode_beam(benchmark::State& state) {
  const int64_t batch = state.range(0);
  models::EncoderDecoderModel model(base_config());
  model.eval();
  const Tensor src = random_sources(batch);  // [B, S]
  decode::BeamOptions options;
  options.beam = kBeam;
  options.bos = model.config().bos_id;
  options.eos = -1;  // run to the limit: always kBeamTokens tokens
  options.pad = model.config().pad_id;
  options.max_len = kBeamTokens;
  NoGradGuard no_grad;
  uint64_t hash = 0;
  int64_t self_bytes = 0, cross_bytes = 0;
  for (auto _ : state) {
    decode::TransformerDecoder decoder(model, true);
    const auto out = decode::beam_search(decoder, src, options);
    if (static_cast<int64_t>(out.size()) != batch || static_cast<int64_t>(out[0][0].tokens.size()) != kBeamTokens) {
      state.SkipWithError("beam_search did not decode 32 tokens per source");
      break;
    }
    benchmark::DoNotOptimize(out.data());
    hash = 1469598103934665603ull;  // FNV-1a over tokens and the bits of each score
    for (const auto& hyps : out)
      for (const auto& h : hyps) {
        for (int64_t t : h.tokens) hash = (hash ^ static_cast<uint64_t>(t)) * 1099511628211ull;
        uint64_t bits = 0;
        std::memcpy(&bits, &h.score, sizeof bits);
        hash = (hash ^ bits) * 1099511628211ull;
      }
    self_bytes = cross_bytes = 0;
    for (int64_t i = 0; i < decoder.cache().num_layers(); ++i) {
      const nn::LayerKV& l = decoder.cache().layer(i);
      for (const Tensor* t : {&l.self.k, &l.self.v})
        if (t->defined()) self_bytes += t->numel() * static_cast<int64_t>(dtype_size(t->dtype()));
      for (const Tensor* t : {&l.cross.k, &l.cross.v})
        if (t->defined()) cross_bytes += t->numel() * static_cast<int64_t>(dtype_size(t->dtype()));
    }
  }
  state.counters["tokens_hash"] = static_cast<double>(hash & ((1ull << 48) - 1));
  state.counters["kv_self_bytes"] = static_cast<double>(self_bytes);
  state.counters["kv_cross_bytes"] = static_cast<double>(cross_bytes);
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(batch * kBeam * kBeamTokens),
                                                      benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(decode_beam)->ArgNames({"B"})->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();

// Reduced-precision weights (attn/ops/quantize.h, Model::quantize): greedy decoding with the
// KV cache for 1 and 8 sources, and beam 4 for 32 sources (kBeamTokens steps), with the weights
// in float32 (q:0), int8 (q:1) or bf16 (q:2). The same random model each time, quantized from
// its float32 values; the tokens differ between dtypes (other rounding), not between runs.
void decode_quantized(benchmark::State& state) {
  const int64_t batch = state.range(0), beam = state.range(1);
  const Quantization q = state.range(2) == 0 ? Quantization::None
                         : state.range(2) == 1 ? Quantization::Int8
                                                : Quantization::BF16;
  models::EncoderDecoderModel model(base_config());
  model.eval();
  if (q != Quantization::None) model.quantize(q);
  const Tensor src = random_sources(batch);  // [B, S]
  const int64_t steps = beam > 1 ? kBeamTokens : kNewTokens;
  NoGradGuard no_grad;
  uint64_t hash = 0;
  for (auto _ : state) {
    decode::TransformerDecoder decoder(model, true);
    hash = 1469598103934665603ull;
    if (beam > 1) {
      decode::BeamOptions options;
      options.beam = beam;
      options.bos = model.config().bos_id;
      options.eos = -1;
      options.pad = model.config().pad_id;
      options.max_len = steps;
      const auto out = decode::beam_search(decoder, src, options);
      for (const auto& hyps : out)
        for (int64_t t : hyps[0].tokens) hash = (hash ^ static_cast<uint64_t>(t)) * 1099511628211ull;
    } else {
      decode::GreedyOptions options;
      options.bos = model.config().bos_id;
      options.eos = -1;
      options.pad = model.config().pad_id;
      options.max_len = steps;
      const auto out = decode::greedy_search(decoder, src, options);
      for (const auto& row : out)
        for (int64_t t : row.tokens) hash = (hash ^ static_cast<uint64_t>(t)) * 1099511628211ull;
    }
  }
  state.SetLabel(quantization_name(q));
  state.counters["tokens_hash"] = static_cast<double>(hash & ((1ull << 48) - 1));
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(batch * beam * steps),
                                                      benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(decode_quantized)
    ->ArgNames({"B", "beam", "q"})
    ->ArgsProduct({{1, 8}, {1}, {0, 1, 2}})
    ->ArgsProduct({{32}, {4}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace attn::bench

ATTN_BENCH_MAIN()
