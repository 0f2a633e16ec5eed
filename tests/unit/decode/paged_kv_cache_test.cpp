// The paged KV cache (nn/kv_cache.h: BlockPool, KVCache::use_pool; ops/attention.h:
// paged_attention). The paged kernel equals the contiguous op bit for bit on keys and values
// scattered over shuffled blocks (every mask kind, GQA, ALiBi, a window, several query rows,
// f32 and f64), and a wrong block-table entry is caught by the same comparison (control); the
// pool counts references, copies a shared block before a write and refuses cleanly when full;
// greedy and beam search, speculative rollback and continuous batching give bit-identical
// outputs with the paged and contiguous layouts, for an encoder-decoder and for decoder-only
// models with RoPE + GQA + a sliding window, ALiBi and learned positions; beams share blocks.
// Controls: without copy-on-write beam search no longer matches; a row that takes another
// row's first blocks (prefix sharing) matches computing them, and taking the blocks of other
// tokens does not. bf16 blocks (--kv-dtype bf16): the attention and every decoder on them equal
// the f32 ones on the keys and values rounded to bf16, bit for bit, while the unrounded or
// truncated keys and values give other bits (controls); a bf16 block takes half the bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/decode/beam_search.h"
#include "attn/decode/greedy.h"
#include "attn/decode/kv_pool.h"
#include "attn/decode/lm_decoder.h"
#include "attn/decode/transformer_decoder.h"
#include "attn/ops/attention.h"
#include "attn/ops/batch_invariant.h"
#include "attn/ops/ops.h"
#include "unit/decode/mock_decoder.h"

namespace attn::decode {
namespace {

// ---- the kernel ---------------------------------------------------------------------------

struct PagedCase {
  int64_t B, H, Hkv, Tq, Tk, Dh, block;
  bool causal;
  int64_t window;
  bool alibi, padding;
  DType dtype;
};

// Keys and values [B, Hkv, Tk, Dh] scattered into a pool of shuffled blocks: row b's key j is
// cache position first + j, its own position j + first - origin[b] (origin[b] = b % 3: the
// positions before read as zero and are masked, as after append_rows).
struct Scattered {
  Tensor k_pool, v_pool, k, v;  // k, v: what the kernel must see
  std::vector<int32_t> tables;
  std::vector<int64_t> origin;
  int64_t stride = 0;
  Tensor padding;  // [B, Tk]
};

Scattered scatter(const PagedCase& c, uint64_t seed) {
  Rng rng(seed);
  Scattered s;
  const int64_t first = 5;
  s.origin.resize(static_cast<size_t>(c.B));
  for (int64_t b = 0; b < c.B; ++b) s.origin[static_cast<size_t>(b)] = b % 3;
  s.stride = (first + c.Tk + c.block - 1) / c.block + 1;
  const int64_t blocks = c.B * s.stride + 3;
  std::vector<int32_t> perm(static_cast<size_t>(blocks));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = blocks - 1; i > 0; --i)
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(rng.next_u64() % static_cast<uint64_t>(i + 1))]);
  s.tables.assign(perm.begin(), perm.begin() + c.B * s.stride);
  // The pool holds garbage (NaN would poison a wrong read), the blocks' slots the values.
  s.k_pool = Tensor::randn({blocks, c.Hkv, c.block, c.Dh}, rng, c.dtype);
  s.v_pool = Tensor::randn({blocks, c.Hkv, c.block, c.Dh}, rng, c.dtype);
  s.k = Tensor::zeros({c.B, c.Hkv, c.Tk, c.Dh}, c.dtype);
  s.v = Tensor::zeros({c.B, c.Hkv, c.Tk, c.Dh}, c.dtype);
  std::vector<int> pad(static_cast<size_t>(c.B * c.Tk), 0);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t j = 0; j < c.Tk; ++j) {
      const int64_t p = first + j - s.origin[static_cast<size_t>(b)];
      if (p < 0) {
        pad[static_cast<size_t>(b * c.Tk + j)] = 1;
        continue;
      }
      if (c.padding && (j * 7 + b) % 5 == 0) pad[static_cast<size_t>(b * c.Tk + j)] = 1;
      const int64_t blk = s.tables[static_cast<size_t>(b * s.stride + p / c.block)];
      for (int64_t h = 0; h < c.Hkv; ++h) {
        s.k.slice(0, b, b + 1).slice(1, h, h + 1).slice(2, j, j + 1).copy_from(
            s.k_pool.slice(0, blk, blk + 1).slice(1, h, h + 1).slice(2, p % c.block, p % c.block + 1));
        s.v.slice(0, b, b + 1).slice(1, h, h + 1).slice(2, j, j + 1).copy_from(
            s.v_pool.slice(0, blk, blk + 1).slice(1, h, h + 1).slice(2, p % c.block, p % c.block + 1));
      }
    }
  bool any = false;
  for (int x : pad) any = any || x != 0;
  if (any) s.padding = Tensor::from_bools(pad, {c.B, c.Tk});
  return s;
}

PagedKVRef ref_of(const Scattered& s, const PagedCase& c) {
  PagedKVRef r;
  r.k_pool = s.k_pool;
  r.v_pool = s.v_pool;
  r.tables = s.tables.data();
  r.table_stride = s.stride;
  r.origin = s.origin.data();
  r.first = 5;
  r.keys = c.Tk;
  r.block = c.block;
  return r;
}

SdpaOptions options_of(const PagedCase& c, const Scattered& s) {
  SdpaOptions o;
  o.causal = c.causal;
  o.window = c.window;
  o.key_padding_mask = s.padding;
  if (c.alibi) o.alibi_slopes = Tensor::from_vector<double>(alibi_slopes(c.H), {c.H}).to(c.dtype);
  return o;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  if (a.dtype() == DType::F32) return a.contiguous().to_vector<float>() == b.contiguous().to_vector<float>();
  return a.contiguous().to_vector<double>() == b.contiguous().to_vector<double>();
}

const std::vector<PagedCase> kCases = {
    {2, 4, 4, 1, 37, 8, 16, false, 0, false, true, DType::F32},    // a decoding step
    {3, 4, 2, 1, 300, 8, 16, false, 0, false, false, DType::F32},  // GQA, several key tiles
    {2, 4, 1, 3, 41, 8, 4, true, 0, false, true, DType::F64},      // MQA, verification rows, small blocks
    {2, 2, 2, 1, 20, 8, 16, true, 7, false, false, DType::F32},    // a sliding window
    {2, 4, 2, 2, 150, 8, 8, true, 0, true, true, DType::F32},      // ALiBi, padding
    {1, 2, 2, 40, 90, 8, 16, true, 0, false, false, DType::F32},   // a prompt: K^T path (Tq >= 32)
    {2, 2, 1, 33, 200, 4, 32, true, 16, true, true, DType::F64},   // everything, K^T path
};

TEST(PagedAttention, BitIdenticalToTheContiguousOpOnScatteredBlocks) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < kCases.size(); ++i) {
    const PagedCase& c = kCases[i];
    const Scattered s = scatter(c, 100 + i);
    Rng rng(200 + i);
    const Tensor q = Tensor::randn({c.B, c.H, c.Tq, c.Dh}, rng, c.dtype);
    const SdpaOptions o = options_of(c, s);
    const Tensor want = scaled_dot_product_attention(q, s.k, s.v, o).out;
    const Tensor got = paged_attention(q, ref_of(s, c), c.B, o);
    EXPECT_TRUE(same_bits(got, want)) << "case " << i;
    // The gather lays the blocks out as the kernel reads them.
    const auto [gk, gv] = paged_kv_gather(ref_of(s, c), c.B);
    EXPECT_TRUE(same_bits(gk, s.k) && same_bits(gv, s.v)) << "case " << i;
  }
}

// The batch-invariant mode (what the server and speculative decoding run): the row-wise kernel
// reads the blocks in place, bit-identical to the mode's contiguous op on the same keys. Control:
// the mode really changes the kernel (its bits differ from the default mode's in some case), and
// a wrong block table entry is caught here too.
TEST(PagedAttention, BitIdenticalInTheBatchInvariantMode) {
  NoGradGuard no_grad;
  bool differs_from_default = false;
  for (size_t i = 0; i < kCases.size(); ++i) {
    const PagedCase& c = kCases[i];
    const Scattered s = scatter(c, 100 + i);
    Rng rng(200 + i);
    const Tensor q = Tensor::randn({c.B, c.H, c.Tq, c.Dh}, rng, c.dtype);
    const SdpaOptions o = options_of(c, s);
    const Tensor plain = paged_attention(q, ref_of(s, c), c.B, o);
    BatchInvariantGuard invariant(true);
    const Tensor want = scaled_dot_product_attention(q, s.k, s.v, o).out;
    const Tensor got = paged_attention(q, ref_of(s, c), c.B, o);
    EXPECT_TRUE(same_bits(got, want)) << "case " << i;
    differs_from_default = differs_from_default || !same_bits(got, plain);
  }
  EXPECT_TRUE(differs_from_default) << "the batch-invariant mode gave the default mode's bits in every case";
  const PagedCase& c = kCases[1];
  Scattered s = scatter(c, 101);
  Rng rng(201);
  const Tensor q = Tensor::randn({c.B, c.H, c.Tq, c.Dh}, rng, c.dtype);
  const SdpaOptions o = options_of(c, s);
  BatchInvariantGuard invariant(true);
  const Tensor want = scaled_dot_product_attention(q, s.k, s.v, o).out;
  std::swap(s.tables[3], s.tables[4]);
  EXPECT_FALSE(same_bits(paged_attention(q, ref_of(s, c), c.B, o), want));
}

// Control: the comparison above catches a block table that points one entry at a wrong block.
TEST(PagedAttention, AWrongBlockTableEntryIsCaught) {
  NoGradGuard no_grad;
  const PagedCase& c = kCases[1];
  Scattered s = scatter(c, 101);
  Rng rng(201);
  const Tensor q = Tensor::randn({c.B, c.H, c.Tq, c.Dh}, rng, c.dtype);
  const SdpaOptions o = options_of(c, s);
  const Tensor want = scaled_dot_product_attention(q, s.k, s.v, o).out;
  std::swap(s.tables[3], s.tables[4]);  // row 0's blocks 3 and 4 exchanged
  EXPECT_FALSE(same_bits(paged_attention(q, ref_of(s, c), c.B, o), want));
  s.tables[4] = static_cast<int32_t>(s.k_pool.size(0));  // out of the pool: an error, not a read
  EXPECT_THROW(paged_attention(q, ref_of(s, c), c.B, o), Error);
}

// ---- the pool -------------------------------------------------------------------------------

TEST(BlockPool, CountsReferencesCopiesOnWriteAndRefusesWhenFull) {
  nn::BlockPool pool(2, 1, 2, DType::F64, 4, 3);
  EXPECT_EQ(pool.block_bytes(), 2 * 2 * 1 * 4 * 2 * 8);
  const int32_t a = pool.allocate();
  EXPECT_EQ(a, 0);  // the lowest first
  pool.k(1).slice(0, a, a + 1).copy_from(Tensor::full({1, 1, 4, 2}, 3.0, DType::F64));
  EXPECT_EQ(pool.writable(a), a);  // one holder: written in place
  pool.retain(a);
  EXPECT_EQ(pool.refcount(a), 2);
  const int32_t b = pool.writable(a);  // shared: copied, every layer
  EXPECT_NE(b, a);
  EXPECT_EQ(pool.refcount(a), 1);
  EXPECT_EQ(pool.refcount(b), 1);
  EXPECT_EQ(pool.k(1).slice(0, b, b + 1).to_vector<double>(), std::vector<double>(8, 3.0));
  pool.allocate();
  EXPECT_EQ(pool.free_blocks(), 0);
  try {
    pool.allocate();
    ADD_FAILURE() << "a full pool allocated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pool is full"), std::string::npos) << e.what();
  }
  pool.release(a);
  EXPECT_EQ(pool.free_blocks(), 1);
  EXPECT_EQ(pool.allocate(), a);
  EXPECT_THROW(nn::BlockPool(1, 1, 1, DType::F32, 0, 1), Error);
}

// ---- decoders ---------------------------------------------------------------------------------

constexpr int64_t kPad = 0, kBos = 1, kEos = 2;

void randomize(nn::Module& model, uint64_t seed, double emb_sd) {
  Rng rng(seed);
  for (auto& [name, p] : model.named_parameters()) {
    if (name.find("norm") != std::string::npos) continue;
    const double sd = name.find("embedding") != std::string::npos ? emb_sd : 1.0 / std::sqrt(static_cast<double>(p.size(-1)));
    p.copy_from(Tensor::randn(p.shape(), rng, p.dtype(), 0.0, sd));
  }
}

models::ModelConfig base_config(models::Arch arch, DType dtype) {
  models::ModelConfig c;
  c.arch = arch;
  c.d_model = 16;
  c.n_heads = 4;
  c.n_encoder_layers = 2;
  c.n_decoder_layers = 2;
  c.d_ff = 32;
  c.dropout = 0.0;
  c.attention_dropout = 0.0;
  c.max_len = 64;
  c.src_vocab_size = 13;
  c.tgt_vocab_size = arch == models::Arch::EncoderDecoder ? 13 : 0;
  c.pad_id = kPad;
  c.bos_id = kBos;
  c.eos_id = kEos;
  c.dtype = dtype;
  c.seed = 5;
  return c;
}

std::vector<std::vector<int64_t>> random_inputs(uint64_t seed, int64_t n, int64_t max_len, bool bos) {
  Rng rng(seed);
  std::vector<std::vector<int64_t>> out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = 1 + static_cast<int64_t>(rng.next_u64() % static_cast<uint64_t>(max_len));
    std::vector<int64_t> x;
    if (bos) x.push_back(kBos);
    for (int64_t j = 0; j < len; ++j) x.push_back(3 + static_cast<int64_t>(rng.next_u64() % 10));
    out.push_back(x);
  }
  return out;
}

void expect_same(const std::vector<Hypothesis>& a, const std::vector<Hypothesis>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << what << " hyp " << i;
    EXPECT_EQ(a[i].logprob, b[i].logprob) << what << " hyp " << i;  // bit-identical
    EXPECT_EQ(a[i].score, b[i].score) << what << " hyp " << i;
  }
}

GreedyOptions greedy_opts(int64_t max_len) {
  GreedyOptions o;
  o.bos = kBos;
  o.eos = kEos;
  o.pad = kPad;
  o.max_len = max_len;
  return o;
}

BeamOptions beam_opts(int64_t beam, int64_t max_len) {
  BeamOptions o;
  o.beam = beam;
  o.n_best = 2;
  o.bos = kBos;
  o.eos = kEos;
  o.pad = kPad;
  o.max_len = max_len;
  return o;
}

TEST(PagedKVCache, EncoderDecoderGreedyAndBeamAreBitIdenticalToContiguous) {
  for (DType dtype : {DType::F32, DType::F64}) {
    models::ModelConfig cfg = base_config(models::Arch::EncoderDecoder, dtype);
    models::EncoderDecoderModel model(cfg);
    randomize(model, 17, 0.5);
    model.eval();
    for (int64_t block : {1, 3, 16}) {
      auto pool = make_kv_pool(cfg, block, 64 << 20);
      for (uint64_t seed = 0; seed < 6; ++seed) {
        const Tensor src = test::padded_batch(random_inputs(seed, 5, 9, false), kPad);
        TransformerDecoder plain(model), paged(model);
        paged.set_kv_pool(pool);
        const std::string what = "dtype " + std::string(dtype_name(dtype)) + " block " + std::to_string(block) +
                                 " seed " + std::to_string(seed);
        const auto g0 = greedy_search(plain, src, greedy_opts(20));
        const auto g1 = greedy_search(paged, src, greedy_opts(20));
        expect_same(g0, g1, "greedy " + what);
        const auto b0 = beam_search(plain, src, beam_opts(4, 20));
        const auto b1 = beam_search(paged, src, beam_opts(4, 20));
        ASSERT_EQ(b0.size(), b1.size());
        for (size_t s = 0; s < b0.size(); ++s) expect_same(b0[s], b1[s], "beam " + what);
      }
      // Every block came back once the decoders were gone.
      EXPECT_EQ(pool->used_blocks(), 0) << "block " << block;
    }
  }
}

models::ModelConfig lm_variant(const std::string& name) {
  models::ModelConfig c = base_config(models::Arch::DecoderOnly, DType::F32);
  c.norm_first = true;
  if (name == "rope_gqa_window") {
    c.positional = nn::PositionalKind::Rope;
    c.n_kv_heads = 2;
    c.sliding_window = 5;
    c.activation = nn::Activation::SwiGLU;
    c.norm = nn::NormKind::RMS;
  } else if (name == "alibi_mqa") {
    c.positional = nn::PositionalKind::Alibi;
    c.n_kv_heads = 1;
  } else if (name == "learned_f64") {
    c.positional = nn::PositionalKind::Learned;
    c.dtype = DType::F64;
  }
  return c;
}

TEST(PagedKVCache, DecoderOnlyVariantsGreedyAndBeamAreBitIdenticalToContiguous) {
  for (const std::string variant : {"rope_gqa_window", "alibi_mqa", "learned_f64"}) {
    const models::ModelConfig cfg = lm_variant(variant);
    models::DecoderOnlyModel model(cfg);
    randomize(model, 23, 0.5);
    model.eval();
    auto pool = make_kv_pool(cfg, 4, 64 << 20);
    for (uint64_t seed = 0; seed < 6; ++seed) {
      const Tensor prompts = test::padded_batch(random_inputs(seed + 50, 4, 11, true), kPad);
      LmDecoder plain(model), paged(model);
      paged.set_kv_pool(pool);
      const std::string what = variant + " seed " + std::to_string(seed);
      expect_same(greedy_search(plain, prompts, greedy_opts(24)), greedy_search(paged, prompts, greedy_opts(24)),
                  "greedy " + what);
      const auto b0 = beam_search(plain, prompts, beam_opts(3, 24));
      const auto b1 = beam_search(paged, prompts, beam_opts(3, 24));
      ASSERT_EQ(b0.size(), b1.size());
      for (size_t s = 0; s < b0.size(); ++s) expect_same(b0[s], b1[s], "beam " + what);
    }
    EXPECT_EQ(pool->used_blocks(), 0) << variant;
  }
}

// Log-probabilities of steps, multi-token steps (speculative verification), rollback and
// continuous batching (join, trim_padding) agree bit for bit.
TEST(PagedKVCache, StepManyRollbackAndJoinAreBitIdentical) {
  for (const std::string variant : {"plain", "alibi_mqa"}) {
    const models::ModelConfig cfg = lm_variant(variant);
    models::DecoderOnlyModel model(cfg);
    randomize(model, 29, 0.5);
    model.eval();
    auto pool = make_kv_pool(cfg, 4, 64 << 20);
    LmDecoder plain(model), paged(model);
    paged.set_kv_pool(pool);
    const auto prompts = random_inputs(7, 3, 6, true);
    plain.start(prompts);
    paged.start(prompts);
    const auto check = [&](const Tensor& a, const Tensor& b, const std::string& what) {
      EXPECT_TRUE(same_bits(a, b)) << variant << ": " << what;
    };
    check(plain.step(Tensor::from_vector<int64_t>({kBos, kBos, kBos}, {3})),
          paged.step(Tensor::from_vector<int64_t>({kBos, kBos, kBos}, {3})), "first step");
    const Tensor many = Tensor::from_vector<int64_t>({3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 3, 4, 5, 6, 7}, {3, 5});
    check(plain.step_many(many), paged.step_many(many), "step_many");
    plain.rollback(3);
    paged.rollback(3);
    EXPECT_EQ(plain.cache().length(), paged.cache().length());
    check(plain.step(Tensor::from_vector<int64_t>({9, 8, 7}, {3})), paged.step(Tensor::from_vector<int64_t>({9, 8, 7}, {3})),
          "after rollback");
    plain.join({kBos, 5, 6});
    paged.join({kBos, 5, 6});
    check(plain.step(Tensor::from_vector<int64_t>({3, 4, 5, 7}, {4})),
          paged.step(Tensor::from_vector<int64_t>({3, 4, 5, 7}, {4})), "after join");
    plain.reorder({3, 1});
    paged.reorder({3, 1});
    EXPECT_EQ(plain.trim_padding(), paged.trim_padding());
    for (int i = 0; i < 6; ++i)
      check(plain.step(Tensor::from_vector<int64_t>({3 + i, 4 + i}, {2})),
            paged.step(Tensor::from_vector<int64_t>({3 + i, 4 + i}, {2})), "after reorder and trim, step " + std::to_string(i));
  }
}

// Beams share their common prefix: after beam search's reorders the cache holds far fewer
// blocks than one table per beam would, and a full pool is an Error, not a crash.
TEST(PagedKVCache, BeamsShareBlocksAndAFullPoolIsAnError) {
  const models::ModelConfig cfg = lm_variant("plain");
  models::DecoderOnlyModel model(cfg);
  randomize(model, 31, 0.5);
  model.eval();
  auto pool = make_kv_pool(cfg, 4, 64 << 20);
  LmDecoder paged(model);
  paged.set_kv_pool(pool);
  const std::vector<int64_t> prompt = {kBos, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 3, 4, 5, 6, 7};  // 16 = 4 blocks
  paged.start(std::vector<std::vector<int64_t>>{prompt});
  paged.step(Tensor::from_vector<int64_t>({kBos}, {1}));
  paged.reorder({0, 0, 0, 0});  // four beams of one prompt
  EXPECT_EQ(paged.cache().blocks_held(), 4);  // shared, not copied
  paged.step(Tensor::from_vector<int64_t>({3, 4, 5, 6}, {4}));  // each beam writes its own block
  EXPECT_EQ(paged.cache().blocks_held(), 4 + 4);
  EXPECT_EQ(paged.cache().positions_held(), 4 * 17);

  auto tiny = make_kv_pool(cfg, 4, 3 * kv_block_bytes(cfg, 4));
  LmDecoder small(model);
  small.set_kv_pool(tiny);
  try {
    small.start(std::vector<std::vector<int64_t>>{prompt});
    ADD_FAILURE() << "16 positions fit in 3 blocks of 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pool is full"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_kv_pool(cfg, 4, 10), Error);
}

// The control for copy-on-write: with it off (a shared block written in place, reaching every
// row that holds it), beam search on the paged cache no longer gives the contiguous cache's
// bits, so the bit-identity tests above would catch a missing copy.
TEST(PagedKVCache, WithoutCopyOnWriteBeamSearchGoesWrong) {
  for (const bool cow : {true, false}) {
    models::ModelConfig cfg = base_config(models::Arch::EncoderDecoder, DType::F32);
    models::EncoderDecoderModel model(cfg);
    randomize(model, 17, 0.5);
    model.eval();
    auto pool = make_kv_pool(cfg, 4, 64 << 20);
    pool->set_copy_on_write(cow);
    bool all_same = true;
    for (uint64_t seed = 0; seed < 4; ++seed) {
      const Tensor src = test::padded_batch(random_inputs(seed, 3, 9, false), kPad);
      TransformerDecoder plain(model), paged(model);
      paged.set_kv_pool(pool);
      const auto b0 = beam_search(plain, src, beam_opts(4, 20));
      const auto b1 = beam_search(paged, src, beam_opts(4, 20));
      ASSERT_EQ(b0.size(), b1.size());
      for (size_t s = 0; s < b0.size(); ++s)
        for (size_t i = 0; i < std::min(b0[s].size(), b1[s].size()); ++i)
          all_same = all_same && b0[s].size() == b1[s].size() && b0[s][i].tokens == b1[s][i].tokens &&
                     b0[s][i].logprob == b1[s][i].logprob;
    }
    EXPECT_EQ(all_same, cow) << (cow ? "with copy-on-write the paged cache must give the contiguous bits"
                                     : "without copy-on-write beams overwrite each other's shared blocks");
  }
}

// Prefix sharing (attn serve): a row that joins taking the first blocks of a running row with
// the same first tokens (KVCache::share_prefix) decodes with the same bits as one that
// computes them, both prefills on the batch-invariant kernels, and holds fewer blocks. The
// control: taking the blocks of a row whose first tokens differ changes the bits.
TEST(PagedKVCache, JoinSharingAPrefixIsBitIdenticalToComputingIt) {
  const std::vector<int64_t> a = {kBos, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<int64_t> b = {kBos, 3, 4, 5, 6, 7, 8, 9, 10, 5, 4, 3, 6, 7};  // a's first 9, then its own
  const std::vector<int64_t> c = {kBos, 3, 4, 5, 6, 9, 9, 9, 9, 5, 4, 3, 6, 7};   // a's first 5 only
  for (const std::string variant : {"plain", "alibi_mqa", "learned_f64"}) {
    const models::ModelConfig cfg = lm_variant(variant);
    models::DecoderOnlyModel model(cfg);
    randomize(model, 37, 0.5);
    model.eval();
    auto pool = make_kv_pool(cfg, 4, 64 << 20);
    BatchInvariantGuard invariant;
    const auto run = [&](const std::vector<int64_t>& second, int64_t shared) {
      LmDecoder d(model);
      d.set_kv_pool(pool);
      d.join(a);
      d.join(second, shared > 0 ? 0 : -1, shared);
      std::vector<Tensor> out;
      for (int64_t i = 0; i < 5; ++i) out.push_back(d.step(Tensor::from_vector<int64_t>({3 + i, 7 + i}, {2})));
      return std::make_pair(out, d.cache().blocks_held());
    };
    const auto own = run(b, 0), shared = run(b, 8);  // 8 = two blocks of 4
    for (size_t i = 0; i < own.first.size(); ++i)
      EXPECT_TRUE(same_bits(own.first[i], shared.first[i])) << variant << " step " << i;
    EXPECT_EQ(shared.second, own.second - 2) << variant << ": the two shared blocks are held once";
    const auto wrong = run(c, 8), right = run(c, 0);  // c's positions 5..7 are not a's
    bool any_differs = false;
    for (size_t i = 0; i < wrong.first.size(); ++i) any_differs = any_differs || !same_bits(wrong.first[i], right.first[i]);
    EXPECT_TRUE(any_differs) << variant << ": taking another prompt's blocks must show";
    // Refused: a part of a block, more than the row holds, and the contiguous cache.
    LmDecoder d(model);
    d.set_kv_pool(pool);
    d.join(a);
    EXPECT_THROW(d.join(b, 0, 6), Error);
    EXPECT_THROW(d.join(std::vector<int64_t>(a.begin(), a.end()), 0, 12), Error);
    LmDecoder flat(model);
    flat.join(a);
    EXPECT_THROW(flat.join(b, 0, 8), Error);
  }
  // A sliding window drops old positions, so a windowed model's rows cannot be shared from.
  const models::ModelConfig cfg = lm_variant("rope_gqa_window");
  models::DecoderOnlyModel model(cfg);
  randomize(model, 41, 0.5);
  model.eval();
  LmDecoder d(model);
  d.set_kv_pool(make_kv_pool(cfg, 4, 64 << 20));
  d.join(a);
  EXPECT_THROW(d.join(b, 0, 8), Error);
}

// ---- bf16 blocks (--kv-dtype bf16) -----------------------------------------------------------

// x's values rounded to bf16 and back (bf16_from_float: nearest even), as f32: what a bf16 pool
// holds of x.
Tensor rounded(const Tensor& x) { return x.to(DType::BF16).to(DType::F32); }

// x's values with their low 16 bits cut off (truncation, not rounding): a wrong conversion the
// tests below must tell from the right one.
Tensor truncated(const Tensor& x) {
  std::vector<float> v = x.contiguous().to_vector<float>();
  for (float& f : v) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    u &= 0xFFFF0000u;
    std::memcpy(&f, &u, sizeof u);
  }
  return Tensor::from_vector<float>(v, x.shape());
}

// Every kernel case in f32 (bf16 blocks go with f32 queries): the bf16 pool's attention is the
// f32 attention on the rounded keys and values, bit for bit, contiguous and paged, in the default
// and the batch-invariant mode, and the gather widens the blocks to exactly those values.
// Controls: the same comparison against the unrounded or the truncated keys and values fails.
TEST(PagedAttention, Bf16BlocksAreBitIdenticalToF32OnRoundedKeysAndValues) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < kCases.size(); ++i) {
    PagedCase c = kCases[i];
    c.dtype = DType::F32;
    const Scattered s = scatter(c, 300 + i);
    Rng rng(400 + i);
    const Tensor q = Tensor::randn({c.B, c.H, c.Tq, c.Dh}, rng, c.dtype);
    const SdpaOptions o = options_of(c, s);
    PagedKVRef bf16 = ref_of(s, c), f32_rounded = ref_of(s, c);
    bf16.k_pool = s.k_pool.to(DType::BF16);
    bf16.v_pool = s.v_pool.to(DType::BF16);
    f32_rounded.k_pool = rounded(s.k_pool);
    f32_rounded.v_pool = rounded(s.v_pool);
    const Tensor kr = rounded(s.k), vr = rounded(s.v);
    const std::string what = "case " + std::to_string(i);
    for (const bool invariant : {false, true}) {
      BatchInvariantGuard mode(invariant);
      const Tensor want = scaled_dot_product_attention(q, kr, vr, o).out;
      const Tensor got = paged_attention(q, bf16, c.B, o);
      EXPECT_TRUE(same_bits(got, want)) << what << " invariant " << invariant;
      EXPECT_TRUE(same_bits(got, paged_attention(q, f32_rounded, c.B, o))) << what << " invariant " << invariant;
      // The controls: not the unrounded keys and values, nor truncated ones.
      EXPECT_FALSE(same_bits(got, scaled_dot_product_attention(q, s.k, s.v, o).out)) << what;
      EXPECT_FALSE(same_bits(got, scaled_dot_product_attention(q, truncated(s.k), truncated(s.v), o).out)) << what;
    }
    const auto [gk, gv] = paged_kv_gather(bf16, c.B);
    EXPECT_EQ(gk.dtype(), DType::F32);
    EXPECT_TRUE(same_bits(gk, kr) && same_bits(gv, vr)) << what;
  }
  // bf16 pools go with f32 queries only.
  const PagedCase& c = kCases[0];
  const Scattered s = scatter(c, 300);
  PagedKVRef bf16 = ref_of(s, c);
  bf16.k_pool = s.k_pool.to(DType::BF16);
  bf16.v_pool = s.v_pool.to(DType::BF16);
  Rng rng(5);
  EXPECT_THROW(paged_attention(Tensor::randn({c.B, c.H, c.Tq, c.Dh}, rng, DType::F64), bf16, c.B, {}), Error);
}

// paged_kv_write rounds to nearest even into a bf16 pool (the write every decoding step does):
// the slots hold bf16_from_float of the values, and a tie rounds to the even neighbour.
TEST(PagedAttention, Bf16WriteRoundsToNearestEven) {
  NoGradGuard no_grad;
  const Tensor pool = Tensor::zeros({3, 1, 2, 4}, DType::BF16);  // 3 blocks of 2 positions, 1 head, Dh 4
  // 1 + 2^-8 lies halfway between the bf16 neighbours 1 and 1 + 2^-7: the even one is 1;
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: the even one is 1 + 2^-6.
  const std::vector<float> xs = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.7182817f, 3.1415927f,
                                 1e-40f, 65504.f, 0.1f, -0.33333334f};
  const Tensor x = Tensor::from_vector<float>(xs, {1, 1, 2, 4});  // one row, two positions
  const std::vector<int32_t> table = {2, 0};
  const std::vector<int64_t> origin = {1};
  paged_kv_write(pool, x, table.data(), 2, origin.data(), 2);  // cache indices 2, 3 = positions 1, 2
  const auto bits = [&](int64_t blk, int64_t slot) {
    std::vector<uint16_t> out(4);
    std::memcpy(out.data(), pool.data<uint16_t>() + (blk * 2 + slot) * 4, 8);
    return out;
  };
  std::vector<uint16_t> want(8);
  for (size_t i = 0; i < xs.size(); ++i) want[i] = bf16_from_float(xs[i]);
  EXPECT_EQ(bits(2, 1), std::vector<uint16_t>(want.begin(), want.begin() + 4));  // position 1: block 2, slot 1
  EXPECT_EQ(bits(0, 0), std::vector<uint16_t>(want.begin() + 4, want.end()));    // position 2: block 0, slot 0
  EXPECT_EQ(want[0], bf16_from_float(1.0f));
  EXPECT_EQ(want[1], bf16_from_float(1.0f + 0x1p-6f));
  EXPECT_EQ(want[4], 0);  // a subnormal becomes zero
  EXPECT_EQ(bits(2, 0), std::vector<uint16_t>(4, 0));  // untouched
  // No block for a position: an error, not a write elsewhere.
  EXPECT_THROW(paged_kv_write(pool, x, table.data(), 2, origin.data(), 4), Error);
  EXPECT_THROW(paged_kv_write(pool, x.to(DType::F64), table.data(), 2, origin.data(), 2), Error);
}

// Pool sizing: a bf16 block takes half the bytes, so the same pool memory holds twice the
// blocks; copy-on-write copies a bf16 block whole (every layer); bf16 needs an f32 model and the
// paged layout.
TEST(BlockPool, Bf16BlocksTakeHalfTheBytes) {
  nn::BlockPool pool(2, 1, 2, DType::BF16, 4, 3);
  EXPECT_EQ(pool.block_bytes(), 2 * 2 * 1 * 4 * 2 * 2);
  const int32_t a = pool.allocate();
  pool.k(1).slice(0, a, a + 1).copy_from(Tensor::full({1, 1, 4, 2}, 3.0, DType::F32));
  pool.v(0).slice(0, a, a + 1).copy_from(Tensor::full({1, 1, 4, 2}, -1.5, DType::F32));
  pool.retain(a);
  const int32_t b = pool.writable(a);  // shared: copied
  EXPECT_NE(b, a);
  EXPECT_EQ(pool.k(1).slice(0, b, b + 1).to_vector<double>(), std::vector<double>(8, 3.0));
  EXPECT_EQ(pool.v(0).slice(0, b, b + 1).to_vector<double>(), std::vector<double>(8, -1.5));

  const models::ModelConfig cfg = lm_variant("rope_gqa_window");
  EXPECT_EQ(kv_block_bytes(cfg, 16, DType::BF16) * 2, kv_block_bytes(cfg, 16, DType::F32));
  EXPECT_EQ(kv_block_bytes(cfg, 16), kv_block_bytes(cfg, 16, DType::F32));
  const int64_t bytes = 10 * kv_block_bytes(cfg, 16);
  EXPECT_EQ(make_kv_pool(cfg, 16, bytes)->num_blocks(), 10);
  const auto half = make_kv_pool(cfg, 16, bytes, DType::BF16);
  EXPECT_EQ(half->num_blocks(), 20);
  EXPECT_EQ(half->dtype(), DType::BF16);
  KvCacheOptions o;
  o.paged = true;
  o.block_size = 16;
  o.pool_bytes = bytes;
  o.dtype = DType::BF16;
  EXPECT_EQ(kv_pool_for(cfg, o, 4, 100)->num_blocks(), 20);
  o.pool_bytes = 0;  // the worst case of 4 rows of 100 positions: 4 * 7 blocks, and one more
  EXPECT_EQ(kv_pool_for(cfg, o, 4, 100)->num_blocks(), 29);
  o.paged = false;
  EXPECT_THROW(kv_pool_for(cfg, o, 4, 100), Error);  // bf16 blocks need the paged layout
  EXPECT_THROW(make_kv_pool(lm_variant("learned_f64"), 16, bytes, DType::BF16), Error);  // an f64 model
  EXPECT_EQ(parse_kv_dtype("bf16"), DType::BF16);
  EXPECT_EQ(std::string(kv_dtype_name(DType::F32)), "f32");
  EXPECT_THROW(parse_kv_dtype("f16"), Error);
}

// The decoders on bf16 blocks give exactly what they give on f32 blocks holding the rounded
// keys and values (BlockPool::set_round_to_bf16, which rounds with the scalar conversion of
// core/dtype.h, while the bf16 pool's write takes the vectorised kernel): greedy and beam search
// (tokens, log-probabilities, scores), an encoder-decoder with blocks of 1, 3 and 16 and
// decoder-only models with RoPE + GQA + a sliding window and with ALiBi + MQA. Control: f32
// blocks without the rounding give other bits, so the comparison sees the rounding.
TEST(PagedKVCache, Bf16BlocksDecodeAsF32BlocksOfTheRoundedKeysAndValues) {
  const auto rounded_pool = [](const models::ModelConfig& cfg, int64_t block, bool round) {
    auto pool = make_kv_pool(cfg, block, 64 << 20);
    pool->set_round_to_bf16(round);
    return pool;
  };
  bool unrounded_differs = false;
  // a on bf16 blocks, b on the rounded f32 ones, c on plain f32 ones (the control).
  const auto check = [&](auto& a, auto& b, auto& c, const Tensor& inputs, int64_t steps, int64_t beam,
                         const std::string& what) {
    const auto g = greedy_search(a, inputs, greedy_opts(steps));
    expect_same(g, greedy_search(b, inputs, greedy_opts(steps)), "greedy " + what);
    const auto g_plain = greedy_search(c, inputs, greedy_opts(steps));
    for (size_t i = 0; i < g.size(); ++i) unrounded_differs = unrounded_differs || g[i].logprob != g_plain[i].logprob;
    const auto b0 = beam_search(a, inputs, beam_opts(beam, steps));
    const auto b1 = beam_search(b, inputs, beam_opts(beam, steps));
    ASSERT_EQ(b0.size(), b1.size());
    for (size_t i = 0; i < b0.size(); ++i) expect_same(b0[i], b1[i], "beam " + what);
  };
  {
    const models::ModelConfig cfg = base_config(models::Arch::EncoderDecoder, DType::F32);
    models::EncoderDecoderModel model(cfg);
    randomize(model, 17, 0.5);
    model.eval();
    for (int64_t block : {1, 3, 16}) {
      auto bf16 = make_kv_pool(cfg, block, 64 << 20, DType::BF16);
      auto ref = rounded_pool(cfg, block, true), plain = rounded_pool(cfg, block, false);
      for (uint64_t seed = 0; seed < 4; ++seed) {
        const Tensor src = test::padded_batch(random_inputs(seed, 5, 9, false), kPad);
        TransformerDecoder a(model), b(model), c(model);
        a.set_kv_pool(bf16);
        b.set_kv_pool(ref);
        c.set_kv_pool(plain);
        check(a, b, c, src, 20, 4, "block " + std::to_string(block) + " seed " + std::to_string(seed));
      }
      EXPECT_EQ(bf16->used_blocks(), 0) << "block " << block;
    }
  }
  for (const std::string variant : {"rope_gqa_window", "alibi_mqa"}) {
    const models::ModelConfig cfg = lm_variant(variant);
    models::DecoderOnlyModel model(cfg);
    randomize(model, 23, 0.5);
    model.eval();
    auto bf16 = make_kv_pool(cfg, 4, 64 << 20, DType::BF16);
    auto ref = rounded_pool(cfg, 4, true), plain = rounded_pool(cfg, 4, false);
    for (uint64_t seed = 0; seed < 4; ++seed) {
      const Tensor prompts = test::padded_batch(random_inputs(seed + 50, 4, 11, true), kPad);
      LmDecoder a(model), b(model), c(model);
      a.set_kv_pool(bf16);
      b.set_kv_pool(ref);
      c.set_kv_pool(plain);
      check(a, b, c, prompts, 24, 3, variant + " seed " + std::to_string(seed));
    }
    EXPECT_EQ(bf16->used_blocks(), 0) << variant;
  }
  EXPECT_TRUE(unrounded_differs) << "f32 blocks without rounding gave the bf16 blocks' bits everywhere";
}

// Speculative decoding's step_many and rollback (truncate), continuous batching's join
// (append_rows), reorder and trim_padding, and prefix sharing in the batch-invariant mode, on
// bf16 blocks: every step's log-probabilities are those of the rounded f32 blocks.
TEST(PagedKVCache, Bf16BlocksStepManyRollbackJoinAndShareAsRoundedF32) {
  for (const std::string variant : {"plain", "alibi_mqa"}) {
    const models::ModelConfig cfg = lm_variant(variant);
    models::DecoderOnlyModel model(cfg);
    randomize(model, 29, 0.5);
    model.eval();
    auto bf16 = make_kv_pool(cfg, 4, 64 << 20, DType::BF16);
    auto ref = make_kv_pool(cfg, 4, 64 << 20);
    ref->set_round_to_bf16(true);
    for (const bool invariant : {false, true}) {
      BatchInvariantGuard mode(invariant);
      LmDecoder a(model), b(model);
      a.set_kv_pool(bf16);
      b.set_kv_pool(ref);
      const auto check = [&](const Tensor& x, const Tensor& y, const std::string& what) {
        EXPECT_TRUE(same_bits(x, y)) << variant << " invariant " << invariant << ": " << what;
      };
      const auto prompts = random_inputs(7, 3, 6, true);
      a.start(prompts);
      b.start(prompts);
      const Tensor bos = Tensor::from_vector<int64_t>({kBos, kBos, kBos}, {3});
      check(a.step(bos), b.step(bos), "first step");
      const Tensor many = Tensor::from_vector<int64_t>({3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 3, 4, 5, 6, 7}, {3, 5});
      check(a.step_many(many), b.step_many(many), "step_many");
      a.rollback(3);
      b.rollback(3);
      const Tensor next = Tensor::from_vector<int64_t>({9, 8, 7}, {3});
      check(a.step(next), b.step(next), "after rollback");
      a.join({kBos, 5, 6});
      b.join({kBos, 5, 6});
      const Tensor four = Tensor::from_vector<int64_t>({3, 4, 5, 7}, {4});
      check(a.step(four), b.step(four), "after join");
      a.reorder({3, 1, 1});
      b.reorder({3, 1, 1});
      EXPECT_EQ(a.trim_padding(), b.trim_padding());
      for (int i = 0; i < 6; ++i) {
        const Tensor t = Tensor::from_vector<int64_t>({3 + i, 4 + i, 5 + i}, {3});
        check(a.step(t), b.step(t), "after reorder and trim, step " + std::to_string(i));
      }
      if (invariant) {  // prefix sharing: a row that joins taking a running row's first two blocks
        const std::vector<int64_t> p = {kBos, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
        LmDecoder sa(model), sb(model);
        sa.set_kv_pool(bf16);
        sb.set_kv_pool(ref);
        sa.join(p);
        sb.join(p);
        sa.join(p, 0, 8);
        sb.join(p, 0, 8);
        for (int i = 0; i < 4; ++i) {
          const Tensor t = Tensor::from_vector<int64_t>({3 + i, 7 + i}, {2});
          check(sa.step(t), sb.step(t), "shared prefix, step " + std::to_string(i));
        }
      }
    }
    EXPECT_EQ(bf16->used_blocks(), 0) << variant;
  }
}

}  // namespace
}  // namespace attn::decode
