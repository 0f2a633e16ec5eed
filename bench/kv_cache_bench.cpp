// bench/kv_cache_bench.cpp — the paged KV cache (nn/kv_cache.h: BlockPool, KVCache::use_pool)
// against the contiguous one, on models of the paper's size built in place (random weights,
// float32, eval mode; no Google Benchmark). Four figures:
//   waste     a mixed-length workload served as continuous batching does (LmDecoder::join,
//             rows dropped as they finish): at every step, allocated minus used positions
//             for the paged cache (blocks held x block size vs tokens held), for a
//             reserve-max-length cache (every sequence reserves --max-len), and for the
//             contiguous cache (one rectangular buffer: rows x its capacity). Deterministic.
//   beam      beam search (beam 4) over an encoder-decoder: the self-attention K/V bytes the
//             paged cache holds (shared prefixes once) against the copy-per-beam layout
//             (every live hypothesis its own T positions), peak and summed over steps; the
//             outputs of both layouts are checked equal. Deterministic.
//   lm_beam   the same for a decoder-only model continuing 8 prompts of 64 tokens: the beams of
//             a prompt share its blocks. Deterministic.
//   capacity  concurrent sequences of the waste workload's length mix that fit in a memory
//             budget (--budget-mb): reserve-max vs paged (each sequence its ceil(len/B)
//             blocks), float32 blocks and bf16 ones (--kv-dtype bf16). Computed from the
//             workload, deterministic.
//   speed     greedy decoding (64 tokens, batch 1 and 8) of the paper's base encoder-decoder,
//             contiguous vs paged, best of --repeat runs; outputs checked equal. Needs an
//             idle machine.
// Usage: kv_cache_bench [--only waste|beam|lm_beam|capacity|speed] [--repeat 3] [--tokens 64]
//                       [--block 16] [--budget-mb 1024] [--requests 64] [--max-len 512]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/core/rng.h"
#include "attn/decode/beam_search.h"
#include "attn/decode/greedy.h"
#include "attn/decode/kv_pool.h"
#include "attn/decode/lm_decoder.h"
#include "attn/decode/transformer_decoder.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"

namespace {

using namespace attn;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string only;
  int64_t repeat = 3, tokens = 64, block = 16, budget_mb = 1024, requests = 64, max_len = 512;
};

models::ModelConfig paper(models::Arch arch) {
  models::ModelConfig c = models::ModelConfig::paper_base();
  c.arch = arch;
  c.src_vocab_size = 1000;
  c.tgt_vocab_size = arch == models::Arch::EncoderDecoder ? 1000 : 0;
  c.dropout = 0.0;
  c.attention_dropout = 0.0;
  c.max_len = 1024;
  c.pad_id = 0;
  c.bos_id = 1;
  c.eos_id = 2;
  if (arch == models::Arch::DecoderOnly) c.norm_first = true;
  return c;
}

// The waste workload: prompt and output lengths (the mix of vLLM's figure: short and long).
struct Request {
  int64_t prompt, output;
};
std::vector<Request> workload(const Args& a) {
  Rng rng(11);
  std::vector<Request> out;
  for (int64_t i = 0; i < a.requests; ++i) {
    const int64_t p = 4 + static_cast<int64_t>(rng.next_u64() % 120);
    const int64_t o = 4 + static_cast<int64_t>(rng.next_u64() % static_cast<uint64_t>(a.max_len - p - 4));
    out.push_back({p, o});
  }
  return out;
}

int waste(const Args& a) {
  NoGradGuard no_grad;
  // A small decoder-only model: the figures count positions, not bytes per position.
  models::ModelConfig cfg = paper(models::Arch::DecoderOnly);
  cfg.d_model = 64;
  cfg.n_heads = 2;
  cfg.n_decoder_layers = 1;
  cfg.d_ff = 64;
  models::DecoderOnlyModel model(cfg);
  model.eval();
  const auto reqs = workload(a);
  auto pool = decode::make_kv_pool(cfg, a.block, int64_t{1} << 30);
  decode::LmDecoder dec(model);
  dec.set_kv_pool(pool);
  // All requests join (one at a time, as a server admits them), then every row steps until
  // its output is done; finished rows leave (reorder) and padding every row has is trimmed.
  std::vector<int64_t> left;  // tokens still to generate, per row
  for (const Request& r : reqs) {
    std::vector<int64_t> prefix(static_cast<size_t>(r.prompt), 5);
    prefix[0] = 1;
    dec.join(prefix);
    left.push_back(r.output);
  }
  double alloc_paged = 0, alloc_reserve = 0, alloc_contig = 0, used = 0;
  double peak_alloc_paged = 0, peak_used = 0;
  int64_t steps = 0;
  while (!left.empty()) {
    const int64_t n = static_cast<int64_t>(left.size());
    dec.step(Tensor::full({n}, 7.0, DType::I64));
    std::vector<int64_t> keep;
    for (int64_t r = 0; r < n; ++r)
      if (--left[static_cast<size_t>(r)] > 0) keep.push_back(r);
    const nn::KVCache& c = dec.cache();
    const double u = static_cast<double>(c.positions_held());
    const double ap = static_cast<double>(c.blocks_held() * a.block);
    used += u;
    alloc_paged += ap;
    alloc_reserve += static_cast<double>(n * a.max_len);
    // The contiguous cache: every row as long as the longest (T), in a buffer that doubles.
    int64_t cap = 16;
    while (cap < c.length()) cap *= 2;
    alloc_contig += static_cast<double>(n * cap);
    if (ap > peak_alloc_paged) {
      peak_alloc_paged = ap;
      peak_used = u;
    }
    ++steps;
    if (static_cast<int64_t>(keep.size()) < n) {
      std::vector<int64_t> next;
      for (int64_t r : keep) next.push_back(left[static_cast<size_t>(r)]);
      left = next;
      if (!keep.empty()) {
        dec.reorder(keep);
        dec.trim_padding();
      }
    }
  }
  std::printf("{\"figure\": \"waste\", \"requests\": %lld, \"block\": %lld, \"max_len\": %lld, \"steps\": %lld, "
              "\"paged_waste_pct\": %.2f, \"paged_waste_at_peak_pct\": %.2f, \"reserve_max_waste_pct\": %.2f, "
              "\"contiguous_waste_pct\": %.2f}\n",
              static_cast<long long>(a.requests), static_cast<long long>(a.block), static_cast<long long>(a.max_len),
              static_cast<long long>(steps), 100.0 * (1.0 - used / alloc_paged),
              100.0 * (1.0 - peak_used / peak_alloc_paged), 100.0 * (1.0 - used / alloc_reserve),
              100.0 * (1.0 - used / alloc_contig));
  return 0;
}

// An IncrementalDecoder that records the cache after every step of the one it wraps
// (a TransformerDecoder or an LmDecoder).
template <class Decoder>
class Recording : public decode::IncrementalDecoder {
 public:
  Recording(Decoder& d, int64_t per_position) : d_(d), per_position_(per_position) {}
  void start(const Tensor& src) override { d_.start(src); }
  Tensor step(const Tensor& last) override {
    Tensor out = d_.step(last);
    const nn::KVCache& c = d_.cache();
    const int64_t cross = cross_bytes(c);
    const int64_t self = c.paged() ? c.memory_bytes() - cross : c.rows() * c.length() * per_position_;
    peak = std::max(peak, self);
    total += self;
    return out;
  }
  void reorder(const std::vector<int64_t>& rows) override { d_.reorder(rows); }
  int64_t vocab_size() const override { return d_.vocab_size(); }
  int64_t peak = 0;
  double total = 0;

 private:
  static int64_t cross_bytes(const nn::KVCache& c) {
    int64_t b = 0;
    for (int64_t i = 0; i < c.num_layers(); ++i)
      for (const Tensor* t : {&c.layer(i).cross.k, &c.layer(i).cross.v})
        if (t->defined()) b += t->numel() * static_cast<int64_t>(dtype_size(t->dtype()));
    return b;
  }
  Decoder& d_;
  int64_t per_position_;
};

Tensor sources(int64_t batch, int64_t len, uint64_t seed) {
  Tensor src = Tensor::empty({batch, len}, DType::I64);
  Rng rng(seed);
  int64_t* p = src.data<int64_t>();
  for (int64_t i = 0; i < batch * len; ++i) p[i] = 4 + static_cast<int64_t>(rng.next_u64() % 996);
  return src;
}

// Beam search (beam 4, no EOS: every hypothesis runs to the limit, so the longest sharing has
// to survive) of `input` through a copy-per-beam cache and a paged one; prints the figure's
// JSON line (`fields` first) and returns 1 when the two outputs differ.
template <class Decoder, class Model>
int compare_beams(const Args& a, const char* figure, const std::string& fields, Model& model,
                  const models::ModelConfig& cfg, const Tensor& input) {
  decode::BeamOptions o;
  o.beam = 4;
  o.bos = 1;
  o.eos = -1;
  o.pad = 0;
  o.max_len = a.tokens;
  const int64_t per_position = decode::kv_block_bytes(cfg, 1);
  Decoder plain(model), paged(model);
  paged.set_kv_pool(decode::make_kv_pool(cfg, a.block, int64_t{4} << 30));
  Recording<Decoder> rp(plain, per_position), rg(paged, per_position);
  const auto h0 = decode::beam_search(rp, input, o);
  const auto h1 = decode::beam_search(rg, input, o);
  bool same = h0.size() == h1.size();
  for (size_t i = 0; same && i < h0.size(); ++i) same = h0[i][0].tokens == h1[i][0].tokens;
  std::printf("{\"figure\": \"%s\", %s, \"beam\": 4, \"tokens\": %lld, \"block\": %lld, "
              "\"copy_per_beam_peak_mib\": %.2f, \"paged_peak_mib\": %.2f, \"peak_ratio\": %.3f, "
              "\"sum_ratio\": %.3f, \"same_output\": %s}\n",
              figure, fields.c_str(), static_cast<long long>(a.tokens), static_cast<long long>(a.block),
              rp.peak / 1048576.0, rg.peak / 1048576.0, static_cast<double>(rg.peak) / static_cast<double>(rp.peak),
              rg.total / rp.total, same ? "true" : "false");
  return same ? 0 : 1;
}

// Beam search translating 8 sources of 32 tokens with an encoder-decoder model.
int beam(const Args& a) {
  NoGradGuard no_grad;
  models::ModelConfig cfg = paper(models::Arch::EncoderDecoder);
  models::EncoderDecoderModel model(cfg);
  model.eval();
  return compare_beams<decode::TransformerDecoder>(a, "beam", "\"sources\": 8", model, cfg, sources(8, 32, 3));
}

// Beam search continuing 8 prompts of 64 tokens with a decoder-only model: the four beams of a
// prompt share its blocks, where a copy-per-beam cache holds the prompt four times.
int lm_beam(const Args& a) {
  NoGradGuard no_grad;
  models::ModelConfig cfg = paper(models::Arch::DecoderOnly);
  models::DecoderOnlyModel model(cfg);
  model.eval();
  const int64_t prompt_len = 64;
  Tensor prompts = sources(8, prompt_len, 11);  // [8, 64]
  for (int64_t i = 0; i < 8; ++i) prompts.data<int64_t>()[i * prompt_len] = 1;  // <bos> first
  return compare_beams<decode::LmDecoder>(a, "lm_beam", "\"prompts\": 8, \"prompt_tokens\": 64", model, cfg,
                                          prompts);
}

int capacity(const Args& a) {
  const models::ModelConfig cfg = paper(models::Arch::DecoderOnly);
  const int64_t per_position = decode::kv_block_bytes(cfg, 1), per_block = decode::kv_block_bytes(cfg, a.block);
  const auto reqs = workload(a);
  double blocks = 0;
  for (const Request& r : reqs) blocks += static_cast<double>((r.prompt + r.output + a.block - 1) / a.block);
  const double budget = static_cast<double>(a.budget_mb) * 1048576.0;
  const double reserve = budget / static_cast<double>(a.max_len * per_position);
  const double mean_blocks = blocks / static_cast<double>(reqs.size());
  const double paged = budget / (mean_blocks * static_cast<double>(per_block));
  // The same blocks holding bf16 keys and values (--kv-dtype bf16): half the bytes each.
  const double paged_bf16 =
      budget / (mean_blocks * static_cast<double>(decode::kv_block_bytes(cfg, a.block, DType::BF16)));
  std::printf("{\"figure\": \"capacity\", \"budget_mib\": %lld, \"kib_per_position\": %.1f, \"max_len\": %lld, "
              "\"reserve_max_sequences\": %.0f, \"paged_sequences\": %.0f, \"ratio\": %.2f, "
              "\"paged_bf16_sequences\": %.0f, \"bf16_ratio\": %.2f}\n",
              static_cast<long long>(a.budget_mb), per_position / 1024.0, static_cast<long long>(a.max_len),
              std::floor(reserve), std::floor(paged), paged / reserve, std::floor(paged_bf16), paged_bf16 / reserve);
  return 0;
}

int speed(const Args& a) {
  NoGradGuard no_grad;
  const models::ModelConfig cfg = paper(models::Arch::EncoderDecoder);
  models::EncoderDecoderModel model(cfg);
  model.eval();
  decode::GreedyOptions o;
  o.bos = 1;
  o.eos = -1;
  o.pad = 0;
  o.max_len = a.tokens;
  int rc = 0;
  for (int64_t batch : {1, 8}) {
    const Tensor src = sources(batch, 32, 5);
    double best[2] = {1e30, 1e30};
    std::vector<decode::Hypothesis> out[2];
    for (int64_t rep = 0; rep < a.repeat; ++rep)
      for (int paged = 0; paged < 2; ++paged) {
        decode::TransformerDecoder dec(model);
        if (paged) dec.set_kv_pool(decode::kv_pool_for(cfg, {true, a.block, 0}, batch, a.tokens + 2));
        const auto t0 = Clock::now();
        out[paged] = decode::greedy_search(dec, src, o);
        best[paged] = std::min(best[paged], std::chrono::duration<double>(Clock::now() - t0).count());
      }
    bool same = out[0].size() == out[1].size();
    for (size_t i = 0; same && i < out[0].size(); ++i) same = out[0][i].tokens == out[1][i].tokens;
    rc |= same ? 0 : 1;
    std::printf("{\"figure\": \"speed\", \"batch\": %lld, \"tokens\": %lld, \"contiguous_s\": %.4f, \"paged_s\": "
                "%.4f, \"paged_over_contiguous\": %.3f, \"same_output\": %s}\n",
                static_cast<long long>(batch), static_cast<long long>(a.tokens), best[0], best[1], best[1] / best[0],
                same ? "true" : "false");
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const char* v = i + 1 < argc ? argv[++i] : "";
    if (k == "--only") a.only = v;
    else if (k == "--repeat") a.repeat = std::atoll(v);
    else if (k == "--tokens") a.tokens = std::atoll(v);
    else if (k == "--block") a.block = std::atoll(v);
    else if (k == "--budget-mb") a.budget_mb = std::atoll(v);
    else if (k == "--requests") a.requests = std::atoll(v);
    else if (k == "--max-len") a.max_len = std::atoll(v);
    else {
      std::fprintf(stderr, "kv_cache_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (a.repeat < 1 || a.tokens < 1 || a.block < 1 || a.budget_mb < 1 || a.requests < 1 || a.max_len < 140) {
    std::fprintf(stderr, "kv_cache_bench: bad sizes (max-len >= 140, the rest >= 1)\n");
    return 2;
  }
  try {
    int rc = 0;
    if (a.only.empty() || a.only == "waste") rc |= waste(a);
    if (a.only.empty() || a.only == "beam") rc |= beam(a);
    if (a.only.empty() || a.only == "lm_beam") rc |= lm_beam(a);
    if (a.only.empty() || a.only == "capacity") rc |= capacity(a);
    if (a.only.empty() || a.only == "speed") rc |= speed(a);
    return rc;
  } catch (const Error& e) {
    std::fprintf(stderr, "kv_cache_bench: %s\n", e.what());
    return 1;
  }
}
