// Cached decoding in the batch-invariant mode (attn/ops/batch_invariant.h), end to end: a row's
// next-token log-probabilities from forward_cached are the same bits alone (one thread) as in
// a batch of N = 3, 9 or 17 rows (two threads) at any slot, for
//   - EncoderDecoderModel: sources of different lengths encoded together (right-padded), rows
//     sharing a source through KVCache::reorder (row_sources), grouped-query heads, and rows
//     that join after a few PAD steps (masked self-attention keys before their own);
//   - DecoderOnlyModel: prompts of different lengths left-padded into one prefill, then steps;
//     sinusoidal positions, RoPE with a sliding window and grouped heads, ALiBi, a mixture of
//     experts, linear attention. The prompt's own logits are compared too.
// Control: outside the mode the same runs change some row's bits.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/core/rng.h"
#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "attn/ops/ops.h"
#include "attn/ops/threads.h"

namespace attn::models {
namespace {

constexpr int64_t kPad = 0, kBos = 1, kVocab = 19, kPool = 17, kSteps = 5;

using Bits = std::vector<float>;  // one row's log-probabilities [V] at one step

template <class M>
void randomize(M& model, uint64_t seed) {
  Rng rng(seed);
  for (auto& [name, p] : model.named_parameters()) {
    if (name.find("norm") != std::string::npos) continue;
    const double sd = name.find("embedding") != std::string::npos ? 0.5 : 1.0 / std::sqrt(static_cast<double>(p.size(-1)));
    p.copy_from(Tensor::randn(p.shape(), rng, p.dtype(), 0.0, sd));
  }
  model.eval();
}

ModelConfig base_config(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.d_model = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.n_encoder_layers = 2;
  c.n_decoder_layers = 2;
  c.d_ff = 48;
  c.dropout = 0.0;
  c.attention_dropout = 0.0;
  c.max_len = 64;
  c.src_vocab_size = c.tgt_vocab_size = kVocab;
  c.pad_id = kPad;
  c.bos_id = kBos;
  c.eos_id = 2;
  c.dtype = DType::F32;
  c.seed = 5;
  return c;
}

// Token sequences of the pool: lengths 1..max_len (all max_len when `fixed`), ids 3..V-1
// (never PAD or BOS).
std::vector<std::vector<int64_t>> pool(uint64_t seed, int64_t max_len, bool fixed = false) {
  Rng rng(seed);
  std::vector<std::vector<int64_t>> out;
  for (int64_t i = 0; i < kPool; ++i) {
    std::vector<int64_t> s(static_cast<size_t>(fixed ? max_len : 1 + (i * 5 + 3) % max_len));
    for (int64_t& t : s) t = 3 + static_cast<int64_t>(rng.uniform() * (kVocab - 3)) % (kVocab - 3);
    out.push_back(s);
  }
  return out;
}

// Row r's log-probabilities out of an [N, V] logits tensor.
std::vector<Bits> rows_of(const Tensor& logits) {
  const Tensor lp = log_softmax(logits).contiguous();  // [N, V]
  const auto all = lp.to_vector<float>();
  const int64_t n = lp.size(0), v = lp.size(1);
  std::vector<Bits> out;
  for (int64_t i = 0; i < n; ++i) out.emplace_back(all.begin() + i * v, all.begin() + (i + 1) * v);
  return out;
}

bool same(const Bits& a, const Bits& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The batches tried: N rows of the pool, each at a different slot in each batch. Encoder-decoder
// rows name a (source, target) pair; several rows may share a source.
std::vector<std::vector<int64_t>> batches() {
  std::vector<std::vector<int64_t>> out;
  for (int64_t n : {1, 3, 9, 17}) {
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < n; ++i) rows.push_back((i * 7 + n) % kPool);
    out.push_back(rows);
  }
  return out;
}

class ThreadCount {  // restores the thread count on scope exit
 public:
  ThreadCount() : before_(omp_get_max_threads()) {}
  ~ThreadCount() { set_num_threads(before_); }

 private:
  int before_;
};

// ---- encoder-decoder ---------------------------------------------------------------------

struct Seq2Seq {
  std::vector<std::vector<int64_t>> sources, targets;  // targets: kSteps tokens, BOS first
};

Seq2Seq seq2seq_data() {
  Seq2Seq d;
  d.sources = pool(31, 12);
  for (auto t : pool(32, kSteps - 1, true)) {
    t.insert(t.begin(), kBos);
    d.targets.push_back(t);
  }
  return d;
}

Tensor right_padded(const std::vector<std::vector<int64_t>>& seqs) {
  size_t len = 0;
  for (const auto& s : seqs) len = std::max(len, s.size());
  std::vector<int64_t> ids;
  for (const auto& s : seqs) {
    ids.insert(ids.end(), s.begin(), s.end());
    ids.insert(ids.end(), len - s.size(), kPad);
  }
  return Tensor::from_vector<int64_t>(ids, {static_cast<int64_t>(seqs.size()), static_cast<int64_t>(len)});
}

// Rows `rows` decoded together: row i reads source sources[src[i]] and feeds targets[rows[i]],
// after lead[i] PAD steps (a row that joined late: its first self-attention keys are masked).
// The distinct sources are encoded as one padded batch; rows then share them by a reorder.
// Returns [step][row] log-probabilities, step counted from the row's own start.
std::vector<std::vector<Bits>> run_seq2seq(EncoderDecoderModel& model, const Seq2Seq& d, const std::vector<int64_t>& rows,
                                           const std::vector<int64_t>& src, const std::vector<int64_t>& lead) {
  std::vector<int64_t> distinct, slot(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    auto it = std::find(distinct.begin(), distinct.end(), src[i]);
    slot[i] = it - distinct.begin();
    if (it == distinct.end()) distinct.push_back(src[i]);
  }
  std::vector<std::vector<int64_t>> seqs;
  for (int64_t s : distinct) seqs.push_back(d.sources[static_cast<size_t>(s)]);
  const Tensor src_ids = right_padded(seqs);
  nn::KVCache cache = model.init_cache(model.encode(src_ids), model.padding_mask(src_ids));
  cache.reorder(slot);  // rows of one source share its cross-attention K/V
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t longest = *std::max_element(lead.begin(), lead.end());
  std::vector<std::vector<Bits>> out(static_cast<size_t>(kSteps), std::vector<Bits>(rows.size()));
  for (int64_t t = 0; t < kSteps + longest; ++t) {
    std::vector<int64_t> tok;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t own = t - lead[static_cast<size_t>(i)];
      tok.push_back(own < 0 || own >= kSteps ? kPad : d.targets[static_cast<size_t>(rows[static_cast<size_t>(i)])][static_cast<size_t>(own)]);
    }
    const auto step = rows_of(model.forward_cached(Tensor::from_vector<int64_t>(tok, {n, 1}), cache));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t own = t - lead[static_cast<size_t>(i)];
      if (own >= 0 && own < kSteps) out[static_cast<size_t>(own)][static_cast<size_t>(i)] = step[static_cast<size_t>(i)];
    }
  }
  return out;
}

// Compares every row of every batch with the row alone; returns how many (row, step) differ.
// `late`: rows join after 0..3 PAD steps; the decoder then has no positions of its own
// (positional "none"), since EncoderDecoderModel::forward_cached gives every row the position
// cache.length().
int64_t seq2seq_mismatches(bool norm_first, bool late, bool mode) {
  ModelConfig c = base_config(Arch::EncoderDecoder);
  c.norm_first = norm_first;
  if (late) c.positional = nn::PositionalKind::None;
  EncoderDecoderModel model(c);
  randomize(model, 41);
  const Seq2Seq d = seq2seq_data();
  NoGradGuard no_grad;
  ThreadCount restore;
  BatchInvariantGuard guard(mode);
  auto source_of = [](int64_t r, int64_t i) { return (r + i % 3) % kPool; };  // some rows share one
  std::map<std::pair<int64_t, int64_t>, std::vector<Bits>> alone;  // (target row, source) -> steps
  int64_t mismatches = 0;
  for (const auto& rows : batches()) {
    std::vector<int64_t> src, lead;
    for (size_t i = 0; i < rows.size(); ++i) {
      src.push_back(source_of(rows[i], static_cast<int64_t>(i)));
      lead.push_back(late ? static_cast<int64_t>(i % 4) : 0);
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto key = std::make_pair(rows[i], src[i]);
      if (alone.count(key)) continue;
      set_num_threads(1);
      const auto steps = run_seq2seq(model, d, {rows[i]}, {src[i]}, {0});
      for (const auto& s : steps) alone[key].push_back(s[0]);
    }
    set_num_threads(2);
    const auto steps = run_seq2seq(model, d, rows, src, lead);
    for (int64_t t = 0; t < kSteps; ++t)
      for (size_t i = 0; i < rows.size(); ++i)
        if (!same(steps[static_cast<size_t>(t)][i], alone[{rows[i], src[i]}][static_cast<size_t>(t)])) {
          ++mismatches;
          if (mode)
            ADD_FAILURE() << "norm_first " << norm_first << " late " << late << " N " << rows.size() << " slot " << i
                          << " step " << t;
        }
  }
  return mismatches;
}

TEST(BatchInvariantModel, EncoderDecoderRowsDecodeAloneAsInAnyBatch) {
  EXPECT_EQ(seq2seq_mismatches(false, false, true), 0);
  EXPECT_EQ(seq2seq_mismatches(true, false, true), 0);
  EXPECT_EQ(seq2seq_mismatches(false, true, true), 0) << "rows joining late";
}

TEST(BatchInvariantModel, ControlEncoderDecoderOutsideTheModeSomeRowsDiffer) {
  int64_t mismatches = 0;
  for (bool norm_first : {false, true}) mismatches += seq2seq_mismatches(norm_first, false, false);
  mismatches += seq2seq_mismatches(false, true, false);
  EXPECT_GT(mismatches, 0);
  RecordProperty("mismatches_outside_the_mode", static_cast<int>(mismatches));
}

// ---- decoder-only ------------------------------------------------------------------------

struct Variant {
  const char* name;
  void (*apply)(ModelConfig&);
};

const Variant kVariants[] = {
    {"sinusoidal", [](ModelConfig&) {}},
    {"rope window gqa rms pre-norm", [](ModelConfig& c) {
       c.positional = nn::PositionalKind::Rope;
       c.sliding_window = 5;
       c.norm = nn::NormKind::RMS;
       c.norm_first = true;
     }},
    {"alibi gelu", [](ModelConfig& c) {
       c.positional = nn::PositionalKind::Alibi;
       c.n_kv_heads = 0;
       c.activation = nn::Activation::GELU;
     }},
    {"moe", [](ModelConfig& c) {
       c.n_experts = 4;
       c.expert_top_k = 2;
     }},
    {"linear attention", [](ModelConfig& c) {
       c.attention = nn::AttentionKind::Linear;
       c.n_kv_heads = 0;
     }},
};

// Rows `rows` of the prompt pool, left-padded into one prefill, then kSteps - 1 steps of their
// own continuation tokens. Returns [step][row] log-probabilities (step 0: the prefill's).
std::vector<std::vector<Bits>> run_lm(DecoderOnlyModel& model, const std::vector<std::vector<int64_t>>& prompts,
                                      const std::vector<std::vector<int64_t>>& next, const std::vector<int64_t>& rows) {
  size_t len = 0;
  for (int64_t r : rows) len = std::max(len, prompts[static_cast<size_t>(r)].size());
  std::vector<int64_t> ids;
  for (int64_t r : rows) {
    const auto& p = prompts[static_cast<size_t>(r)];
    ids.insert(ids.end(), len - p.size(), kPad);
    ids.insert(ids.end(), p.begin(), p.end());
  }
  const int64_t n = static_cast<int64_t>(rows.size());
  nn::KVCache cache = model.init_cache(n);
  std::vector<std::vector<Bits>> out;
  out.push_back(rows_of(model.forward_cached(Tensor::from_vector<int64_t>(ids, {n, static_cast<int64_t>(len)}), cache)));
  for (int64_t t = 0; t + 1 < kSteps; ++t) {
    std::vector<int64_t> tok;
    for (int64_t r : rows) tok.push_back(next[static_cast<size_t>(r)][static_cast<size_t>(t)]);
    out.push_back(rows_of(model.forward_cached(Tensor::from_vector<int64_t>(tok, {n, 1}), cache)));
  }
  return out;
}

int64_t lm_mismatches(const Variant& variant, bool mode) {
  ModelConfig c = base_config(Arch::DecoderOnly);
  variant.apply(c);
  DecoderOnlyModel model(c);
  randomize(model, 43);
  const auto prompts = pool(51, 9), next = pool(52, kSteps - 1, true);
  NoGradGuard no_grad;
  ThreadCount restore;
  BatchInvariantGuard guard(mode);
  std::map<int64_t, std::vector<Bits>> alone;
  set_num_threads(1);
  for (int64_t r = 0; r < kPool; ++r) {
    const auto steps = run_lm(model, prompts, next, {r});
    for (const auto& s : steps) alone[r].push_back(s[0]);
  }
  set_num_threads(2);
  int64_t mismatches = 0;
  for (const auto& rows : batches()) {
    const auto steps = run_lm(model, prompts, next, rows);
    for (int64_t t = 0; t < kSteps; ++t)
      for (size_t i = 0; i < rows.size(); ++i)
        if (!same(steps[static_cast<size_t>(t)][i], alone[rows[i]][static_cast<size_t>(t)])) {
          ++mismatches;
          if (mode) ADD_FAILURE() << variant.name << " N " << rows.size() << " slot " << i << " step " << t;
        }
  }
  return mismatches;
}

TEST(BatchInvariantModel, DecoderOnlyRowsDecodeAloneAsInAnyBatch) {
  for (const Variant& v : kVariants) EXPECT_EQ(lm_mismatches(v, true), 0) << v.name;
}

TEST(BatchInvariantModel, ControlDecoderOnlyOutsideTheModeSomeRowsDiffer) {
  int64_t mismatches = 0;
  for (const Variant& v : kVariants) mismatches += lm_mismatches(v, false);
  EXPECT_GT(mismatches, 0);
  RecordProperty("mismatches_outside_the_mode", static_cast<int>(mismatches));
}

}  // namespace
}  // namespace attn::models
