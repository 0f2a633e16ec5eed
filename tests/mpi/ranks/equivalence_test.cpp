// The promise of data-parallel training (issue #7): N ranks with per-rank batch b give the
// losses and the weights of one process with batch N*b. Every rank trains a small Transformer
// on its share of each global batch (token-weighted loss, bucketed all-reduce, clipping,
// Adam) and also, alone, the one-process reference on the whole batch; both must agree for
// every step within 1e-5 relative, and every rank must hold the same weights bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attn/dist/gradient_reducer.h"
#include "attn/dist/sharding.h"
#include "attn/models/encoder_decoder.h"
#include "attn/train/adam.h"
#include "attn/train/batching.h"
#include "mpi_util.h"
#include "support/expect_close.h"

namespace attn::dist {
namespace {

using test::world;

models::ModelConfig tiny_config(uint64_t seed) {
  models::ModelConfig c;
  c.d_model = 16;
  c.n_heads = 2;
  c.n_encoder_layers = 1;
  c.n_decoder_layers = 1;
  c.d_ff = 32;
  c.dropout = 0;  // dropout masks would differ with the split
  c.attention_dropout = 0;
  c.src_vocab_size = c.tgt_vocab_size = 12;
  c.max_len = 16;
  c.seed = seed;
  return c;
}

// Examples of lengths 2..6 over symbols 3..11, the same on every rank.
std::vector<io::Example> examples(int64_t n) {
  Rng rng(7);
  std::vector<io::Example> out;
  for (int64_t i = 0; i < n; ++i) {
    io::Example e;
    const int64_t ls = 2 + static_cast<int64_t>(rng.below(5)), lt = 2 + static_cast<int64_t>(rng.below(5));
    for (int64_t k = 0; k < ls; ++k) e.src.push_back(3 + static_cast<int64_t>(rng.below(9)));
    for (int64_t k = 0; k < lt; ++k) e.tgt.push_back(3 + static_cast<int64_t>(rng.below(9)));
    out.push_back(e);
  }
  return out;
}

// Mean label-smoothed cross entropy over the batch's non-PAD targets.
Tensor batch_loss(models::EncoderDecoderModel& model, const train::Batch& b) {
  const Tensor logits = model.forward(b.src, b.tgt_in);  // [B, T, V]
  const int64_t rows = logits.size(0) * logits.size(1), V = logits.size(2);
  return cross_entropy(logits.reshape({rows, V}), b.tgt_out.reshape({rows}), 0, 0.1);
}

TEST(MpiDataParallel, NRanksWithBatchBEqualOneProcessWithBatchNB) {
  ATTN_REQUIRE_RANKS(2);
  const int rank = world().rank(), size = world().size();
  // Global batches of 2 * size + 1 examples (shares of unequal size), and a last one of a
  // single example, where every rank but rank 0 has nothing to do.
  const int64_t steps = 21, global_batch = 2 * size + 1;
  const std::vector<io::Example> data = examples(steps * global_batch);
  const double lr = 3e-3, clip = 1.0;

  // The reference: one process, whole batches.
  models::EncoderDecoderModel ref(tiny_config(11));
  train::Adam ref_adam(ref.parameters());
  std::vector<double> ref_losses, ref_norms;
  // Data parallel: different initial weights per rank, replaced by rank 0's (= the reference's).
  models::EncoderDecoderModel model(tiny_config(11 + 1000 * static_cast<uint64_t>(rank)));
  broadcast_parameters(model.parameters(), world());
  train::Adam adam(model.parameters());
  GradientReducer reducer(model.parameters(), world(), {0.01, Reduction::Sum});
  ASSERT_GT(reducer.buckets().size(), 2u);
  std::vector<double> losses, norms;

  for (int64_t s = 0; s < steps; ++s) {
    std::vector<int64_t> batch;
    const int64_t n = s + 1 < steps ? global_batch : 1;
    for (int64_t i = 0; i < n; ++i) batch.push_back(s * global_batch + i);

    const Tensor l = batch_loss(ref, train::make_batch(data, batch));
    ref_losses.push_back(l.item());
    l.backward();
    ref_norms.push_back(train::clip_grad_norm(ref_adam.params(), clip));
    ref_adam.step(lr);
    ref_adam.zero_grad();

    const std::vector<int64_t> mine = shard(batch, rank, size);
    if (!mine.empty()) {
      const train::Batch b = train::make_batch(data, mine);
      const TokenShare share = share_tokens(b.n_tgt_tokens, world());
      const Tensor local = batch_loss(model, b);
      reducer.backward(scale(local, share.weight()));
      losses.push_back(global_mean(local.item(), share, world()));
    } else {
      const TokenShare share = share_tokens(0, world());
      losses.push_back(global_mean(0.0, share, world()));
    }
    reducer.wait_all();
    norms.push_back(train::clip_grad_norm(adam.params(), clip));
    adam.step(lr);
    adam.zero_grad();
  }

  // Adam hardly sees a gradient's scale, so the gradient norms are compared too: a sum where
  // a mean was due (or the reverse) shows there.
  ASSERT_EQ(losses.size(), ref_losses.size());
  for (size_t s = 0; s < losses.size(); ++s) {
    EXPECT_LE(std::fabs(losses[s] - ref_losses[s]), 1e-5 * std::fabs(ref_losses[s]))
        << "step " << s + 1 << ": loss " << losses[s] << " with " << size << " ranks, " << ref_losses[s] << " alone";
    EXPECT_LE(std::fabs(norms[s] - ref_norms[s]), 1e-5 * std::fabs(ref_norms[s]))
        << "step " << s + 1 << ": gradient norm " << norms[s] << " with " << size << " ranks, " << ref_norms[s]
        << " alone";
  }
  EXPECT_LT(losses.back(), losses.front());  // it learned something
  // The same weights, but for the key biases: softmax over keys ignores a constant added to
  // every score, so their gradient is zero in exact arithmetic and only rounding noise in
  // both runs, which Adam's normalisation turns into steps of up to lr in random directions.
  const nn::NamedTensors mine = model.named_parameters(), alone = ref.named_parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    const std::string& name = mine[i].first;
    const Tensor& a = mine[i].second;
    const Tensor& b = alone[i].second;
    EXPECT_TRUE(test::same_on_all_ranks(a)) << name;
    if (name.ends_with("in_proj_bias")) {
      const int64_t D = a.size(0) / 3;
      EXPECT_TRUE(attn::test::all_close(a.slice(0, 0, D), b.slice(0, 0, D), 1e-5, 1e-4, name + " (query)"));
      EXPECT_TRUE(attn::test::all_close(a.slice(0, 2 * D, 3 * D), b.slice(0, 2 * D, 3 * D), 1e-5, 1e-4,
                                        name + " (value)"));
      EXPECT_LE(attn::test::max_abs_diff(a.slice(0, D, 2 * D), b.slice(0, D, 2 * D)), 2 * lr * steps) << name;
    } else {
      EXPECT_TRUE(attn::test::all_close(a, b, 1e-5, 1e-4, name));
    }
  }
}

}  // namespace
}  // namespace attn::dist
